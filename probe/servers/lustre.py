"""Lustre: a data op's OST from the file's RAID-0 layout (``lfs getstripe``), a metadata op's
MDT from its directory (``lfs getdirstripe``, ``lfs getstripe -m``), cached per path.

``lfs getstripe FILE`` prints the stripe size, the stripe count and one ``obdidx`` line per
stripe, in stripe order; byte ``offset`` lies on the OST of entry
``(offset // stripe_size) % stripe_count`` of that list. A composite (PFL) layout is that per
component, over the component's extent. Names as a storage team says them: ``OST0007``,
``MDT0000`` (the index in lowercase hex, as Lustre's target names ``fsname-OST000a`` have
it). Not mapped (``unknown``): mirrored layouts (FLR: the client picks the mirror), a
component not instantiated yet, striped directories (an entry's MDT follows its name's hash).

Lustre does not run on the machines this was built on: the parsing and the arithmetic are
tested on real ``lfs`` output transcribed from Lustre's documentation (tests/kit/lustre_lfs/).
"""

from __future__ import annotations

import os
import re
import subprocess
from typing import ClassVar, NamedTuple

from slowdown.analysis.store.server_records import UNKNOWN
from slowdown.probe.layout.names import BLOCK_SIZE
from slowdown.probe.servers import Resolver

TIMEOUT = 10.0  # seconds for one lfs command
_FIELD = re.compile(r"\b(lmm_\w+|lcm_\w+|lmv_\w+):\s*(\S+)")  # also several on a line
_OBJECT = re.compile(r"^\s*(\d+)\s+(\d+)\s+(0x[0-9a-fA-F]+)\s+(\S+)\s*$")
_MDT_ROW = re.compile(r"^\s*(\d+)\s+\[0x[0-9a-fA-F]+:0x[0-9a-fA-F]+:0x[0-9a-fA-F]+\]\s*$")


class StripeLayout(NamedTuple):
    """A plain (RAID-0) Lustre file layout: stripe size and the OST index of each stripe."""

    stripe_size: int
    osts: tuple[int, ...]


class DirLayout(NamedTuple):
    """A directory's layout: how many MDTs it is striped over, its master MDT, the MDT of
    each stripe (empty for a plain directory)."""

    stripe_count: int
    master: int
    mdts: tuple[int, ...]


class Component(NamedTuple):
    """The bytes [start, end) of a file (end None: to its end) and their layout (None: not
    instantiated yet, no objects)."""

    start: int
    end: int | None
    layout: StripeLayout | None


def _plain(text: str, objects: list[int]) -> StripeLayout | None:
    fields = dict(_FIELD.findall(text))
    for key in ("lmm_stripe_count", "lmm_stripe_size"):
        if key not in fields:
            raise ValueError(f"lfs getstripe: no {key}")
    pattern = fields.get("lmm_pattern", "raid0")
    if pattern not in ("raid0", "1", "0x1"):
        raise ValueError(f"lfs getstripe: pattern {pattern}, not raid0")
    count, size = int(fields["lmm_stripe_count"]), int(fields["lmm_stripe_size"])
    if not objects:
        return None
    if size <= 0 or count <= 0 or len(objects) != count:
        raise ValueError(f"lfs getstripe: {len(objects)} objects listed for stripe count {count}")
    return StripeLayout(size, tuple(objects))


def parse_getstripe(text: str) -> tuple[Component, ...]:
    """``lfs getstripe FILE`` (one file) to its components: one for a plain RAID-0 layout,
    one per ``lcme_id`` for a composite one (PFL). ValueError for what is not mapped: mirrors
    (FLR), patterns other than raid0, a directory's default layout (no ``lmm_`` fields)."""
    if "lcm_entry_count" not in text:
        rows, seen_header = [], False
        for line in text.splitlines():
            if line.split()[:1] == ["obdidx"]:
                seen_header = True
                continue
            match = _OBJECT.match(line) if seen_header else None
            if match:
                rows.append(int(match.group(1)))
        return (Component(0, None, _plain(text, rows)),)
    if "lcme_mirror_id" in text or "lcm_mirror_count" in text:
        raise ValueError("a mirrored layout (FLR): the client picks the mirror it reads")
    components = []
    for chunk in re.split(r"^\s*lcme_id:", text, flags=re.M)[1:]:
        start = re.search(r"lcme_extent\.e_start:\s*(\d+)", chunk)
        end = re.search(r"lcme_extent\.e_end:\s*(\d+|EOF)", chunk)
        if start is None or end is None:
            raise ValueError("lfs getstripe: a component without its extent")
        objects = [int(i) for i in re.findall(r"l_ost_idx:\s*(\d+)", chunk)]
        components.append(Component(int(start.group(1)),
                                    None if end.group(1) == "EOF" else int(end.group(1)),
                                    _plain(chunk, objects)))
    if not components:
        raise ValueError("lfs getstripe: a composite layout without components")
    return tuple(components)


