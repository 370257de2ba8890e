"""slowdown.analysis: everything that reads, computes and shows, from the histogram up to
the ``slowdown`` command. Packages by job; imports go downwards only (docs/DEVELOPERS.md
draws the map). Never imports ``slowdown.probe``."""
