"""Scenes of minutes: the real service, for minutes of wall clock, under what people do to a
node (its live database, its filesystems) and under a slow filesystem.

Each scene waits on minute boundaries far more than it works, so tests/test_scenes.py runs
them side by side, each in a thread of its own with its own directory, and reports each as a
test of its own. A scene is ``scene(tmp_path)``: it raises AssertionError naming what was not
so. Their asserts are rewritten as a test module's are (tests/conftest.py).
"""
