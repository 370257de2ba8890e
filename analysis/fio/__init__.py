"""fio's latency logs in: percentiles over time out, or minute records into the database.

fio writes two kinds of latency logs. A *histogram log* (``--write_hist_log``) holds one
line per direction every ``--log_hist_msec``: ``time_ms, ddir, bs, counts...``, the counts of
fio's own latency bins completed since the previous line of that direction. A *latency
log* (``--write_lat_log``) holds one line per I/O (or per ``--log_avg_msec`` window):
``time_ms, value, ddir, bs[, ...]``. This package reads both, from any number of jobs and
hosts, and merges them into one series of intervals (``slowdown import-fio``):

- ``layout``: fio's bin layouts (1216 bins in microseconds before fio 3.0, 1856 in
  nanoseconds since, either coarsened by ``--log_hist_coarseness``) and their bin values;
- ``histlog``: the chunked numpy text parser and the histogram-log reader;
- ``latlog``: the latency-log reader;
- ``merge``: files in time lockstep, intervals, the weighting of fiologparser_hist.py,
  host offsets, percentiles;
- ``output``: CSV (the columns of fiologparser_hist.py), JSON, and database records;
- ``cli``: the ``import-fio`` command.
"""

from __future__ import annotations


class FioLogError(ValueError):
    """Bad input in a fio log: names the file and line, says what was expected and found."""

    def __init__(self, path: object, line: int | None, message: str) -> None:
        self.path = str(path)
        self.line = line
        self.message = message
        where = self.path if line is None else f"{self.path}:{line}"
        super().__init__(f"{where}: {message}")


__all__ = ["FioLogError"]
