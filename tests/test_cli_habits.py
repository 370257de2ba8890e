"""Habits of the ecosystem, through the real command lines: `--version`, `--config` before or
after the command, durations as people write them, percentages with or without `%`."""

from __future__ import annotations

import json
import re
import subprocess
import sys

import pytest
from click.testing import CliRunner

from slowdown.analysis.cli.main import main
from slowdown.probe.command.main import main as probe_main
from testdata.datakit import fill, lognormal, utc
from tests.kit.servicekit import TargetSpec, write_config

NOV = utc(2026, 11, 1)
AT = "2026-11-01T02:00:00Z"  # two hours of data from NOV


def run(*args: str, command=main) -> tuple[int, str]:
    result = CliRunner().invoke(command, list(args), catch_exceptions=False)
    return result.exit_code, result.output


@pytest.fixture
def configured(tmp_path):
    """A configuration whose database holds two hours of numbers; returns its path."""
    database = tmp_path / "n1.db"
    fill(database, NOV, 120, lognormal(0.001, 0.2), targets=("work",), per_minute=6)
    return write_config(tmp_path / "slowdown.toml", database,
                        [TargetSpec("work", tmp_path / "work")])


@pytest.fixture
def other(tmp_path):
    """A second, valid configuration naming another (absent) database."""
    return write_config(tmp_path / "other.toml", tmp_path / "other.db",
                        [TargetSpec("work", tmp_path / "work")])


# -- --version ---------------------------------------------------------------------------------

def test_both_commands_say_their_version_the_same_way():
    said = {}
    for name, module in (("slowdown", "slowdown.analysis.cli"),
                         ("slowdown-probe", "slowdown.probe.command.main")):
        done = subprocess.run([sys.executable, "-m", module, "--version"], capture_output=True,
                              text=True, timeout=60)
        assert done.returncode == 0, done.stderr
        match = re.fullmatch(rf"{name}, version (\S+)\n", done.stdout)
        assert match, done.stdout
        said[name] = match.group(1)
    assert said["slowdown"] == said["slowdown-probe"]
    assert "--version" in run("--help")[1]


# -- --config before or after the command ------------------------------------------------------

# Each read command, with what it needs to show the configured database's numbers.
READ_COMMANDS = [
    ("check", "--at", AT, "-w", "100", "-c", "1000"),
    ("stats", "--at", AT, "--since", "1h"),
    ("history", "--at", AT, "--since", "10m"),
    ("trends", "--at", AT, "--since", "1h"),
    ("watch", "--at", AT, "--count", "1"),
    ("alerts",),
    ("rebaseline", "--reason", "test", "--from", "2026-11-01T00:00:00Z",
     "--to", "2026-11-01T01:00:00Z"),
]


@pytest.mark.parametrize("args", READ_COMMANDS, ids=[a[0] for a in READ_COMMANDS])
def test_config_after_the_command_is_the_config_before_it(configured, args):
    before = run("--config", str(configured), *args)
    after = run(*args, "--config", str(configured))
    assert before[0] == after[0] == 0, (before, after)
    if args[0] not in ("watch", "rebaseline"):  # (a clock in the output; a new row each time)
        assert before == after
    both = run("--config", str(configured), *args, "--config", str(configured))
    assert both[0] == 0, both


def test_report_takes_config_after_the_command(configured, tmp_path):
    code, out = run("report", "--config", str(configured), "--at", AT, "--since", "1h",
                    "-o", str(tmp_path / "r.html"))
    assert code == 0, out
    assert (tmp_path / "r.html").stat().st_size > 0


@pytest.mark.parametrize("args", READ_COMMANDS, ids=[a[0] for a in READ_COMMANDS])
def test_two_different_configs_are_a_usage_error_naming_config(configured, other, args):
    code, out = run("--config", str(configured), *args, "--config", str(other))
    assert code == (3 if args[0] == "check" else 2), out  # check: UNKNOWN, as plugins must
    assert "--config names two files" in out and str(other) in out


@pytest.mark.parametrize("args", [("-w", "abc"), ("--bogus",), ("--window", "10x")])
def test_check_answers_usage_errors_unknown(configured, args):
    """A monitoring system reads 2 as CRITICAL: check's usage errors are UNKNOWN (3)."""
    code, out = run("--config", str(configured), "check", *args)
    assert code == 3 and out.startswith("SLOWDOWN UNKNOWN - "), out


def test_import_fio_reads_no_configuration_so_takes_no_config():
    code, out = run("import-fio", "--help")
    assert code == 0 and "--config" not in out


def test_probe_commands_take_config_after_the_command(tmp_path, configured, other):
    code, out = run("check-config", "--config", str(configured), command=probe_main)
    assert code == 0 and f"configuration  {configured}" in out, out
    code, out = run("--config", str(configured), "check-config", "--config", str(configured),
                    command=probe_main)
    assert code == 0, out
    (tmp_path / "work").mkdir()
    code, out = run("prepare", "--config", str(configured), "--no-progress", command=probe_main)
    assert code == 0 and "work: created" in out, out
    code, out = run("cleanup", "--config", str(configured), "-y", command=probe_main)
    assert code == 0 and "work: removed" in out, out
    result = CliRunner().invoke(probe_main, ["systemd-dropin", "--config", str(configured)])
    assert str(configured) in result.output  # made from it (under /tmp: refused, naming it)
    done = subprocess.run([sys.executable, "-m", "slowdown.probe.command.main", "run", "--config",
                           str(other), "--duration", "1s"], capture_output=True, text=True,
                          timeout=60)  # the service: never in the test process
    assert done.returncode == 0, done.stderr
    assert (tmp_path / "other.db").exists()  # the file after `run` was run


