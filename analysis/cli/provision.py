"""The ``--provision`` options shared by ``slowdown stats`` and ``slowdown report``."""

from __future__ import annotations

from collections.abc import Callable

import click

from slowdown.analysis.cli.read_setup import parse_fraction_option
from slowdown.analysis.report.provision import DEFAULT_SEED, DEFAULT_TRIALS, Goal, parse_goal


def provision_options(func: Callable) -> Callable:
    """--provision, --confidence, --trials, --seed."""
    options = [
        click.option("--provision", "provision", default=None, metavar="GOAL",
                     help="Nodes needed for this aggregate: ops/s (20000) or bytes/s "
                          "(5GiB/s, data ops), from the per-minute variation."),
        click.option("--confidence", default="99%", show_default=True,
                     help="Confidence of the --provision estimate."),
        click.option("--trials", type=click.IntRange(min=1), default=DEFAULT_TRIALS,
                     show_default=True, help="Monte Carlo trials of the --provision estimate."),
        click.option("--seed", type=int, default=DEFAULT_SEED, show_default=True,
                     help="Seed of the --provision Monte Carlo run."),
    ]
    for option in reversed(options):
        func = option(func)
    return func


def parse_provision_options(provision: str | None, confidence: str) -> tuple[Goal | None, float]:
    """The goal (None without --provision) and the confidence, or a usage error naming the
    flag."""
    level = parse_fraction_option(confidence, "--confidence")
    if provision is None:
        return None, level
    try:
        return parse_goal(provision), level
    except ValueError as exc:
        raise click.BadParameter(str(exc), param_hint="--provision") from None
