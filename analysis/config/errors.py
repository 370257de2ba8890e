"""Errors of the configuration and the key paths they name.

A :class:`ConfigError` always renders as ``path:line: key: message`` (the parts it knows),
one line per mistake, and every one carries ``errors`` so a caller can list them all. Key
paths count array entries from 1, as a user does: ``("target", 2, "data_size")`` renders as
``target[2].data_size``.
"""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from pathlib import Path
from typing import Union

KeyPath = tuple[Union[str, int], ...]

_BARE_KEY = re.compile(r"[A-Za-z0-9_-]+")


def format_key(path: Sequence[str | int]) -> str:
    """``("alert", 1, "action", "argv")`` -> ``alert[1].action.argv`` (indices count from 1)."""
    parts: list[str] = []
    for part in path:
        if isinstance(part, int):
            if parts:
                parts[-1] += f"[{part}]"
            else:
                parts.append(f"[{part}]")
        else:
            parts.append(part if _BARE_KEY.fullmatch(part) else json.dumps(part))
    return ".".join(parts)


class ConfigError(Exception):
    """A mistake in the configuration, rendered as ``path:line: key: message``.

    Every ConfigError has ``errors``, the list of single errors it stands for (itself,
    or all of them for :class:`ConfigErrors`), so a caller can print one per line.
    """

    def __init__(
        self,
        message: str,
        *,
        path: str | Path | None = None,
        line: int | None = None,
        key: str | None = None,
    ) -> None:
        super().__init__(message)
        self.message = message
        self.path = path
        self.line = line
        self.key = key
        self.errors: list[ConfigError] = [self]

    def __str__(self) -> str:
        where = ""
        if self.path is not None:
            where = str(self.path) + (f":{self.line}" if self.line is not None else "")
        elif self.line is not None:
            where = f"line {self.line}"
        parts = [p for p in (where, self.key) if p]
        return ": ".join([*parts, self.message])


class ConfigErrors(ConfigError):
    """Several mistakes at once; ``str()`` gives one line per error."""

    def __init__(self, errors: Sequence[ConfigError]) -> None:
        first = errors[0]
        super().__init__(
            f"{len(errors)} errors in the configuration", path=first.path, line=first.line
        )
        self.errors = list(errors)

    def __str__(self) -> str:
        return "\n".join(str(error) for error in self.errors)