def parse_getdirstripe(text: str) -> DirLayout:
    """``lfs getdirstripe DIR`` (one directory) to its layout."""
    fields = dict(_FIELD.findall(text))
    for key in ("lmv_stripe_count", "lmv_stripe_offset"):
        if key not in fields:
            raise ValueError(f"lfs getdirstripe: no {key}")
    mdts = tuple(int(m.group(1)) for m in map(_MDT_ROW.match, text.splitlines()) if m)
    count = int(fields["lmv_stripe_count"])
    if count > 1 and len(mdts) != count:
        raise ValueError(f"lfs getdirstripe: {len(mdts)} stripes listed for count {count}")
    return DirLayout(count, int(fields["lmv_stripe_offset"]), mdts)


def parse_index(text: str) -> int:
    """``lfs getstripe -m PATH`` / ``lfs getdirstripe -m DIR``: one MDT index."""
    words = text.split()
    if len(words) != 1 or not words[0].isdigit():
        raise ValueError(f"not one MDT index: {text.strip()!r}")
    return int(words[0])


def ost_name(index: int) -> str:
    return f"OST{index:04x}"


def mdt_name(index: int) -> str:
    return f"MDT{index:04x}"


def osts_of(layout: StripeLayout, offset: int, length: int = BLOCK_SIZE) -> list[int]:
    """The OSTs a read or write of ``length`` bytes at ``offset`` touches, in stripe order:
    stripe ``(offset mod stripe width) // stripe size`` of the layout, the file offset taken
    whole also inside a PFL component (as Lustre's ``lov_stripe_number`` does)."""
    if offset < 0:
        raise ValueError(f"negative offset {offset}")
    size, count = layout.stripe_size, len(layout.osts)
    first, last = offset // size, (offset + max(length, 1) - 1) // size
    found: list[int] = []
    for stripe in range(first, min(last, first + count - 1) + 1):
        ost = layout.osts[stripe % count]
        if ost not in found:
            found.append(ost)
    return found


def server_of(components: tuple[Component, ...], offset: int, length: int = BLOCK_SIZE
              ) -> str:
    """The OST (or OSTs joined with ``+``, sorted) that serve the bytes; ``unknown`` where
    a component is not instantiated or no component holds them."""
    found: set[int] = set()
    end = offset + max(length, 1)
    for c in components:
        lo, hi = max(offset, c.start), end if c.end is None else min(end, c.end)
        if lo >= hi:
            continue
        if c.layout is None:
            return UNKNOWN
        found.update(osts_of(c.layout, lo, hi - lo))
    return "+".join(ost_name(i) for i in sorted(found)) if found else UNKNOWN


def _lfs(*args: str) -> str:
    done = subprocess.run(["lfs", *args], capture_output=True, text=True, timeout=TIMEOUT)
    if done.returncode != 0:
        raise OSError(done.returncode, f"lfs {args[0]}: {done.stderr.strip()}")
    return done.stdout


class LustreResolver(Resolver):
    """``OSTxxxx`` for data ops, ``MDTxxxx`` for metadata ops on a Lustre client mount."""

    fstypes: ClassVar[tuple[str, ...]] = ("lustre",)

    def __init__(self, target) -> None:
        super().__init__(target)
        self.refresh()

    def refresh(self) -> None:
        self._files: dict[str, tuple[Component, ...] | None] = {}
        self._dirs: dict[str, int | None] = {}

    def server(self, op: str, path: str, offset: int | None) -> str:
        try:
            if op.startswith("md-"):
                return self._mdt(os.path.dirname(path.rstrip("/")) or "/")
            if offset is None:
                return UNKNOWN
            if path not in self._files:
                try:
                    self._files[path] = parse_getstripe(_lfs("getstripe", path))
                except ValueError:
                    self._files[path] = None  # a layout not mapped: said once, not asked again
            layout = self._files[path]
            return UNKNOWN if layout is None else server_of(layout, offset)
        except (OSError, ValueError, subprocess.SubprocessError):
            return UNKNOWN

    def _mdt(self, directory: str) -> str:
        if directory not in self._dirs:
            layout = parse_getdirstripe(_lfs("getdirstripe", directory))
            self._dirs[directory] = None if layout.stripe_count > 1 else \
                parse_index(_lfs("getstripe", "-m", directory))
        index = self._dirs[directory]
        return UNKNOWN if index is None else mdt_name(index)


RESOLVER = LustreResolver
