"""``slowdown motd``: the login notice. Nothing while every target is normal; one line while
one is slow, such as ``work is 12x slower than usual right now (most nodes see it: the
filesystem)``.

Run by ``/etc/profile.d/slowdown.sh`` at every interactive login, so it must never make a
login wait or fail: it reads only this node's database (never a probed filesystem; a
[fleet] of published copies is not read, a Prometheus only within what is left of the
deadline), says nothing of any fault (no configuration, no database, a damaged one, no
permission), exits 0 whatever happens, and ends at its deadline ([motd] deadline, 100 ms
by default) whatever the child doing the work waits on (``main``). It runs without click
(``entry.py`` sends ``slowdown motd`` here first): its cost is Python's start, a fork, the
configuration and one SQLite read.
"""

from __future__ import annotations

import contextlib
import os
import select
import signal
import sys
import time

BACKSTOP = 1.0  # seconds: the bound until the configuration has said its deadline


def main(argv: list[str]) -> int:
    """``slowdown motd [--config FILE]``; always 0 (a login must not see a failure).

    The work is done in a child process: a process blocked on a hung filesystem (a FUSE
    request already taken by its server, an NFS hard mount) cannot be killed, not even by
    SIGKILL, so only a parent that never touches a file can keep the deadline. The child
    says the deadline, then the line, through a pipe; the parent prints the line if it
    comes in time, kills the child and leaves without waiting for it."""
    started = time.monotonic()
    path = _config_path(argv)
    read_end, write_end = os.pipe()
    child = os.fork()
    if child == 0:  # pragma: no cover - the child's exit status is never read
        os.close(read_end)
        _child(write_end, path, started)
    os.close(write_end)
    said = _read_until(read_end, started)
    with contextlib.suppress(OSError):
        os.kill(child, signal.SIGKILL)
    with contextlib.suppress(OSError):  # reaped if it is done; else init's, once it can die
        os.waitpid(child, os.WNOHANG)
    if said:
        os.write(1, said.encode())  # one write: the line is whole or absent
    return 0


def _child(out: int, path, started: float) -> None:
    """Away from the caller's terminal and pipes (a child stuck in the kernel must not keep
    them open), write ``deadline SECONDS`` and then the line, and exit."""
    try:
        null = os.open(os.devnull, os.O_RDWR)
        for fd in (0, 1, 2):
            os.dup2(null, fd)
        os.write(out, notice(path, started, lambda d: os.write(out, f"{d!r}\n".encode()))
                 .encode())
    except BaseException:  # whatever went wrong, the login goes on in silence
        pass
    os._exit(0)


def _read_until(fd: int, started: float) -> str:
    """What the child wrote before its end or the deadline: its first line gives the
    deadline (from ``started``), the rest is the notice; "" when it was not all there."""
    deadline, data = started + BACKSTOP, b""
    while True:
        left = deadline - time.monotonic()
        if left <= 0 or not select.select([fd], [], [], left)[0]:
            return ""
        chunk = os.read(fd, 4096)
        if not chunk:
            break
        data += chunk
        if b"\n" in data and deadline == started + BACKSTOP:
            head = data.split(b"\n", 1)[0]
            try:
                deadline = started + min(float(head), BACKSTOP * 10)
            except ValueError:
                return ""
    head, _, line = data.decode(errors="replace").partition("\n")
    return line if line.endswith("\n") else ""


def _config_path(argv: list[str]):
    """The file of ``--config FILE`` / ``--config=FILE``, or None (the usual search)."""
    from pathlib import Path

    for i, arg in enumerate(argv):
        if arg == "--config" and i + 1 < len(argv):
            return Path(argv[i + 1])
        if arg.startswith("--config="):
            return Path(arg.split("=", 1)[1])
    return None


def notice(config_path, started: float, say_deadline) -> str:
    """The line to show with its newline, or "" (off, nothing slow, nothing known); the
    configured deadline is handed to ``say_deadline`` as soon as it is known."""
    from slowdown.analysis.config import load

    config = load(config_path)
    if not config.motd.enabled:
        return ""
    say_deadline(config.motd.deadline)
    line = slow_line(config, started + config.motd.deadline)
    return line + "\n" if line else ""


def slow_line(config, deadline: float) -> str:
    """``work is 12x slower than usual right now (...)``, for each running target at or above
    the slow threshold ([fleet] slow, else 3), joined by ``; ``; "" when none is."""
    from slowdown.analysis.stats.slowdown import target_slowdowns
    from slowdown.analysis.stats.verdict import DEFAULT_SLOW
    from slowdown.analysis.view.reader import open_view

    fleet = config.fleet
    window = fleet.window if fleet is not None else min(config.windows)
    statistic = fleet.statistic if fleet is not None else config.statistics[0]
    slow = fleet.slow if fleet is not None else DEFAULT_SLOW
    now = time.time()
    reader = open_view(config, (), (), (), (), now, now, True, one_moment=True,
                       windows=(window,), statistic=statistic)
    states = reader.target_states()
    target_ops = {t: ops for t, ops in reader.target_ops().items()
                  if t in states and states[t].state == "running"}
    if not target_ops:
        return ""
    results = target_slowdowns(reader.stores, reader.book(), list(target_ops), target_ops,
                               [window], statistic, now, hosts=reader.hosts,
                               live_stuck=reader.live_stuck(), prepared=reader.prepared)
    slow_ones = {t: r[0].value for t, r in results.items()
                 if r and r[0].value is not None and r[0].value >= slow}  # NaN: not >=
    if not slow_ones:
        return ""
    words = _verdict_words(config, reader, target_ops, deadline)
    parts = []
    for target, value in sorted(slow_ones.items()):
        said = VERDICT_WORDS.get(words.get(target, ""), "")
        parts.append(f"{target} {ratio_text(value)} right now" + (f" ({said})" if said else ""))
    return "; ".join(parts)


VERDICT_WORDS = {
    "filesystem": "most nodes see it: the filesystem",
    "node": "few other nodes see it: this node",
}


def ratio_text(value: float) -> str:
    """``is 12x slower than usual``, ``is 3.4x ...``; a slowdown without bound (an op stuck
    with nothing to divide by) ``is not answering``."""
    if value == float("inf"):
        return "is not answering"
    return f"is {value:.1f}x slower than usual" if value < 10 else \
        f"is {value:.0f}x slower than usual"


def _verdict_words(config, reader, target_ops, deadline: float) -> dict[str, str]:
    """Each target's verdict word from a [fleet] Prometheus, asked with what is left of the
    deadline; none from published copies (they lie on shared, perhaps probed, filesystems,
    which a login must never wait on) and none without a [fleet]."""
    fleet = config.fleet
    if fleet is None or not fleet.prometheus:
        return {}
    left = deadline - time.monotonic() - 0.01
    if left <= 0:
        return {}
    import dataclasses

    from slowdown.analysis.stats.fleet_sources import fleet_verdicts

    host = config.host
    stores = [s for s, series in zip(reader.stores, reader.store_series)
              if any(h == host for h, _, _ in series)] or list(reader.stores)
    verdicts = fleet_verdicts(dataclasses.replace(fleet, timeout=left), stores, reader.book(),
                              target_ops, reader.now, host, reader.live_stuck(host))
    return {t: v.word for t, v in verdicts.items()}


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main(sys.argv[1:]))
