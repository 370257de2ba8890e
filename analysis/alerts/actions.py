"""The three actions: run a command, POST a webhook, send an e-mail.

Each takes the action's configuration and a notification, does one attempt within the
action's timeout and returns a :class:`Result`; retrying is the dispatcher's business.
Nothing here ever runs a shell, writes a secret into a result or a log, or raises for a
failed delivery.
"""

from __future__ import annotations

import contextlib
import http.client
import ipaddress
import json
import os
import signal
import smtplib
import ssl
import subprocess
import tempfile
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Mapping
from dataclasses import dataclass
from email.message import EmailMessage
from email.utils import formatdate, make_msgid
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from slowdown.analysis.alerts.notification import Notification, TemplateError, expand
from slowdown.analysis.config import ActionConfig

OUTPUT_LIMIT = 2000  # characters of a program's output or a response kept in the log
KILL_WAIT = 5.0  # seconds to wait for a killed process group's leader to be reaped


@dataclass(frozen=True)
class Result:
    """How one attempt went. ``retry``: whether trying again may help (a 5xx, a timeout,
    a refused connection) rather than not (a 400, a bad template)."""

    ok: bool
    message: str
    retry: bool = True
    retry_after: float | None = None  # seconds, when the receiver asked for it


def describe(action: ActionConfig) -> str:
    """A short name for logs: the program, the host, the addresses; never a secret."""
    options = action.options
    if action.type == "command":
        return f"command {options['argv'][0]}"
    if action.type == "webhook":
        parts = urlsplit(options["url"])
        return f"webhook {parts.scheme}://{parts.hostname}" + (
            f":{parts.port}" if parts.port else "")
    return "email " + ",".join(options["to"])


def deliver(action: ActionConfig, note: Notification, *,
            processes: ProcessGroups | None = None) -> Result:
    """One attempt of ``action`` for ``note``; never raises for a delivery failure."""
    try:
        if action.type == "command":
            return run_command(action, note, processes)
        if action.type == "webhook":
            return post_webhook(action, note)
        if action.type == "email":
            return send_email(action, note)
        return Result(False, f"unknown action type {action.type!r}", retry=False)
    except Exception as exc:  # a bug must not take the dispatcher down
        return Result(False, f"{type(exc).__name__}: {exc}")


# -- command ----------------------------------------------------------------------------------

