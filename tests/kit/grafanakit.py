"""The project's Grafana dashboards read as Grafana would: their panels and queries, variables
interpolated, the SQLite plugin's macros, and the node dashboard run on a database."""

from __future__ import annotations

import json
import math
import re
import sqlite3
from collections.abc import Iterator
from pathlib import Path
from urllib.parse import parse_qsl

ROOT = Path(__file__).resolve().parents[2]


GRAFANA = ROOT / "grafana"


DASHBOARDS = {p.stem: json.loads(p.read_text()) for p in sorted(GRAFANA.glob("dashboards/*.json"))}


NODE = DASHBOARDS["slowdown-node"]


FLEET = DASHBOARDS["slowdown-fleet"]


VARIABLE = re.compile(r"\$(\w+)|\$\{(\w+)(?:[:.][^}]*)?\}|\[\[(\w+)(?::\w+)?\]\]")


def load_yaml(path: Path) -> dict:
    """A YAML file (PyYAML is a test tool, not a dependency of slowdown itself)."""
    import yaml

    with path.open() as f:
        return yaml.safe_load(f)


def provisioned_datasources() -> dict[str, dict]:
    doc = load_yaml(GRAFANA / "provisioning" / "datasources" / "slowdown.yaml")
    return {d["uid"]: d for d in doc["datasources"]}


def panels(dashboard: dict) -> Iterator[dict]:
    """Every panel, rows' nested panels included."""
    for panel in dashboard["panels"]:
        yield panel
        yield from panel.get("panels", [])


def queries(dashboard: dict, uid: str) -> Iterator[tuple[dict, dict]]:
    """(panel, target) of every query on the datasource ``uid``."""
    for panel in panels(dashboard):
        for target in panel.get("targets", []):
            if (target.get("datasource") or panel["datasource"])["uid"] == uid:
                yield panel, target


def interpolate(text: str, values: dict[str, object], texts: dict[str, str] | None = None) -> str:
    """Grafana's template variables: ``$x``, ``${x}``, ``${x:sqlstring}``, ``${x:text}``."""
    texts = texts or {}

    def one(match: re.Match) -> str:
        whole = match.group(0)
        name = match.group(1) or match.group(2)
        if name is None or name.startswith("__"):
            return whole
        fmt = whole[len(name) + 3:-1] if whole.startswith("${") and ":" in whole else None
        value = values[name]
        items = value if isinstance(value, (list, tuple)) else [value]
        if fmt == "sqlstring":
            return ",".join("'" + str(v).replace("'", "''") + "'" for v in items)
        if fmt == "text":
            return texts.get(name, str(items[0]))
        if fmt == "regex":
            return "|".join(re.escape(str(v)) for v in items)
        assert fmt is None, whole
        return "(" + "|".join(map(str, items)) + ")" if len(items) > 1 else str(items[0])

    return VARIABLE.sub(one, text)


def plugin_sql(sql: str, start: float, end: float) -> str:
    """What the plugin's backend does after Grafana: time range, then its one macro."""
    sql = sql.replace("$__from", str(int(start) * 1000)).replace("$__to", str(int(end) * 1000))
    sql = re.sub(r"\$__unixEpochGroupSeconds\(([^,)]+),\s*(\d+)\)",
                 lambda m: f"cast(({m.group(1)} / {m.group(2)}) as int) * {m.group(2)}", sql)
    assert "$" not in sql, sql
    return sql


def grafana_reader(database: Path) -> sqlite3.Connection:
    """A connection opened as the provisioned datasource opens it (path options included)."""
    options = provisioned_datasources()["slowdown-sqlite"]["jsonData"]["pathOptions"]
    uri_options = []
    pragmas = []
    for key, value in parse_qsl(options):
        if key == "_pragma":
            pragmas.append(value)
        else:
            uri_options.append(f"{key}={value}")
    conn = sqlite3.connect(f"file:{database}?{'&'.join(uri_options)}", uri=True)
    for pragma in pragmas:
        name, arg = re.fullmatch(r"(\w+)\((\w+)\)", pragma).groups()
        conn.execute(f"PRAGMA {name} = {arg}")
    return conn


def run(conn: sqlite3.Connection, sql: str) -> tuple[list[str], list[tuple]]:
    cursor = conn.execute(sql)
    return [d[0] for d in cursor.description], cursor.fetchall()


def node_values(conn: sqlite3.Connection) -> dict[str, object]:
    host = conn.execute("SELECT min(host) FROM series").fetchone()[0]
    targets = [r[0] for r in conn.execute("SELECT DISTINCT target FROM series ORDER BY 1")]
    ops = [r[0] for r in conn.execute("SELECT DISTINCT op FROM series ORDER BY 1")]
    return {"host": host, "target": targets, "op": ops, "statistic": "0.5"}


def check_panel(panel: dict, columns: list[str], rows: list[tuple]) -> None:
    """The rows have what the panel type needs."""
    what = f"panel {panel['title']!r}"
    assert rows, f"{what}: no rows"
    if panel["type"] == "timeseries":
        assert columns[0] == "time", (what, columns)
        times = [r[0] for r in rows]
        assert all(isinstance(t, int) for t in times), what
        assert times == sorted(times), f"{what}: time not ascending"
        values = [v for r in rows for v, c in zip(r, columns) if c != "time"
                  and not isinstance(v, str)]
        assert values and all(v is None or isinstance(v, (int, float)) for v in values), what
        assert any(v is not None for v in values), what
    elif panel["type"] == "heatmap":
        assert columns[0] == "time", (what, columns)
        times = [r[0] for r in rows]
        assert times == sorted(set(times)), f"{what}: time not strictly ascending"
        bounds = [float(c) if c != "+Inf" else math.inf for c in columns[1:]]
        assert bounds == sorted(set(bounds)) and bounds[-1] == math.inf, f"{what}: columns"
        assert all(isinstance(v, int) and v >= 0 for r in rows for v in r[1:]), what
    elif panel["type"] == "trend":
        xfield = panel["options"]["xField"]
        x = [r[columns.index(xfield)] for r in rows]
        assert all(v > 0 for v in x) and x == sorted(set(x)), f"{what}: x not ascending"
        shares = [r[1 - columns.index(xfield)] for r in rows]
        assert all(0 < s <= 100 + 1e-9 for s in shares) and shares == sorted(shares), what
    else:
        raise AssertionError(f"{what}: no check for panel type {panel['type']}")


def run_node_dashboard(database: Path, start: float, end: float) -> dict[str, list]:
    """Every SQL query of the node dashboard (repeated panels once per op); the rows of each."""
    results: dict[str, list] = {}
    with grafana_reader(database) as conn:
        values = node_values(conn)
        for variable in NODE["templating"]["list"]:
            if variable["type"] == "query":
                cols, rows = run(conn, plugin_sql(interpolate(variable["query"], values),
                                                  start, end))
                assert len(cols) == 1 and rows, variable["name"]
                got = [r[0] for r in rows]
                assert got == (values[variable["name"]] if variable["multi"]
                               else [values[variable["name"]]])
        for panel, target in queries(NODE, "slowdown-sqlite"):
            for op in (values["op"] if panel.get("repeat") == "op" else [None]):
                scoped = dict(values, op=op) if op else values
                sql = plugin_sql(interpolate(target["rawQueryText"], scoped,
                                             {"statistic": "median"}), start, end)
                columns, rows = run(conn, sql)
                check_panel(panel, columns, rows)
                results[f"{panel['title']}/{target['refId']}/{op}"] = [columns, rows]
    return results
