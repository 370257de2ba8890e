"""The probes and the worker that runs them: the data probe (block reads and writes), the md
probe (MD-Workbench's rotation), the md rotation's resume, and the worker process that does
one target's filesystem calls. Imports ``locks`` and ``layout`` only."""