class ProcessGroups:
    """The process groups of running commands, so a shutdown can kill them."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._groups: set[int] = set()

    def add(self, pgid: int) -> None:
        with self._lock:
            self._groups.add(pgid)

    def discard(self, pgid: int) -> None:
        with self._lock:
            self._groups.discard(pgid)

    def kill_all(self) -> int:
        with self._lock:
            groups = list(self._groups)
        for pgid in groups:
            _kill_group(pgid)
        return len(groups)


def _kill_group(pgid: int) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pgid, signal.SIGKILL)


def command_argv(action: ActionConfig, note: Notification) -> list[str]:
    """The argv with each element's ``{field}`` placeholders filled in, element by element:
    a value never splits into two arguments nor reaches a shell."""
    fields = note.fields()
    argv = []
    for position, template in enumerate(action.options["argv"]):
        try:
            argv.append(expand(template, fields))
        except TemplateError as exc:
            raise TemplateError(f"argv[{position + 1}]: {exc}") from None
    return argv


def run_command(action: ActionConfig, note: Notification,
                processes: ProcessGroups | None = None) -> Result:
    """Run the program (no shell) in its own process group, the webhook document on its
    standard input and ``SLOWDOWN_*`` in its environment; kill the group at the timeout."""
    timeout = float(action.options["timeout"])
    try:
        argv = command_argv(action, note)
    except TemplateError as exc:
        return Result(False, str(exc), retry=False)
    env = {**os.environ, **note.environment()}
    with tempfile.TemporaryFile() as stdin, tempfile.TemporaryFile() as output:
        stdin.write(json.dumps(note.document()).encode())
        stdin.seek(0)
        try:
            # Output goes to a file, not a pipe: a grandchild that keeps a pipe open can
            # never make us wait.
            proc = subprocess.Popen(argv, stdin=stdin, stdout=output, stderr=subprocess.STDOUT,
                                    env=env, start_new_session=True, close_fds=True)
        except OSError as exc:
            return Result(False, f"cannot run {argv[0]}: {exc.strerror or exc}")
        if processes is not None:
            processes.add(proc.pid)
        try:
            try:
                code = proc.wait(timeout=timeout)
            except subprocess.TimeoutExpired:
                _kill_group(proc.pid)
                with contextlib.suppress(subprocess.TimeoutExpired):
                    proc.wait(timeout=KILL_WAIT)  # in D state it stays a zombie: leave it
                return Result(False, f"no exit within {timeout:g}s; process group killed")
        finally:
            if processes is not None:
                processes.discard(proc.pid)
        output.seek(0)
        text = output.read(OUTPUT_LIMIT * 4).decode("utf-8", "replace").strip()
    tail = _last_lines(text)
    if code == 0:
        return Result(True, "exit 0" + (f": {tail}" if tail else ""))
    how = f"killed by signal {-code}" if code < 0 else f"exit {code}"
    return Result(False, how + (f": {tail}" if tail else ""), retry=False)


def _last_lines(text: str) -> str:
    if len(text) > OUTPUT_LIMIT:
        text = "..." + text[-OUTPUT_LIMIT:]
    return " | ".join(line.strip() for line in text.splitlines() if line.strip())[-OUTPUT_LIMIT:]


# -- webhook ----------------------------------------------------------------------------------

class SecretError(Exception):
    """A token or password that cannot be read; the message names where, never the value."""


def bearer_token(options: Mapping[str, Any]) -> str | None:
    """The webhook's bearer token from ``token_file`` or ``$token_env``, read at each attempt
    (a rotated token is picked up without a restart)."""
    token_file = options.get("token_file")
    token_env = options.get("token_env")
    if token_file is not None:
        try:
            token = Path(token_file).read_text().strip()
        except OSError as exc:
            raise SecretError(f"cannot read token_file {token_file}: "
                              f"{exc.strerror or exc}") from None
        if not token:
            raise SecretError(f"token_file {token_file} is empty")
        return token
    if token_env is not None:
        token = os.environ.get(token_env, "").strip()
        if not token:
            raise SecretError(f"environment variable {token_env} (token_env) is not set")
        return token
    return None


class _NoRedirect(urllib.request.HTTPRedirectHandler):
    """A redirect is an answer, not a delivery: a POST is never silently turned into a GET."""

    def redirect_request(self, req, fp, code, msg, headers, newurl):
        return None


RETRY_STATUS = (408, 425, 429)


def post_webhook(action: ActionConfig, note: Notification) -> Result:
    options = action.options
    timeout = float(options["timeout"])
    try:
        token = bearer_token(options)
    except SecretError as exc:
        return Result(False, str(exc))
    body = json.dumps(note.document()).encode()
    headers = {"Content-Type": "application/json", "User-Agent": "slowdown-alerts"}
    if token:
        headers["Authorization"] = f"Bearer {token}"
    request = urllib.request.Request(options["url"], data=body, headers=headers, method="POST")
    opener = urllib.request.build_opener(_NoRedirect)
    try:
        with opener.open(request, timeout=timeout) as response:
            status = response.status
            text = response.read(OUTPUT_LIMIT).decode("utf-8", "replace")
    except urllib.error.HTTPError as exc:
        text = ""
        with contextlib.suppress(Exception):
            text = exc.read(OUTPUT_LIMIT).decode("utf-8", "replace")
        retry = exc.code >= 500 or exc.code in RETRY_STATUS
        message = f"HTTP {exc.code} {exc.reason}" + (f": {_last_lines(text)}" if text else "")
        if not retry:
            message += " (not retried)"
        return Result(False, message, retry=retry,
                      retry_after=_retry_after(exc.headers.get("Retry-After")))
    except urllib.error.URLError as exc:
        return Result(False, f"cannot reach {_origin(options['url'])}: {exc.reason}")
    except (OSError, http.client.HTTPException) as exc:
        return Result(False, f"{_origin(options['url'])}: {type(exc).__name__}: {exc}")
    return Result(True, f"HTTP {status}" + (f": {_last_lines(text)}" if text.strip() else ""))


def _origin(url: str) -> str:
    parts = urlsplit(url)
    return f"{parts.scheme}://{parts.netloc.rpartition('@')[2]}"


def _retry_after(value: str | None) -> float | None:
    if value is None:
        return None
    try:
        seconds = float(value)
    except ValueError:
        return None
    return seconds if 0 <= seconds <= 86400 else None


# -- email ------------------------------------------------------------------------------------

def read_credentials(path: str | os.PathLike) -> tuple[str, str]:
    """SMTP user and password: the user on the first line and the password on the second,
    or ``user:password`` on one line."""
    try:
        lines = [line.strip() for line in Path(path).read_text().splitlines() if line.strip()]
    except OSError as exc:
        raise SecretError(f"cannot read credentials_file {path}: {exc.strerror or exc}") \
            from None
    if len(lines) == 2:
        return lines[0], lines[1]
    if len(lines) == 1 and ":" in lines[0]:
        user, _, password = lines[0].partition(":")
        return user, password
    raise SecretError(f"credentials_file {path}: expected the user on the first line and the "
                      "password on the second (or user:password)")


def _is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def message_id(note: Notification, event: str | None = None) -> str:
    """A Message-ID per incident and event: the resolve message names the firing one in
    In-Reply-To, so mail clients and ticket systems thread them."""
    local = f"{note.rule}.{note.subject}.{int(note.starts_at)}.{event or note.event}"
    local = "".join(c if c.isalnum() or c in ".-_" else "_" for c in local)
    host = "".join(c if c.isalnum() or c in ".-" else "-" for c in note.host) or "localhost"
    return f"<slowdown.{local}@{host}>"


def email_message(action: ActionConfig, note: Notification) -> EmailMessage:
    options = action.options
    msg = EmailMessage()
    state = {"firing": "FIRING", "repeat": "STILL FIRING", "escalated": "ESCALATED",
             "resolved": "RESOLVED", "test": "TEST"}.get(note.event, note.event.upper())
    msg["Subject"] = f"[slowdown {state} {note.severity}] {note.rule}: {note.summary}"
    msg["From"] = options["from"]
    msg["To"] = ", ".join(options["to"])
    msg["Date"] = formatdate(localtime=False)
    if note.event in ("firing", "test"):
        msg["Message-ID"] = message_id(note) if note.event == "firing" else make_msgid("slowdown")
    else:
        msg["Message-ID"] = message_id(note, f"{note.event}.{int(time.time())}")
        first = message_id(note, "firing")
        msg["In-Reply-To"] = first
        msg["References"] = first
    msg["X-Slowdown-Incident"] = note.incident
    msg["X-Slowdown-Status"] = note.status
    msg.set_content(note.description + "\n\n" + json.dumps(note.document()["slowdown"],
                                                           indent=2) + "\n")
    return msg


def send_email(action: ActionConfig, note: Notification) -> Result:
    """SMTP; STARTTLS when configured (implicit TLS on port 465); a login from
    ``credentials_file``, never sent unencrypted to another host."""
    options = action.options
    host, port = options["smtp_host"], int(options["smtp_port"])
    timeout = float(options["timeout"])
    implicit_tls = port == 465
    credentials = None
    try:
        if options.get("credentials_file") is not None:
            credentials = read_credentials(options["credentials_file"])
    except SecretError as exc:
        return Result(False, str(exc))
    if credentials and not (options["starttls"] or implicit_tls) and not _is_loopback(host):
        return Result(False, f"refusing to send the SMTP password to {host} unencrypted; "
                             "set starttls = true", retry=False)
    msg = email_message(action, note)
    where = f"{host}:{port}"
    try:
        context = ssl.create_default_context()
        if implicit_tls:
            smtp: smtplib.SMTP = smtplib.SMTP_SSL(host, port, timeout=timeout, context=context)
        else:
            smtp = smtplib.SMTP(host, port, timeout=timeout)
        with smtp:
            smtp.ehlo()
            if options["starttls"] and not implicit_tls:
                smtp.starttls(context=context)
                smtp.ehlo()
            if credentials:
                smtp.login(*credentials)
            refused = smtp.send_message(msg)
    except smtplib.SMTPRecipientsRefused as exc:
        return Result(False, f"{where}: every recipient refused: "
                             + ", ".join(f"{a} {c}" for a, (c, _) in exc.recipients.items()),
                      retry=False)
    except smtplib.SMTPAuthenticationError as exc:
        return Result(False, f"{where}: login refused: {exc.smtp_code} "
                             f"{_text(exc.smtp_error)}", retry=False)
    except smtplib.SMTPResponseException as exc:
        permanent = 500 <= exc.smtp_code < 600
        return Result(False, f"{where}: {exc.smtp_code} {_text(exc.smtp_error)}",
                      retry=not permanent)
    except (OSError, smtplib.SMTPException) as exc:
        return Result(False, f"{where}: {type(exc).__name__}: {exc}")
    message = f"sent to {', '.join(options['to'])} via {where}"
    if refused:
        message += "; refused: " + ", ".join(refused)
    return Result(True, message)


def _text(value: bytes | str) -> str:
    return value.decode("utf-8", "replace") if isinstance(value, bytes) else str(value)

