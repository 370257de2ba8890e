"""What the tests share: databases, the service as a subprocess, faulty and real filesystems,
the GlusterFS testbed, the scenes of minutes. No test module imports another; what two share
lives here."""
