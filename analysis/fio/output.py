"""Where merged fio intervals go: CSV like fiologparser_hist.py, JSON, or the database.

CSV keeps fiologparser_hist.py's columns and units so that existing scripts read it:
``end-time, [dir,] samples, min, avg, median, <p>%..., max``, end-time in ms of the log's
timeline, latencies in the logs' own unit (nanoseconds for fio >= 3.0) unless ``unit`` says
otherwise; in the logs' unit min and max print as whole numbers, as there.

Into the database, fio bins become slowdown's exponential histogram: each bin's count goes
to the bucket of the bin's value, in seconds. A value is within half a fio bin of every
latency in that bin (0.8 % of it at coarseness 0, ``2**c`` times that at coarseness ``c``)
and the bucket's representative value within 1.1 % of the bin value, so a quantile read back
from the database is within about 1.9 % of fio's (coarseness 0). Latency logs go in value by
value, with exact count, sum, min and max.
"""

from __future__ import annotations

import io
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from slowdown.analysis.atomic_write import replace_whole
from slowdown.analysis.fio.intervals import Row

if TYPE_CHECKING:  # printing needs no store
    from slowdown.analysis.store.records import Record

UNIT_SECONDS = {"ns": 1e-9, "us": 1e-6, "ms": 1e-3, "s": 1.0}


def percent_label(p: float) -> str:
    return f"{p:g}%"


def csv_text(rows: Sequence[Row], percents: Sequence[float], *, native: str, unit: str,
             directions: bool, decimals: int = 3) -> str:
    """fiologparser_hist.py's CSV; ``percents`` lists the median (50) first."""
    scale = UNIT_SECONDS[native] / UNIT_SECONDS[unit]
    header = ["end-time"] + (["dir"] if directions else []) + ["samples", "min", "avg", "median"]
    header += [percent_label(p) for p in percents[1:]] + ["max"]
    out = io.StringIO()
    out.write(", ".join(header) + "\n")
    fixed = f"%.{decimals}f"
    extreme = "%d" if scale == 1.0 else fixed
    middle = ", ".join([fixed] * (len(percents) + 1))
    form = ("%d, %s, %d, " if directions else "%d, %d, ") + f"{extreme}, {middle}, {extreme}\n"
    for row in rows:
        head = (row.end_ms, row.direction) if directions else (row.end_ms,)
        values = [row.min, row.avg, *row.percentiles, row.max]
        out.write(form % (*head, round(row.samples), *(v * scale for v in values)))
    return out.getvalue()


def json_text(rows: Sequence[Row], percents: Sequence[float], *, native: str, unit: str,
              info: dict) -> str:
    """The same rows as one JSON document; latencies in ``unit``, named in the document."""
    import json  # here: CSV, the default, starts without it

    scale = UNIT_SECONDS[native] / UNIT_SECONDS[unit]
    names = ["median"] + [f"p{p:g}" for p in percents[1:]]
    doc = dict(info, unit=unit, percentiles=list(percents[1:]), rows=[
        dict({"end_ms": row.end_ms, "dir": row.direction, "samples": row.samples,
              "min": row.min * scale, "avg": row.avg * scale},
             **{name: value * scale for name, value in zip(names, row.percentiles)},
             max=row.max * scale)
        for row in rows])
    return json.dumps(doc, indent=1) + "\n"


def write_file(path: Path, text: str, force: bool = False) -> None:
    """Write ``text`` to ``path`` whole or not at all (a temporary file renamed into place).

    An existing file is replaced only with ``force``: slowdown overwrites no file it was not
    asked to.
    """
    path = Path(path)
    if path.exists() and not force:
        raise FileExistsError(f"{path}: exists; add --force to replace it")
    replace_whole(path, text.encode(), mode=0o600)  # private, as it has always been made


def existing_records(store, target: str, records: Sequence[Record]) -> int | None:
    """Start of a record the target already holds in the imported minutes, or None."""
    from slowdown.analysis.store import Selection

    if not records:
        return None
    starts = [r.start for r in records]
    selection = Selection(targets=(target,), start=min(starts), end=max(starts) + 60)
    for record in store.records(selection):
        return record.start
    return None


def write_records(db: Path, records: Sequence[Record], target: str,
                  merge_existing: bool = False) -> int:
    """All records in one transaction; refuses to add to minutes the target already holds
    (a second import of the same logs would count every sample twice) unless asked to."""
    from slowdown.analysis.store import Store  # only here: printing needs no database

    with Store(db) as store:
        if not merge_existing:
            clash = existing_records(store, target, records)
            if clash is not None:
                raise FileExistsError(
                    f"{db}: target {target!r} already holds records of the imported minutes "
                    f"(from unix time {clash}); add --merge to add to them")
        return store.write(records)


__all__ = ["UNIT_SECONDS", "csv_text", "json_text", "write_file", "write_records"]
