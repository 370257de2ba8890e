"""Converters from TOML values to what the model holds, one per kind of value.

Each takes the raw value, returns the converted one or raises :class:`_Invalid` with a
message that says what was expected and what was given (``expected an integer, got a string
('100')``); the checks add file, line and key. None of them looks at the filesystem.
"""

from __future__ import annotations

import ipaddress
import math
import os
import re
from collections.abc import Mapping, Sequence
from datetime import date, datetime, time
from typing import Any, Callable, TypeVar
from urllib.parse import urlsplit

from slowdown.analysis.config.defaults import _home
from slowdown.analysis.config.model import DataSize
from slowdown.analysis.units import (
    DURATION_EXAMPLE,
    format_duration,
    parse_duration,
    parse_size,
)
from slowdown.analysis.words import STATISTICS, is_statistic

_NAME = re.compile(r"[A-Za-z0-9_.-]+")
_ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_HOSTNAME = re.compile(
    r"[A-Za-z0-9]([A-Za-z0-9-]*[A-Za-z0-9])?(\.[A-Za-z0-9]([A-Za-z0-9-]*[A-Za-z0-9])?)*"
)


_Parsed = TypeVar("_Parsed")


class _Invalid(Exception):
    """A bad value; the checker turns it into a ConfigError at the key being read."""


def _describe(value: object) -> str:
    if isinstance(value, bool):
        return f"a boolean ({str(value).lower()})"
    if isinstance(value, int):
        return f"an integer ({value})"
    if isinstance(value, float):
        return f"a float ({value})"
    if isinstance(value, str):
        return f"a string ({value!r})"
    if isinstance(value, list):
        return "an array"
    if isinstance(value, dict):
        return "a table"
    if isinstance(value, datetime):
        return "a date-time"
    if isinstance(value, date):
        return "a date"
    if isinstance(value, time):
        return "a time"
    return type(value).__name__


def _as_str(value: object) -> str:
    if not isinstance(value, str):
        raise _Invalid(f"expected a string, got {_describe(value)}")
    return value


def _matching(pattern: re.Pattern[str], expected: str) -> Callable[[object], str]:
    """A converter of strings that match ``pattern`` whole, else "expected <expected>"."""
    def convert(value: object) -> str:
        text = _as_str(value)
        if not pattern.fullmatch(text):
            raise _Invalid(f"expected {expected}; got {text!r}")
        return text
    return convert


_as_name = _matching(_NAME, "a name of letters, digits, '_', '.', '-'")


def _as_bool(value: object) -> bool:
    if not isinstance(value, bool):
        raise _Invalid(f"expected true or false, got {_describe(value)}")
    return value


def _as_int(value: object, low: int | None = None, high: int | None = None) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise _Invalid(f"expected an integer, got {_describe(value)}")
    if low is not None and value < low:
        raise _Invalid(f"must be at least {low}; got {value}")
    if high is not None and value > high:
        raise _Invalid(f"must be at most {high}; got {value}")
    return value


def _as_number(value: object) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise _Invalid(f"expected a number, got {_describe(value)}")
    if not math.isfinite(value):
        raise _Invalid(f"expected a finite number, got {value}")
    return float(value)


def _parsed(value: object, types: tuple[type, ...], like: str,
            parse: Callable[[Any], _Parsed]) -> _Parsed:
    """``parse(value)`` of a value written as one of ``types`` (never a bool, which is an
    int to Python but not to TOML), "expected <like>" otherwise; its ValueError, said as
    it is."""
    if isinstance(value, bool) or not isinstance(value, types):
        raise _Invalid(f"expected {like}; got {_describe(value)}")
    try:
        return parse(value)
    except ValueError as error:
        raise _Invalid(str(error)) from None


def _as_duration(value: object) -> float:
    return _parsed(value, (str, int, float), f"a duration like {DURATION_EXAMPLE}",
                   parse_duration)


def _as_zone(value: object) -> str:
    """A time zone: "local", "UTC" or an IANA name known to this system."""
    from slowdown.analysis.config.model import zone_info

    if not isinstance(value, str):
        raise _Invalid(f'expected "local", "UTC" or a zone name; got {_describe(value)}')
    try:
        zone_info(value)
    except ValueError as error:
        raise _Invalid(str(error)) from None
    return value


