"""Facts of this machine that tell processes apart across machines and boots.

A PID means something only on its machine, in its boot: a lock's or a start state's holder is
known to be alive only when its boot id is this one. Imports nothing: the probe worker uses it.
"""

from __future__ import annotations


def boot_id() -> str:
    """This machine's boot id ('' when unknown): equal only for processes of this boot."""
    try:
        with open("/proc/sys/kernel/random/boot_id") as f:
            return f.read().strip()
    except OSError:
        return ""
