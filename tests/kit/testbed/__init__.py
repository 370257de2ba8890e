"""A GlusterFS testbed: a replicated volume (or a distribute one) on loop-mounted ext4 bricks,
client nodes as namespaces with their own host names and mounts, each running the real probing
service, and the IO500 phases as load from a node that does not probe.

Everything it makes carries one unique prefix and is recorded as it is made; leaving the
testbed (even through a failing test) reaps its processes, unmounts, stops and deletes its
volume and detaches its loop devices, and ``Testbed.leftovers()`` says what, if anything,
remains. GlusterFS allows one glusterd per machine: the testbed runs its own (with a private
working directory) and refuses to start next to one it did not start; two testbeds on one
machine take turns through a lock file.
"""