@pytest.mark.parametrize("command", ["check-config", "run", "prepare", "cleanup",
                                     "systemd-dropin"])
def test_probe_two_different_configs_are_a_usage_error(tmp_path, configured, other, command):
    code, out = run("--config", str(configured), command, "--config", str(other),
                    command=probe_main)
    assert code == 2 and "--config names two files" in out, out
    assert not (tmp_path / "other.db").exists()  # nothing started


# -- durations as people write them, through the commands --------------------------------------

@pytest.mark.parametrize(("written", "usual"), [
    ("60min", "1h"), ("60mins", "1h"), ("1 hour", "1h"), ("3600sec", "1h"), ("0.5h 30m", "1h"),
    ("1h 0m", "1h"),
])
def test_stats_since_in_any_spelling(configured, written, usual):
    assert run("--config", str(configured), "stats", "--at", AT, "--since", written,
               "--json") == run("--config", str(configured), "stats", "--at", AT,
                                "--since", usual, "--json")


def test_history_every_and_at_in_long_spellings(configured):
    short = run("--config", str(configured), "history", "--at", AT, "--since", "1h",
                "--every", "10m")
    long = run("--config", str(configured), "history", "--at", AT, "--since", "1 hour",
               "--every", "10mins")
    assert short[0] == 0 and short == long
    code, out = run("--config", str(configured), "--at", "2026-11-01T02:30:00Z", "stats",
                    "--since", "2h30m")
    assert code == 0, out
    code, out = run("--config", str(configured), "watch", "--interval", "10 fortnights")
    assert code == 2 and "--interval" in out
    assert "expected a duration like 1s, 10m, 1h, 30d; got '10 fortnights'" in out


# -- percentages: 10, 10% and 0.1 ---------------------------------------------------------------

@pytest.mark.parametrize("written", ["10", "10%", "0.1", " 10 "])
def test_accuracy_ten_percent_however_written(configured, written):
    code, out = run("--config", str(configured), "--at", AT, "--accuracy", written, "--json")
    assert code == 0, out
    assert json.loads(out)["accuracy"] == pytest.approx(0.1)


@pytest.mark.parametrize("written", ["100", "200%", "0", "-5", "abc", "nan", "inf"])
def test_accuracy_out_of_range_is_a_usage_error(configured, written):
    code, out = run("--config", str(configured), "--at", AT, "--accuracy", written)
    assert code == 2 and "--accuracy" in out, out


@pytest.mark.parametrize("written", ["95", "95%", "0.95"])
def test_confidence_shares_the_rule(configured, written):
    code, out = run("--config", str(configured), "stats", "--at", AT, "--since", "1h",
                    "--provision", "1000", "--confidence", written, "--trials", "100", "--json")
    assert code == 0, out
    assert json.loads(out)["provision"]["confidence"] == pytest.approx(0.95)


# Where --config stands twice: before the command, after it, on both sides.
TWICE = {"before": ("ab", ""), "after": ("", "ab"), "both sides": ("a", "b")}


def _twice(where: str, a, b, command: tuple[str, ...]) -> list[str]:
    """``command`` with ``--config a`` and ``--config b`` where ``where`` says."""
    named = {"a": str(a), "b": str(b)}
    before, after = ([arg for c in side for arg in ("--config", named[c])]
                     for side in TWICE[where])
    return [*before, command[0], *after, *command[1:]]


@pytest.mark.parametrize("where", TWICE)
@pytest.mark.parametrize("args", READ_COMMANDS, ids=[a[0] for a in READ_COMMANDS])
def test_config_naming_two_files_is_refused_wherever_it_stands(configured, other, args, where):
    command = _twice(where, configured, other, args)
    code, out = run(*command)
    assert code == (3 if args[0] == "check" else 2), (command, out)
    assert "--config names two files: " in out and str(other) in out, (command, out)
    if args[0] == "check":
        assert out.startswith("SLOWDOWN UNKNOWN - ") and len(out.splitlines()) == 1, out


@pytest.mark.parametrize("args", READ_COMMANDS, ids=[a[0] for a in READ_COMMANDS])
def test_the_same_config_twice_before_the_command_is_one(configured, args):
    code, out = run("--config", str(configured), "--config", str(configured), *args)
    assert code == 0, out


@pytest.mark.parametrize("where", TWICE)
@pytest.mark.parametrize("command", ["check-config", "run", "prepare", "cleanup",
                                     "systemd-dropin"])
def test_probe_config_naming_two_files_is_refused_wherever_it_stands(tmp_path, configured,
                                                                    other, command, where):
    args = _twice(where, configured, other, (command,))
    code, out = run(*args, command=probe_main)
    assert code == 2 and "--config names two files: " in out, (args, out)
    assert not (tmp_path / "other.db").exists()  # nothing started
