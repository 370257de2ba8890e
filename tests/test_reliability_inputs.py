"""Damaged inputs: each gets a clear error naming the file (line, key or flag), a non-zero
exit, no traceback, and nothing is overwritten.

- databases: truncated, pages overwritten with garbage, a garbage header, a newer schema, a
  SQLite file of something else; through the read commands, rebaseline, import-fio into it,
  and the service (which refuses to start on a file it cannot trust, and never writes into
  one): the file's bytes never change;
- configurations: every mistake of tests/test_config.py through every command that loads the
  file, and random damage to the reference configuration (hypothesis);
- command-line values and fio logs: random values for every option that takes one, and
  random damage to fio histogram and latency logs (hypothesis).
"""

from __future__ import annotations

import csv
import io
import os
import re
import sqlite3
import subprocess
import sys
import textwrap
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
from click.testing import CliRunner
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from slowdown.analysis.cli.import_fio import import_fio
from slowdown.analysis.cli.main import main as read_main
from slowdown.analysis.config import ConfigError, loads
from slowdown.analysis.store import schema
from slowdown.analysis.units import parse_duration
from slowdown.probe.command.main import main as probe_main
from testdata.datakit import fill, lognormal
from tests.kit.configkit import _cases, marked_line
from tests.kit.fiologs import write_hist, write_lat
from tests.kit.reliabilitykit import sha256
from tests.kit.servicekit import TargetSpec, write_config

# CI: 60 fixed examples each; SLOWDOWN_FUZZ_EXAMPLES=N explores N fresh ones (random seed).
EXAMPLES = int(os.environ.get("SLOWDOWN_FUZZ_EXAMPLES", "0"))
FUZZ = settings(max_examples=EXAMPLES or 60, deadline=None, derandomize=not EXAMPLES,
                suppress_health_check=[HealthCheck.function_scoped_fixture,
                                       HealthCheck.too_slow])
REFERENCE = Path(__file__).resolve().parents[1] / "config" / "slowdown.toml"


def runner() -> CliRunner:
    try:
        return CliRunner(mix_stderr=False)  # click < 8.2 mixes stderr into output by default
    except TypeError:
        return CliRunner()


def invoke(command, args, env=None):
    result = runner().invoke(command, [str(a) for a in args], env=env, catch_exceptions=True)
    if result.exception is not None and not isinstance(result.exception, SystemExit):
        raise AssertionError(f"{args}: uncaught {result.exception!r}") from result.exception
    return result


# -- damaged databases ------------------------------------------------------------------------

def _page_of(path: Path, table: str) -> int:
    conn = sqlite3.connect(path)
    try:
        return conn.execute("SELECT rootpage FROM sqlite_master WHERE name = ?",
                            (table,)).fetchone()[0]
    finally:
        conn.close()


def _damage(good: Path, kind: str, out: Path) -> Path:
    data = bytearray(good.read_bytes())
    if kind == "truncated":
        data = data[: len(data) // 3]
    elif kind == "garbage-pages":
        for table in ("minutes", "series"):
            page = _page_of(good, table)
            data[(page - 1) * 4096: page * 4096] = bytes([0xA5]) * 4096
    elif kind == "garbage-header":
        data[:100] = b"not a database, but it was one ".ljust(100, b"!")
    out.write_bytes(bytes(data))
    if kind == "newer-schema":
        conn = sqlite3.connect(out)
        conn.execute(f"PRAGMA user_version = {schema.VERSION + 1}")
        conn.commit()
        conn.close()
    elif kind == "foreign":
        out.unlink()
        conn = sqlite3.connect(out)
        conn.execute("CREATE TABLE invoices (id INTEGER PRIMARY KEY, total REAL)")
        conn.execute("INSERT INTO invoices (total) VALUES (12.5)")
        conn.commit()
        conn.close()
    return out


DAMAGE = ("truncated", "garbage-pages", "garbage-header", "newer-schema", "foreign")


@pytest.fixture(scope="module")
def good_database(tmp_path_factory) -> Path:
    path = tmp_path_factory.mktemp("good") / "good.db"
    now = int(time.time()) // 60 * 60
    fill(path, now - 3 * 3600, 180, lognormal(0.002), host="testhost", targets=("work",))
    assert _page_of(path, "minutes") > 1
    return path


def _cli(*args: str, env: dict | None = None) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", *args], capture_output=True, text=True,
                          timeout=60, env={**os.environ, **(env or {})})


