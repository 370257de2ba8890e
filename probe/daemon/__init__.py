"""The probing service: ticks every interval, flushes a minute in one transaction, maintains
its database, writes the live state, takes its locks and watches the clock, assembling the
``runtime`` parts and the ``exporters``. Only the command line (``command``) imports it."""
