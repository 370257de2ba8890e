"""CSV lines of numeric columns, built with numpy: the text Python would write, without
formatting it one cell at a time.

A 30-day history at 1-minute steps is half a million lines of a dozen cells; formatting them
one by one costs Python about a second. Here each column of a block of rows becomes a byte
matrix (a row of text per line, NUL where a cell is shorter than the column's widest), the
matrices are laid side by side with the separators, and the NULs are deleted in one
``bytes.translate``.

The text is exactly Python's: integers as ``str``, floats as ``format(v, ".9g")``, names as
the ``csv`` module quotes them, times as ``%Y-%m-%dT%H:%M:%SZ``, NaN as an empty cell. A float
is rounded to 9 digits in binary floating point, which is right unless its scaled value lies
within a rounding error of a decimal tie or the digits fall outside one decade; those few
cells (and infinities, subnormals, negative integers) are formatted by Python itself.
"""

from __future__ import annotations

import csv
import io
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol

import numpy as np

BLOCK = 1 << 14  # rows formatted at a time: a few MiB of matrices
DIGITS = 9  # significant digits of a float (``.9g``)
_POW10 = np.array([float(10**k) for k in range(309)])  # correctly rounded; exact to 10**22
_TIE = 1e-6  # scaled values this close to .5 are left to Python (rounding error < 3e-7)
_ZERO = ord("0")


@dataclass
class Field:
    """A column's texts for a block of rows: row i's text is ``chars[i]`` without its NUL
    bytes (padding, and digits a format drops), ``length[i]`` bytes long."""

    chars: np.ndarray  # uint8 (rows, width)
    length: np.ndarray  # int64 (rows,)


class Column(Protocol):
    def field(self, rows: slice) -> Field: ...


def _from_texts(texts: Sequence[bytes], index: np.ndarray) -> Field:
    """Rows taking one of a few byte strings: ``texts[index[i]]``."""
    width = max(map(len, texts), default=0)
    table = np.zeros((len(texts), max(width, 1)), np.uint8)
    for i, text in enumerate(texts):
        table[i, :len(text)] = np.frombuffer(text, np.uint8)
    length = np.fromiter(map(len, texts), np.int64, len(texts))
    return Field(table[index], length[index])


def _patch(field: Field, rows: np.ndarray, texts: list[str]) -> Field:
    """``field`` with ``rows`` replaced by ``texts`` (the cells left to Python)."""
    if not len(rows):
        return field
    encoded = [t.encode("ascii") for t in texts]
    width = max(map(len, encoded))
    chars = field.chars
    if width > chars.shape[1]:
        chars = np.pad(chars, ((0, 0), (0, width - chars.shape[1])))
    for row, text in zip(rows.tolist(), encoded):
        chars[row] = 0
        chars[row, :len(text)] = np.frombuffer(text, np.uint8)
        field.length[row] = len(text)
    return Field(chars, field.length)


@dataclass
class Names:
    """Strings by code: ``names[codes[i]]``, quoted as the ``csv`` module quotes them."""

    names: Sequence[str]
    codes: np.ndarray

    def __post_init__(self) -> None:
        self._texts = [quoted(n).encode() for n in self.names]
        if any(b"\0" in t for t in self._texts):
            raise ValueError("a name holds a NUL character")

    def field(self, rows: slice) -> Field:
        return _from_texts(self._texts, self.codes[rows])


