"""``slowdown``: the read side's command line, a thin layer over the packages below it.

``main`` is the group; ``uptime`` the uptime-like default; every other command has a module
of its own, registered lazily so that ``slowdown`` alone imports neither numpy nor the
others, and ``slowdown import-fio`` neither the configuration nor the store. ``options``
declares the options every read command shares, ``read_setup`` opens what they name (databases,
filters, the moment looked at: the view, ``analysis/view/``), ``output`` writes text and JSON.
"""
