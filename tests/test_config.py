"""The configuration file: search order, defaults, validation with key and line, check-config."""

from __future__ import annotations

import socket
from pathlib import Path

import pytest

from slowdown.analysis.config import (
    ActionConfig,
    AlertRule,
    BaselineConfig,
    Config,
    ConfigError,
    DataSize,
    MetricsConfig,
    Target,
    default_config,
    find_config_path,
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
from slowdown.analysis.config.model import ACTION_TYPES, ALERT_KINDS, KeepConfig
from tests.kit.configkit import (
    MIB,
    MINIMAL,
    REFERENCE,
    errors_of,
    write,
)

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
