"""Which line of the TOML text wrote a key: tomllib reports no line for a semantic error.

:class:`_Locator` scans the source text once and maps key paths such as
``("target", 2, "data_size")`` to the line that wrote them, so every mistake the checks
find is reported at its line; a key it did not record takes the line of its nearest outer key.
"""

from __future__ import annotations

import sys
from collections.abc import Sequence

from slowdown.analysis.config.errors import KeyPath

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - exercised on Python < 3.11 only
    import tomli as tomllib


class _Locator:
    """Maps key paths to the source line that wrote them, from a light scan of TOML text.

    It knows ``[table]`` and ``[[array]]`` headers (counting entries per parent entry),
    ``key = value`` lines with dotted and quoted keys, and skips values, including strings
    and arrays over several lines. Keys inside inline tables and arrays are not recorded,
    so a lookup falls back to the longest recorded prefix: the line of the outer key.
    It runs only on text tomllib already accepted.
    """

    def __init__(self, text: str) -> None:
        self.lines: dict[KeyPath, int] = {}
        self._text = text
        self._scan()

    def line_of(self, path: Sequence[str | int]) -> int | None:
        key = tuple(path)
        while key:
            if key in self.lines:
                return self.lines[key]
            key = key[:-1]
        return None

    def _scan(self) -> None:
        text, n = self._text, len(self._text)
        i, line = 0, 1
        prefix: KeyPath = ()
        arrays: dict[KeyPath, int] = {}
        while i < n:
            char = text[i]
            if char == "\n":
                line += 1
                i += 1
            elif char in " \t\r":
                i += 1
            elif char == "#":
                i = self._end_of_line(i)
            elif char == "[":
                is_array = text.startswith("[[", i)
                keys, i = self._key(i + (2 if is_array else 1))
                i = self._end_of_line(i)
                concrete: KeyPath = ()
                for part in keys[:-1]:
                    concrete += (part,)
                    if concrete in arrays:
                        concrete += (arrays[concrete],)
                    self.lines.setdefault(concrete, line)
                concrete += (keys[-1],)
                self.lines.setdefault(concrete, line)
                if is_array:
                    arrays[concrete] = arrays.get(concrete, 0) + 1
                    concrete += (arrays[concrete],)
                    self.lines[concrete] = line
                prefix = concrete
            else:
                keys, i = self._key(i)
                equals = text.find("=", i)
                if not keys or equals < 0:  # not TOML tomllib accepted; stop quietly
                    return
                for depth in range(1, len(keys) + 1):
                    self.lines.setdefault(prefix + keys[:depth], line)
                i, line = self._skip_value(equals + 1, line)

    def _end_of_line(self, i: int) -> int:
        end = self._text.find("\n", i)
        return len(self._text) if end < 0 else end

    def _key(self, i: int) -> tuple[tuple[str, ...], int]:
        """A dotted key starting at ``i`` (spaces allowed around dots)."""
        text, n = self._text, len(self._text)
        parts: list[str] = []
        while i < n:
            while i < n and text[i] in " \t":
                i += 1
            if i < n and text[i] in "\"'":
                end = self._string_end(i)
                raw = text[i:end]
                i = end
                try:
                    parts.append(tomllib.loads(f"k = {raw}")["k"])
                except tomllib.TOMLDecodeError:
                    parts.append(raw.strip("\"'"))
            else:
                start = i
                while i < n and (text[i].isalnum() or text[i] in "_-"):
                    i += 1
                parts.append(text[start:i])
            while i < n and text[i] in " \t":
                i += 1
            if i < n and text[i] == ".":
                i += 1
                continue
            break
        return tuple(parts), i

    def _string_end(self, i: int) -> int:
        """Index just past the string starting at ``i`` (one-line or multi-line)."""
        text, n = self._text, len(self._text)
        quote = text[i]
        escapes = quote == '"'
        if text.startswith(quote * 3, i):
            j = i + 3
            while j < n:
                if escapes and text[j] == "\\":
                    j += 2
                elif text.startswith(quote * 3, j):
                    j += 3
                    extra = 0  # up to two quotes may stand right before the delimiter
                    while j < n and text[j] == quote and extra < 2:
                        j += 1
                        extra += 1
                    return j
                else:
                    j += 1
            return n
        j = i + 1
        while j < n and text[j] != quote and text[j] != "\n":
            j += 2 if escapes and text[j] == "\\" else 1
        return min(j + 1, n)

    def _skip_value(self, i: int, line: int) -> tuple[int, int]:
        """Skip one value; returns the index of the newline ending it and the line there."""
        text, n = self._text, len(self._text)
        depth = 0
        while i < n:
            char = text[i]
            if char == "\n":
                if depth <= 0:
                    return i, line
                line += 1
                i += 1
            elif char == "#":
                i = self._end_of_line(i)
            elif char in "\"'":
                end = self._string_end(i)
                line += text.count("\n", i, end)
                i = end
            else:
                if char in "[{":
                    depth += 1
                elif char in "]}":
                    depth -= 1
                i += 1
        return i, line

