"""Fleets of many days with planted effects, written through the store as hour records: a
level shift by a chosen factor on a chosen day, daily and weekly cycles of chosen amplitude,
a stretch of caching below 1, and stationary series beside them (tests/ and bench/ both).

Why hour records, not minutes: the service keeps minutes for ``retention`` and then merges
them into hours (``Store.rollup``); histograms merge exactly, so an hour record reads the
same hourly statistics as its sixty minutes merged, and ``slowdown trends`` works on hourly
steps. Sixty days of minutes are 86,400 records per (host, target, op), 8.3 million for 16
hosts of one target: minutes long to write here and gigabytes on disk, for the same
numbers. ``per_hour`` samples an hour (240 by default; a probe at one op a second takes
3,600): fewer samples make each hour's median noisier, so detection here is no easier than
on a real probe's hours.
"""

from __future__ import annotations

import calendar
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from slowdown.analysis.histogram import Histogram
from slowdown.analysis.store import Store
from slowdown.analysis.store.records import HOUR, Record

DAY = 86400
OPS = ("data-read", "data-write", "md-stat", "md-read", "md-delete", "md-write")
MEDIAN = {"data-read": 3e-3, "data-write": 4e-3}  # md ops: MD_MEDIAN
MD_MEDIAN = 200e-6
START = calendar.timegm((2026, 9, 1, 0, 0, 0))  # a Tuesday, 00:00 UTC


