"""``slowdown``: the read side's command line, a thin layer over the packages below it.

``main`` is the group and the uptime-like default; every other command has a module of its
own, registered lazily so that ``slowdown`` alone imports neither numpy nor the others.
``scope`` is what every read command shares (databases, filters, the moment looked at),
``output`` how text and JSON are written.
"""
