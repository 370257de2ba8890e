"""The IO500 phases as load, with the real IOR and mdtest, run in the IO500's order (without
``find``) from a node that does not probe: the arguments are the IO500's own, scaled down
(``-D``/``-W`` stonewall seconds, a per-process cap on ior-easy's file) to fit a small machine.

Each write phase runs for ``seconds`` (stonewall); the phases after it (read, stat, delete)
take what the write phase left, as in the IO500, so they may be shorter.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass

from tests.kit.iorkit import ior_bin

# Paths relative to the load node's working directory, the volume's root.
EASY, HARD = "load/ior_easy", "load/ior_hard"
MD_EASY, MD_HARD = "load/mdt_easy", "load/mdt_hard"
DIRS = [EASY, HARD]


@dataclass
class Phase:
    name: str
    argv: list[str]
    start: float = 0.0
    end: float = 0.0
    status: int | None = None


def mpi(np: int, tool: str, *args: str) -> list[str]:
    return ["mpiexec", "--allow-run-as-root", "--oversubscribe", "-np", str(np),
            str(ior_bin() / tool), *args]


def phases(seconds: int, np: int = 2, easy_block: str = "2g", hard_segments: int = 16000
           ) -> list[Phase]:
    """The IO500's phases in its order: writes stonewalled at ``seconds``, and capped (per
    process: ior-easy's file at ``easy_block``, ior-hard at ``hard_segments`` transfers) so
    that the bricks cannot fill up: a fast machine stops at the cap before the stonewall."""
    s = str(seconds)
    ior_easy = ["-C", "-Q", "1", "-g", "-G", "271", "-k", "-e", "-o", f"{EASY}/ior_file_easy",
                "-O", f"stoneWallingStatusFile={EASY}.stonewall", "-t", "2m", "-b", easy_block,
                "-F", "-a", "POSIX"]
    ior_hard = ["-C", "-Q", "1", "-g", "-G", "27", "-k", "-e", "-t", "47008", "-b", "47008",
                "-s", str(hard_segments), "-o", f"{HARD}/IOR_file", "-O",
                f"stoneWallingStatusFile={HARD}.stonewall", "-a", "POSIX"]
    md_easy = ["-n", "1000000", "-u", "-L", "-F", "-P", "-N", "1", "-d", MD_EASY,
               "-x", f"{MD_EASY}.stonewall"]
    md_hard = ["-n", "1000000", "-t", "-w", "3901", "-e", "3901", "-P", "-N", "1", "-F",
               "-d", MD_HARD, "-x", f"{MD_HARD}.stonewall"]
    wear_out = ["-O", "stoneWallingWearOut=1"]
    return [
        Phase("ior-easy-write", mpi(np, "ior", *ior_easy, "-w", "-D", s, *wear_out)),
        Phase("mdtest-easy-write", mpi(np, "mdtest", *md_easy, "-C", "-W", s)),
        Phase("ior-hard-write", mpi(np, "ior", *ior_hard, "-w", "-D", s, *wear_out)),
        Phase("mdtest-hard-write", mpi(np, "mdtest", *md_hard, "-C", "-W", s)),
        Phase("ior-easy-read", mpi(np, "ior", *ior_easy, "-r", "-R")),
        Phase("mdtest-easy-stat", mpi(np, "mdtest", *md_easy, "-T")),
        Phase("ior-hard-read", mpi(np, "ior", *ior_hard, "-r", "-R")),
        Phase("mdtest-hard-stat", mpi(np, "mdtest", *md_hard, "-T")),
        Phase("mdtest-easy-delete", mpi(np, "mdtest", *md_easy, "-r")),
        Phase("mdtest-hard-read", mpi(np, "mdtest", *md_hard, "-E")),
        Phase("mdtest-hard-delete", mpi(np, "mdtest", *md_hard, "-r")),
    ]


def run_phases(load: Callable[[list[str], str], int], plan: list[Phase], gap: float,
               log: Callable[[str], None] = print) -> list[Phase]:
    """Each phase on the load node, then ``gap`` seconds of quiet; times as they happened."""
    load(["mkdir", "-p", *DIRS], "mkdir")
    for phase in plan:
        phase.start = time.time()
        phase.status = load(phase.argv, phase.name)
        phase.end = time.time()
        log(f"{phase.name}: {phase.end - phase.start:.0f} s, exit {phase.status}")
        time.sleep(gap)
    return plan
