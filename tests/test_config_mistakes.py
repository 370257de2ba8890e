"""The configuration file's mistakes, each named by its key and line and collected in file
order; and the pieces a file is read with (the locator of keys, errors' rendering, statistics,
data sizes, alert rules' matching)."""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest

from slowdown.analysis.config import (
    ConfigError,
    ConfigErrors,
    DataSize,
    format_key,
    load_config,
    loads,
)
from slowdown.analysis.config.locator import _Locator
from slowdown.analysis.words import OPS, STATISTICS, is_statistic, statistic_quantile
from tests.kit.configkit import (
    ALERT,
    MIB,
    MINIMAL,
    _cases,
    errors_of,
    marked_line,
    write,
)

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
