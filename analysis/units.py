"""Human forms of durations and sizes, parsed and formatted at the edges.

Inside the code a duration is float seconds and a size is int bytes; forms such as ``10m``
or ``256GiB`` exist only in the configuration, on the command line and in output. Parsing
goes through :class:`decimal.Decimal` so that ``"250ms"`` is exactly the float ``0.25`` and
``"1.5GiB"`` exactly ``1610612736`` bytes.
"""

from __future__ import annotations

import math
import re
import time
from datetime import datetime
from decimal import Decimal

DURATION_EXAMPLE = "1s, 10m, 1h, 30d"
SIZE_EXAMPLE = "4096, 1MiB, 256GiB, 10GB"

# Largest first: a compound duration lists its parts in this order, each at most once.
_DURATION_UNITS: dict[str, Decimal] = {
    "w": Decimal(604800),
    "d": Decimal(86400),
    "h": Decimal(3600),
    "m": Decimal(60),
    "s": Decimal(1),
    "ms": Decimal("0.001"),
}
# The usual spellings of each unit (as systemd, GNU date and people write them); ``m`` is
# minutes, never months.
_DURATION_SPELLINGS: dict[str, tuple[str, ...]] = {
    "w": ("w", "wk", "wks", "week", "weeks"),
    "d": ("d", "day", "days"),
    "h": ("h", "hr", "hrs", "hour", "hours"),
    "m": ("m", "min", "mins", "minute", "minutes"),
    "s": ("s", "sec", "secs", "second", "seconds"),
    "ms": ("ms", "msec", "msecs", "millisecond", "milliseconds"),
}
_DURATION_UNIT_OF = {spelling: unit for unit, spellings in _DURATION_SPELLINGS.items()
                     for spelling in spellings}
_NUMBER = r"(?:\d+(?:\.\d*)?|\.\d+)"
_BARE_NUMBER = re.compile(_NUMBER)
_DURATION_PART = re.compile(
    rf"\s*({_NUMBER})\s*({'|'.join(sorted(_DURATION_UNIT_OF, key=lambda u: (-len(u), u)))})"
    r"(?![A-Za-z])")

_BINARY_UNITS = ("KiB", "MiB", "GiB", "TiB", "PiB", "EiB")
_SIZE_UNITS: dict[str, int] = {"b": 1}
for _power, _unit in enumerate(_BINARY_UNITS, start=1):
    _SIZE_UNITS[_unit.lower()] = 1024**_power
    _SIZE_UNITS[_unit[0].lower() + "b"] = 1000**_power
_SIZE = re.compile(rf"({_NUMBER})\s*([A-Za-z]*)")


def _duration_error(text: object, what: str = "") -> ValueError:
    return ValueError(f"expected a duration like {DURATION_EXAMPLE}{what}; got {text!r}")


def parse_duration(text: str | int | float) -> float:
    """Seconds from ``"500ms"``, ``"10m"``, ``"1h30m"``, ``"2w"`` or a bare number of seconds.

    Units are ``ms``, ``s``, ``m`` (minutes), ``h``, ``d`` and ``w``, each also in its usual
    spellings (``msec``; ``sec``, ``seconds``; ``min``, ``mins``, ``minutes``; ``hr``,
    ``hours``; ``day``, ``days``; ``wk``, ``weeks``), in lower case; spaces may stand between
    the parts (``"1h 30m"``, ``"1 hour 30 minutes"``). A compound form names each unit at most
    once, largest first. Negative, empty and unknown forms raise :class:`ValueError` saying
    what was expected.
    """
    if isinstance(text, bool) or not isinstance(text, (str, int, float)):
        raise _duration_error(text)
    if not isinstance(text, str):
        if not math.isfinite(text):
            raise _duration_error(text)
        if text < 0:
            raise _duration_error(text, ", not a negative one")
        return float(text)
    stripped = text.strip()
    if stripped.startswith("-"):
        raise _duration_error(text, ", not a negative one")
    if _BARE_NUMBER.fullmatch(stripped):
        return float(Decimal(stripped))
    total = Decimal(0)
    position, previous_rank = 0, -1
    ranks = list(_DURATION_UNITS)
    while position < len(stripped):
        match = _DURATION_PART.match(stripped, position)
        if match is None:
            raise _duration_error(text)
        unit = _DURATION_UNIT_OF[match.group(2)]
        rank = ranks.index(unit)
        if rank <= previous_rank:
            raise _duration_error(text, " (units largest first, each once)")
        total += Decimal(match.group(1)) * _DURATION_UNITS[unit]
        position, previous_rank = match.end(), rank
    if previous_rank < 0:
        raise _duration_error(text)
    return float(total)


