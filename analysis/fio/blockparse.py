"""Blocks of whole lines of comma-separated whole numbers, parsed fast with numpy.

Guarantees: ``parse_block`` returns the numbers of every line of a block, the same as
reading it line by line in Python would, or raises ``BlockError`` naming the first bad line
(its offset in the block) and field.

A fio log is lines of comma-separated whole numbers, written by fio as ``"%d, %d, ..."``.
Python's ``int()`` per field manages about a million fields a second, ``numpy.loadtxt`` a
few million; a histogram log has 1859 fields a line and a day of latency logs hundreds of
millions of lines. So a block of lines is parsed in a few vectorised passes instead, up to
a MiB at a time (few numpy calls, and the piece stays in the core's L2 cache from pass to
pass).

Histogram logs (every field wanted, ``_every``): most fields are one digit. Counts of
newlines, commas, spaces, ", " pairs and digits show that a block is digits, newlines and
", " only; without the digits that follow a digit (few, found with one ``flatnonzero``)
each line must then be ``3 * columns - 1`` bytes, one-digit fields joined by ", ", which
holds only if every line has exactly ``columns`` fields and none is empty. The first digit
of every field is then one strided copy; the fields of several digits are read as below.

Latency logs (a few wanted columns, ``_fast``):

1. one ``flatnonzero`` finds the separators (bytes below ``"0"`` other than space); there
   must be ``columns`` per line, of them as many newlines as lines, each line's last one a
   newline, the others commas, each comma followed by one space and no other space nor
   byte below ``"0"`` anywhere, so every field is one run of digits (or of hexadecimal
   digits, which fio writes for priorities with ``log_prio=1``: the fields read are then
   checked digit by digit);
2. each field's last 8 (or 16) bytes are loaded as one little-endian 64-bit word, the bytes
   before the field masked to zero, and turned into a number with three multiply-shift steps
   (eight ASCII digits at a time, the SWAR method of fast JSON parsers). A field of one digit
   is one byte load.

A block that fails any check is parsed again line by line in Python, which accepts any
spacing and blank lines and otherwise names the first bad line and field. Only that slow
path raises errors, so the fast paths may be strict.
"""

from __future__ import annotations

import re
import threading
from collections.abc import Callable, Sequence

import numpy as np

from slowdown.analysis.fio.textblocks import PAD, Buffers, RawBlock

MAX_DIGITS = 16  # fast path; the slow path reads up to 18 digits (int64)
SUB_BLOCK = 1 << 20  # bytes parsed at a time: few numpy calls, and in a core's L2 cache

_NUMBER = re.compile(rb"\d{1,18}")
_OTHER = re.compile(rb"\d{1,20}|0[xX][0-9a-fA-F]{1,16}")  # log_prio=1 writes 0x%04x

_U = np.uint64
_LOW_NIBBLES = _U(0x0F0F0F0F0F0F0F0F)
_HIGH_NIBBLES = _U(0xF0F0F0F0F0F0F0F0)
_ASCII_ZEROS = _U(0x3030303030303030)
_ASCII_THREES = _U(0x3333333333333333)
_PLUS_SIX = _U(0x0606060606060606)
# _KEEP[n]: the top min(n, 8) bytes of a word (the last characters before a field's end).
_KEEP = np.array([0] + [(1 << 64) - (1 << (8 * (8 - min(n, 8)))) for n in range(1, 17)],
                 dtype=_U)
_KEEP_NIBBLES = _KEEP & _LOW_NIBBLES


class BlockError(Exception):
    """A bad line inside a block: its 0-based line offset in the block, and the message."""

    def __init__(self, offset: int, message: str) -> None:
        super().__init__(message)
        self.offset = offset
        self.message = message


