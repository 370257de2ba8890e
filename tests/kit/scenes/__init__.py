"""Scenes of minutes: the real service, for minutes of wall clock, under what people do to a
node (its live database, its filesystems) and under a slow filesystem.

Each scene waits on minute boundaries far more than it works, so runs.py starts them with the
session's first test, side by side and beside the other tests, each in a thread of its own
with its own directory, and tests/test_scenes.py reports each as a test of its own. A scene
is ``scene(tmp_path)``: it raises AssertionError naming what was not so. Their asserts
are rewritten as a test module's are (tests/conftest.py).
"""
