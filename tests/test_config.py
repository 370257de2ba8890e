"""The configuration file: search order, defaults, validation with key and line, check-config."""

from __future__ import annotations

import socket
import textwrap
from pathlib import Path

import pytest

from slowdown.analysis.config import (
    ActionConfig,
    AlertRule,
    BaselineConfig,
    Config,
    ConfigError,
    ConfigErrors,
    DataSize,
    MetricsConfig,
    Target,
    default_config,
    find_config_path,
    format_key,
    load,
    load_config,
    loads,
)
from slowdown.analysis.config.alert_checks import _ACTION_KEYS, _ALERT_KEYS
from slowdown.analysis.config.checks import (
    _BASELINE_KEYS,
    _FLEET_KEYS,
    _METRICS_KEYS,
    _TARGET_KEYS,
    _TOP_KEYS,
)
from slowdown.analysis.config.locator import _Locator
from slowdown.analysis.config.model import ACTION_TYPES, ALERT_KINDS, KeepConfig
from slowdown.analysis.words import OPS, STATISTICS, is_statistic, statistic_quantile
from slowdown.probe.cli import main
from tests.kit.cli_runner import runner
from tests.kit.configkit import ALERT, MINIMAL, _cases, marked_line

REPO = Path(__file__).resolve().parent.parent
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


# --------------------------------------------------------------------------- valid files

FULL = """
host = "node7"
interval = "500ms"
database = "data/slowdown.db"
windows = ["1m", "5m", "1h"]
statistics = ["median", "q99.9", "mean"]
retention = "30d"
histogram_scale = 4

[baseline]
period = "month"
expected = "median"
provisional_after = "12h"

[[target]]
name = "home"
path = "~/probe"
data_size = "2.5xRAM"
pool_files = 2000
pool_dirs = 4
object_size = "4KiB"

[[target]]
name = "scratch"
path = "/scratch/probe"
data_size = "256GiB"
sync = true

[metrics]
listen = "[::1]:9100"

[[alert]]
name = "md-slow"
target = ["home", "scr*"]
op = "md-*"
statistic = "q95"
window = "10m"
above = 10
critical = 50.5
for = "15m"
clear_for = "30m"
repeat = "4h"
action = { type = "command", argv = ["/usr/local/bin/open-ticket", "{target}"] }

[[alert]]
name = "errors"
kind = "error_rate"
window = "1m"
above = 0.1

[[alert.action]]
type = "webhook"
url = "https://hooks.example.org/x"
token_env = "HOOK_TOKEN"

[[alert.action]]
type = "email"
to = "ops@example.org"
smtp_port = 587
starttls = true
credentials_file = "smtp.cred"
"""


def test_full_file_round_trip(tmp_path, environ):
    path = write(tmp_path, FULL)
    home = Path(environ["HOME"])
    expected = Config(
        source=path,
        host="node7",
        interval=0.5,
        database=tmp_path / "data" / "slowdown.db",
        windows=(60.0, 300.0, 3600.0),
        statistics=("median", "q99.9", "mean"),
        baseline=BaselineConfig(period="month", expected="median", provisional_after=43200.0),
        targets=(
            Target("home", home / "probe", DataSize(ram_factor=2.5), 2000, 4, 4096,
                   data_file="shared"),
            Target("scratch", Path("/scratch/probe"), DataSize(bytes=256 << 30),
                   data_file="shared", sync=True),
        ),
        metrics=MetricsConfig(listen_host="::1", listen_port=9100),
        alerts=(
            AlertRule(
                name="md-slow",
                targets=("home", "scr*"),
                ops=("md-*",),
                statistic="q95",
                window=600.0,
                above=10.0,
                critical=50.5,
                for_=900.0,
                clear_for=1800.0,
                repeat=14400.0,
                kind="slowdown",
                actions=(
                    ActionConfig(
                        "command",
                        {"argv": ("/usr/local/bin/open-ticket", "{target}"), "timeout": 30.0},
                    ),
                ),
            ),
            AlertRule(
                name="errors",
                targets=("*",),
                ops=("*",),
                statistic="median",
                window=60.0,
                above=0.1,
                critical=None,
                for_=0.0,
                clear_for=60.0,
                repeat=None,
                kind="error_rate",
                actions=(
                    ActionConfig(
                        "webhook",
                        {
                            "url": "https://hooks.example.org/x",
                            "token_file": None,
                            "token_env": "HOOK_TOKEN",
                            "timeout": 10.0,
                        },
                    ),
                    ActionConfig(
                        "email",
                        {
                            "to": ("ops@example.org",),
                            "from": "slowdown@node7",
                            "smtp_host": "localhost",
                            "smtp_port": 587,
                            "starttls": True,
                            "credentials_file": tmp_path / "smtp.cred",
                            "timeout": 30.0,
                        },
                    ),
                ),
            ),
        ),
        retention=30 * 86400.0,
        keep=KeepConfig(node=30 * 86400.0),  # node context follows `retention`
        scale=4,
    )
    assert load_config(path, environ) == expected


