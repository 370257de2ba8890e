"""Configuration files for tests: texts with known mistakes, each marked on the line the error
must name; the reference file; writing a file and reading its errors; the fixture ``environ``
(a home of its own; registered in tests/conftest.py)."""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest

from slowdown.analysis.config import (
    ConfigError,
    load_config,
)

MINIMAL = """
[[target]]
name = "home"
path = "/srv/home"
"""


def marked_line(text: str) -> int:
    """The line carrying the ``# <-`` marker: where the test expects the error."""
    lines = textwrap.dedent(text).lstrip("\n").splitlines()
    return next(number for number, line in enumerate(lines, 1) if "# <-" in line)


def above_target(line: str) -> str:
    """A top-level ``line``, marked as the mistake, above one valid [[target]]."""
    return f"{line}  # <-\n{MINIMAL}"


def in_target(line: str) -> str:
    """One valid [[target]] with ``line``, marked as the mistake, added to it."""
    return f"{MINIMAL}{line}  # <-\n"


# Each case: the text, the key the one error names and a fragment of its message. The line
# marked ``# <-`` is where the error must be reported.
MISTAKES = {
    "unknown top-level key": ('intervall = "2s"  # <-' + MINIMAL, "intervall",
                              "did you mean 'interval'"),
    "unknown key in a target": (in_target("pool_file = 100"), "target[1].pool_file",
                                "did you mean 'pool_files'"),
    "unknown key in a table": (
        MINIMAL
        + """
        [baseline]
        period = "month"
        expectd = "same"  # <-
        """,
        "baseline.expectd",
        "did you mean 'expected'",
    ),
    "unknown key without a close match": (
        MINIMAL + "[metrics]\nbanana = 1  # <-\n",
        "metrics.banana",
        "known keys: listen",
    ),
    "unknown key inside an inline action": (
        MINIMAL
        + """
        [[alert]]
        name = "a"
        statistic = "q95"
        window = "1m"
        above = 2
        action = { type = "command", argvv = ["/bin/true"], argv = ["/bin/true"] }  # <-
        """,
        "alert[1].action.argvv",
        "did you mean 'argv'",
    ),
    "string where an integer is needed": (in_target('pool_files = "100"'), "target[1].pool_files",
                                          "expected an integer, got a string"),
    "boolean where an integer is needed": (in_target("pool_dirs = true"), "target[1].pool_dirs",
                                           "got a boolean"),
    "sync not a boolean": (in_target('sync = "yes"'), "target[1].sync",
                           "expected true or false, got a string"),
    "sync as a number": (in_target("sync = 1"), "target[1].sync", "expected true or false"),
    "negative size": (in_target('data_size = "-1GiB"'), "target[1].data_size",
                      "expected a size like 256GiB or a multiple of RAM like 4xRAM"),
    "bad object size": (in_target('object_size = "3.5B"'), "target[1].object_size",
                        "whole number of bytes"),
    "pool not divisible into directories": (MINIMAL + "pool_files = 1001  # <-\npool_dirs = 10\n",
                                            "target[1].pool_files", "multiple of pool_dirs"),
    "interval zero": (above_target('interval = "0s"'), "interval", "longer than 0s"),
    "interval above a minute": (above_target('interval = "61s"'), "interval", "at most 1m"),
    "interval not a duration": (above_target('interval = "fast"'), "interval", "got 'fast'"),
    "unknown statistic": (above_target('statistics = ["median", "p95"]'), "statistics[2]",
                          "unknown statistic 'p95'"),
    "window not positive": (above_target('windows = ["1m", "0s"]'), "windows[2]", "0s"),
    "window not whole minutes": (above_target('windows = ["90s"]'), "windows[1]", "minutes"),
    "windows not an array": (above_target('windows = "1m"'), "windows", "expected an array"),
    "windows over several lines": (
        'windows = [  # <-\n  "1m",\n  "-10m",\n]\n' + MINIMAL,
        "windows[2]",
        "negative",
    ),
    "retention too short": (above_target('retention = "10m"'), "retention", "at least 1h"),
    "histogram scale out of range": (above_target("histogram_scale = 9"), "histogram_scale",
                                     "at most 8"),
    "host with a slash": (above_target('host = "a/b"'), "host", "expected a name"),
    "target name not unique": (
        MINIMAL
        + """
        [[target]]
        name = "home"  # <-
        path = "/srv/other"
        """,
        "target[2].name",
        "already the name of target[1]",
    ),
    "target name with spaces": ('[[target]]\nname = "my home"  # <-\npath = "/srv/home"\n',
                                "target[1].name", "expected a name"),
    "target path relative": ('[[target]]\nname = "home"\npath = "srv/home"  # <-\n',
                             "target[1].path", "absolute path"),
    "two targets in one directory": (
        MINIMAL
        + """
        [[target]]
        name = "other"
        path = "/srv/home/"  # <-
        """,
        "target[2].path",
        "same directory as target[1]",
    ),
    "target without path": (
        MINIMAL
        + """
        [[target]]  # <-
        name = "work"
        """,
        "target[2].path",
        "missing",
    ),
    "single table instead of array of tables": (
        '[target]  # <-\nname = "home"\npath = "/srv/home"\n', "target", "two brackets"
    ),
    "expected not same or median": (
        MINIMAL + '[baseline]\nexpected = "mean"  # <-\n',
        "baseline.expected",
        "expected one of 'same', 'median'",
    ),
    "period not month": (
        MINIMAL + '[baseline]\nperiod = "week"  # <-\n',
        "baseline.period",
        "'month'",
    ),
    "dotted key": (above_target('baseline.expected = "q95"'), "baseline.expected",
                   "expected one of"),
    "quoted key": (in_target('"pool files" = 10'), 'target[1]."pool files"', "unknown key"),
}


