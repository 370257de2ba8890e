"""Cluster views over many files: bad files among them named and the others read; a bound on
open descriptors, per thread and per process, with the windows and statistics read in the
visits that open the files."""

from __future__ import annotations

import json
import os
import resource
import shutil
import sqlite3
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from slowdown.analysis.histogram import Histogram
from slowdown.analysis.stats import baseline
from slowdown.analysis.stats.baseline import BaselineBook
from slowdown.analysis.store import Store
from slowdown.analysis.store.records import Record
from tests.kit.fleetkit import AT, HOUR, NOV, fill_three_hosts, run


@pytest.fixture
def three_hosts(tmp_path):
    return fill_three_hosts(tmp_path)


# -- bad input among many files ----------------------------------------------------------------

def bad_files(directory: Path) -> dict[str, str]:
    """A damaged, a foreign, a newer and an unreadable file beside good ones: name -> what
    the one-line error says of it."""
    damaged = directory / "damaged.db"
    shutil.copy(directory / "n0.db", damaged)
    with open(damaged, "r+b") as f:  # the schema page (after the header) overwritten
        f.seek(100)
        f.write(b"\xa5" * 3000)
    (directory / "foreign.db").write_text("not a database at all\n" * 100)
    newer = directory / "newer.db"
    shutil.copy(directory / "n1.db", newer)
    with sqlite3.connect(newer) as conn:
        conn.execute("PRAGMA user_version = 99")
    unreadable = directory / "unreadable.db"
    shutil.copy(directory / "n1.db", unreadable)
    unreadable.chmod(0)
    return {"damaged.db": "malformed", "foreign.db": "not a database",
            "newer.db": "schema version 99 is newer", "unreadable.db": "unable to open"}


# Root reads a file of mode 000 anyway: it runs without the capabilities that let it.
WITHOUT_OVERRIDE = (["setpriv", "--bounding-set", "-dac_override,-dac_read_search",
                     "--inh-caps", "-dac_override,-dac_read_search"]
                    if os.geteuid() == 0 else [])


