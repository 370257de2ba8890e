"""`failing: every op since ...`: said from a running service's live state while every op of
a target failed at its last try, and only then (a stale failure, one op back, a stopped
service: the windows speak)."""

from __future__ import annotations

from pathlib import Path

from slowdown.analysis.cli.output import failing_now, failing_now_note
from slowdown.analysis.units import format_clock
from slowdown.analysis.view.service_states import ServiceState
from slowdown.analysis.words import OPS

NOW = 1_790_000_000.0


def service(errors: dict, host: str = "n1", live: dict | None = None) -> ServiceState:
    return ServiceState(database=Path(f"/var/lib/{host}.db"), host=host, state="running",
                        since=NOW - 3600, last_seen=NOW, first_numbers_at=None,
                        newest_record=int(NOW) - 120, targets={"work": "running"},
                        live={"interval": 1.0} if live is None else live,
                        probes={"work": {"errors": errors}})


def every_op(at: float, since: float, err: str = "ESHUTDOWN") -> dict:
    return {op: {"err": err, "msg": "m", "at": at, "since": since} for op in OPS}


def test_every_op_failing_now_is_said_with_the_latest_start_and_the_errors():
    errors = every_op(NOW - 1, NOW - 30)
    errors["md-stat"]["since"] = NOW - 4  # the last op to join the streak
    errors["md-read"]["err"] = "ENOTCONN"
    assert failing_now([service(errors)], "work", NOW) == (NOW - 4, ["ENOTCONN", "ESHUTDOWN"],
                                                           ["n1"])
    assert failing_now_note([service(errors)], "work", NOW) == \
        f"failing: every op since {format_clock(NOW - 4, NOW)} (ENOTCONN, ESHUTDOWN)"


def test_one_op_back_a_stale_failure_or_a_stopped_service_say_nothing():
    back = every_op(NOW - 1, NOW - 30)
    del back["data-read"]  # its last try succeeded: not among the errors
    assert failing_now([service(back)], "work", NOW) is None
    stale = every_op(NOW - 11, NOW - 60)  # older than 10 s (three intervals of 1 s)
    assert failing_now([service(stale)], "work", NOW) is None
    slow = every_op(NOW - 25, NOW - 60)  # with a 10 s interval 30 s are recent
    assert failing_now([service(slow, live={"interval": 10.0})], "work", NOW) is not None
    stopped = service(every_op(NOW - 1, NOW - 30), live={"interval": 1.0, "stopped": NOW})
    assert failing_now([stopped], "work", NOW) is None
    published = service(every_op(NOW - 1, NOW - 30), live=None)
    published.live = None  # a copy's state: no live state behind it
    assert failing_now([published], "work", NOW) is None


def test_a_cluster_names_the_hosts_that_fail_and_the_earliest_start():
    failing = [service(every_op(NOW - 1, NOW - 9), "n1"), service(every_op(NOW - 2, NOW - 5),
                                                                 "n2")]
    healthy = service({}, "n3")
    note = failing_now_note([*failing, healthy], "work", NOW)
    assert note == f"failing on n1, n2: every op since {format_clock(NOW - 9, NOW)} (ESHUTDOWN)"
