"""The parts of a running service: each target's runner and its worker process, the recorder
of minute records, node context, stop signals, systemd's notify protocol, logs, the live
state's writer and the start state. Imports ``probes`` (the worker's ops and position),
``locks`` and ``layout``; the service (``daemon``) assembles them."""
