"""Shared fixtures: real filesystems with faults (FUSE, tmpfs, loop-mounted ext4)."""

pytest_plugins = ["tests.fixtures_fs"]