def slowdown(directory: Path, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([*WITHOUT_OVERRIDE, sys.executable, "-m", "slowdown.analysis.cli",
                           *args], capture_output=True, text=True, timeout=120, cwd=directory)


def test_bad_files_among_many_are_named_and_the_others_read(three_hosts):
    said = bad_files(three_hosts)
    glob = str(three_hosts / "*.db")
    done = slowdown(three_hosts, "--db", glob, "--at", AT)
    assert done.returncode == 0, done.stderr
    last = done.stdout.strip().splitlines()[-1]
    assert "merged 2 of 3 hosts (3 files); no records in the last 1h from n2; " \
           "4 files skipped: " in last
    for name, words in said.items():
        assert f"{three_hosts / name}: " in last and words in last, (name, last)
    doc = json.loads(slowdown(three_hosts, "--db", glob, "--at", AT, "--json").stdout)
    assert sorted(Path(s["database"]).name for s in doc["merged"]["skipped"]) == sorted(said)
    check = slowdown(three_hosts, "check", "--db", glob, "--at", AT)
    assert check.returncode == 0 and "4 files skipped" in check.stdout
    for name, words in said.items():  # named alone: one line, and a failure
        alone = slowdown(three_hosts, "--db", str(three_hosts / name), "--at", AT)
        assert alone.returncode == 1 and alone.stdout == ""
        lines = alone.stderr.strip().splitlines()
        assert len(lines) == 1 and str(three_hosts / name) in lines[0] \
            and words in lines[0], (name, lines)


# -- a bound on descriptors --------------------------------------------------------------------

FILES = 120
NOFILE = 32


def low_nofile():
    resource.setrlimit(resource.RLIMIT_NOFILE, (NOFILE, NOFILE))


def test_many_files_are_read_with_few_descriptors(three_hosts):
    """120 host files read under ``ulimit -n 32``: every command holds a few open at once."""
    fleet = three_hosts / "fleet"
    fleet.mkdir()
    for i in range(FILES):
        path = fleet / f"h{i:03d}.db"
        shutil.copy(three_hosts / f"n{i % 2}.db", path)
        with sqlite3.connect(path) as conn:
            conn.execute("UPDATE series SET host = ?", (f"h{i:03d}",))
    glob = str(fleet / "*.db")
    for args in (["--json"], ["check"], ["history", "--since", "1h", "--every", "10m"],
                 ["report", "--since", "1h", "-o", str(three_hosts / "r.html")]):
        done = subprocess.run([sys.executable, "-m", "slowdown.analysis.cli", *args,
                               "--db", glob, "--at", AT], capture_output=True, text=True,
                              timeout=300, preexec_fn=low_nofile)
        assert done.returncode == 0, (args, done.stderr[-2000:])
        assert "files skipped" not in done.stdout + done.stderr
    doc = json.loads(subprocess.run(
        [sys.executable, "-m", "slowdown.analysis.cli", "--json", "--db", glob, "--at", AT],
        capture_output=True, text=True, timeout=300, preexec_fn=low_nofile).stdout)
    assert (doc["merged"]["files"], doc["merged"]["reporting"]) == (FILES, FILES)


def test_each_thread_bounds_its_own_readers_and_closes_none_of_anothers(three_hosts):
    """The service reads from several threads (metrics, alerts); a thread that opens many
    files closes only its own least recently used readers: a connection may be closed only
    by the thread that made it, and another thread's reader must stay usable."""
    import threading

    from slowdown.analysis.store.open_files import LIMIT, READERS

    paths = sorted(three_hosts.glob("n*.db"))
    theirs = Store(paths[0], readonly=True)  # made in this thread, used here alone
    assert theirs.conn.execute("SELECT count(*) FROM series").fetchone()[0] > 0
    failures: list[BaseException] = []

    def many() -> None:
        try:
            mine = [Store(paths[i % len(paths)], readonly=True) for i in range(LIMIT + 3)]
            for store in mine:
                store.conn.execute("SELECT count(*) FROM series").fetchone()
            assert len(READERS) == LIMIT
            for store in mine:
                store.close()
        except BaseException as exc:  # reported by the main thread
            failures.append(exc)

    thread = threading.Thread(target=many)
    thread.start()
    thread.join()
    assert failures == []
    assert not theirs._released  # never closed by the other thread
    assert theirs.conn.execute("SELECT count(*) FROM series").fetchone()[0] > 0
    theirs.close()


@pytest.mark.parametrize("minute, records", [
    (100, {60: 1, 600: 1, 3600: 6}),  # on a ten: the 10m window is one ten, the hour six
    (106, {60: 1, 600: 10, 3600: 15}),  # 4 minutes, 5 tens and the last 6 of the 10m's minutes
])
def test_nested_windows_over_many_files_are_each_windows_merge(three_hosts, minute, records):
    """The windows a cluster's ``slowdown`` reads at once equal each window read alone (from
    the minutes), reading the whole tens inside each window as one record each."""
    from slowdown.analysis.store import Selection, aggregate
    from slowdown.analysis.store.cluster_windows import nested_windows

    stores = [Store(path, readonly=True) for path in sorted(three_hosts.glob("n*.db"))]
    end = NOV + minute * 60
    found = nested_windows(stores, Selection(), end, [60, 600, 3600])
    assert {key[:2] for key in found} == {("work", "md-stat"), ("work", "md-read")}
    for (target, op, span), agg in found.items():
        alone = aggregate(stores, Selection(targets=(target,), ops=(op,), start=end - span,
                                            end=end))
        assert agg.histogram == alone.histogram
        assert (agg.errors, agg.skipped, agg.stuck, agg.stuck_end) == \
            (alone.errors, alone.skipped, alone.stuck, alone.stuck_end)
        assert alone.records == 2 * span // 60  # two hosts reporting, a record a minute
        assert agg.records == 2 * records[span]
        assert agg.histogram.sum == pytest.approx(alone.histogram.sum, rel=1e-12)
        assert (agg.histogram.min, agg.histogram.max) == (alone.histogram.min,
                                                          alone.histogram.max)


def copies(directory: Path, n: int) -> list[Path]:
    """``n`` host files c0.db.. made from the three hosts' files, each with a host of its own."""
    paths = []
    for i in range(n):
        path = directory / f"c{i}.db"
        shutil.copy(directory / f"n{i % 3}.db", path)
        with sqlite3.connect(path) as conn:
            conn.execute("UPDATE series SET host = ?", (f"c{i}",))
        paths.append(path)
    return paths


def test_nested_windows_split_between_processes_are_the_same_to_the_bit(three_hosts):
    """The files of a cluster read by three processes give what one process reads, each
    file's sums and every histogram; a damaged file in a forked process's share is named."""
    from slowdown.analysis.store import Selection, StoreError, cluster_windows, merged

    paths = copies(three_hosts, 9)
    stores = [Store(path, readonly=True) for path in paths]
    query = cluster_windows.windows_query(Selection(), NOV + 100 * 60, [60, 600, 3600])
    one = cluster_windows._read(stores, query)
    split = cluster_windows._read_split(stores, query, processes=3)
    assert one is not None and split is not None
    assert len(one[0]) == 9  # each file's numbers, in the files' order, to the bit
    np.testing.assert_array_equal(split[0], one[0])
    assert split[4] == one[4] and len(one[4]) == 9  # and what each file's visit saw besides
    window = Selection(start=NOV + 100 * 60 - 3600, end=NOV + 100 * 60)
    assert [{h for h, _, _ in seen} for seen, _ in one[4]] == \
        [merged.hosts_with_records(store, window) for store in stores]  # as its query says
    assert [newest for _, newest in one[4]] == [
        {series: store.latest_start(Selection(hosts=(series[0],), targets=(series[1],),
                                              ops=(series[2],)))
         for series in store.series()} for store in stores]

    def by_name(read):
        _, codes, parts, *_ = read
        width = query.width
        return {(key, k): parts[code * width + k] for key, code in codes.items()
                for k in range(width) if code * width + k in parts}

    assert by_name(split) == by_name(one) and len(by_name(one)) == 6
    with open(paths[-1], "r+b") as f:  # the last file: in the last process's share
        f.seek(100)
        f.write(b"\xa5" * 3000)
    with pytest.raises(StoreError, match=r"c8\.db"):
        cluster_windows._read_split(stores, query, processes=3)


def test_rebaseline_over_several_files_does_each(three_hosts):
    (three_hosts / "foreign.db").write_text("not a database at all\n" * 100)
    code, out = run("rebaseline", "--db", str(three_hosts / "*.db"), "--reason", "new OSTs",
                    "--from", "2026-11-01T00:00:00Z", "--to", "2026-11-01T00:30:00Z")
    assert code == 1
    assert f"{three_hosts / 'foreign.db'}: " in out and "1 of 4 databases not rebaselined" in out
    for i in range(3):
        assert f"{three_hosts / f'n{i}.db'}: new baseline for 2 target/op pairs" in out
        with Store(three_hosts / f"n{i}.db", readonly=True) as store:
            assert {b.reason for b in baseline.load(store)} == {"new OSTs"}
            assert len(baseline.load_histograms(store)) == 2


def test_files_opened_by_several_processes_are_those_one_process_opens(three_hosts):
    """The forked opening of a cluster view gives, file by file and in order, what one
    process gives: the series, the baselines in force and their histograms, the errors of a
    damaged and a foreign file in a child's share; its stores read as stores opened here."""
    from slowdown.analysis.store import Selection
    from slowdown.analysis.view.opened_files import open_all

    paths = copies(three_hosts, 8)
    with Store(paths[1]) as store:  # baselines: one in force at AT, one not yet
        baseline.rebaseline(store, NOV + 30 * 60, "new OSTs", NOV, NOV + 30 * 60)
        baseline.rebaseline(store, NOV + 200 * 60, "later", NOV, NOV + 60 * 60)
    with open(paths[5], "r+b") as f:
        f.seek(100)
        f.write(b"\xa5" * 3000)
    paths[6].write_text("not a database at all\n" * 100)
    at = NOV + 100 * 60
    one = open_all(paths, True, at, split=1)
    split = open_all(paths, True, at, split=3)
    assert [(s is None, series, read, error) for s, series, read, error in split] == \
        [(s is None, series, read, error) for s, series, read, error in one]
    assert [e is not None for *_, e in one] == [False] * 5 + [True, True, False]
    assert one[5][3].endswith("c5.db: database disk image is malformed")
    assert one[6][3].endswith("c6.db: file is not a database")
    assert [b.reason for b in one[1][2][1]] == ["new OSTs"] * len(one[1][2][1])
    assert one[1][2][1] and one[1][2][2]  # in force at AT, with its histograms
    for (mine, *_), (theirs, *_) in zip(one, split):
        if mine is not None:
            assert theirs.latest_start(Selection()) == mine.latest_start(Selection())
            assert theirs.series() == mine.series()
            mine.close()
            theirs.close()


def test_a_book_of_one_statistic_reads_the_others_when_asked_for_them(three_hosts):
    """A cluster's ``slowdown`` reads while opening only the baselines of the statistic it
    shows, in force at its moment, and their histograms; a book made of them gives what a
    book of every baseline gives, for that statistic and (reading them all) for another."""
    from slowdown.analysis.view.opened_files import open_all

    paths = sorted(three_hosts.glob("n*.db"))
    for path in paths:
        with Store(path) as store:
            baseline.rebaseline(store, NOV + 30 * 60, "new OSTs", NOV, NOV + 30 * 60)
            baseline.rebaseline(store, NOV + 200 * 60, "later", NOV, NOV + 60 * 60)
    at = NOV + 100 * 60
    opened = open_all(paths, True, at, statistics=("q95",))
    stores = [store for store, *_ in opened]
    loaded = [(rows, blobs) for _, _, (_, rows, blobs), _ in opened]
    assert all(rows and {(b.statistic, b.reason) for b in rows} == {("q95", "new OSTs")}
               for rows, _ in loaded)
    assert all(len(blobs) == 2 for _, blobs in loaded)  # the 2 ops' period in force at AT
    book = BaselineBook(stores, "same", loaded, ("q95",))
    full = BaselineBook(stores)
    for statistic in ("q95", "median", "q95"):
        for op in ("md-stat", "md-read"):
            mine, theirs = (b.expected("work", op, statistic, at) for b in (book, full))
            assert mine is not None and not mine.provisional and mine.hosts == 3
            assert (mine.value, mine.statistic, mine.baseline) == \
                (theirs.value, theirs.statistic, theirs.baseline)
    assert book.only is None  # the median asked for: every baseline read
    for store in stores:
        store.close()


def test_the_cycle_collector_is_paused_while_files_are_read_and_restored_after():
    """In this process and the forked ones; after a failure too; left off if it was off."""
    import gc

    from slowdown.analysis.store import forking

    def fails(task: int) -> int:
        raise ValueError("no")

    assert gc.isenabled()
    assert forking.run_all([1, 2, 3], lambda t: (t, gc.isenabled())) == \
        [(1, False), (2, False), (3, False)]
    assert gc.isenabled()
    with pytest.raises(ValueError):
        forking.run_all([1, 2], fails)
    assert gc.isenabled()
    gc.disable()
    try:
        forking.run_all([1], lambda t: t)
        assert not gc.isenabled()
    finally:
        gc.enable()


def test_the_windows_are_read_in_the_visits_that_open_the_files(three_hosts, monkeypatch):
    """``slowdown`` and ``check`` over many files read the windows while opening each file:
    one process or three, the read is the one the windows make apart (each file's sums, every
    histogram, what each visit saw) and gives the same windows; taken once, and only for the
    query it was made for. A file that fails in the visit (an hour record in the window)
    leaves the visit unused: the windows are then read as without it."""
    from functools import partial

    from slowdown.analysis.store import Selection, cluster_windows
    from slowdown.analysis.view.opened_files import open_all

    paths = copies(three_hosts, 9)
    end, spans = NOV + 100 * 60, [60, 600, 3600]
    alone = cluster_windows._read([Store(p, readonly=True) for p in paths],
                                  cluster_windows.windows_query(Selection(), end, spans))
    for split in (1, 3):
        visited: list = []
        opened = open_all(paths, True, end, split=split, visited=visited,
                          visit=partial(cluster_windows.Visit, Selection(), end, spans))
        assert len(visited) == split
        prepared = cluster_windows.Prepared.of(Selection(), end, spans, visited)
        assert prepared.read is not None
        np.testing.assert_array_equal(prepared.read[0], alone[0])
        assert prepared.read[1] == alone[1] and prepared.read[3:] == alone[3:]
        assert prepared.read[2] == alone[2] and len(alone[2]) == 6  # 2 ops x 3 parts
        stores = [s for s, *_ in opened]
        other = cluster_windows.Prepared(prepared.key, prepared.read)
        assert cluster_windows.nested_windows(stores, Selection(hosts=("c1",)), end, spans,
                                              other) is not None
        assert other.read is None  # another query: not used, and not kept
        got = cluster_windows.nested_windows(stores, Selection(), end, spans, prepared)
        assert prepared.read is None  # taken
        assert got == cluster_windows.nested_windows(stores, Selection(), end, spans)
    def unread(*_):
        raise AssertionError("the windows read again")

    monkeypatch.setattr(cluster_windows, "_read", unread)  # the commands use the visits' read
    glob = str(three_hosts / "c*.db")
    assert run("--db", glob, "--at", AT, "--json")[0] == 0
    code, out = run("check", "--db", glob, "--at", AT)
    assert code == 0 and out.startswith("SLOWDOWN OK"), out
    monkeypatch.undo()
    with Store(paths[4]) as store:  # an hour record inside the hour window
        store.write([Record("c4", "work", "md-stat", NOV + HOUR, Histogram(), span=HOUR)])
    visited = []
    open_all(paths, True, end, split=3, visited=visited,
             visit=partial(cluster_windows.Visit, Selection(), end, spans))
    assert visited[1] is None and visited[0] is not None
    assert cluster_windows.Prepared.of(Selection(), end, spans, visited).read is None