def test_defaults_of_a_minimal_file(tmp_path, environ):
    environ["XDG_DATA_HOME"] = str(tmp_path / "data")
    config = load_config(write(tmp_path, MINIMAL), environ)
    assert config.host == socket.gethostname()
    assert config.interval == 1.0
    assert config.database == tmp_path / "data" / "slowdown" / f"slowdown-{config.host}.db"
    assert config.windows == (60.0, 600.0, 3600.0)
    assert config.statistics == ("median", "q95")
    assert config.baseline == BaselineConfig("month", "same", 86400.0)
    assert config.metrics is None
    assert config.alerts == ()
    assert config.retention == 90 * 86400.0
    assert config.scale == 5
    (target,) = config.targets
    assert target == Target("home", Path("/srv/home"), DataSize(bytes=64 << 30), 100_000, 10,
                            3901, data_file="shared", write_size=256 * MIB)
    assert config.workspace(target) == Path("/srv/home/.slowdown") / config.host
    assert config.target("home") is target
    with pytest.raises(KeyError):
        config.target("work")


@pytest.mark.parametrize(
    ("line", "host", "port", "listen"),
    [
        pytest.param("", "127.0.0.1", 9877, "127.0.0.1:9877", id="loopback without listen"),
        pytest.param('listen = "0.0.0.0:9100"\n', "0.0.0.0", 9100, "0.0.0.0:9100",
                     id="any address when written"),
        pytest.param('listen = "[::1]:9877"\n', "::1", 9877, "[::1]:9877", id="IPv6 in brackets"),
    ],
)
def test_metrics_listen(environ, line, host, port, listen):
    config = loads(MINIMAL + "[metrics]\n" + line, environ=environ)
    assert config.metrics == MetricsConfig(host, port)
    assert config.metrics.listen == listen


def test_service_state_directory_is_the_default_database(environ):
    environ["STATE_DIRECTORY"] = "/var/lib/slowdown"
    assert loads(MINIMAL, environ=environ).database == Path("/var/lib/slowdown/slowdown.db")


def test_reference_config_passes(environ):
    config = load_config(REFERENCE, environ)
    assert [t.name for t in config.targets] == ["home", "work"]
    assert config.metrics == MetricsConfig("127.0.0.1", 9877)
    assert [a.actions[0].type for a in config.alerts] == ["command", "webhook"]
    assert config.database == Path("/var/lib/slowdown/slowdown.db")


def test_reference_config_documents_every_key():
    text = REFERENCE.read_text()
    keys = [
        *_TOP_KEYS,
        *_BASELINE_KEYS,
        *_TARGET_KEYS,
        *_METRICS_KEYS,
        *_FLEET_KEYS,
        *_ALERT_KEYS,
        *(key for keys in _ACTION_KEYS.values() for key in keys),
    ]
    missing = [key for key in keys if key not in text]
    assert missing == []
    for kind in (*ALERT_KINDS, *ACTION_TYPES):
        assert f'"{kind}"' in text


# --------------------------------------------------------------------------- defaults, search


def test_default_config_uses_xdg_data_home(tmp_path, environ):
    environ["XDG_DATA_HOME"] = str(tmp_path / "xdg")
    config = default_config(environ)
    base = tmp_path / "xdg" / "slowdown"
    assert config.source is None
    assert config.database == base / f"slowdown-{config.host}.db"  # one file per host
    (local,) = config.targets
    assert local == Target("local", base / "workspace", DataSize(bytes=64 * MIB), 1000, 10, 3901,
                           create_parents=True, data_file="own")
    assert config.workspace(local) == base / "workspace" / ".slowdown" / config.host
    assert config.metrics is None and config.alerts == ()


def test_default_config_falls_back_to_home(environ):
    base = Path(environ["HOME"]) / ".local" / "share" / "slowdown"
    name = f"slowdown-{default_config(environ).host}.db"
    assert default_config(environ).database == base / name
    environ["XDG_DATA_HOME"] = "relative/ignored"
    assert default_config(environ).database == base / name


