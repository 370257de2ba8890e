"""The checks of ``[[alert]]`` entries and their actions.

A rule is kept only when every key of it is right: its target and op globs each match
something, its levels suit its kind, and every action has the options its type needs (a
command's argv runs without a shell, a webhook's URL is http(s), an e-mail has addresses).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from fnmatch import fnmatchcase
from typing import Any

from slowdown.analysis.config.errors import KeyPath
from slowdown.analysis.config.model import ACTION_TYPES, ALERT_KINDS, ActionConfig, AlertRule
from slowdown.analysis.config.reader import _MISSING, _REQUIRED, _Reader
from slowdown.analysis.config.values import (
    _address,
    _argv,
    _as_bool,
    _as_duration,
    _as_int,
    _as_number,
    _as_statistic,
    _as_str,
    _choice,
    _describe,
    _env_name,
    _http_url,
    _Invalid,
    _positive_duration,
    _recipients,
    _suggestion,
    _window,
)
from slowdown.analysis.words import OPS

_ALERT_KEYS = (
    "name",
    "target",
    "op",
    "statistic",
    "window",
    "above",
    "critical",
    "for",
    "clear_for",
    "repeat",
    "kind",
    "verdict",
    "action",
)
VERDICT_WORDS = ("node", "filesystem", "unknown")  # the verdicts a rule may be limited to
_ACTION_KEYS = {
    "command": ("type", "argv", "timeout"),
    "webhook": ("type", "url", "token_file", "token_env", "timeout"),
    "email": (
        "type",
        "to",
        "from",
        "smtp_host",
        "smtp_port",
        "starttls",
        "credentials_file",
        "timeout",
    ),
}
_ACTION_TIMEOUT = {"command": 30.0, "webhook": 10.0, "email": 30.0}


def _verdicts(value: object) -> tuple[str, ...]:
    items = [value] if isinstance(value, str) else value
    if not isinstance(items, list) or not items:
        raise _Invalid(f"expected one of {', '.join(VERDICT_WORDS)} or an array of them")
    for item in items:
        if item not in VERDICT_WORDS:
            raise _Invalid(f"expected one of {', '.join(VERDICT_WORDS)}; got {item!r}")
    return tuple(dict.fromkeys(items))


class _AlertChecks(_Reader):
    """The ``[[alert]]`` section: each rule and its actions."""

    def alerts(self, data: Mapping[str, Any], target_names: list[str]) -> list[AlertRule]:
        has_fleet = isinstance(data.get("fleet"), dict)
        rules: list[AlertRule] = []
        names: dict[str, int] = {}
        for index, table in self.array_of_tables(data, "alert"):
            path: KeyPath = ("alert", index)
            before = len(self.errors)
            self.unknown_keys(table, _ALERT_KEYS, path)
            name, _ = self.unique_name(table, path, names, "alert")
            targets = self.patterns(table, "target", path, target_names, "[[target]]")
            ops = self.patterns(table, "op", path, OPS, "op")
            kind = self.get(table, "kind", path, _choice(ALERT_KINDS), "slowdown")
            statistic = self.get(
                table,
                "statistic",
                path,
                _as_statistic,
                _REQUIRED if kind == "slowdown" else "median",
            )
            window = self.get(table, "window", path, _window, _REQUIRED)
            threshold = {
                "slowdown": self.slowdown_threshold,
                "error_rate": self.fraction_threshold,
                "stuck": _positive_duration,
            }.get(kind)
            above = critical = _MISSING
            if threshold is not None:
                above = self.get(table, "above", path, threshold, None)
                critical = self.get(table, "critical", path, threshold, None)
                if above is None and critical is None:
                    self.error((*path, "above"), "missing; give above, critical or both")
                elif (
                    above not in (None, _MISSING)
                    and critical not in (None, _MISSING)
                    and critical < above
                ):
                    self.error(
                        (*path, "critical"), f"must be >= above ({above:g}); got {critical:g}"
                    )
            for_ = self.get(table, "for", path, _as_duration, 0.0)
            clear_for = self.get(table, "clear_for", path, _as_duration, None)
            repeat = self.get(table, "repeat", path, _positive_duration, None)
            verdicts = self.get(table, "verdict", path, _verdicts, ())
            if verdicts and kind != "slowdown":
                self.error((*path, "verdict"), f'applies to kind "slowdown" only; got {kind!r}')
            elif verdicts and not has_fleet:
                self.error((*path, "verdict"), "needs a [fleet] source, where the verdict "
                           "is read")
            actions = self.actions(table, path)
            if len(self.errors) != before:
                continue
            rules.append(
                AlertRule(
                    name=name,
                    targets=targets,
                    ops=ops,
                    statistic=statistic,
                    window=window,
                    above=above,
                    critical=critical,
                    for_=for_,
                    clear_for=window if clear_for is None else clear_for,
                    repeat=repeat,
                    kind=kind,
                    actions=actions,
                    verdicts=verdicts,
                )
            )
        return rules

    @staticmethod
    def slowdown_threshold(value: object) -> float:
        number = _as_number(value)
        if number <= 0:
            raise _Invalid(f"a slowdown threshold must be > 0; got {value}")
        return number

    @staticmethod
    def fraction_threshold(value: object) -> float:
        number = _as_number(value)
        if not 0 <= number < 1:
            raise _Invalid(f"an error rate is a fraction: expected 0 <= above < 1; got {value}")
        return number

    def patterns(
        self,
        table: Mapping[str, Any],
        key: str,
        path: KeyPath,
        names: Sequence[str],
        what: str,
    ) -> tuple[str, ...]:
        """A name/glob or a list of them, each matching at least one of ``names``."""
        value = table.get(key, "*")
        values = value if isinstance(value, list) else [value]
        if isinstance(value, list) and not value:
            self.error((*path, key), "must not be empty")
        patterns = []
        for position, pattern in enumerate(values, start=1):
            where = (*path, key, position) if isinstance(value, list) else (*path, key)
            if not isinstance(pattern, str) or not pattern:
                self.error(where, f"expected a name or glob, got {_describe(pattern)}")
                continue
            if names and not any(fnmatchcase(name, pattern) for name in names):
                self.error(
                    where,
                    f"{pattern!r} matches no {what}; known: {', '.join(names)}"
                    + _suggestion(pattern, names),
                )
                continue
            patterns.append(pattern)
        return tuple(patterns)

    def actions(self, table: Mapping[str, Any], path: KeyPath) -> tuple[ActionConfig, ...]:
        if "action" not in table:
            self.error(
                (*path, "action"),
                'missing; e.g. action = { type = "command", argv = ["/path/to/program", '
                '"{target}"] }',
            )
            return ()
        value = table["action"]
        if isinstance(value, dict):
            entries = [((*path, "action"), value)]
        elif isinstance(value, list) and value:
            entries = []
            for index, entry in enumerate(value, start=1):
                if isinstance(entry, dict):
                    entries.append(((*path, "action", index), entry))
                else:
                    self.error(
                        (*path, "action", index), f"expected a table, got {_describe(entry)}"
                    )
        else:
            self.error(
                (*path, "action"),
                f"expected an inline table or a list of them, got {_describe(value)}",
            )
            return ()
        actions = []
        for where, entry in entries:
            action = self.action(entry, where)
            if action is not None:
                actions.append(action)
        return tuple(actions)

    def action(self, table: Mapping[str, Any], path: KeyPath) -> ActionConfig | None:
        kind = self.get(table, "type", path, _choice(ACTION_TYPES), _REQUIRED)
        if kind is _MISSING:
            return None
        self.unknown_keys(table, _ACTION_KEYS[kind], path)
        before = len(self.errors)
        options: dict[str, Any] = {}
        options["timeout"] = self.get(
            table, "timeout", path, _positive_duration, _ACTION_TIMEOUT[kind]
        )
        if kind == "command":
            options["argv"] = self.get(table, "argv", path, _argv, _REQUIRED)
        elif kind == "webhook":
            options["url"] = self.get(table, "url", path, _http_url, _REQUIRED)
            options["token_file"] = self.get(
                table, "token_file", path, lambda v: self.path_value(v, relative_ok=True), None
            )
            options["token_env"] = self.get(table, "token_env", path, _env_name, None)
            if "token_file" in table and "token_env" in table:
                self.error((*path, "token_env"), "give token_file or token_env, not both")
        else:
            to = self.get(table, "to", path, _recipients, _REQUIRED)
            options["to"] = to
            sender = self.get(table, "from", path, _address, None)
            options["from"] = f"slowdown@{self.host}" if sender is None else sender
            options["smtp_host"] = self.get(table, "smtp_host", path, _as_str, "localhost")
            options["smtp_port"] = self.get(
                table, "smtp_port", path, lambda v: _as_int(v, 1, 65535), 25
            )
            options["starttls"] = self.get(table, "starttls", path, _as_bool, False)
            options["credentials_file"] = self.get(
                table,
                "credentials_file",
                path,
                lambda v: self.path_value(v, relative_ok=True),
                None,
            )
        if len(self.errors) != before:
            return None
        return ActionConfig(type=kind, options=options)