@pytest.mark.timeout(240)
@pytest.mark.parametrize("kind", DAMAGE)
def test_a_damaged_database_is_named_and_never_changed(tmp_path, good_database, kind):
    db = _damage(good_database, kind, tmp_path / f"{kind}.db")
    before = sha256(db)
    reads = [[], ["stats", "--since", "1d"], ["history", "--since", "1d"],
             ["history", "--since", "1d", "--jobs", "3"], ["watch", "--count", "1"]]
    for args in reads:
        done = _cli("slowdown.analysis.cli", "--db", str(db), *args)
        assert done.returncode == 1, (args, done.returncode, done.stdout, done.stderr)
        assert "Traceback" not in done.stderr, (args, done.stderr)
        (line,) = done.stderr.strip().splitlines()
        assert line.startswith(f"Error: {db}: "), (args, line)
    done = _cli("slowdown.analysis.cli", "check", "--db", str(db))
    assert done.returncode == 3 and done.stdout.startswith(f"SLOWDOWN UNKNOWN - {db}: "), done
    done = _cli("slowdown.analysis.cli", "rebaseline", "--reason", "test", "--db", str(db))
    assert done.returncode != 0 and str(db) in done.stderr and "Traceback" not in done.stderr
    log = write_lat(tmp_path / "l_clat.1.log", [(1000, 2000, 0), (2000, 3000, 0)])
    done = _cli("slowdown.analysis.cli", "import-fio", "--into-db", "fio", "--db", str(db),
                "--start", "2026-01-01T00:00:00Z", str(log))
    assert done.returncode == 2 and str(db) in done.stderr and "Traceback" not in done.stderr
    assert sha256(db) == before
    # The service: refuses to start on a file it cannot open safely (exit 2); a file whose
    # damage shows only when written is never written (the minutes wait, the exit is 1).
    target = TargetSpec("t", tmp_path / "target", data_size="4MiB", pool_files=20, pool_dirs=2)
    target.path.mkdir()
    config = write_config(tmp_path / "slowdown.toml", db, [target])
    assert _cli("slowdown.probe.command.main", "--config", str(config), "prepare",
                "--no-progress").returncode == 0
    # No minute boundary inside the run: a flush before the first results holds only node
    # context, which lands in undamaged pages and is written (the only write this file sees).
    if time.time() % 60 > 50:
        time.sleep(61 - time.time() % 60)
    done = _cli("slowdown.probe.command.main", "--config", str(config), "run", "--duration", "3s")
    expected = 1 if kind == "garbage-pages" else 2
    assert done.returncode == expected, (done.returncode, done.stderr)
    assert str(db) in done.stderr and "Traceback" not in done.stderr, done.stderr
    assert sha256(db) == before


@pytest.mark.timeout(120)
def test_damaged_records_under_a_history_split_between_processes(tmp_path, good_database):
    """Garbage in the minute records of the last series written (the last leaves of the
    table in key order): one process or three processes, the same single error line, and
    only the series before it are written."""
    data = bytearray(good_database.read_bytes())
    with sqlite3.connect(f"file:{good_database}?mode=ro", uri=True) as conn:
        size = conn.execute("PRAGMA page_size").fetchone()[0]
        leaves = [page for (page,) in conn.execute(
            "SELECT pageno FROM dbstat WHERE name = 'minutes' AND pagetype = 'leaf' "
            "ORDER BY path")]
    for page in leaves[-5:]:  # (pages are numbered from 1)
        data[(page - 1) * size:page * size] = bytes([0xA5]) * size
    db = tmp_path / "late-garbage.db"
    db.write_bytes(bytes(data))
    results = []
    for jobs in ("1", "3"):
        done = _cli("slowdown.analysis.cli", "history", "--db", str(db), "--since", "1d",
                    "--jobs", jobs)
        assert done.returncode == 1 and "Traceback" not in done.stderr, done.stderr
        (line,) = done.stderr.strip().splitlines()
        assert line.startswith(f"Error: {db}: "), line
        results.append(line)
    assert results[0] == results[1]


# -- configurations ---------------------------------------------------------------------------

def _errors(stderr: str, path: Path) -> list[str]:
    """The error lines of a command, without what the service's log puts before them: the
    journal's priority, or (off the journal) the time and the level."""
    prefix = r"^(<\d>|\d{4}-\d\d-\d\dT\S+ [A-Z]+ )slowdown\.probe: "
    lines = [re.sub(prefix, "", e) for e in stderr.strip().splitlines()]
    assert lines and all(e.startswith(f"{path}:") for e in lines), lines
    return lines


