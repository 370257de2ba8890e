"""Fleets for ``[baseline] expected = "weekly"``: a nightly job (3x from 02:00 to 04:00 UTC
every night) and one real slowdown (5x from 14:00 for an hour on day 28), written through
the store by testdata/trendkit.py as two hosts' files and as one file holding both; the
baselines made by the service's maintenance (``baseline.maintain``) at the end of day 28."""

from __future__ import annotations

import datetime as dt
import json
from pathlib import Path

from slowdown.analysis.cli.main import main
from slowdown.analysis.stats import baseline
from slowdown.analysis.store import Store
from testdata import trendkit
from tests.kit.cli_runner import runner

DAY = 86400
NIGHTLY = (2.0, 4.0, 3.0)  # from, to (UTC hours), factor
SPIKE_DAY = 28
BASELINE_AT = trendkit.START + SPIKE_DAY * DAY  # Tuesday 2026-09-29 00:00 UTC


def fleet(days: int = SPIKE_DAY + 1, spike: bool = True) -> trendkit.Fleet:
    effects = trendkit.Effects(nightly=NIGHTLY,
                               spike=(SPIKE_DAY + 14 / 24, 1.0, 5.0) if spike else None)
    return trendkit.Fleet((trendkit.Target("work", effects),), hosts=2, days=days,
                          ops=("md-stat",), host_spread=0.1, per_hour=120)


def write(directory: Path, kit: trendkit.Fleet) -> tuple[list[Path], Path]:
    """Each host's file in ``directory/nodes`` and one file of both: ``directory/both.db``."""
    nodes = trendkit.write_fleet(directory / "nodes", kit)
    both = directory / "both.db"
    for number, host in enumerate(kit.host_names()):
        trendkit.write_host(both, kit, host, number)  # the same seeds: the same records
    return nodes, both


def maintain(paths, now: float, weekly: str | None = "UTC") -> list:
    made = []
    for path in paths:
        with Store(path) as store:
            made += baseline.maintain(store, now, 86400.0, (), dt.timezone.utc, weekly)
    return made


def config(directory: Path, expected: str, name: str | None = None) -> Path:
    path = directory / (name or f"{expected}.toml")
    path.write_text(f'database = "{directory}/none.db"\n[[target]]\nname = "work"\n'
                    f'path = "{directory}"\n[baseline]\nexpected = "{expected}"\n'
                    'zone = "UTC"\n')
    return path


def run(*args: str, code: int = 0) -> str:
    result = runner().invoke(main, list(args), catch_exceptions=False)
    assert result.exit_code == code, (result.output, result.stderr)
    return result.stdout if not code else result.stderr


def slowdown_json(cfg: Path, db: str, at: float) -> dict:
    return json.loads(run("--config", str(cfg), "--db", db, "--at", f"@{int(at)}", "--json"))


def op_of(doc: dict, window: float) -> dict:
    """The one op of the one target in the window of ``window`` seconds."""
    [target] = doc["targets"]
    [w] = [w for w in target["windows"] if w["window"] == window]
    [op] = w["ops"]
    return op
