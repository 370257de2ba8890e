"""The workspace of each target: prepare (the data file, the md pool, the shared data file,
room checked first), cleanup of what a MANIFEST lists and nothing else, and what a target
costs its filesystem. What prepare makes follows from the probes' registry (``probes``);
imports ``probes``, ``locks`` and ``layout``, never the service."""
