"""Where a byte of a CephFS file lives: its object (the file layout's RAID-0 striping) and the
placement group of that object (Ceph's object hash), as pure functions.

The arithmetic is Ceph's own (``Striper::file_to_extents`` and ``pg_pool_t::raw_pg_to_pg``
with ``ceph_str_hash_rjenkins``), so a PG computed here is the PG the cluster uses: the tests
compare it with ``ceph osd map``'s answers on a real cluster. The PG's OSDs are not computed
here (CRUSH, upmaps and temporary mappings are the monitors' to say): a PG is asked once.
"""

from __future__ import annotations

from typing import NamedTuple

HASH_RJENKINS = 2  # pg_pool_t object_hash of the pools Ceph makes (1: the Linux dcache hash)


class FileLayout(NamedTuple):
    """``ceph.file.layout`` of a file: how its bytes are cut into objects."""

    stripe_unit: int
    stripe_count: int
    object_size: int
    pool: str
    pool_namespace: str = ""


def parse_layout(text: str) -> FileLayout:
    """``stripe_unit=4194304 stripe_count=1 object_size=4194304 pool=cephfs_data`` (and
    ``pool_namespace=``) to a layout; ValueError naming what is wrong or missing."""
    fields: dict[str, str] = {}
    for word in text.split():
        key, sep, value = word.partition("=")
        if not sep:
            raise ValueError(f"ceph.file.layout: {word!r} is not key=value")
        fields[key] = value
    try:
        layout = FileLayout(int(fields["stripe_unit"]), int(fields["stripe_count"]),
                            int(fields["object_size"]), fields["pool"],
                            fields.get("pool_namespace", ""))
    except KeyError as exc:
        raise ValueError(f"ceph.file.layout: no {exc.args[0]} in {text!r}") from None
    su, sc, size = layout.stripe_unit, layout.stripe_count, layout.object_size
    if su <= 0 or sc <= 0 or size <= 0 or size % su:
        raise ValueError(f"ceph.file.layout: not a valid layout: {text!r}")
    return layout


def object_number(layout: FileLayout, offset: int) -> int:
    """The number of the object that holds byte ``offset`` (RAID-0 over ``stripe_count``
    objects at a time, ``stripe_unit`` bytes each, ``object_size / stripe_unit`` stripes
    per object before the next object set begins)."""
    if offset < 0:
        raise ValueError(f"negative offset {offset}")
    su, sc = layout.stripe_unit, layout.stripe_count
    block = offset // su  # the stripe unit of the file the byte falls in
    stripe, position = divmod(block, sc)
    object_set = stripe // (layout.object_size // su)
    return object_set * sc + position


def object_numbers(layout: FileLayout, offset: int, length: int) -> list[int]:
    """The objects a read or write of ``length`` bytes at ``offset`` touches, each once, in
    the order of the first byte it holds."""
    seen: list[int] = []
    su = layout.stripe_unit
    pos, end = offset, offset + max(length, 1)
    while pos < end:
        number = object_number(layout, pos)
        if number not in seen:
            seen.append(number)
        pos = (pos // su + 1) * su  # the next stripe unit
    return seen


def object_name(inode: int, number: int) -> str:
    """CephFS's name of a file's data object: ``<inode hex>.<number as 8 hex digits>``."""
    return f"{inode:x}.{number:08x}"


def _mix(a: int, b: int, c: int) -> tuple[int, int, int]:
    m = 0xFFFFFFFF
    a = (a - b - c) & m ^ (c >> 13)
    b = (b - c - a) & m ^ (a << 8) & m
    c = (c - a - b) & m ^ (b >> 13)
    a = (a - b - c) & m ^ (c >> 12)
    b = (b - c - a) & m ^ (a << 16) & m
    c = (c - a - b) & m ^ (b >> 5)
    a = (a - b - c) & m ^ (c >> 3)
    b = (b - c - a) & m ^ (a << 10) & m
    c = (c - a - b) & m ^ (b >> 15)
    return a, b, c


def rjenkins(data: bytes) -> int:
    """``ceph_str_hash_rjenkins``: Bob Jenkins' 1996 hash as Ceph computes object hashes."""
    m = 0xFFFFFFFF
    a = b = 0x9E3779B9
    c = 0
    k = data
    while len(k) >= 12:
        a = (a + int.from_bytes(k[0:4], "little")) & m
        b = (b + int.from_bytes(k[4:8], "little")) & m
        c = (c + int.from_bytes(k[8:12], "little")) & m
        a, b, c = _mix(a, b, c)
        k = k[12:]
    c = (c + len(data)) & m
    rest = k + bytes(12 - len(k))  # the last 0-11 bytes; c's lowest byte is the length's
    a = (a + int.from_bytes(rest[0:4], "little")) & m
    b = (b + int.from_bytes(rest[4:8], "little")) & m
    c = (c + (int.from_bytes(rest[8:12], "little") << 8)) & m
    return _mix(a, b, c)[2]


def stable_mod(x: int, b: int, bmask: int) -> int:
    """``ceph_stable_mod``: x mod b that moves few values when b grows (PG splits)."""
    return x & bmask if (x & bmask) < b else x & (bmask >> 1)


def pg_mask(pg_num: int) -> int:
    """``pg_num_mask``: the smallest all-ones mask that covers pg_num - 1."""
    return (1 << (pg_num - 1).bit_length()) - 1


def raw_hash(name: str, namespace: str = "") -> int:
    """``pg_pool_t::hash_key``: the object's 32-bit placement seed before the modulo."""
    key = f"{namespace}\037{name}" if namespace else name
    return rjenkins(key.encode())


def pg_of(pool_id: int, pg_num: int, name: str, namespace: str = "") -> str:
    """The placement group of an object, as Ceph prints it (``3.a``)."""
    return f"{pool_id}.{stable_mod(raw_hash(name, namespace), pg_num, pg_mask(pg_num)):x}"


__all__ = ["HASH_RJENKINS", "FileLayout", "object_name", "object_number", "object_numbers",
           "parse_layout", "pg_mask", "pg_of", "raw_hash", "rjenkins", "stable_mod"]
