"""slowdown.analysis: histograms, the SQLite store, statistics and the read-side interfaces."""
