"""slowdown.probe: everything that touches a target: the probes, workspace preparation and
cleanup, the probing service and its recorder, and ``slowdown-probe``. It may import
``slowdown.analysis`` (never its command line); nothing imports it."""