def test_default_config_under_systemd(environ):
    environ["STATE_DIRECTORY"] = "/var/lib/slowdown:/var/lib/other"
    config = default_config(environ)
    assert config.database == Path("/var/lib/slowdown/slowdown.db")
    assert config.targets[0].path == Path("/var/lib/slowdown/workspace")


def test_search_order(tmp_path, environ):
    system = write(tmp_path, MINIMAL, "system.toml")
    user_dir = Path(environ["HOME"]) / ".config" / "slowdown"
    explicit = write(tmp_path, MINIMAL, "explicit.toml")
    from_env = write(tmp_path, MINIMAL, "env.toml")

    assert find_config_path(None, environ, system_path=tmp_path / "absent.toml") is None
    assert find_config_path(None, environ, system_path=system) == system
    user_dir.mkdir(parents=True)
    user = write(user_dir, MINIMAL)
    assert find_config_path(None, environ, system_path=system) == user
    environ["SLOWDOWN_CONFIG"] = str(from_env)
    assert find_config_path(None, environ, system_path=system) == from_env
    assert find_config_path(explicit, environ, system_path=system) == explicit
    assert find_config_path(str(explicit), environ, system_path=system) == explicit


def test_search_respects_xdg_config_home(tmp_path, environ):
    environ["XDG_CONFIG_HOME"] = str(tmp_path / "xdg")
    (tmp_path / "xdg" / "slowdown").mkdir(parents=True)
    user = write(tmp_path / "xdg" / "slowdown", MINIMAL)
    assert find_config_path(None, environ, system_path=tmp_path / "absent") == user


def test_explicit_or_env_path_must_exist(tmp_path, environ):
    with pytest.raises(ConfigError, match="not found") as info:
        find_config_path(tmp_path / "missing.toml", environ)
    assert info.value.path == tmp_path / "missing.toml"
    environ["SLOWDOWN_CONFIG"] = str(tmp_path / "gone.toml")
    with pytest.raises(ConfigError, match=r"gone\.toml: configuration file not found"):
        find_config_path(None, environ)
    with pytest.raises(ConfigError, match="is a directory"):
        find_config_path(tmp_path, environ)


def test_load_without_any_file_gives_defaults(tmp_path, environ):
    config = load(None, environ, system_path=tmp_path / "absent.toml")
    assert config == default_config(environ)


def test_load_finds_then_loads(tmp_path, environ):
    system = write(tmp_path, MINIMAL.replace('"home"', '"sys"'), "system.toml")
    config = load(None, environ, system_path=system)
    assert config.source == system
    assert config.targets[0].name == "sys"


def test_file_without_targets_is_an_error(tmp_path, environ):
    path = write(tmp_path, 'interval = "1s"\n')
    (error,) = errors_of(path, environ)
    assert "no [[target]] defined" in error.message
    assert str(error).startswith(f"{path}: ")


# --------------------------------------------------------------------------- mistakes


@pytest.mark.parametrize(("text", "key", "fragment"), list(_cases()))
def test_each_mistake_names_key_and_line(tmp_path, environ, text, key, fragment):
    path = write(tmp_path, text)
    errors = errors_of(path, environ)
    assert len(errors) == 1, [str(e) for e in errors]
    (error,) = errors
    assert error.key == key
    assert fragment in error.message
    assert error.path == path
    # Unmarked cases are missing keys: reported at the header of their [[alert]].
    expected = marked_line(text) if "# <-" in text else text.splitlines().index("[[alert]]") + 1
    assert error.line == expected
    assert str(error).startswith(f"{path}:{expected}: {key}: ")


def test_missing_key_points_at_its_table(tmp_path, environ):
    text = MINIMAL + '\n[[target]]\nname = "work"\n'
    (error,) = errors_of(write(tmp_path, text), environ)
    assert (error.key, error.line) == ("target[2].path", text.lstrip("\n").count("\n") - 1)


def test_several_errors_are_collected_in_file_order(tmp_path, environ):
    text = """
    interval = "0s"
    statistics = ["q101"]

    [[target]]
    name = "home"
    path = "relative"
    pool_dirs = -1

    [metrics]
    listen = "nowhere"
    """
    path = write(tmp_path, text)
    with pytest.raises(ConfigErrors) as info:
        load_config(path, environ)
    errors = info.value.errors
    assert [(e.line, e.key) for e in errors] == [
        (1, "interval"),
        (2, "statistics[1]"),
        (6, "target[1].path"),
        (7, "target[1].pool_dirs"),
        (10, "metrics.listen"),
    ]
    lines = str(info.value).splitlines()
    assert len(lines) == 5
    assert lines[0].startswith(f"{path}:1: interval: ")
    assert lines[4].startswith(f"{path}:10: metrics.listen: ")


