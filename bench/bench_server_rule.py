"""The rule that names a slow server (``analysis/stats/server_rule.py``), measured on
simulated tens: how often it accuses a server on quiet data, and how many probes it needs
to name a server 10x (and 2x) slower than the others.

Quiet data: ``--servers`` servers, each with a lognormal median of its own (sigma
``--spread`` around the filesystem's: servers differ a little when all is well), each
probe's latency lognormal (sigma ``--sigma``), a ten's probes of all nodes spread over the
servers uniformly at random (``--probes``: the mean per server and ten, several values).
False accusations: ``slow`` words per 100 server-judgments, over ``--tens`` tens per seed,
``--seeds`` seeds, the median and max over the seeds; and of them, the words of servers
whose own median is less than ``FACTOR`` times the others' (wrong by the rule's own
standard: with ``--spread``, a few servers of a quiet filesystem are that much slower).

Power: one server exactly 10 (2) times slower than the filesystem's median, among 20 others
(each with its own median, ``--spread``) that got 3,000 probes in all; for each count of its
probes, the share of ``--trials`` tens in which it is named ``slow``; the fewest probes naming
it in 95 % of them.

    python -m bench.bench_server_rule                 # the figures of docs/BENCHMARKS.md
    python -m bench.bench_server_rule --quick         # a few seconds
"""

from __future__ import annotations

import argparse
import json
import statistics
import time

import numpy as np

from slowdown.analysis.histogram import Histogram
from slowdown.analysis.stats import server_rule
from testdata import serverkit


def false_rate(servers: int, per_server: int, tens: int, seed: int, sigma: float,
               spread: float) -> tuple[int, int, int, int]:
    """(slow words, slow words of servers truly less than ``FACTOR`` times the others'
    median, few words, judgments) over ``tens`` quiet tens of one seed."""
    rng = np.random.default_rng(seed)
    names = serverkit.server_names(servers)
    slow = wrong = few = judged = 0
    for _ in range(tens):
        medians = serverkit.server_medians(rng, names, 0.004, spread, {})
        hists = serverkit.ten_of_servers(rng, medians, per_server * servers, sigma)
        for name, j in server_rule.judge(hists).items():
            judged += 1
            few += j.word == server_rule.FEW
            if j.word == server_rule.SLOW:
                slow += 1
                others = np.median([m for n, m in medians.items() if n != name])
                wrong += medians[name] < server_rule.FACTOR * others
    return slow, wrong, few, judged


def named_share(factor: float, probes: int, others: int, trials: int, seed: int,
                sigma: float, spread: float) -> float:
    """Share of ``trials`` tens in which a server ``factor`` times slower, with ``probes``
    probes, is named among others that got ``others`` probes in all."""
    rng = np.random.default_rng(seed)
    named = 0
    for _ in range(trials):
        mine = Histogram()  # exactly ``factor`` times the filesystem's median
        mine.record_many(rng.lognormal(np.log(0.004 * factor), sigma, probes))
        rest = Histogram()
        medians = 0.004 * rng.lognormal(0.0, spread, 20)
        rest.record_many(rng.lognormal(np.log(medians[rng.integers(0, 20, others)]), sigma))
        named += server_rule.judge_one(mine, rest).word == server_rule.SLOW
    return named / trials


def probes_needed(factor: float, counts: list[int], others: int, trials: int, seed: int,
                  sigma: float, spread: float) -> tuple[int | None, dict[int, float]]:
    shares = {n: named_share(factor, n, others, trials, seed + n, sigma, spread)
              for n in counts}
    enough = [n for n in counts if shares[n] >= 0.95]
    return (min(enough) if enough else None), shares


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--servers", type=int, nargs="+", default=[4, 100])
    ap.add_argument("--probes", type=int, nargs="+", default=[6, 30, 300],
                    help="mean probes per server and ten")
    ap.add_argument("--tens", type=int, default=200)
    ap.add_argument("--seeds", type=int, default=5)
    ap.add_argument("--sigma", type=float, default=0.5)
    ap.add_argument("--spread", type=float, default=0.1)
    ap.add_argument("--trials", type=int, default=400)
    ap.add_argument("--seed-base", type=int, default=0,
                    help="first seed (runs with other bases draw other data)")
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()
    if args.quick:
        args.tens, args.seeds, args.trials, args.servers = 5, 2, 40, [4, 20]
    began = time.perf_counter()
    out: dict = {"seed_base": args.seed_base, "z": server_rule.Z, "factor": server_rule.FACTOR,
                 "min_probes": server_rule.MIN_PROBES, "sigma": args.sigma,
                 "spread": args.spread, "quiet": [], "power": []}
    print(f"rule: z={server_rule.Z} (99.9 %), factor {server_rule.FACTOR}, few below "
          f"{server_rule.MIN_PROBES} probes; sigma {args.sigma}, spread {args.spread}")
    print("quiet data: slow words per 100 server-judgments (median, max over seeds)")
    for servers in args.servers:
        for per in args.probes:
            runs = [false_rate(servers, per, args.tens, seed, args.sigma, args.spread)
                    for seed in range(args.seed_base, args.seed_base + args.seeds)]
            rates = [100 * s / j for s, _, _, j in runs]
            wrong = [100 * w / j for _, w, _, j in runs]
            few = [100 * f / j for _, _, f, j in runs]
            judged = sum(j for *_, j in runs)
            row = {"servers": servers, "probes": per, "judgments": judged,
                   # none in n: below 3/n at 95 % (the rule of three), per 100
                   "bound_per_100": 100 * 3 / judged if not any(w for _, w, *_ in runs)
                   else None,
                   "slow_per_100": statistics.median(rates), "slow_per_100_max": max(rates),
                   "below_factor_per_100": statistics.median(wrong),
                   "below_factor_per_100_max": max(wrong),
                   "few_per_100": statistics.median(few)}
            out["quiet"].append(row)
            print(f"  {servers:4d} servers, {per:4d} probes/server/ten: "
                  f"{row['slow_per_100']:.4f} (max {row['slow_per_100_max']:.4f}) slow, of them "
                  f"{row['below_factor_per_100']:.4f} (max {row['below_factor_per_100_max']:.4f})"
                  f" truly below {server_rule.FACTOR}x, "
                  f"{row['few_per_100']:.1f} few, of {judged} judgments"
                  + (f" (none: below {row['bound_per_100']:.4f} at 95 %)"
                     if row["bound_per_100"] is not None else ""))
    counts = [5, 10, 15, 20, 30, 40, 60, 80, 120, 160, 240, 320, 480, 640]
    for factor in (10.0, 2.0):
        need, shares = probes_needed(factor, counts, 3000, args.trials, 1000 + args.seed_base,
                                     args.sigma, args.spread)
        out["power"].append({"factor": factor, "probes_for_95": need, "shares": shares})
        print(f"a server {factor:g}x slower: named in 95 % of tens from {need} probes; "
              + ", ".join(f"{n}: {100 * s:.0f}%" for n, s in shares.items()))
    out["seconds"] = round(time.perf_counter() - began, 1)
    print(f"({out['seconds']} s)")
    if args.json:
        print(json.dumps(out))


if __name__ == "__main__":
    main()
