"""End to end, as a site would see it: an alert rule on a real device that turns slow.

The service probes a loop-mounted ext4 image for a few minutes; a baseline is taken from
those minutes (`slowdown rebaseline`); then the loop device is slowed for real by a cgroup
v1 blkio throttle on the service's cgroup (every 1 MiB O_DIRECT read or write takes about
250 ms instead of a few ms). The rule's slowdown rises above its threshold, exactly one
ticket goes out through each action (a local HTTP receiver with a bearer token, a local
SMTP server with STARTTLS and a login, a real program); the service is restarted while the
incident fires; after the throttle is lifted, the incident resolves with one message each.

Opt-in (tests/long, `--long`); takes about 14 minutes; needs root (loop mount, cgroups):

    PYTHONPATH=... python -m pytest --long -s tests/long/test_alerts_e2e.py

The result of a run is recorded in docs/ALERTS-e2e.md.
"""

from __future__ import annotations

import contextlib
import inspect
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from slowdown.analysis.alerts import load_states
from slowdown.analysis.store import Store
from tests.kit.alertkit import SmtpReceiver, WebhookReceiver, calls, recorder_program
from tests.kit.faultfs.realfs import ext4_image
from tests.kit.fixtures_fs import require_root
from tests.kit.servicekit import TargetSpec, probe_cli, wait_for, write_config

BLKIO = Path("/sys/fs/cgroup/blkio")
THROTTLE_BPS = 4 << 20  # 4 MiB/s: a 1 MiB O_DIRECT read or write takes ~250 ms
HEALTHY_MINUTES = 3
TOKEN = "e2e-token-0123"

# Until probe/daemon/service.py calls ServiceAlerts itself, the service is started through this
# launcher, which adds exactly the calls the service is to make (docs/ALERTS.md, "In the
# service"). Once the service has them, the plain `slowdown-probe run` is used.
LAUNCHER = """
import sys, time
from slowdown.analysis.alerts import ServiceAlerts
from slowdown.analysis.store import Store
from slowdown.probe.command import main as cli
from slowdown.probe.daemon import service

_flush, _shutdown = service.Service.flush, service.Service.shutdown

def flush(self, everything=False):
    ok = _flush(self, everything)
    if ok and not everything and self.config.alerts:
        if getattr(self, "alerts", None) is None:
            cfg = self.config
            self.alerts = ServiceAlerts(
                cfg, lambda: Store(cfg.database, check_same_thread=False))
        stuck = {(r.name, op): age for r in self.runners for op, age, _ in r.in_flight()
                 if age > self.config.interval}
        self.alerts.evaluate(time.time(), stuck)
    return ok

def shutdown(self):
    code = _shutdown(self)
    if getattr(self, "alerts", None) is not None:
        self.alerts.close(2.0)
    return code

service.Service.flush, service.Service.shutdown = flush, shutdown
sys.exit(cli.main())
"""


def service_is_wired() -> bool:
    from slowdown.probe.daemon import service

    return "ServiceAlerts" in inspect.getsource(service)


class Cgroup:
    """A blkio cgroup of our own; processes started with :meth:`join` as preexec run in it."""

    def __init__(self) -> None:
        self.path = BLKIO / f"slowdown-e2e-{os.getpid()}"
        self.path.mkdir()

    def join(self) -> None:  # in the child, before exec
        (self.path / "cgroup.procs").write_text(str(os.getpid()))

    def throttle(self, device: str, bps: int) -> None:
        for name in ("blkio.throttle.read_bps_device", "blkio.throttle.write_bps_device"):
            (self.path / name).write_text(f"{device} {bps}")

    def remove(self) -> None:
        for pid in (self.path / "cgroup.procs").read_text().split():
            with contextlib.suppress(OSError):
                (BLKIO / "cgroup.procs").write_text(pid)
        self.path.rmdir()


def loop_device(image: Path) -> str:
    """``major:minor`` of the loop device behind ``image``."""
    out = subprocess.run(["losetup", "-j", str(image)], capture_output=True, text=True,
                         check=True).stdout
    device = out.split(":", 1)[0]
    rdev = os.stat(device).st_rdev
    return f"{os.major(rdev)}:{os.minor(rdev)}"


