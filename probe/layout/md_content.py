"""What an md pool object holds: md-workbench's data pattern, so that `md-workbench -X` verifies.

md-workbench (IOR's src/md-workbench.c with utilities.c, default ``--dataPacketType=t``,
timestamp) fills an object of ``size`` bytes with ``size // 8`` native 64-bit words, word `i`
being ``rank << 32 | (seed + i)``, then the remaining bytes with ``(char) i`` for their
offset `i` (generate_memory_pattern); with the timestamp type no word depends on the object,
so every object holds the same bytes, and ``-X`` (verify_memory_pattern) checks exactly that.

The seed is md-workbench's ``-G``; without ``-G`` md-workbench takes the time of its start,
so no run could verify another's objects. slowdown writes every object with ``SEED``:
``md-workbench -2 -X -G 0`` verifies a pool that slowdown prepared and probed.
"""

from __future__ import annotations

from array import array

SEED = 0
"""md-workbench's -G for the objects slowdown writes."""

_MASK = (1 << 64) - 1


def object_content(size: int, seed: int = SEED, rank: int = 0) -> bytes:
    """The bytes md-workbench writes (and -X expects) in an object of `size` bytes."""
    words = size // 8
    high = (rank & 0xFFFFFFFF) << 32
    body = array("Q", ((high | ((seed + i) & _MASK)) for i in range(words)))
    return body.tobytes() + bytes(i & 0xFF for i in range(words * 8, size))