@pytest.mark.parametrize(
    ("text", "line"),
    [
        pytest.param(MINIMAL.lstrip("\n") + "pool_files = 10 000\n", 4, id="in a line"),
        pytest.param('windows = ["1m",\n', 1, id="at end of document"),
    ],
)
def test_syntax_error_has_its_line(tmp_path, environ, text, line):
    path = write(tmp_path, text)
    (error,) = errors_of(path, environ)
    assert error.line == line
    assert error.message.startswith("TOML syntax error")
    assert str(error).startswith(f"{path}:{line}: TOML syntax error")


def test_unreadable_and_non_utf8_files(tmp_path, environ):
    path = tmp_path / "latin1.toml"
    path.write_bytes(b'interval = "1s"\n# caf\xe9\n')
    (error,) = errors_of(path, environ)
    assert (error.line, error.message) == (2, "not UTF-8 text")
    (error,) = errors_of(tmp_path / "absent.toml", environ)
    assert error.path == tmp_path / "absent.toml"


def test_relative_database_is_taken_from_the_file_directory(tmp_path, environ):
    (tmp_path / "etc").mkdir()
    path = write(tmp_path / "etc", 'database = "../db/slowdown.db"\n' + MINIMAL)
    assert load_config(path, environ).database == tmp_path / "etc" / ".." / "db" / "slowdown.db"


def test_home_is_expanded_in_paths(tmp_path, environ):
    config = loads('database = "~/x.db"\n' + MINIMAL.replace("/srv/home", "~/probe"),
                   environ=environ)
    assert config.database == Path(environ["HOME"]) / "x.db"
    assert config.targets[0].path == Path(environ["HOME"]) / "probe"


# --------------------------------------------------------------------------- pieces


def test_locator_tracks_tables_arrays_and_inline_values():
    text = textwrap.dedent(
        '''
        a = 1
        [t]
        "quoted key" = 2
        x.y = """
        [fake]
        z = 3
        """
        [[arr]]
        k = [
          { n = 1 },
        ]
        [[arr]]
        [[arr.sub]]
        m = 'it''s'
        [[arr.sub]]
        m = 4  # comment = 5
        '''
    ).lstrip("\n")
    locator = _Locator(text)
    assert locator.line_of(("a",)) == 1
    assert locator.line_of(("t", "quoted key")) == 3
    assert locator.line_of(("t", "x", "y")) == 4
    assert locator.line_of(("fake",)) is None
    assert locator.line_of(("arr", 1, "k", 1, "n")) == 9
    assert locator.line_of(("arr", 2)) == 12
    assert locator.line_of(("arr", 2, "sub", 1, "m")) == 14
    assert locator.line_of(("arr", 2, "sub", 2, "m")) == 16
    assert locator.line_of(("arr", 2, "sub", 2, "other")) == 15


def test_format_key():
    assert format_key(("target", 2, "data_size")) == "target[2].data_size"
    assert format_key(("alert", 1, "action", "argv")) == "alert[1].action.argv"
    assert format_key(("windows", 3)) == "windows[3]"
    assert format_key(("target", 1, "a b")) == 'target[1]."a b"'


def test_config_error_rendering():
    assert str(ConfigError("bad", path="f.toml", line=3, key="k")) == "f.toml:3: k: bad"
    assert str(ConfigError("bad", path="f.toml", key="k")) == "f.toml: k: bad"
    assert str(ConfigError("bad", path="f.toml")) == "f.toml: bad"
    assert str(ConfigError("bad", key="k")) == "k: bad"
    several = ConfigErrors([ConfigError("one", key="a"), ConfigError("two", key="b")])
    assert str(several) == "a: one\nb: two"
    assert isinstance(several, ConfigError)


@pytest.mark.parametrize(
    ("name", "quantile"),
    [
        ("median", 0.5),
        ("max", 1.0),
        ("mean", None),
        ("q90", 0.9),
        ("q95", 0.95),
        ("q99", 0.99),
        ("q5", 0.05),
        ("q99.9", 0.999),
    ],
)
def test_statistics(name, quantile):
    assert is_statistic(name)
    if quantile is None:
        assert statistic_quantile(name) is None
    else:
        assert statistic_quantile(name) == pytest.approx(quantile)


@pytest.mark.parametrize("name", ["q0", "q100", "q99.99", "p95", "q", "Median", "", "q9a", 95])
def test_not_statistics(name):
    assert not is_statistic(name)