def start(config: Path, cgroup: Cgroup, env: dict[str, str], log: Path) -> subprocess.Popen:
    if service_is_wired():
        argv = [sys.executable, "-m", "slowdown.probe.command.main", "--config", str(config), "run"]
    else:
        argv = [sys.executable, "-c", LAUNCHER, "--config", str(config), "run"]
    with open(log, "a") as out:
        return subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=out,
                                stderr=subprocess.STDOUT, env={**os.environ, **env},
                                preexec_fn=cgroup.join)


def stop(proc: subprocess.Popen) -> float:
    t0 = time.monotonic()
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
            raise AssertionError("the service did not stop within 30 s") from None
    return time.monotonic() - t0


def read_cli(config: Path, *args: str) -> str:
    done = subprocess.run([sys.executable, "-m", "slowdown.analysis.cli", "--config",
                           str(config), *args], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stdout + done.stderr
    return done.stdout


def headline(config: Path) -> float | None:
    """The 1-minute slowdown of the median, as `slowdown --json` shows it."""
    doc = json.loads(read_cli(config, "--stat", "median", "--json"))
    return doc["targets"][0]["windows"][0]["slowdown"]


def say(t0: float, text: str) -> None:
    print(f"[{time.time() - t0:6.0f}s {time.strftime('%H:%M:%S', time.gmtime())}Z] {text}",
          flush=True)


@pytest.mark.timeout(1800)
def test_a_throttled_device_raises_one_ticket_and_resolves_it(tmp_path):
    require_root("the alert end-to-end run (loop mount, blkio cgroup)")
    assert BLKIO.is_dir(), "needs the cgroup v1 blkio controller at /sys/fs/cgroup/blkio"
    t0 = time.time()
    tickets = tmp_path / "tickets.jsonl"
    credentials = tmp_path / "smtp.credentials"
    credentials.write_text("slowdown\ns3cret:pw\n")
    log = tmp_path / "service.log"
    webhook, smtp = WebhookReceiver(), SmtpReceiver(tmp_path)
    cgroup = Cgroup()
    procs: list[subprocess.Popen] = []
    device = None
    try:
        with ext4_image(tmp_path / "disk", 256) as mount:
            try:
                device = loop_device(tmp_path / "disk" / "ext4.img")
                database = tmp_path / "db" / "slowdown.db"
                config = write_config(tmp_path / "slowdown.toml", database,
                                      [TargetSpec("e2e", mount / "probe", data_size="64MiB",
                                                  pool_files=100)])
                with open(config, "a") as f:
                    f.write(rule_text(webhook, smtp, credentials, tickets, tmp_path))
                (mount / "probe").mkdir()
                done = probe_cli(config, "prepare", "--no-progress")
                assert done.returncode == 0, done.stderr
                env = {"E2E_WEBHOOK_TOKEN": TOKEN, "SSL_CERT_FILE": str(smtp.cafile)}
                say(t0, f"service starts; loop device {device}; "
                        f"{'wired' if service_is_wired() else 'through the launcher'}")
                procs.append(start(config, cgroup, env, log))
                started = time.time()

                # 1. Healthy minutes, then a baseline from them.
                first_whole = (int(started) // 60 + 1) * 60
                sleep_until(first_whole + HEALTHY_MINUTES * 60 + 5)
                assert procs[-1].poll() is None, log.read_text()
                read_cli(config, "rebaseline", "--reason", "e2e: healthy loop device",
                         "--from", f"@{first_whole}")
                say(t0, f"baseline from {HEALTHY_MINUTES} healthy minutes; slowdown now "
                        f"{headline(config)}")
                assert webhook.answered() == []

                # 2. The device turns slow: the rule fires, once.
                cgroup.throttle(device, THROTTLE_BPS)
                throttled = time.time()
                say(t0, f"throttled to {THROTTLE_BPS >> 20} MiB/s")
                wait_for(lambda: webhook.answered(), 300, step=1, what="the firing webhook")
                fired = time.time()
                say(t0, f"fired after {fired - throttled:.0f} s; slowdown {headline(config)}")
                # A restart while the incident fires raises nothing again.
                took = stop(procs[-1])
                procs.append(start(config, cgroup, env, log))
                say(t0, f"service restarted (stop took {took:.1f} s)")
                sleep_until(time.time() + 120)
                assert procs[-1].poll() is None, log.read_text()
                assert len(webhook.answered()) == 1
                slow_value = headline(config)
                say(t0, f"still firing, no second ticket; slowdown {slow_value}")

                # 3. The load stops: the incident resolves, once.
                cgroup.throttle(device, 0)
                released = time.time()
                say(t0, "throttle lifted")
                wait_for(lambda: len(webhook.answered()) >= 2, 420, step=1,
                         what="the resolve webhook")
                resolved = time.time()
                say(t0, f"resolved after {resolved - released:.0f} s; "
                        f"slowdown {headline(config)}")
                sleep_until(time.time() + 70)  # one more evaluation: nothing more is sent
                listing = read_cli(config, "alerts") if has_alerts_command(config) else ""
                stop(procs[-1])
            finally:
                if device is not None:
                    cgroup.throttle(device, 0)
                for proc in procs:
                    if proc.poll() is None:
                        proc.kill()
                        proc.wait()
    finally:
        cgroup.remove()
        webhook.close()
        smtp.close()
    say(t0, "done")
    output = log.read_text()

    # Exactly one ticket and one resolve message per action.
    hooks = webhook.answered()
    assert [h["body"]["status"] for h in hooks] == ["firing", "resolved"], output
    assert all(h["headers"]["Authorization"] == f"Bearer {TOKEN}" for h in hooks)
    firing, resolve = (h["body"]["alerts"][0] for h in hooks)
    assert firing["labels"]["alertname"] == "e2e-slow" and firing["labels"]["target"] == "e2e"
    assert firing["labels"]["op"] in ("data-read", "data-write")
    assert resolve["startsAt"] == firing["startsAt"] and resolve["endsAt"] != firing["endsAt"]
    fired_value = hooks[0]["body"]["slowdown"]["value"]
    assert fired_value > 5.0
    mails = smtp.messages
    assert [m["message"]["Subject"].split("]")[0] for m in mails] == \
        ["[slowdown FIRING warning", "[slowdown RESOLVED warning"]
    assert all(m["tls"] and m["login"] == "slowdown" for m in mails)
    assert [c["argv"][0] for c in calls(tickets)] == ["firing", "resolved"]
    with Store(database, readonly=True) as store:
        (st,) = load_states(store.conn).values()
        log_rows = store.conn.execute(
            "SELECT event, action, ok FROM alert_log ORDER BY id").fetchall()
    assert st.state in ("ok", "resolved") and st.fired_at and st.resolved_at
    assert sorted(log_rows) == sorted([(e, a, 1) for e in ("firing", "resolved") for a in (
        f"webhook http://127.0.0.1:{webhook.server.server_address[1]}",
        "email storage@example.org", f"command {sys.executable}")])
    summary = {
        "fired_after_throttle_s": round(fired - throttled),
        "resolved_after_release_s": round(resolved - released),
        "fired_value": fired_value, "slowdown_while_slow": slow_value,
        "fired_at": st.fired_at, "resolved_at": st.resolved_at,
        "peak": st.details.get("peak"), "incident": hooks[0]["body"]["slowdown"]["incident"],
        "run_minutes": round((time.time() - t0) / 60, 1),
    }
    print("SUMMARY " + json.dumps(summary), flush=True)
    print(listing, flush=True)
    print("\n".join(line for line in output.splitlines() if "alert" in line), flush=True)


def sleep_until(moment: float) -> None:
    time.sleep(max(0.0, moment - time.time()))


def has_alerts_command(config: Path) -> bool:
    """Whether `slowdown alerts` is registered yet (the lead wires it)."""
    done = subprocess.run([sys.executable, "-m", "slowdown.analysis.cli", "--config",
                           str(config), "alerts", "--help"], capture_output=True, text=True)
    return done.returncode == 0


def rule_text(webhook: WebhookReceiver, smtp: SmtpReceiver, credentials: Path, tickets: Path,
              directory: Path) -> str:
    program = recorder_program(directory)
    actions = [
        f'{{ type = "webhook", url = "{webhook.url}", token_env = "E2E_WEBHOOK_TOKEN" }}',
        f'{{ type = "email", to = "storage@example.org", smtp_host = "localhost", '
        f'smtp_port = {smtp.port}, starttls = true, credentials_file = "{credentials}" }}',
        f'{{ type = "command", argv = ["{sys.executable}", "{program}", "{tickets}", '
        '"{state}", "{target}", "{op}", "{value}"] }',
    ]
    return "\n".join([
        "[[alert]]", 'name = "e2e-slow"', 'target = "e2e"', 'op = ["data-read", "data-write"]',
        'statistic = "median"', 'window = "1m"', "above = 5.0", 'for = "1m"',
        'clear_for = "2m"', "action = [", *(f"    {a}," for a in actions), "]", ""])