# Each case: an address [metrics] listens on and a fragment of the error at metrics.listen.
LISTEN_MISTAKES = {
    "listen without port": ("localhost", "host:port"),
    "listen port out of range": ("127.0.0.1:70000", "1..65535"),
    "listen on a malformed address": ("127.0.0.256:9877", "not an IPv4 address"),
    "listen port zero": ("127.0.0.1:0", "1..65535"),
    "listen on no named address": (":9877", "explicitly"),
}


ALERT = """
[[target]]
name = "home"
path = "/srv/home"

[[target]]
name = "work"
path = "/srv/work"

[[alert]]
name = "slow"
"""


# The body of the [[alert]] most cases start from, and its usual action.
SLOW = 'statistic = "q95"\nwindow = "10m"\nabove = 10\n'


COMMAND = 'action = { type = "command", argv = ["/bin/true"] }\n'


ALERT_MISTAKES = {
    "critical below above": (SLOW + "critical = 5  # <-\n" + COMMAND, "alert[1].critical",
                             "must be >= above"),
    "alert target names no target": ('target = "wrok"  # <-\n' + SLOW + COMMAND,
                                     "alert[1].target", "did you mean 'work'"),
    "alert target list entry names no target": (
        'target = ["home", "scratch*"]  # <-\n' + SLOW + COMMAND,
        "alert[1].target[2]",
        "'scratch*' matches no [[target]]",
    ),
    "op glob matches no op": ('op = "meta-*"  # <-\n' + SLOW + COMMAND, "alert[1].op",
                              "matches no op"),
    "unknown statistic in an alert": (
        'statistic = "q95.55"  # <-\nwindow = "10m"\nabove = 10\n' + COMMAND,
        "alert[1].statistic",
        "unknown statistic",
    ),
    "slowdown alert without statistic": ('window = "10m"\nabove = 10\n' + COMMAND,
                                         "alert[1].statistic", "missing"),
    "alert without a level": ('statistic = "q95"\nwindow = "10m"\n' + COMMAND, "alert[1].above",
                              "above, critical or both"),
    "slowdown threshold not a number": (
        'statistic = "q95"\nwindow = "10m"\nabove = "10x"  # <-\n' + COMMAND,
        "alert[1].above",
        "expected a number",
    ),
    "error rate above one": ('kind = "error_rate"\nwindow = "10m"\nabove = 1.5  # <-\n' + COMMAND,
                             "alert[1].above", "fraction"),
    "stuck threshold not a duration": (
        'kind = "stuck"\nwindow = "1m"\nabove = "soon"  # <-\n' + COMMAND,
        "alert[1].above",
        "expected a duration",
    ),
    "unknown kind": ('kind = "latency"  # <-\nwindow = "1m"\nabove = 1\n' + COMMAND,
                     "alert[1].kind", "'slowdown', 'error_rate', 'stuck'"),
    "for not a duration": (SLOW + 'for = "a while"  # <-\n' + COMMAND, "alert[1].for",
                           "expected a duration"),
    "missing action": (SLOW, "alert[1].action", "missing"),
    "unknown action type": (SLOW + 'action = { type = "pager", number = "555" }  # <-\n',
                            "alert[1].action.type", "got 'pager'"),
    "command argv empty": (SLOW + 'action = { type = "command", argv = [] }  # <-\n',
                           "alert[1].action.argv", "empty"),
    "command argv a string": (
        SLOW + 'action = { type = "command", argv = "/bin/open-ticket {target}" }  # <-\n',
        "alert[1].action.argv",
        "without a shell",
    ),
    "command argv not all strings, in a multi-line array": (
        SLOW
        + "action = [  # <-\n"
        + '    { type = "command", argv = ["/bin/true"] },\n'
        + '    { type = "command", argv = ["/bin/x", 1] },\n]\n',
        "alert[1].action[2].argv",
        "array of strings",
    ),
    "webhook url not http": (
        SLOW
        + textwrap.dedent("""
            [[alert.action]]
            type = "command"
            argv = ["/bin/true"]

            [[alert.action]]
            type = "webhook"
            url = "ftp://example.org/hook"  # <-
            """),
        "alert[1].action[2].url",
        "http:// or https://",
    ),
    "webhook with two token sources": (
        SLOW
        + textwrap.dedent("""\
            [alert.action]
            type = "webhook"
            url = "https://example.org/hook"
            token_file = "/etc/token"
            token_env = "TOKEN"  # <-
            """),
        "alert[1].action.token_env",
        "not both",
    ),
    "email with a bad address": (
        SLOW + 'action = { type = "email", to = ["ops@example.org", "nobody"] }  # <-\n',
        "alert[1].action.to",
        "e-mail address",
    ),
    "email port a string": (
        SLOW + 'action = { type = "email", to = "ops@example.org", smtp_port = "25" }  # <-\n',
        "alert[1].action.smtp_port",
        "expected an integer",
    ),
    "key of another action type": (
        SLOW + 'action = { type = "command", argv = ["/bin/true"], url = "https://x.org" }  # <-\n',
        "alert[1].action.url",
        "known keys: type, argv, timeout",
    ),
    "multi-line strings do not confuse lines": (
        '''
        statistic = "q95"
        above = 10
        action = { type = "command", argv = ["/bin/x", """
        [[target]]
        window = "1m"
        """] }
        window = "90s"  # <-
        ''',
        "alert[1].window",
        "whole minutes",
    ),
}


