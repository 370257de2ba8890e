"""What an alert says: one notification, and the forms it takes (text, template fields,
environment, the Alertmanager-like webhook document).

A notification is built when the state machine decides to send, stored as JSON in the
outbox, and rendered by each action when it is delivered; so a retry after a restart sends
exactly what the first attempt would have sent.
"""

from __future__ import annotations

import datetime as dt
import hashlib
import json
import math
import string
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field
from typing import Any

from slowdown.analysis.units import format_duration, format_latency

EVENTS = ("firing", "resolved", "repeat", "escalated", "test")
NO_END = "0001-01-01T00:00:00Z"  # Alertmanager's "not ended yet"


@dataclass(frozen=True)
class Notification:
    """One message about one incident of one (rule, subject)."""

    rule: str
    subject: str  # "target/op", or "target" when the rule covers several ops
    target: str
    op: str  # the op, or the worst of the rule's ops when the incident fired
    event: str  # firing, resolved, repeat, escalated, test
    severity: str  # warning, critical
    value: float | None  # the value now (at firing: the value that fired it)
    threshold: float | None  # the level crossed: above or critical
    kind: str  # slowdown, error_rate, stuck
    statistic: str
    window: float  # seconds
    host: str
    starts_at: float  # when the incident fired (unix seconds)
    ends_at: float | None = None  # when it resolved
    details: Mapping[str, Any] = field(default_factory=dict)

    @property
    def status(self) -> str:
        """``firing`` or ``resolved``: what a receiver should do with the incident."""
        return "resolved" if self.event == "resolved" else "firing"

    @property
    def incident(self) -> str:
        """Stable for the whole incident: receivers can deduplicate on it."""
        return f"{self.host}/{self.rule}/{self.subject}/{int(self.starts_at)}"

    @property
    def fingerprint(self) -> str:
        """Stable for (host, rule, subject) across incidents, like Alertmanager's."""
        key = "\0".join((self.host, self.rule, self.subject))
        return hashlib.sha256(key.encode()).hexdigest()[:16]

    # -- text ------------------------------------------------------------------------------

    def measure(self) -> str:
        """What is measured, in words: ``slowdown of q95 over 10m``."""
        window = format_duration(self.window)
        if self.kind == "error_rate":
            return f"error rate over {window}"
        if self.kind == "stuck":
            return f"longest op still stuck over {window}"
        return f"slowdown of {self.statistic} over {window}"

    def show(self, value: float | None) -> str:
        return show_value(self.kind, value)

    @property
    def summary(self) -> str:
        where = f"{self.target} {self.op}" if "/" in self.subject else self.target
        test = "TEST: " if self.event == "test" else ""
        if self.event == "resolved":
            return (f"{test}{where} on {self.host}: resolved, {self.measure()} "
                    f"{self.show(self.value)} (threshold {self.show(self.threshold)})")
        named = self.servers_note
        verdict = self.verdict_word
        # A named server says "filesystem: ..." itself; the verdict's word is not repeated.
        word = f", {verdict}" if verdict and not (named and verdict == "filesystem") else ""
        servers = f"; filesystem: {named}" if named else ""
        return (f"{test}{where} on {self.host}: {self.measure()} {self.show(self.value)} "
                f"> {self.show(self.threshold)} ({self.severity}{word}){servers}")

    @property
    def servers_note(self) -> str:
        """The slow servers the per-server records named (``h3:/bricks/b3 12x, the others
        1.1x``), or "" when none was named."""
        return str(self.details.get("servers_note") or "")

    @property
    def verdict_word(self) -> str:
        """``filesystem``, ``node`` or ``unknown`` (the verdict's word), or "" without one."""
        verdict = self.details.get("verdict")
        return str(verdict).split(":", 1)[0] if verdict else ""

    @property
    def description(self) -> str:
        lines = [self.summary, ""]
        started = _iso(self.starts_at)
        if self.event == "test":
            lines.append("A test message sent by `slowdown alerts --test`; no incident is open.")
        elif self.event == "resolved":
            lines.append(f"Fired {started}, resolved {_iso(self.ends_at)}.")
        else:
            lines.append(f"Firing since {started}.")
        peak = self.details.get("peak")
        if peak is not None and self.event != "test":
            lines.append(f"Peak {self.show(peak)}.")
        ops = self.details.get("ops") or {}
        if ops:
            lines.append("")
            lines.append(f"{self.measure()} per op:")
            for op, info in ops.items():
                lines.append(f"  {op:<10} {self.show(info.get('value'))}")
        verdict = self.details.get("verdict")
        if verdict:
            lines += ["", f"Verdict: {verdict}"]
        servers = self.details.get("servers") or []
        if servers and self.event != "resolved":
            lines += ["", "Slow servers (their medians over the last 10m, per-server records):"]
            lines += [f"  {srv.get('server')}  {_times(srv.get('slowdown'))} expected, "
                      f"{_times(srv.get('against_others'))} the others, {srv.get('probes')} "
                      f"probes ({', '.join(srv.get('ops') or [])})" for srv in servers]
        note = self.details.get("note")
        if note:
            lines += ["", str(note)]
        lines += ["", f"Rule {self.rule!r}, incident {self.incident}."]
        return "\n".join(lines)

    # -- forms -----------------------------------------------------------------------------

    def fields(self) -> dict[str, Any]:
        """The template fields of a command's arguments (``{target}``, ``{value}``, ...)."""
        return {
            "rule": self.rule,
            "subject": self.subject,
            "target": self.target,
            "op": self.op,
            "state": self.status,
            "event": self.event,
            "severity": self.severity,
            "value": _Number(self.value),
            "threshold": _Number(self.threshold),
            "kind": self.kind,
            "statistic": self.statistic,
            "window": format_duration(self.window),
            "host": self.host,
            "incident": self.incident,
            "starts_at": _iso(self.starts_at),
            "ends_at": _iso(self.ends_at) if self.ends_at is not None else "",
            "summary": self.summary,
            "verdict": self.verdict_word,
            "servers": self.servers_note,
        }

    def environment(self) -> dict[str, str]:
        """``SLOWDOWN_*`` variables given to a command."""
        env = {f"SLOWDOWN_{key.upper()}": format(value) for key, value in self.fields().items()}
        env["SLOWDOWN_WINDOW_SECONDS"] = f"{self.window:g}"
        env["SLOWDOWN_STARTS_AT_EPOCH"] = str(int(self.starts_at))
        env["SLOWDOWN_ENDS_AT_EPOCH"] = "" if self.ends_at is None else str(int(self.ends_at))
        return env

    def document(self, receiver: str = "slowdown") -> dict[str, Any]:
        """The webhook body: an Alertmanager webhook (version 4) with one alert, plus our own
        ``slowdown`` object with the numbers."""
        labels = {"alertname": self.rule, "target": self.target, "op": self.op,
                  "host": self.host, "severity": self.severity}
        annotations = {"summary": self.summary, "description": self.description}
        alert = {
            "status": self.status,
            "labels": labels,
            "annotations": annotations,
            "startsAt": _iso(self.starts_at),
            "endsAt": _iso(self.ends_at) if self.ends_at is not None else NO_END,
            "generatorURL": "",
            "fingerprint": self.fingerprint,
        }
        group_labels = {"alertname": self.rule, "host": self.host, "subject": self.subject}
        return {
            "version": "4",
            "groupKey": "{}:{" + ",".join(f"{k}={json.dumps(v)}"
                                          for k, v in group_labels.items()) + "}",
            "truncatedAlerts": 0,
            "status": self.status,
            "receiver": receiver,
            "groupLabels": group_labels,
            "commonLabels": labels,
            "commonAnnotations": annotations,
            "externalURL": "",
            "alerts": [alert],
            "slowdown": {
                "incident": self.incident,
                "event": self.event,
                "rule": self.rule,
                "subject": self.subject,
                "kind": self.kind,
                "statistic": self.statistic,
                "window": self.window,
                "value": _finite(self.value),
                "threshold": _finite(self.threshold),
                "startsAt": self.starts_at,
                "endsAt": self.ends_at,
                "details": {k: v for k, v in self.details.items()
                            if k not in ("servers", "servers_note")},
                "servers": list(self.details.get("servers") or []),
            },
        }

    # -- storage ---------------------------------------------------------------------------

    def to_json(self) -> str:
        doc = asdict(self)
        doc["details"] = dict(self.details)
        return json.dumps(doc, sort_keys=True)

    @classmethod
    def from_json(cls, text: str) -> Notification:
        doc = json.loads(text)
        return cls(**{name: doc.get(name) for name in cls.__dataclass_fields__})