@dataclass
class Times:
    """Unix seconds as ISO 8601 UTC, ``2026-01-31T23:59:00Z`` (years 1970 to 9999)."""

    seconds: np.ndarray

    def __post_init__(self) -> None:
        # The times of a history are steps repeated from series to series: when they are
        # whole minutes of a span no longer than the column, each minute is formatted once.
        t = np.asarray(self.seconds, np.int64)
        self._first = int(t.min()) if len(t) else 0
        minutes = (int(t.max()) - self._first) // 60 + 1 if len(t) else 0
        self._table = _iso(self._first + 60 * np.arange(minutes)) \
            if minutes <= len(t) and not (t % 60 - self._first % 60).any() else None

    def field(self, rows: slice) -> Field:
        t = np.asarray(self.seconds[rows], np.int64)
        chars = _iso(t) if self._table is None else self._table[(t - self._first) // 60]
        return Field(chars, np.full(len(t), 20, np.int64))


def _iso(t: np.ndarray) -> np.ndarray:
    """The 20 bytes of each time's ISO text."""
    days, second = np.divmod(t, 86400)
    year, month, day = _civil(days)
    hour, second = np.divmod(second, 3600)
    minute, second = np.divmod(second, 60)
    chars = np.empty((len(t), 20), np.uint8)
    chars[:] = np.frombuffer(b"0000-00-00T00:00:00Z", np.uint8)
    for value, at, width in ((year, 0, 4), (month, 5, 2), (day, 8, 2), (hour, 11, 2),
                             (minute, 14, 2), (second, 17, 2)):
        chars[:, at:at + width] = _digits(value, width)
    return chars


def _civil(days: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(year, month, day) of days since 1970-01-01 in the proleptic Gregorian calendar
    (H. Hinnant's ``civil_from_days``, in whole-array integer steps)."""
    z = days + 719468
    era = z // 146097
    doe = z - era * 146097  # day of the 400-year era
    yoe = (doe - doe // 1460 + doe // 36524 - doe // 146096) // 365
    doy = doe - (365 * yoe + yoe // 4 - yoe // 100)
    mp = (5 * doy + 2) // 153  # month counted from March
    month = np.where(mp < 10, mp + 3, mp - 9)
    return yoe + era * 400 + (month <= 2), month, doy - (153 * mp + 2) // 5 + 1


@dataclass
class Integers:
    """Integers as ``str`` writes them."""

    values: np.ndarray

    def field(self, rows: slice) -> Field:
        v = np.asarray(self.values[rows], np.int64)
        if ((v >= 0) & (v < 1000)).all():  # counts of a minute: from a table
            return Field(_SMALL[v].view(np.uint8).reshape(-1, 4), _SMALL_LENGTH[v])
        a = np.maximum(v, 0)
        digits = np.maximum(1, np.searchsorted(10 ** np.arange(19, dtype=np.int64), a,
                                               side="right"))
        width = int(digits.max(initial=1))
        # Right-aligned digits, then shifted left by the room each row leaves.
        shift = (width - digits)[:, None] + np.arange(width)
        chars = np.take_along_axis(_digits(a, width), np.minimum(shift, width - 1), axis=1)
        chars[np.arange(width) >= digits[:, None]] = 0
        field = Field(chars, digits.astype(np.int64))
        negative = np.flatnonzero(v < 0)
        return _patch(field, negative, [str(x) for x in v[negative].tolist()])


def _digits(values: np.ndarray, width: int) -> np.ndarray:
    """ASCII digits of non-negative integers, right-aligned in ``width`` places (leading
    zeros). One division by a scalar per place: numpy divides by a scalar with SIMD."""
    out = np.empty((len(values), width), np.uint8)
    for k in range(width):
        out[:, k] = values // values.dtype.type(10 ** (width - 1 - k)) % 10
    out += _ZERO
    return out


def _layout(negative: bool, exponent: int) -> list[int | bytes]:
    """How ``.9g`` writes a number of this sign and decimal exponent with all 9 digits and
    the point: literal bytes, and ints for the digits' places."""
    sign: list[int | bytes] = [b"-"] if negative else []
    every = list(range(DIGITS))
    if 0 <= exponent < DIGITS:
        return [*sign, *every[:exponent + 1], b".", *every[exponent + 1:]]
    if -4 <= exponent < 0:
        return [*sign, b"0", b".", *[b"0"] * (-exponent - 1), *every]
    power = f"e{'-' if exponent < 0 else '+'}{abs(exponent):02d}".encode()
    return [*sign, 0, b".", *every[1:], *(bytes([c]) for c in power)]


@dataclass
class Floats:
    """Floats as ``format(v, ".9g")`` writes them; NaN as an empty cell."""

    values: np.ndarray

    def field(self, rows: slice) -> Field:
        v = np.asarray(self.values[rows], np.float64)
        n = len(v)
        a = np.abs(v)
        usual = np.isfinite(v) & (a >= 1e-300) & (a <= 1e300)
        chars = np.zeros((n, 2), np.uint8)
        length = np.zeros(n, np.int64)
        if usual.any():
            chars, length, usual = _usual(v, a, usual)
        zero = np.flatnonzero(v == 0)  # "0", or "-0" for negative zero
        negative_zero = np.signbit(v[zero])
        chars[zero, 0] = np.where(negative_zero, ord("-"), _ZERO)
        chars[zero[negative_zero], 1] = _ZERO
        length[zero] = 1 + negative_zero
        odd = np.flatnonzero(~usual & ~np.isnan(v) & (v != 0))
        return _patch(Field(chars, length), odd, [format(x, ".9g") for x in v[odd].tolist()])


def _usual(v: np.ndarray, a: np.ndarray, usual: np.ndarray) \
        -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The texts of the finite non-zero floats whose 9 digits are certain, and which those
    are. Each row is laid out with all 9 digits by its (sign, exponent); the zeros ``.9g``
    drops are NUL, as is the padding."""
    n = len(v)
    a = np.where(usual, a, 1.0)
    exponent = np.floor(np.log10(a)).astype(np.int64)
    shift = DIGITS - 1 - exponent  # scaled = a * 10**shift, in [1e8, 1e9)
    scaled = np.where(shift >= 0, a * _POW10[np.clip(shift, 0, 308)],
                      a / _POW10[np.clip(-shift, 0, 308)])
    whole = np.rint(scaled)
    ambiguous = np.abs(scaled - np.floor(scaled) - 0.5) < _TIE
    usual = usual & ~ambiguous & (whole >= 10 ** (DIGITS - 1)) & (whole < 10 ** DIGITS)
    places, kept = _nine_digits(np.where(usual, whole, 10 ** (DIGITS - 1)).astype(np.uint32))
    fixed = (exponent >= -4) & (exponent < DIGITS)
    before = np.where(fixed, np.maximum(exponent + 1, 0), 1)  # places before the point
    # The zeros behind the point after the last digit kept are dropped, and the point
    # when no digit follows it.
    keep = np.maximum(kept, before)
    places *= _KEEP[keep]
    point = np.where(kept > before, ord("."), 0).astype(np.uint8)
    low = int(exponent[usual].min(initial=0))
    span = int(exponent[usual].max(initial=0)) - low + 1
    code = np.where(usual, (v < 0) * span + exponent - low, 2 * span)
    present = np.flatnonzero(np.bincount(code, minlength=2 * span)[:2 * span]).tolist()
    layouts = {c: _layout(c >= span, c % span + low) for c in present}
    chars = np.zeros((n, max((len(lay) for lay in layouts.values()), default=2)), np.uint8)
    for c, layout in layouts.items():
        members = np.flatnonzero(code == c)
        block = np.empty((len(members), len(layout)), np.uint8)
        literal = [(i, p[0]) for i, p in enumerate(layout) if isinstance(p, bytes)]
        block[:, [i for i, _ in literal]] = [b for _, b in literal]
        block[:, [i for i, p in enumerate(layout) if isinstance(p, int)]] = places[members]
        block[:, layout.index(b".")] = point[members]
        chars[members, :len(layout)] = block
    sizes = np.zeros(2 * span + 1, np.int64)
    sizes[present] = [len(layouts[c]) for c in present]
    length = sizes[code] - (DIGITS - keep) - (point == 0)
    return chars, np.where(usual, length, 0), usual


# Each number below 1000 as its 3 digits (with leading zeros) in the bytes of a uint32.
_TRIPLES = np.array([list(f"{i:03d}".encode().ljust(4, b"\0")) for i in range(1000)],
                    np.uint8).view("<u4").ravel()
_SMALL = np.array([list(str(i).encode().ljust(4, b"\0")) for i in range(1000)],
                  np.uint8).view("<u4").ravel()  # str(i), NUL-padded
_SMALL_LENGTH = np.array([len(str(i)) for i in range(1000)], np.int64)
_TRAILING = np.array([3 - len(f"{i:03d}".rstrip("0")) for i in range(1000)], np.int64)
_KEEP = np.tri(DIGITS + 1, DIGITS, -1, np.uint8)  # _KEEP[k]: ones at the first k places


def _nine_digits(d: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """ASCII digits of 9-digit integers (three at a time from a table), and how many remain
    without the trailing zeros."""
    high, rest = np.divmod(d, np.uint32(1000000))
    middle, low = np.divmod(rest, np.uint32(1000))
    words = np.empty((len(d), 3), "<u4")
    words[:, 0], words[:, 1], words[:, 2] = _TRIPLES[high], _TRIPLES[middle], _TRIPLES[low]
    places = words.view(np.uint8)[:, [0, 1, 2, 4, 5, 6, 8, 9, 10]]
    zeros = _TRAILING[low] + (low == 0) * (_TRAILING[middle] + (middle == 0) * _TRAILING[high])
    return places, DIGITS - zeros


def lines(fields: Sequence[Field], sep: bytes = b",", end: bytes = b"\n") -> bytes:
    """The fields' texts joined by ``sep``, each row ended by ``end``: the fields side by side
    in one matrix, then the NUL bytes that pad them deleted (``bytes.translate``, a C loop)."""
    n = len(fields[0].length) if fields else 0
    text = np.empty((n, sum(f.chars.shape[1] + 1 for f in fields)), np.uint8)
    at = 0
    for i, f in enumerate(fields):
        w = f.chars.shape[1]
        text[:, at:at + w] = f.chars
        text[:, at + w] = (end if i == len(fields) - 1 else sep)[0]
        at += w + 1
    return text.tobytes().translate(None, b"\0")


def header(names: Sequence[str]) -> bytes:
    """The header line of a CSV table."""
    return (",".join(quoted(h) for h in names) + "\n").encode()


def text(columns: Sequence[Column], rows: int, block: int = BLOCK) -> list[bytes]:
    """The lines of ``rows`` rows of ``columns``, a block of rows at a time (one piece each:
    joining them would hold the text twice)."""
    return [lines([c.field(slice(first, min(rows, first + block))) for c in columns])
            for first in range(0, rows, block)]


def quoted(value: str) -> str:
    """One CSV cell as the ``csv`` module writes it (quoted only when it must be: a comma, a
    quote or a line break inside)."""
    buffer = io.StringIO()
    csv.writer(buffer, lineterminator="\r\n").writerow([value])
    return buffer.getvalue()[:-2]


__all__ = ["Column", "Field", "Floats", "Integers", "Names", "Times", "header", "lines",
           "quoted", "text"]