def _decimal_text(value: Decimal) -> str:
    """``Decimal`` as plain positional text without trailing zeros (``2.50`` -> ``2.5``)."""
    text = format(value.normalize(), "f")
    if "." in text:
        text = text.rstrip("0").rstrip(".")
    return text


def format_duration(seconds: float) -> str:
    """The short human form: ``"250ms"``, ``"1.5s"``, ``"10m"``, ``"1h30m"``, ``"1d"``, ``"2w"``.

    Below one second the form is milliseconds; from one second on it is a compound of
    days, hours, minutes and seconds (weeks only for a whole number of weeks). The result
    parses back to the same float.
    """
    if isinstance(seconds, bool) or not isinstance(seconds, (int, float)):
        raise ValueError(f"expected a number of seconds, got {seconds!r}")
    if not math.isfinite(seconds) or seconds < 0:
        raise ValueError(f"expected a finite, non-negative number of seconds, got {seconds!r}")
    if seconds == 0:
        return "0s"
    # The shortest decimal that reads back as this float; all arithmetic below is exact on it.
    exact = Decimal(repr(float(seconds)))
    if seconds < 1:
        return _decimal_text(exact * 1000) + "ms"
    whole = int(exact)
    if exact == whole and whole % 604800 == 0:
        return f"{whole // 604800}w"
    parts = []
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60)):
        count, whole = divmod(whole, size)
        if count:
            parts.append(f"{count}{unit}")
    rest = exact - int(exact) + whole
    if rest:
        parts.append(_decimal_text(rest) + "s")
    return "".join(parts)


def _size_error(text: object, what: str = "") -> ValueError:
    return ValueError(f"expected a size like {SIZE_EXAMPLE}{what}; got {text!r}")


def parse_size(text: str | int) -> int:
    """Bytes from ``"4096"``, ``"1MiB"``, ``"1.5GiB"`` (binary) or ``"10GB"`` (SI, powers of 1000).

    Units: ``B``, ``KiB`` ... ``EiB`` and ``kB``/``KB`` ... ``EB``, in any letter case. A
    fractional result, a negative or an unknown unit raises :class:`ValueError`.
    """
    if isinstance(text, bool):
        raise _size_error(text)
    if isinstance(text, int):
        if text < 0:
            raise _size_error(text, ", not a negative one")
        return text
    if isinstance(text, float):
        if not text.is_integer() or text < 0:
            raise _size_error(text, " (a whole, non-negative number of bytes)")
        return int(text)
    if not isinstance(text, str):
        raise _size_error(text)
    stripped = text.strip()
    if stripped.startswith("-"):
        raise _size_error(text, ", not a negative one")
    match = _SIZE.fullmatch(stripped)
    unit = match.group(2).lower() if match is not None else "?"
    factor = 1 if unit == "" else _SIZE_UNITS.get(unit)
    if match is None or factor is None:
        raise _size_error(text)
    value = Decimal(match.group(1)) * factor
    if value != value.to_integral_value():
        raise _size_error(text, " (a whole number of bytes)")
    return int(value)