@pytest.mark.slow  # 354 commands: a minute of CPU, once per CI run is enough
@pytest.mark.timeout(180)
def test_every_configuration_mistake_through_every_command(tmp_path):
    cases = [c.values for c in _cases()]
    assert len(cases) >= 40
    env = {"HOME": str(tmp_path / "home")}
    (tmp_path / "home").mkdir()
    commands = [(probe_main, ["check-config"]), (probe_main, ["prepare", "--no-progress"]),
                (probe_main, ["cleanup", "--yes"]), (read_main, []), (read_main, ["stats"])]
    work = []
    for n, (text, key, _) in enumerate(cases):
        (tmp_path / f"case{n}").mkdir()
        path = tmp_path / f"case{n}" / "slowdown.toml"
        path.write_text(textwrap.dedent(text).lstrip("\n"))
        work.append((path, key, marked_line(text) if "# <-" in text else None,
                     path.read_bytes()))

    def check(errors: list[str], path: Path, key: str, line: int | None, what) -> None:
        assert any(f": {key}: " in e for e in errors), (what, key, errors)
        if line is not None:
            assert any(e.startswith(f"{path}:{line}: ") for e in errors), (what, key, errors)

    for path, key, line, _ in work:
        for command, args in commands:
            result = invoke(command, ["--config", path, *args], env=env)
            assert result.exit_code == 2, (key, args, result.output)
            check(_errors(result.stderr, path), path, key, line, args)

    def service(path: Path) -> subprocess.CompletedProcess:  # a process of its own: it logs
        return _cli("slowdown.probe.command.main", "--config", str(path), "run", "--duration", "1s",
                    env=env)

    with ThreadPoolExecutor(2) as pool:
        for (path, key, line, before), done in zip(work, pool.map(service, [w[0] for w in work])):
            assert done.returncode == 2, (key, done.stderr)
            assert "Traceback" not in done.stderr
            check(_errors(done.stderr, path), path, key, line, "run")
            assert path.read_bytes() == before
            assert os.listdir(path.parent) == ["slowdown.toml"], key  # nothing created


_REFERENCE_LINES = REFERENCE.read_text().splitlines()


@st.composite
def damaged_config(draw) -> str:
    lines = list(_REFERENCE_LINES)
    for _ in range(draw(st.integers(1, 4))):
        i = draw(st.integers(0, len(lines) - 1))
        how = draw(st.sampled_from(["drop", "duplicate", "value", "garble", "swap"]))
        if how == "drop":
            del lines[i]
        elif how == "duplicate":
            lines.insert(i, lines[i])
        elif how == "value" and "=" in lines[i]:
            key = lines[i].split("=", 1)[0]
            value = draw(st.one_of(
                st.integers(-10**12, 10**12).map(str), st.floats(allow_nan=True).map(repr),
                st.text(max_size=12).map(lambda t: '"' + t.replace('"', "").replace("\\", "")
                                         + '"'),
                st.sampled_from(["true", "[]", "{}", '["1m", 3]', '"-1s"', '"4xRAM"', '""'])))
            lines[i] = f"{key}= {value}"
        elif how == "garble":
            text = lines[i]
            at = draw(st.integers(0, len(text)))
            lines[i] = text[:at] + draw(st.text(max_size=5)) + text[at + 1:]
        elif how == "swap" and i + 1 < len(lines):
            lines[i], lines[i + 1] = lines[i + 1], lines[i]
        if not lines:
            break
    return "\n".join(lines) + "\n"


@FUZZ
@given(text=damaged_config())
def test_a_damaged_configuration_loads_or_names_every_mistake(text):
    path = Path("/etc/slowdown/fuzzed.toml")
    try:
        loads(text, path, environ={"HOME": "/home/fuzz"})
    except ConfigError as error:
        for single in error.errors:
            assert str(single).startswith(f"{path}"), str(single)
            assert "\n" not in str(single).strip(), str(single)


# -- command-line values ----------------------------------------------------------------------

VALUE_OPTIONS = [
    (["--stat"], "--stat"), (["--at"], "--at"), (["--accuracy"], "--accuracy"),
    (["stats", "--since"], "--since"), (["stats", "--until"], "--until"),
    (["history", "--since"], "--since"), (["history", "--every"], "--every"),
    (["history", "--stat"], "--stat"),
    (["check", "--window"], "--window"), (["check", "--stale"], "--stale"),
    (["check", "-w"], "-w"), (["watch", "--count", "1", "--interval"], "--interval"),
]


@pytest.fixture(scope="module")
def fuzz_db(tmp_path_factory) -> Path:
    path = tmp_path_factory.mktemp("fuzz") / "fuzz.db"
    now = int(time.time()) // 60 * 60
    fill(path, now - 2 * 3600, 120, lognormal(0.002), host="testhost", targets=("work",))
    return path


@pytest.mark.timeout(300)
@FUZZ
@given(option=st.sampled_from(VALUE_OPTIONS),
       value=st.one_of(st.text(max_size=20), st.sampled_from(
           ["-1", "0", "1e400", "nan", "inf", "-5m", "0s", "99999999999d", "q101", "q0",
            "p95", "2026-13-45", "@-1", "@1e30", "1m", "", " ", "100%", "-3%", "1.5x"])))
