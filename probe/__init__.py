"""slowdown.probe: everything that touches a target, in rooms by job that import downwards
only (``tests/test_architecture.py`` ranks them): ``layout`` (a workspace on disk), ``locks``,
``probes`` (the Probe interface, its registry and the worker), ``workspaces`` (prepare and
cleanup), ``runtime`` (the running service's parts), ``exporters``, ``daemon`` (the service)
and ``command`` (``slowdown-probe``). It may import ``slowdown.analysis`` (never its command
line); nothing imports it."""
