"""slowdown.probe: probes, workspaces, the probing service and its recorder."""
