"""Options every read command shares, declared apart from ``read_setup`` (which opens what
they name): the group in ``main`` takes them too, and must not import the configuration, the store
and numpy to do so, or ``slowdown import-fio`` would pay for them at every start."""

from __future__ import annotations

from collections.abc import Callable

import click

PERCENT_RULE = "10, 10% and 0.1 all mean 10 % (a bare number below 1 is a fraction)"


def read_options(func: Callable) -> Callable:
    """--db, --target, --host, --op, --at: on every read command."""
    options = [
        click.option("--db", "dbs", multiple=True, metavar="FILE",
                     help="Database file or glob; repeat to merge hosts (default: the "
                          "configuration's database)."),
        click.option("--target", "targets", multiple=True, metavar="GLOB",
                     help="Only these targets (repeatable)."),
        click.option("--host", "hosts", multiple=True, metavar="GLOB",
                     help="Only these hosts (repeatable)."),
        click.option("--op", "ops", multiple=True, metavar="GLOB",
                     help="Only these ops, e.g. 'md-*' (repeatable)."),
        click.option("--at", "at", default=None, metavar="TIME",
                     help="Look at a past moment, read as `date -d` reads it: an ISO time (local "
                          "unless it ends in Z or +HH:MM), @epoch or a duration ago (2h, -2h)."),
    ]
    for option in reversed(options):
        func = option(func)
    return func


__all__ = ["PERCENT_RULE", "read_options"]
