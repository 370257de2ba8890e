"""Prometheus' Alertmanager for tests: the project's rules and example configuration, an
Alertmanager with short waits, a receiver of its notifications, starting, stopping and querying
(is_ready and stop serve a Prometheus server as well)."""

from __future__ import annotations

import contextlib
import json
import subprocess
import threading
import urllib.parse
import urllib.request
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

from tests.kit.grafanakit import load_yaml
from tests.kit.servicekit import wait_for

ROOT = Path(__file__).resolve().parents[2]


RULES = ROOT / "prometheus" / "slowdown.rules.yml"


ALERTMANAGER = ROOT / "prometheus" / "alertmanager.example.yml"


def serve(handler: type[BaseHTTPRequestHandler]) -> ThreadingHTTPServer:
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    server.daemon_threads = True
    threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05},
                     daemon=True).start()
    return server


class Receiver:
    """The webhook receiver: every notification Alertmanager posts, by path."""

    def __init__(self) -> None:
        self.got: list[tuple[str, dict]] = []
        self.lock = threading.Lock()
        receiver = self

        class Hook(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                doc = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                with receiver.lock:
                    receiver.got.append((self.path, doc))
                self.send_response(200)
                self.send_header("Content-Length", "0")
                self.end_headers()

            def log_message(self, *args) -> None:
                pass

        self.server = serve(Hook)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"

    def at(self, path: str) -> list[dict]:
        with self.lock:
            return [doc for p, doc in self.got if p == path]


def fast_alertmanager(path: Path, receiver: Receiver, group_wait: str = "1s",
                      group_interval: str = "2s") -> None:
    """The shipped Alertmanager example, its receivers on our webhook, its waits short."""
    config = load_yaml(ALERTMANAGER)
    config["global"]["resolve_timeout"] = "10s"
    config["route"].update(group_wait=group_wait, group_interval=group_interval,
                           repeat_interval="1h")
    for r in config["receivers"]:
        (hook,) = r["webhook_configs"]
        hook["url"] = f"{receiver.url}/{r['name']}"
    path.write_text(json.dumps(config))


def alertmanager_argv(config: Path, data: Path, port: int) -> list[str]:
    return ["prometheus-alertmanager", f"--config.file={config}", f"--storage.path={data}",
            f"--web.listen-address=127.0.0.1:{port}",
            "--cluster.listen-address="]  # no gossip port: a single Alertmanager


def start(argv: list[str], log: Path, url: str, what: str) -> subprocess.Popen:
    proc = subprocess.Popen(argv, stdout=log.open("w"), stderr=subprocess.STDOUT,
                            stdin=subprocess.DEVNULL, start_new_session=True)

    def ready() -> bool:
        assert proc.poll() is None, f"{what} exited: {log.read_text()[-2000:]}"
        return is_ready(url)

    wait_for(ready, 30, what=what)
    return proc


def is_ready(url: str) -> bool:
    """Whether the Prometheus or Alertmanager at ``url`` answers /-/ready with 200."""
    with contextlib.suppress(OSError), urllib.request.urlopen(f"{url}/-/ready",
                                                              timeout=2) as r:
        return r.status == 200
    return False


def stop(proc: subprocess.Popen) -> None:
    """SIGTERM, and SIGKILL after 15 s."""
    proc.terminate()
    try:
        proc.wait(15)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()


def query(url: str, expr: str) -> list[dict]:
    q = urllib.parse.urlencode({"query": expr})
    with urllib.request.urlopen(f"{url}/api/v1/query?{q}", timeout=10) as r:
        doc = json.loads(r.read())
    assert doc["status"] == "success", doc
    return doc["data"]["result"]
