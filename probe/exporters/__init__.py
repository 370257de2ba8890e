"""What hands the service's data to others: the Prometheus ``/metrics`` endpoint, the
``.prom`` file for node_exporter's textfile collector, the copy of the database published to
a shared directory, and the jobs that run them without holding the service. Reads the
``runtime``'s recorder and runners; the ``daemon`` starts them."""