class Scratch(threading.local):
    """Arrays a parser thread reuses from block to block (for the same reason as Buffers),
    by name; one name, one dtype. An array is valid until the thread's next request of it."""

    def __init__(self) -> None:
        self._arrays: dict[str, np.ndarray] = {}

    def get(self, name: str, size: int, dtype: type) -> np.ndarray:
        array = self._arrays.get(name)
        if array is None or array.size < size:
            array = np.empty(-(-size // Buffers.GRAIN) * Buffers.GRAIN, dtype=dtype)
            self._arrays[name] = array
        return array[:size]


SCRATCH = Scratch()


def _swar(words: np.ndarray) -> np.ndarray:
    """Numbers from words of eight ASCII digits masked to their low nibbles (in place)."""
    words *= _U(10 * 256 + 1)
    words >>= _U(8)
    words &= _U(0x00FF00FF00FF00FF)
    words *= _U(100 * 65536 + 1)
    words >>= _U(16)
    words &= _U(0x0000FFFF0000FFFF)
    words *= _U(10000 * (1 << 32) + 1)
    words >>= _U(32)
    return words


def _all_digits(words: np.ndarray, keep: np.ndarray) -> bool:
    """Whether the kept bytes of every word are ASCII digits."""
    text = (words & keep) | (_ASCII_ZEROS & ~keep)
    test = (text & _HIGH_NIBBLES) | (((text + _PLUS_SIX) & _HIGH_NIBBLES) >> _U(4))
    return bool((test == _ASCII_THREES).all())


def _words(words_at: np.ndarray, ends: np.ndarray, lengths: np.ndarray,
           check: bool) -> np.ndarray | None:
    """Numbers of up to 16 digits ending at ``ends``; with ``check`` None if a field byte is
    no digit."""
    low = words_at[ends - 8]
    if check and not _all_digits(low, _KEEP[lengths]):
        return None
    low &= _KEEP_NIBBLES[lengths]
    value = _swar(low)
    long = np.flatnonzero(lengths > 8)
    if long.size:
        high = words_at[ends[long] - 16]
        keep = _KEEP[lengths[long] - 8]
        if check and not _all_digits(high, keep):
            return None
        high &= keep & _LOW_NIBBLES
        value[long] += _swar(high) * _U(100_000_000)
    return value.view(np.int64)


def _numbers(u: np.ndarray, words_at: np.ndarray, ends: np.ndarray, lengths: np.ndarray,
             check: bool, out: np.ndarray) -> bool:
    """Write the numbers in fields ``[end - length, end)`` of the bytes ``u`` to ``out``;
    ``words_at[i]`` is the little-endian word of ``u[i:i + 8]``. With ``check``, False unless
    every field byte is a digit.

    Fields of one digit, most of a histogram log, take one byte load each.
    """
    longest = int(lengths.max())
    if longest > 1:
        multi = np.flatnonzero(lengths > 1)
        if multi.size * 4 > ends.size:  # mostly longer numbers: all through the words
            value = _words(words_at, ends, lengths, check)
            if value is None:
                return False
            out[:] = value
            return True
    units = u[ends - 1] - np.uint8(48)
    if check and (units > 9).any():
        return False
    out[:] = units
    if longest > 1:
        value = _words(words_at, ends[multi], lengths[multi], check)
        if value is None:
            return False
        out[multi] = value
    return True


def _count(values: np.ndarray, value: int, test: np.ndarray) -> int:
    """How many of ``values`` equal ``value`` (``test``: room for as many booleans)."""
    return int(np.count_nonzero(np.equal(values, value, out=test[:values.size])))


def _pairs(raw: RawBlock) -> int:
    """How many ", " the block holds: two bytes at a time, at even and at odd offsets."""
    comma_space = 0x202C  # "," then " ", as a little-endian 16-bit word
    test = SCRATCH.get("pairs", raw.size // 2, np.bool_)
    even = np.frombuffer(raw.buffer, dtype="<u2", count=raw.size // 2, offset=raw.start)
    odd = np.frombuffer(raw.buffer, dtype="<u2", count=(raw.size - 1) // 2,
                        offset=raw.start + 1)
    return _count(even, comma_space, test) + _count(odd, comma_space, test)


def _runs(positions: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Index of the first and of the last position of each run of consecutive positions."""
    breaks = np.flatnonzero(np.diff(positions) != 1)
    first = np.empty(breaks.size + 1, dtype=np.int64)
    first[0] = 0
    first[1:] = breaks + 1
    last = np.empty_like(first)
    last[:-1] = breaks
    last[-1] = positions.size - 1
    return first, last


def _every(raw: RawBlock, columns: int, out: np.ndarray) -> int | None:
    """Every field of lines in fio's exact form into the flat ``out``: the number of lines,
    or None.

    Most fields of a histogram log are one digit. Without the digits that follow a digit
    (few), every line is ``columns`` one-digit fields joined by ", ", one byte in three a
    field, read with one strided copy; the longer numbers are then read on their own.
    """
    size = raw.size
    body = np.frombuffer(raw.buffer, dtype=np.uint8, count=size, offset=raw.start)
    if body.max() > 57:
        return None  # letters: not fio's decimal form
    test = SCRATCH.get("test", size, np.bool_)
    ends = np.flatnonzero(np.equal(body, 10, out=test))
    ends += 1  # line ends (exclusive)
    n = ends.size
    commas = n * (columns - 1)
    digit = np.greater_equal(body, 48, out=SCRATCH.get("digit", size, np.bool_))
    if n == 0 or _count(body, 44, test) != commas or _count(body, 32, test) != commas \
            or _pairs(raw) != commas or np.count_nonzero(digit) + 2 * commas + n != size:
        return None
    # Bytes are digits, newlines and ", "; each space follows a comma.
    more = np.flatnonzero(np.logical_and(digit[1:], digit[:-1], out=test[1:]))
    more += 1  # digits that follow a digit
    # Without them a line of k one-digit fields is 3k - 1 bytes, its newline included. Every
    # line of 3 * columns - 1 such bytes and n * (columns - 1) commas in all leave no room
    # for an empty field, nor for a line of other than ``columns`` fields.
    width = 3 * columns - 1
    lengths = np.diff(ends, prepend=0) - np.diff(np.searchsorted(more, ends), prepend=0)
    if (lengths != width).any():
        return None
    keep = test
    keep.fill(True)
    keep[more] = False
    short = body[keep]  # the first digit of every field (numpy's compress is slower)
    short -= np.uint8(48)
    flat = out[:n * columns]
    np.copyto(flat.reshape(n, columns), short.reshape(n, width)[:, ::3])
    if more.size:
        first, last = _runs(more)  # a run of k is a field of k + 1 digits
        digits = last - first + 2
        if digits.max() > MAX_DIGITS:
            return None
        words_at = np.ndarray((size + PAD - 7,), dtype="<u8", buffer=raw.buffer,
                              offset=raw.start - PAD, strides=(1,))
        value = _words(words_at, more[last] + (1 + PAD), digits, False)
        at = more[first] - first - 1  # the field's first digit, short of the later ones
        line = at // width
        flat[line * columns + (at - line * width) // 3] = value
    return n


def _fast(raw: RawBlock, columns: int, wanted: Sequence[int] | None,
          out: np.ndarray) -> int | None:
    """Parse the lines of ``raw`` into ``out``, or None when they are not in fio's exact form.

    All columns go to the flat ``out`` line after line; wanted ones to the rows of ``out``
    (one per wanted column). ``out`` has room for any number of lines the bytes can hold.
    Returns the number of lines.
    """
    if wanted is None:
        return _every(raw, columns, out)
    base = raw.start - PAD
    size = raw.size + PAD
    u = np.frombuffer(raw.buffer, dtype=np.uint8, count=size, offset=base)
    body = u[PAD:]  # the block's own bytes
    below = body < 48
    low_bytes = np.count_nonzero(below)
    below &= body != 32
    separators = np.flatnonzero(below)  # newlines and commas, unless there is garbage
    n = np.count_nonzero(body == 10)
    if n == 0 or separators.size != n * columns \
            or np.count_nonzero(body == 44) != n * (columns - 1):
        return None
    separators += PAD  # positions in u
    per_line = separators.reshape(n, columns)
    newlines = per_line[:, -1]
    if (u[newlines] != 10).any():
        return None  # a line with fewer or more fields than the others
    # Every line is columns - 1 commas and a newline. fio writes ", " between fields and no
    # other space, so the other bytes are digits, unless one lies above "9": fio's
    # hexadecimal priorities (log_prio=1) do, so the fields read are then checked digit by
    # digit.
    commas = n * (columns - 1)
    if low_bytes - separators.size != commas \
            or np.count_nonzero((body[:-1] == 44) & (body[1:] == 32)) != commas:
        return None
    check = bool(body.max() > 57)
    words_at = np.ndarray((size - 7,), dtype="<u8", buffer=raw.buffer, offset=base,
                          strides=(1,))
    per_line = per_line[:, :-1]
    starts = np.empty(n, dtype=np.int64)
    starts[0] = PAD
    starts[1:] = newlines[:-1] + 1
    for i, j in enumerate(wanted):
        ends = per_line[:, j] if j < columns - 1 else newlines
        lengths = ends - (starts if j == 0 else per_line[:, j - 1] + 2)
        if lengths.min() < 1 or lengths.max() > MAX_DIGITS:
            return None
        if not _numbers(u, words_at, ends, lengths, check, out[i, :n]):
            return None
    return n


def _slow(data: bytes, columns: int, wanted: Sequence[int] | None,
          field_name: Callable[[int], str]) -> tuple[np.ndarray, np.ndarray]:
    """Line by line: the wanted columns and each row's 0-based line offset, or BlockError."""
    picks = range(columns) if wanted is None else wanted
    rows: list[list[int]] = []
    offsets: list[int] = []
    for offset, line in enumerate(data.split(b"\n")[:-1]):
        if not line.strip():
            continue
        fields = line.split(b",")
        if len(fields) != columns:
            raise BlockError(offset, f"expected {columns} comma-separated fields, "
                                     f"found {len(fields)}")
        for j, text in enumerate(fields):
            text = text.strip()
            pattern = _NUMBER if wanted is None or j in picks else _OTHER
            if not pattern.fullmatch(text):
                found = repr(text.decode("ascii", "replace")) if text else "an empty field"
                raise BlockError(offset, f"field {j + 1} ({field_name(j)}): expected a whole "
                                         f"number, found {found}")
        rows.append([int(fields[j]) for j in picks])
        offsets.append(offset)
    values = np.array(rows, dtype=np.int64).reshape(len(rows), len(picks))
    if wanted is not None:
        values = np.ascontiguousarray(values.T)
    return values, np.array(offsets, dtype=np.int64)


def parse_block(raw: RawBlock, columns: int, wanted: Sequence[int] | None,
                field_name: Callable[[int], str], scratch: bool = False
                ) -> tuple[np.ndarray, np.ndarray | None]:
    """The numbers of every line of a block: with ``wanted`` None a (lines, columns) matrix,
    else a (len(wanted), lines) matrix of the wanted columns.

    The second item is each row's 0-based line offset in the block when blank lines were
    skipped, else None (row i is line i). Raises BlockError for a bad line. With
    ``scratch`` (and ``wanted`` None) the matrix is the thread's SCRATCH memory, for a
    caller done with it before the thread's next parse.
    """
    if raw.size == 0:  # no line: a last block that held only a line cut short
        shape = (0, columns) if wanted is None else (len(wanted), 0)
        return np.empty(shape, dtype=np.int64), None
    # At most one line per 3 * columns - 1 bytes (one digit a field, ", " between them);
    # pages of the output never written to are never touched.
    most = raw.size // (3 * columns - 1) + 1
    if wanted is None:
        out = SCRATCH.get("lines", most * columns, np.int64) if scratch else \
            np.empty(most * columns, dtype=np.int64)
    else:
        out = np.empty((len(wanted), most), dtype=np.int64)
    lines = 0
    start = raw.start
    pieces = -(-raw.size // SUB_BLOCK)
    step = -(-raw.size // pieces)  # pieces of one size: none is left tiny
    while start < raw.end:  # pieces that stay in the CPU's cache through all passes
        end = min(start + step, raw.end)
        if end < raw.end:
            end = raw.buffer.rfind(b"\n", start, end) + 1 or raw.end
        piece = RawBlock(raw.buffer, start, end, raw.index)
        if wanted is None:
            n = _fast(piece, columns, None, out[lines * columns:])
        else:
            n = _fast(piece, columns, wanted, out[:, lines:])
        if n is None:
            return _slow(raw.data, columns, wanted, field_name)
        lines += n
        start = end
    if wanted is None:
        return out[:lines * columns].reshape(lines, columns), None
    return out[:, :lines], None


__all__ = ["MAX_DIGITS", "SCRATCH", "SUB_BLOCK", "BlockError", "Scratch", "parse_block"]