def show_value(kind: str, value: float | None, missing: str = "no data") -> str:
    """A value in the unit of a rule's kind: ``12.3``, ``4.5%``, ``1m15s``."""
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return missing
    if kind == "error_rate":
        return f"{value * 100:.3g}%"
    if kind == "stuck":
        return format_latency(value)
    return f"{value:.3g}" if value < 1000 else f"{value:.0f}"


class _Number(float):
    """A float that renders compactly in a template (``12.346``, ``0.053``) unless the
    template gives a format (``{value:.1f}``); missing values render as an empty string."""

    def __new__(cls, value: float | None) -> Any:
        if value is None or (isinstance(value, float) and math.isnan(value)):
            return ""
        return super().__new__(cls, value)

    def __format__(self, spec: str) -> str:
        if spec:
            return float.__format__(self, spec)
        text = f"{float(self):.3f}".rstrip("0").rstrip(".")
        return text if text not in ("", "-0") else "0"

    def __str__(self) -> str:
        return format(self)


class TemplateError(ValueError):
    """An argument whose ``{field}`` cannot be filled in."""


class _Fields(dict):
    def __missing__(self, key: str) -> str:
        raise TemplateError(f"unknown field {{{key}}}; known: "
                            + ", ".join("{" + k + "}" for k in sorted(self)))


def expand(template: str, fields: Mapping[str, Any]) -> str:
    """One argument with its ``{field}`` placeholders filled in (``{{`` for a brace).

    Only plain names are allowed, with an optional format spec: no attribute access or
    indexing, so a template cannot reach into the objects behind the values. The values
    are inserted as text; nothing is interpreted again.
    """
    for _, name, _, _ in string.Formatter().parse(template):
        if name is not None and not name.isidentifier():
            raise TemplateError(f"{{{name}}} is not a field name")
    try:
        return template.format_map(_Fields(fields))
    except TemplateError:
        raise
    except (ValueError, IndexError, KeyError, AttributeError) as exc:
        raise TemplateError(f"{template!r}: {exc}") from None


def _times(value: object) -> str:
    """A slowdown as the verdict writes it: ``12x``, ``1.5x``; ``-`` when unknown."""
    if not isinstance(value, (int, float)) or not math.isfinite(value):
        return "-"
    return f"{value:.1f}x" if value < 10 else f"{value:.0f}x"


def _iso(t: float | None) -> str:
    if t is None:
        return ""
    return dt.datetime.fromtimestamp(t, dt.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def _finite(value: float | None) -> float | None:
    if value is None or not math.isfinite(value):
        return None
    return value
