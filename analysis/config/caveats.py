"""What a valid configuration may still cost: warnings, never refusals.

``slowdown-probe check-config`` prints them and the service logs them as it starts. Each is
one line naming the file, line and key, as an error is (``errors.ConfigError``), after
``warning:``. Nothing here touches a target's filesystem: a configuration is read even while
one hangs.
"""

from __future__ import annotations

from collections.abc import Sequence

from slowdown.analysis.config.errors import ConfigError, format_key
from slowdown.analysis.config.locator import _Locator
from slowdown.analysis.config.model import Config
from slowdown.analysis.units import format_duration, format_size

SHORT_INTERVAL = 0.1  # seconds: below, the probe loads what it measures (and skips ticks)
# What one tick of one target asks of its filesystem (probe/probes/worker.py: the six ops in turn):
# a 1 MiB read and a 1 MiB write, and four metadata ops (stat, read, delete, create).
TICK_BYTES = 2 << 20
TICK_MD_OPS = 4


def caveats(config: Config) -> list[str]:
    """The configuration's warnings, one line each (none for a plain one)."""
    found = []
    if config.interval < SHORT_INTERVAL:
        found.append(f"warning: {located(config, ('interval',), _short_interval(config))}")
    return found


def located(config: Config, key: Sequence[str | int], message: str) -> ConfigError:
    """``message`` about ``key``, rendered ``<file>:<line>: <key>: <message>``, the line
    found in the file's text (the built-in configuration, without a file, names the key
    alone): for a warning, or an error found after the file was read."""
    line = None
    if config.source is not None:
        try:
            line = _Locator(config.source.read_text(encoding="utf-8")).line_of(key)
        except (OSError, UnicodeDecodeError):  # changed since it was read: the key will do
            line = None
    return ConfigError(message, path=config.source, line=line, key=format_key(key))


def _short_interval(config: Config) -> str:
    """What an interval under SHORT_INTERVAL costs, per target, from this node alone."""
    ticks = 1.0 / config.interval
    return (f"{format_duration(config.interval)} is under "
            f"{format_duration(SHORT_INTERVAL)}: each tick runs all six ops of a target "
            f"(a 1 MiB read, a 1 MiB write, 4 metadata ops), so this node alone asks "
            f"{format_size(round(TICK_BYTES * ticks))}/s and {TICK_MD_OPS * ticks:,.0f} metadata "
            f"ops/s of each target's filesystem, the probe's load then weighs on the "
            f"latency it measures, and a tick that comes while the last run still goes is "
            f"skipped; the default is 1s")


__all__ = ["SHORT_INTERVAL", "caveats", "located"]
