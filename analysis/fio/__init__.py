"""fio's latency logs in: percentiles over time out, or minute records into the database.

fio writes two kinds of latency logs. A *histogram log* (``--write_hist_log``) holds one
line per direction every ``--log_hist_msec``: ``time_ms, ddir, bs, counts...``, the counts of
fio's own latency bins completed since the previous line of that direction. A *latency
log* (``--write_lat_log``) holds one line per I/O (or per ``--log_avg_msec`` window):
``time_ms, value, ddir, bs[, ...]``. This package reads both, from any number of jobs and
hosts, and merges them into one series of intervals (``slowdown import-fio``):

- ``layout``: fio's bin layouts (1216 bins in microseconds before fio 3.0, 1856 in
  nanoseconds since, either coarsened by ``--log_hist_coarseness``) and their bin values;
- ``textblocks``: a file's text in blocks of whole lines, in reused buffers;
- ``blockparse``: the numpy parser of such blocks of comma-separated whole numbers;
- ``logblock``: the parsed ``Block`` (times, directions, bins or latencies) both readers return;
- ``histlog``: the histogram-log reader; ``latlog``: the latency-log reader;
- ``sources``: the input files, their kind, layout and host, and host offsets;
- ``percentiles``: percentiles, min, mean and max of fio bins or of exact latencies;
- ``intervals``: intervals, the weighting of fiologparser_hist.py, rows for CSV and JSON;
- ``minute_records``: minute records of slowdown's histogram, for the database;
- ``merge``: the files read in time lockstep on a thread pool, fed to ``intervals`` or
  ``minute_records``;
- ``output``: CSV (the columns of fiologparser_hist.py), JSON, and database records;
- ``slowdown.analysis.cli.import_fio``: the ``import-fio`` command.
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
