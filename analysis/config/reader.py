"""Reading keys out of a parsed document without stopping at the first mistake.

:class:`_Reader` converts each key with a converter from ``values``, fills in defaults,
and records every mistake as a :class:`ConfigError` with file, line and key; a value that
failed reads as ``_MISSING`` so the checks go on and report the rest. ``raise_if_errors``
raises them all at once, in file order.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, Callable

from slowdown.analysis.config.errors import ConfigError, ConfigErrors, KeyPath, format_key
from slowdown.analysis.config.locator import _Locator
from slowdown.analysis.config.values import (
    _as_name,
    _as_str,
    _describe,
    _expand_home,
    _Invalid,
    _suggestion,
)

_MISSING: Any = object()  # what a key reads as after its mistake was recorded
_REQUIRED: Any = object()  # as a default: the key must be written


class _Reader:
    """Reads values out of the parsed document, collecting every mistake with its key and line."""

    def __init__(
        self, source: Path | None, locator: _Locator | None, environ: Mapping[str, str]
    ) -> None:
        self.source = source
        self.locator = locator
        self.environ = environ
        self.errors: list[ConfigError] = []
        # What the sections share: the names [[alert]] may refer to, the host of e-mail senders.
        self.target_names: list[str] = []
        self.host = ""
        base = Path(os.path.abspath(source)).parent if source is not None else Path.cwd()
        self.base_dir = base

    # ---- reporting

    def unique_name(self, table: Mapping[str, Any], path: KeyPath, names: dict[str, int],
                    kind: str) -> tuple[Any, bool]:
        """An entry's required ``name`` and whether it is new: an entry of ``kind`` named
        like an earlier one is an error naming the first (``names`` maps names to indices)."""
        name = self.get(table, "name", path, _as_name, _REQUIRED)
        if name is _MISSING:
            return name, False
        if name in names:
            self.error((*path, "name"), f"{name!r} is already the name of {kind}[{names[name]}]")
            return name, False
        names[name] = path[-1]
        return name, True

    def error(self, path: KeyPath, message: str) -> None:
        line = self.locator.line_of(path) if self.locator is not None else None
        self.errors.append(
            ConfigError(message, path=self.source, line=line, key=format_key(path) or None)
        )

    def raise_if_errors(self) -> None:
        if not self.errors:
            return
        errors = sorted(self.errors, key=lambda e: (e.line is None, e.line or 0))
        if len(errors) == 1:
            raise errors[0]
        raise ConfigErrors(errors)

    def unknown_keys(self, table: Mapping[str, Any], known: Sequence[str], path: KeyPath) -> None:
        for key in table:
            if key not in known:
                hint = _suggestion(key, known) or f"; known keys: {', '.join(known)}"
                self.error((*path, key), f"unknown key {key!r}{hint}")

    def get(
        self,
        table: Mapping[str, Any],
        key: str,
        path: KeyPath,
        convert: Callable[[Any], Any],
        default: Any = _MISSING,
    ) -> Any:
        """``convert(table[key])``, the default when absent; _MISSING after an error."""
        if key not in table:
            if default is _REQUIRED:
                self.error((*path, key), "missing; this key is required")
                return _MISSING
            return default
        try:
            return convert(table[key])
        except _Invalid as error:
            self.error((*path, key), str(error))
            return _MISSING

    def table(self, data: Mapping[str, Any], key: str, path: KeyPath) -> dict[str, Any] | None:
        value = data.get(key)
        if value is None:
            return None
        if not isinstance(value, dict):
            self.error((*path, key), f"expected a table [{key}], got {_describe(value)}")
            return None
        return value

    def array_of_tables(self, data: Mapping[str, Any], key: str) -> list[tuple[int, dict]]:
        value = data.get(key)
        if value is None:
            return []
        if isinstance(value, dict):
            self.error(
                (key,),
                f"expected [[{key}]] entries (two brackets: an array of tables), got a table",
            )
            return []
        if not isinstance(value, list):
            self.error((key,), f"expected [[{key}]] entries, got {_describe(value)}")
            return []
        entries = []
        for index, entry in enumerate(value, start=1):
            if isinstance(entry, dict):
                entries.append((index, entry))
            else:
                self.error((key, index), f"expected a table, got {_describe(entry)}")
        return entries

    def path_value(self, value: object, *, relative_ok: bool) -> Path:
        text = _as_str(value)
        if not text.strip():
            raise _Invalid("expected a path, got an empty string")
        path = Path(_expand_home(text, self.environ))
        if not path.is_absolute():
            if not relative_ok:
                raise _Invalid(f"must be an absolute path; got {text!r}")
            path = self.base_dir / path
        return path

    def list_of(
        self, data: Mapping[str, Any], key: str, convert: Callable[[Any], Any], default: tuple
    ) -> tuple:
        if key not in data:
            return default
        value = data[key]
        if not isinstance(value, list):
            self.error((key,), f"expected an array, got {_describe(value)}")
            return default
        if not value:
            self.error((key,), "must not be empty")
            return default
        items = []
        for index, item in enumerate(value, start=1):
            try:
                converted = convert(item)
            except _Invalid as error:
                self.error((key, index), str(error))
                continue
            if converted in items:
                self.error((key, index), f"{item!r} is listed twice")
                continue
            items.append(converted)
        return tuple(items)