def test_fuzzed_option_values_are_refused_or_taken_never_a_traceback(fuzz_db, option, value):
    args, flag = option
    assume(not value.startswith("-") or value in ("-1", "-5m", "-3%"))
    before = sha256(fuzz_db)
    if args[0] == "check":
        command = ["check", "--db", fuzz_db, *args[1:]]
    else:
        command = ["--db", fuzz_db, *args] if args[0].startswith("-") else \
            [args[0], "--db", fuzz_db, *args[1:]]
    result = invoke(read_main, [*command, value])
    if args[0] == "check":
        assert result.exit_code in (0, 1, 2, 3), result.output
    else:
        assert result.exit_code in (0, 1, 2), result.output
    if result.exit_code == 2 and args[0] != "check":
        assert flag in result.stderr or "Usage:" in result.stderr, (command, value, result.stderr)
    assert sha256(fuzz_db) == before


@pytest.mark.timeout(120)
@FUZZ
@given(value=st.text(max_size=20))
def test_fuzzed_run_durations_are_refused_before_anything_starts(tmp_path, value):
    try:
        parse_duration(value)
        assume(False)  # a valid duration would start the service
    except ValueError:
        pass
    assume(not value.startswith("-"))
    config = write_config(tmp_path / "slowdown.toml", tmp_path / "db" / "x.db",
                          [TargetSpec("t", tmp_path / "target")])
    result = invoke(probe_main, ["--config", config, "run", "--duration", value])
    assert result.exit_code == 2 and "--duration" in result.stderr, result.stderr
    assert not (tmp_path / "db").exists()


# -- fio logs ---------------------------------------------------------------------------------

def _hist_log(path: Path) -> Path:
    return write_hist(path, [(t, t // 1000 % 2, {400 + t // 1000: 3, 900: 1})
                             for t in range(1000, 6001, 1000)])


def _lat_log(path: Path) -> Path:
    return write_lat(path, [(t, 1000 + 37 * t, t % 2) for t in range(10, 400, 10)])


@st.composite
def damaged_bytes(draw, data: bytes) -> bytes:
    data = bytearray(data)
    for _ in range(draw(st.integers(1, 3))):
        how = draw(st.sampled_from(["truncate", "flip", "insert", "delete-line",
                                    "duplicate-line", "garble-line"]))
        lines = bytes(data).split(b"\n")
        i = draw(st.integers(0, max(0, len(lines) - 1)))
        if how == "truncate":
            data = data[: draw(st.integers(0, len(data)))]
        elif how == "flip" and data:
            at = draw(st.integers(0, len(data) - 1))
            data[at] = draw(st.integers(0, 255))
        elif how == "insert":
            at = draw(st.integers(0, len(data)))
            data[at:at] = draw(st.binary(max_size=8))
        elif how == "delete-line":
            del lines[i]
            data = bytearray(b"\n".join(lines))
        elif how == "duplicate-line":
            lines.insert(i, lines[i])
            data = bytearray(b"\n".join(lines))
        else:
            fields = lines[i].split(b",")
            j = draw(st.integers(0, max(0, len(fields) - 1)))
            fields[j] = draw(st.sampled_from([b"", b" -1", b" x", b" 1e9", b" 99999999999999999999",
                                              b" 3", b" 0.5"]))
            lines[i] = b",".join(fields)
            data = bytearray(b"\n".join(lines))
    return bytes(data)


@pytest.fixture(scope="module")
def fio_logs(tmp_path_factory) -> dict[str, bytes]:
    d = tmp_path_factory.mktemp("fio")
    return {"h_clat_hist.1.log": _hist_log(d / "h.log").read_bytes(),
            "l_clat.1.log": _lat_log(d / "l.log").read_bytes()}


@pytest.mark.timeout(300)
@FUZZ
@given(data=st.data(), name=st.sampled_from(["h_clat_hist.1.log", "l_clat.1.log"]))
def test_fuzzed_fio_logs_are_read_or_named_never_half_written(tmp_path_factory, fio_logs,
                                                              data, name):
    work = tmp_path_factory.mktemp("fuzzed")
    log = work / name
    log.write_bytes(data.draw(damaged_bytes(fio_logs[name])))
    out = work / "out.csv"
    result = invoke(import_fio, ["-i", "1000", "-o", out, log])
    assert result.exit_code in (0, 2), (result.exit_code, result.stderr)
    if result.exit_code == 2:
        message = result.stderr.strip().splitlines()[-1]
        assert message.startswith(f"Error: {log}") or "every file is empty" in message, message
        assert re.match(rf"Error: {re.escape(str(log))}(:\d+)?: ", message) or \
            "every file is empty" in message, message
        assert not out.exists()
    else:
        rows = list(csv.reader(io.StringIO(out.read_text())))
        assert rows and all(len(r) == len(rows[0]) for r in rows)