def test_named_statistics_and_ops_are_exposed():
    assert all(is_statistic(name) for name in STATISTICS)
    assert OPS == ("data-read", "data-write", "md-stat", "md-read", "md-delete", "md-write")


def test_data_size_resolution():
    gib = 1 << 30
    assert DataSize(ram_factor=4.0).resolve(16 * gib) == 64 * gib
    assert DataSize(ram_factor=0.5).resolve(3 * MIB + 12345) == MIB
    assert DataSize(ram_factor=1.0).resolve(10 * MIB + 5) == 10 * MIB
    assert DataSize(ram_factor=1e-9).resolve(gib) == MIB
    assert DataSize(bytes=5 * MIB + 1).resolve() == 5 * MIB
    assert DataSize(ram_factor=1.0).resolve() >= MIB
    assert str(DataSize(ram_factor=4.0)) == "4xRAM"
    assert str(DataSize(bytes=256 * gib)) == "256GiB"
    assert DataSize.parse("4xRAM") == DataSize(ram_factor=4.0)
    assert DataSize.parse("0.5 x ram") == DataSize(ram_factor=0.5)
    assert DataSize.parse("1MiB") == DataSize(bytes=MIB)
    for bad in ("0xRAM", "1KiB", "lots"):
        with pytest.raises(ValueError):
            DataSize.parse(bad)
    with pytest.raises(ValueError):
        DataSize()
    with pytest.raises(ValueError):
        DataSize(bytes=MIB, ram_factor=1.0)


def test_alert_rule_matching(environ):
    config = loads(
        ALERT
        + 'target = "wo*"\nop = ["md-st*", "data-read"]\nstatistic = "q95"\nwindow = "1m"\n'
        + 'above = 3\naction = { type = "command", argv = ["/bin/true"] }\n',
        environ=environ,
    )
    (rule,) = config.alerts
    assert rule.matches("work", "md-stat")
    assert rule.matches("work", "data-read")
    assert not rule.matches("home", "md-stat")
    assert not rule.matches("work", "md-write")
    assert rule.actions[0].options["argv"] == ("/bin/true",)
    with pytest.raises(TypeError):
        rule.actions[0].options["argv"] = ()  # type: ignore[index]


# --------------------------------------------------------------------------- check-config


def test_check_config_accepts_the_reference(tmp_path):
    """The reference as it is, its work target under a /lustre/work that exists here."""
    (tmp_path / "lustre" / "work").mkdir(parents=True)
    copy = tmp_path / "slowdown.toml"
    copy.write_text(REFERENCE.read_text().replace('"/lustre/', f'"{tmp_path}/lustre/'))
    result = runner().invoke(main, ["--config", str(copy), "check-config"])
    assert result.exit_code == 0, result.output
    assert f"configuration  {copy}" in result.output
    assert "target work" in result.output
    assert f"{tmp_path}/lustre/work/slowdown-probe/.slowdown/" in result.output
    assert "alerts         2 (work-slow, any-stuck)" in result.output
    assert result.output.rstrip().endswith("configuration OK")


def test_check_config_lists_every_error(tmp_path):
    text = 'interval = "0s"\n' + MINIMAL.lstrip("\n") + 'data_size = "huge"\n'
    path = write(tmp_path, text)
    result = runner().invoke(main, ["--config", str(path), "check-config"])
    assert result.exit_code == 2
    assert result.stderr.splitlines() == [
        f"{path}:1: interval: must be longer than 0s; got '0s'",
        f"{path}:5: target[1].data_size: expected a size like 256GiB or a multiple of RAM "
        "like 4xRAM; got 'huge'",
    ]
    assert "configuration OK" not in result.stdout


@pytest.mark.parametrize("through", ["the environment", "an argument"])
def test_check_config_finds_the_file(tmp_path, through):
    path = write(tmp_path, MINIMAL)
    if through == "the environment":
        result = runner().invoke(main, ["check-config"], env={"SLOWDOWN_CONFIG": str(path)})
    else:
        result = runner().invoke(main, ["check-config", str(path)])
    assert result.exit_code == 0, result.output
    assert f"configuration  {path}" in result.output
    assert "target home" in result.output


def test_check_config_with_a_missing_file(tmp_path):
    result = runner().invoke(main, ["--config", str(tmp_path / "nope.toml"), "check-config"])
    assert result.exit_code == 2
    assert (
        result.stderr.strip()
        == f"{tmp_path / 'nope.toml'}: configuration file not found (--config)"
    )


def test_version_option():
    result = runner().invoke(main, ["--version"])
    assert result.exit_code == 0
    assert result.output.startswith("slowdown-probe, version ")