def _kept(value: object) -> float | None:
    """How long rows are kept: a duration, or "forever" (None: kept for good)."""
    if value == "forever":
        return None
    try:
        return _as_duration(value)
    except _Invalid:
        raise _Invalid(f'expected a duration like "90d" or "forever"; got {_describe(value)}') \
            from None


def _positive_duration(value: object) -> float:
    seconds = _as_duration(value)
    if seconds <= 0:
        raise _Invalid(f"must be longer than 0s; got {value!r}")
    return seconds


def _as_size(value: object) -> int:
    return _parsed(value, (str, int), "a size like 3901 or 4KiB", parse_size)


def _as_data_size(value: object) -> DataSize:
    return _parsed(value, (str, int), "a size like 256GiB or 4xRAM", DataSize.parse)


def _as_statistic(value: object) -> str:
    name = _as_str(value)
    if not is_statistic(name):
        raise _Invalid(
            f"unknown statistic {name!r}; expected one of {', '.join(STATISTICS)} "
            "or a quantile qNN / qNN.N"
        )
    return name


def _window(value: object) -> float:
    seconds = _positive_duration(value)
    if seconds % 60:
        raise _Invalid(
            f"a window is made of whole minutes (minute records); got {format_duration(seconds)}"
        )
    return seconds


def _choice(choices: Sequence[str]) -> Callable[[object], str]:
    def convert(value: object) -> str:
        text = _as_str(value)
        if text not in choices:
            raise _Invalid(
                f"expected one of {', '.join(repr(c) for c in choices)}; got {text!r}"
                + _suggestion(text, choices)
            )
        return text

    return convert


def _suggestion(word: str, known: Sequence[str]) -> str:
    import difflib  # only on a mistake: not imported by every command

    close = difflib.get_close_matches(word, list(known), n=1, cutoff=0.6)
    return f"; did you mean {close[0]!r}?" if close else ""


def _expand_home(text: str, environ: Mapping[str, str]) -> str:
    if text == "~" or text.startswith("~/"):
        return str(_home(environ)) + text[1:]
    return os.path.expanduser(text)


def _parse_listen(value: object) -> tuple[str, int]:
    text = _as_str(value).strip()
    example = "expected host:port such as 127.0.0.1:9877 or [::1]:9877"
    match = re.fullmatch(r"\[([^\]]*)\]:(\d+)", text) or re.fullmatch(r"([^:\[\]]*):(\d+)", text)
    if match is None:
        raise _Invalid(f"{example}; got {text!r}")
    host, port = match.group(1), int(match.group(2))
    if not host:
        raise _Invalid(f"name the address to bind explicitly, e.g. 0.0.0.0:{port}; got {text!r}")
    if text.startswith("["):
        try:
            ipaddress.IPv6Address(host)
        except ValueError:
            raise _Invalid(f"{host!r} is not an IPv6 address; {example}") from None
    elif re.fullmatch(r"[\d.]+", host):
        try:
            ipaddress.IPv4Address(host)
        except ValueError:
            raise _Invalid(f"{host!r} is not an IPv4 address; {example}") from None
    elif not _HOSTNAME.fullmatch(host):
        raise _Invalid(f"{host!r} is not an address or host name; {example}")
    if not 1 <= port <= 65535:
        raise _Invalid(f"port must be 1..65535; got {port}")
    return host, port


def _argv(value: object) -> tuple[str, ...]:
    if not isinstance(value, list) or not all(isinstance(a, str) for a in value):
        raise _Invalid(
            "expected an array of strings, the program and its arguments (run without a "
            f'shell), e.g. ["/usr/local/bin/open-ticket", "{{target}}"]; got {_describe(value)}'
        )
    if not value or not value[0]:
        raise _Invalid("must name a program: the array is empty")
    return tuple(value)


def _http_url(value: object) -> str:
    url = _as_str(value)
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.netloc:
        raise _Invalid(f"expected an http:// or https:// URL; got {url!r}")
    return url


_env_name = _matching(_ENV_NAME, "an environment variable name")


def _address(value: object) -> str:
    text = _as_str(value).strip()
    if "@" not in text or any(c.isspace() for c in text):
        raise _Invalid(f"expected an e-mail address; got {text!r}")
    return text


def _recipients(value: object) -> tuple[str, ...]:
    if isinstance(value, list):
        if not value:
            raise _Invalid("must name at least one address")
        return tuple(_address(v) for v in value)
    return (_address(value),)
