"""The alert actions' receivers and recorders: a webhook receiver, an SMTP receiver (TLS with a
self-signed certificate), a program that records its calls, and the action lines that use them."""

from __future__ import annotations

import email
import email.policy
import json
import ssl
import subprocess
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

from aiosmtpd.controller import Controller
from aiosmtpd.smtp import AuthResult, LoginPassword

from tests.kit.metricskit import free_port
from tests.kit.servicekit import wait_for


class WebhookReceiver:
    """A real HTTP server on 127.0.0.1 that records every POST. ``script`` says how to
    answer the next requests (a status code, or "hang" to never answer until closed);
    afterwards it answers ``default``."""

    def __init__(self, default: int = 200) -> None:
        self.requests: list[dict] = []
        self.script: list[int | str] = []
        self.default = default
        self.release = threading.Event()
        self.lock = threading.Lock()
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                length = int(self.headers.get("Content-Length", 0))
                body = self.rfile.read(length)
                with receiver.lock:
                    answer = receiver.script.pop(0) if receiver.script else receiver.default
                    receiver.requests.append({
                        "path": self.path, "headers": dict(self.headers),
                        "body": json.loads(body), "answer": answer, "at": time.time()})
                if answer == "hang":
                    receiver.release.wait(120)
                    return
                reply = json.dumps({"received": True}).encode()
                self.send_response(int(answer))
                if int(answer) in (301, 302, 303, 307, 308):
                    self.send_header("Location", "/elsewhere")
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(reply)))
                self.end_headers()
                self.wfile.write(reply)

            def log_message(self, *args: object) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server.server_address[1]}/hook"

    def answered(self, status: int | str | None = None) -> list[dict]:
        with self.lock:
            return [r for r in self.requests if status is None or r["answer"] == status]

    def close(self) -> None:
        self.release.set()
        self.server.shutdown()
        self.server.server_close()

    def __enter__(self) -> WebhookReceiver:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def self_signed(directory: Path) -> Path:
    """A certificate for localhost and 127.0.0.1 and its key, in one PEM file."""
    pem = directory / "smtp.pem"
    subprocess.run(
        ["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "2",
         "-subj", "/CN=localhost", "-addext", "subjectAltName=DNS:localhost,IP:127.0.0.1",
         "-keyout", str(pem.with_suffix(".key")), "-out", str(pem)],
        check=True, capture_output=True)
    pem.write_text(pem.read_text() + pem.with_suffix(".key").read_text())
    return pem


class SmtpReceiver:
    """aiosmtpd on 127.0.0.1 that requires STARTTLS and a login, and keeps every message.

    Clients trust its self-signed certificate through ``SSL_CERT_FILE`` (set ``cafile``).
    ``fail_next`` answers the next messages with a temporary failure (451).
    """

    def __init__(self, directory: Path, user: str = "slowdown", password: str = "s3cret:pw",
                 tls: bool = True) -> None:
        self.messages: list[dict] = []
        self.logins: list[str] = []
        self.fail_next = 0
        self.cafile = self_signed(directory) if tls else None
        self.port = free_port()
        receiver = self

        class Handler:
            async def handle_DATA(self, server, session, envelope):
                if receiver.fail_next:
                    receiver.fail_next -= 1
                    return "451 try again later"
                receiver.messages.append({
                    "from": envelope.mail_from, "to": list(envelope.rcpt_tos),
                    "message": email.message_from_bytes(envelope.content,
                                                        policy=email.policy.default),
                    "tls": session.ssl is not None, "login": session.auth_data})
                return "250 OK"

        def authenticate(server, session, envelope, mechanism, auth_data):
            ok = isinstance(auth_data, LoginPassword) and \
                auth_data.login.decode() == user and auth_data.password.decode() == password
            if ok:
                receiver.logins.append(user)
            if not ok:
                return AuthResult(success=False, handled=False)
            return AuthResult(success=True, auth_data=auth_data.login.decode())

        kwargs = {}
        if tls:
            context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
            context.load_cert_chain(str(self.cafile))
            kwargs = dict(tls_context=context, require_starttls=True)
        self.controller = Controller(Handler(), hostname="127.0.0.1", port=self.port,
                                     authenticator=authenticate, auth_required=tls,
                                     auth_require_tls=True, **kwargs)
        self.controller.start()

    def close(self) -> None:
        self.controller.stop()


RECORDER = """\
import json, os, sys
out = sys.argv[1]
with open(out, "a") as f:
    f.write(json.dumps({"argv": sys.argv[2:], "stdin": sys.stdin.read(),
                        "env": {k: v for k, v in os.environ.items()
                                if k.startswith("SLOWDOWN_")}}) + "\\n")
sys.exit(int(os.environ.get("RECORDER_EXIT", "0")))
"""


def recorder_program(directory: Path) -> Path:
    path = directory / "record-call.py"
    path.write_text(RECORDER)
    return path


def recorder_action(directory: Path, out: Path, *args: str) -> str:
    """A command action (TOML) running the recorder program, which appends to ``out``."""
    argv = ", ".join(f'"{a}"' for a in (sys.executable, recorder_program(directory), out, *args))
    return f'{{ type = "command", argv = [{argv}] }}'


def webhook_action(url: str, timeout: str | None = None) -> str:
    """A webhook action (TOML)."""
    extra = "" if timeout is None else f', timeout = "{timeout}"'
    return f'{{ type = "webhook", url = "{url}"{extra} }}'


def calls(path: Path) -> list[dict]:
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text().splitlines()]


def wait_until(predicate, timeout: float, what: str):
    return wait_for(predicate, timeout, 0.05, what)