def format_size(n: int) -> str:
    """The short human form in binary units: ``"512B"``, ``"1MiB"``, ``"1.5GiB"``, ``"3.81KiB"``.

    At most two decimals; whole and half units are exact and parse back to ``n``.
    """
    if isinstance(n, bool) or not isinstance(n, int) or n < 0:
        raise ValueError(f"expected a non-negative number of bytes, got {n!r}")
    if n < 1024:
        return f"{n}B"
    power = min((n.bit_length() - 1) // 10, len(_BINARY_UNITS))
    factor = 1024**power
    if n % factor == 0:
        return f"{n // factor}{_BINARY_UNITS[power - 1]}"
    value = (Decimal(n) / factor).quantize(Decimal("0.01"))
    return _decimal_text(value) + _BINARY_UNITS[power - 1]


_CLOCK = re.compile(r"(\d{1,2}):(\d{1,2})(?::(\d{2})(\.\d+)?)?\s*([Zz]|[+-]\d{2}:?\d{2})?")


def _clock_today(value: str, now: float) -> str | None:
    """A bare clock time (``15:22``, ``9:05:30``, ``15:22Z``, ``15:22 +01:00``) as an ISO time
    on the local date of ``now``: ``date -d 15:22`` is today's 15:22, also while it is still
    to come. None when ``value`` is not one; an hour past 23 or a minute or second past 59 is
    refused, as ``date`` refuses it."""
    clock = _CLOCK.fullmatch(value)
    if clock is None:
        return None
    hour, minute, second = (int(part or 0) for part in clock.group(1, 2, 3))
    if hour > 23 or minute > 59 or second > 59:
        raise ValueError(f"{value!r} is not a clock time (00:00 to 23:59:59)")
    zone = clock.group(5) or ""
    if len(zone) == 5:  # +0100
        zone = zone[:3] + ":" + zone[3:]
    day = datetime.fromtimestamp(now).date().isoformat()
    fraction = f".{clock.group(4)[1:7]:0<6}" if clock.group(4) else ""  # 3.9 reads 6 digits
    return f"{day}T{hour:02d}:{minute:02d}:{second:02d}{fraction}{zone}"


def parse_time(text: str, now: float) -> float:
    """A point in time, read as ``date -d`` reads it: ``now``, a duration ago (``10m``, ``1d``,
    also written ``-10m``), ``@EPOCH``, an ISO 8601 date or time (``2026-11-20``,
    ``2026-11-20T08:00`` or ``2026-11-20 08:00``), or a clock time alone (``15:22``,
    ``15:22:30``: today's, by the local date of ``now``, as ``date -d 15:22`` says it even
    before 15:22), in local time unless it carries a zone (``...Z`` or ``...+01:00``). A local
    time that a DST change skips does not exist and is refused; one that it repeats is the
    first of the two (as ``date`` and ``mktime`` have it).
    """
    value = str(text).strip()
    if value == "now":
        return now
    if value.startswith("@"):
        try:
            seconds = float(value[1:])
        except ValueError:
            raise ValueError(f"expected @ and unix seconds; got {text!r}") from None
        return _moment(seconds, text)
    try:
        ago = parse_duration(value[1:] if value.startswith("-") else value)
    except ValueError:
        pass
    else:
        return _moment(now - ago, text)
    iso = _clock_today(value, now) or value
    iso = iso[:-1] + "+00:00" if iso.endswith(("Z", "z")) else iso
    try:
        moment = datetime.fromisoformat(iso)
    except ValueError:
        raise ValueError(
            f"expected a time like 2026-11-20T08:00 (local time), 2026-11-20T08:00Z, 15:22 "
            f"(today), @1795000000 or a duration ago like 1h; got {text!r}") from None
    if moment.tzinfo is not None:
        return _moment(moment.timestamp(), text)
    seconds = time.mktime((*moment.timetuple()[:8], -1)) + moment.microsecond / 1e6
    if datetime.fromtimestamp(seconds).replace(microsecond=moment.microsecond) != moment:
        raise ValueError(f"{text!r} does not exist in the local time zone ({_zone_names()}): "
                         f"a DST change skips it; give a zone (Z or +01:00) or @epoch")
    return _moment(seconds, text)


def _zone_names() -> str:
    return "/".join(dict.fromkeys(time.tzname))


def _moment(seconds: float, text: str) -> float:
    """A time that every read command can show: from 1970 to the end of the year 9999."""
    if not 0 <= seconds < 253402300800:  # also no nan, no inf
        raise ValueError(f"{text!r} is not a time between 1970 and the year 9999")
    return seconds


def format_clock(moment: float, now: float | None = None) -> str:
    """A moment in local time with its zone: ``"16:42:07 UTC"``, or with its date,
    ``"2026-11-20 16:42:07 CET"``, when it falls on another day than ``now``."""
    local = time.localtime(moment)
    if now is not None and time.localtime(now)[:3] != local[:3]:
        return time.strftime("%Y-%m-%d %H:%M:%S %Z", local)
    return time.strftime("%H:%M:%S %Z", local)


def format_age(seconds: float) -> str:
    """How long ago, to the unit that matters: ``"42s"``, ``"7m"``, ``"3h20m"``, ``"2d5h"``."""
    whole = max(0, int(seconds))
    if whole < 60:
        return f"{whole}s"
    if whole < 3600:
        return f"{whole // 60}m"
    if whole < 86400:
        return format_duration(whole // 60 * 60)
    return format_duration(whole // 3600 * 3600)


def format_latency(seconds: float | None) -> str:
    """Seconds in the unit that reads best: ``850us``, ``1.23ms``, ``2.50s``, ``3m12s``."""
    if seconds is None or seconds != seconds:
        return "-"
    if seconds < 1e-3:
        return f"{seconds * 1e6:.0f}us"
    if seconds < 1.0:
        return f"{seconds * 1e3:.3g}ms"
    if seconds < 100:
        return f"{seconds:.3g}s"
    return format_duration(round(seconds))