def _cases():
    for name, (text, key, fragment) in MISTAKES.items():
        yield pytest.param(textwrap.dedent(text).lstrip("\n"), key, fragment, id=name)
    for name, (address, fragment) in LISTEN_MISTAKES.items():
        text = f'{MINIMAL}[metrics]\nlisten = "{address}"  # <-\n'
        yield pytest.param(text.lstrip("\n"), "metrics.listen", fragment, id=name)
    for name, (text, key, fragment) in ALERT_MISTAKES.items():
        full = ALERT.lstrip("\n") + textwrap.dedent(text).lstrip("\n")
        yield pytest.param(full, key, fragment, id=name)


REPO = Path(__file__).resolve().parents[2]


REFERENCE = REPO / "config" / "slowdown.toml"


MIB = 1 << 20


@pytest.fixture
def environ(tmp_path: Path) -> dict[str, str]:
    home = tmp_path / "home"
    home.mkdir()
    return {"HOME": str(home)}


def write(directory: Path, text: str, name: str = "slowdown.toml") -> Path:
    path = directory / name
    path.write_text(textwrap.dedent(text).lstrip("\n"))
    return path


def errors_of(path: Path, environ: dict[str, str]) -> list[ConfigError]:
    with pytest.raises(ConfigError) as info:
        load_config(path, environ)
    return info.value.errors
