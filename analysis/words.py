"""The product's fixed words: the six ops a probe times and the statistics a reader may ask for.

They are written once, here, because the probe names its results with them, the
configuration checks a file against them and the statistics take them apart; three copies
could drift apart, one cannot. Imports nothing of ours.
"""

from __future__ import annotations

import re

OPS = ("data-read", "data-write", "md-stat", "md-read", "md-delete", "md-write")
"""Every op, in the order a probe run does them."""
DATA_OPS = OPS[:2]
"""The data probe's ops: 1 MiB read and written in ``data.bin``."""
MD_OPS = OPS[2:]
"""The metadata probe's ops on one pool object, in the order it does them."""

STATISTICS = ("median", "mean", "max", "q90", "q95", "q99")
"""The named statistics; any quantile ``qNN`` / ``qNN.N`` is a statistic too."""

_QUANTILE_NAME = re.compile(r"q\d{1,2}(?:\.\d)?")


def is_statistic(name: object) -> bool:
    """True for ``median``, ``mean``, ``max`` and quantiles ``qNN`` / ``qNN.N`` (0 < NN < 100)."""
    return isinstance(name, str) and (name == "mean" or statistic_quantile(name) is not None)


def statistic_quantile(name: str) -> float | None:
    """The quantile a statistic stands for: ``median`` 0.5, ``q95`` 0.95, ``q99.9`` 0.999,
    ``max`` 1.0; None for ``mean`` and for anything that is not a statistic."""
    if name == "median":
        return 0.5
    if name == "max":
        return 1.0
    match = _QUANTILE_NAME.fullmatch(name)
    if match is None:
        return None
    percent = float(name[1:])
    if not 0 < percent < 100:
        return None
    return percent / 100