@dataclass(frozen=True)
class Effects:
    """What is planted on some ops of a target, as factors on the latency's level."""

    shifts: tuple[tuple[float, float], ...] = ()  # (days after the start, factor): stays
    daily: float = 1.0  # peak over trough of a cosine over the day
    daily_peak: float = 2.5  # hour of the day (UTC) of its peak
    weekly: float = 1.0  # factor on one day of every week
    weekly_day: int = 6  # that day: 0 Monday .. 6 Sunday
    dip: tuple[float, float, float] | None = None  # (first day, days, factor < 1): caching
    nightly: tuple[float, float, float] | None = None  # (from hour, to hour, factor) UTC, daily
    spike: tuple[float, float, float] | None = None  # (days after the start, hours, factor)

    def level(self, t: np.ndarray, start: int) -> np.ndarray:
        """The factor at the moments ``t`` (unix seconds)."""
        log = np.zeros(len(t))
        for day, factor in self.shifts:
            log += np.where(t >= start + day * DAY, np.log(factor), 0.0)
        hour = (t % DAY) / HOUR
        log += np.log(self.daily) / 2 * np.cos(2 * np.pi * (hour - self.daily_peak) / 24)
        weekday = (t // DAY + 3) % 7  # 1970-01-01 was a Thursday
        log += np.where(weekday == self.weekly_day, np.log(self.weekly), 0.0)
        if self.dip is not None:
            first, days, factor = self.dip
            inside = (t >= start + first * DAY) & (t < start + (first + days) * DAY)
            log += np.where(inside, np.log(factor), 0.0)
        if self.nightly is not None:  # a job on the clock every night: backups
            lo, hi, factor = self.nightly
            log += np.where((hour >= lo) & (hour < hi), np.log(factor), 0.0)
        if self.spike is not None:  # once: a real slowdown
            first, hours, factor = self.spike
            inside = (t >= start + first * DAY) & (t < start + first * DAY + hours * HOUR)
            log += np.where(inside, np.log(factor), 0.0)
        return np.exp(log)


STEADY = Effects()


@dataclass(frozen=True)
class Target:
    """A target of the fleet: ``effects`` on ``ops`` (the others stationary)."""

    name: str
    effects: Effects = STEADY
    ops: tuple[str, ...] = OPS


@dataclass(frozen=True)
class Fleet:
    targets: tuple[Target, ...]
    hosts: int = 4
    days: int = 60
    start: int = START
    sigma: float = 0.4  # lognormal spread of the samples within an hour
    per_hour: int = 240
    seed: int = 31
    host_spread: float = 0.2  # each host's level: up to +-20 % off the fleet's
    wander: float = 0.0  # spread of a slow wander of each series' log level (AR(1), 0: none)
    wander_hours: float = 12.0  # its correlation time
    names: tuple[str, ...] = field(default=())
    ops: tuple[str, ...] = OPS  # the ops written (fewer: a quicker fleet)

    def host_names(self) -> list[str]:
        return list(self.names) or [f"h{i:02d}" for i in range(1, self.hosts + 1)]

    @property
    def end(self) -> int:
        return self.start + self.days * DAY


def planted(hosts: int = 4, days: int = 60, ops: tuple[str, ...] = OPS) -> Fleet:
    """The fleet of issue #31's "done when": every effect on its own target, a steady one."""
    return Fleet((
        Target("steady"),
        Target("shifted", Effects(shifts=((12.5, 2.0),)), ("md-stat",)),
        Target("shifted-down", Effects(shifts=((40.25, 0.6),)), ("data-read",)),
        Target("cyclic", Effects(daily=1.6, daily_peak=2.5, weekly=1.4, weekly_day=6)),
        Target("cached", Effects(dip=(30.0, 7.0, 0.5)), ("data-read", "md-read")),
    ), hosts=hosts, days=days, ops=ops)


def median_of(op: str) -> float:
    return MEDIAN.get(op, MD_MEDIAN)


def write_host(path: Path, fleet: Fleet, host: str, number: int) -> int:
    """One host's file of ``fleet``; returns the records written."""
    rng = np.random.default_rng([fleet.seed, number])
    hours = np.arange(fleet.start, fleet.end, HOUR, dtype=np.int64)

    def records() -> Iterable[Record]:
        for target in fleet.targets:
            for op in fleet.ops:
                effects = target.effects if op in target.ops else STEADY
                offset = float(rng.uniform(-fleet.host_spread, fleet.host_spread))
                level = median_of(op) * (1 + offset) * effects.level(hours, fleet.start)
                level *= np.exp(_wander(rng, len(hours), fleet.wander, fleet.wander_hours))
                samples = rng.lognormal(0.0, fleet.sigma, (len(hours), fleet.per_hour))
                yield from _records(host, target.name, op, hours, samples * level[:, None])

    with Store(path) as store:  # one transaction: one sync of the file
        return store.write(records())


def _wander(rng: np.random.Generator, n: int, spread: float, hours: float) -> np.ndarray:
    """A stationary AR(1) series of ``n`` hours, standard deviation ``spread``, correlation
    time ``hours``: load that comes and goes, not a change that stays."""
    out = np.zeros(n)
    if spread <= 0:
        return out
    rho = float(np.exp(-1.0 / hours))
    steps = rng.normal(0.0, spread * np.sqrt(1 - rho ** 2), n)
    out[0] = rng.normal(0.0, spread)
    for i in range(1, n):
        out[i] = rho * out[i - 1] + steps[i]
    return out


def _records(host: str, target: str, op: str, hours: np.ndarray,
             samples: np.ndarray) -> Iterable[Record]:
    for start, values in zip(hours.tolist(), samples):
        h = Histogram()
        h.record_many(values)
        yield Record(host, target, op, start, h, span=HOUR)


def write_minutes(path: Path, effects: Effects, *, host: str = "m01", target: str = "work",
                  ops: tuple[str, ...] = ("md-stat", "data-read"), start: int = START,
                  days: int = 60, per_minute: int = 60, sigma: float = 0.4,
                  seed: int = 31) -> int:
    """One host's file of minute records (as the service keeps them for ``retention``), a
    day per transaction; returns the records written."""
    rng = np.random.default_rng(seed)
    minutes = np.arange(start, start + days * DAY, 60, dtype=np.int64)
    written = 0
    with Store(path) as store:
        for op in ops:
            level = median_of(op) * effects.level(minutes, start)
            for first in range(0, len(minutes), 1440):
                part = slice(first, first + 1440)
                samples = rng.lognormal(0.0, sigma, (len(minutes[part]), per_minute))
                batch = []
                for t, values in zip(minutes[part].tolist(), samples * level[part, None]):
                    h = Histogram()
                    h.record_many(values)
                    batch.append(Record(host, target, op, t, h))
                written += store.write(batch)
    return written


def write_fleet(directory: Path, fleet: Fleet) -> list[Path]:
    """One file per host in ``directory`` (made; files already there are left alone)."""
    directory.mkdir(parents=True, exist_ok=True)
    paths = []
    for number, host in enumerate(fleet.host_names()):
        path = directory / f"{host}.db"
        if not path.exists():
            write_host(path, fleet, host, number)
        paths.append(path)
    return paths


def maintain_baselines(paths: Iterable[Path], fleet: Fleet) -> int:
    """The baselines the service would have made in each file over the fleet's days
    (``baseline.maintain``, UTC months): the initial one after the first day, then one at
    each month's start from the month before. Returns how many were made."""
    import datetime as dt

    from slowdown.analysis.stats import baseline

    moments = [fleet.start + DAY]
    month = baseline.month_start(fleet.start + DAY, dt.timezone.utc)
    while True:
        month = baseline.month_start(month + 32 * DAY, dt.timezone.utc)
        if month >= fleet.end:
            break
        moments.append(month)
    made = 0
    for path in paths:
        with Store(path) as store:
            for now in moments:
                made += len(baseline.maintain(store, now, DAY, zone=dt.timezone.utc))
    return made


def planted_changes(fleet: Fleet) -> list[tuple[str, str, int, float]]:
    """(target, op, moment, factor) of every shift that stays."""
    return [(t.name, op, int(fleet.start + day * DAY), factor) for t in fleet.targets
            for op in t.ops if op in fleet.ops for day, factor in t.effects.shifts
            if day < fleet.days]


def steady_pairs(fleet: Fleet) -> list[tuple[str, str]]:
    """(target, op) with nothing planted."""
    return [(t.name, op) for t in fleet.targets for op in fleet.ops
            if op not in t.ops or t.effects == STEADY]


def latency_log(path: Path, start: int, days: int, effects: Effects, *, median: float,
                every: float = 30.0, sigma: float = 0.4, seed: int = 0,
                ddir: int = 0) -> Path:
    """A fio latency log (``--write_lat_log`` with ``--log_unix_epoch=1``: unix ms, ns) of
    one sample every ``every`` seconds over ``days`` days, its level as ``effects`` say."""
    rng = np.random.default_rng(seed)
    t = np.arange(start, start + days * DAY, every)
    values = median * effects.level(t, start) * rng.lognormal(0.0, sigma, len(t))
    ms = np.round(t * 1000).astype(np.int64)
    ns = np.maximum(1, np.round(values * 1e9)).astype(np.int64)
    lines = np.char.add(np.char.add(ms.astype(str), ", "), ns.astype(str))
    with open(path, "w") as f:
        f.write("".join(f"{line}, {ddir}, 4096, 0\n" for line in lines.tolist()))
    return path
