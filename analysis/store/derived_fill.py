"""The derived columns of records for SQL readers (schema 5), computed a batch at a time
with numpy: what migration 5's fill writes, the same values the store's SQL function gives."""

from __future__ import annotations

from slowdown.analysis.store.schema import (
    BUCKETS_HIGHEST,
    BUCKETS_LOWEST,
    BUCKETS_SCALE,
    DERIVED_QUANTILES,
)


def derived_rows(rows: list[tuple]) -> tuple[list[tuple], list[tuple]]:
    """The derived columns of records ``(series, start, hist, min, max)``, a batch at a time
    with numpy, as ``store.derived`` gives them for each decoded histogram, float for float
    and character for character (tests/test_migration.py holds it to that):
    ``([(p50, p90, p95, p99, buckets, series, start), ...], [(series, start) left over])``.

    Left over, for the SQL function to do (or to fail on, as it did), are the records whose
    histogram is not a well-formed blob of this encoding (another version or scale, a damaged
    body, indices not strictly ascending, a count beyond int64 sums) or that hold values but
    lack a float min and max.
    """
    import numpy as np

    from slowdown.analysis.histogram import codec, mapping_for
    from slowdown.analysis.histogram.histogram import rank
    from slowdown.analysis.histogram.mapping import MAX_SCALE, MIN_SCALE

    HUGE = 1 << 40  # values in one bucket: above, a record goes the SQL function's way

    def ints(parts: list[np.ndarray]) -> np.ndarray:
        return np.concatenate([p.astype(np.int64) for p in parts] or [np.empty(0, np.int64)])

    plain = [i for i, row in enumerate(rows)
             if type(row[2]) is bytes and len(row[2]) >= 3 and row[2][0] == codec.VERSION
             and MIN_SCALE <= (row[2][2] ^ 0x80) - 0x80 <= MAX_SCALE]
    odd = set(range(len(rows))).difference(plain)
    blobs = [rows[i][2] for i in plain]
    m = len(plain)
    scales = np.array([b[2] for b in blobs], np.uint8).view(np.int8).astype(np.int64)
    zero = np.zeros(m, np.int64)
    labels, indices, counts = [], [], []  # label: the record's position in ``plain``
    for s in np.unique(scales).tolist():
        members = np.flatnonzero(scales == s)
        try:
            groups, zeros, _ = codec.decode_blobs([blobs[i] for i in members], members, s)
        except codec.DecodeError:  # left to the SQL function, which names the damage
            odd.update(plain[i] for i in members.tolist())
            continue
        zero[members] = zeros
        odd.update(plain[i] for i in members[(zeros >= HUGE) | (zeros < 0)].tolist())
        for g in groups:
            odd.update(plain[i] for i in np.unique(g.label[g.count >= HUGE]).tolist())
            labels.append(g.label)
            indices.append(g.index)
            counts.append(g.count)
    label, index, count = ints(labels), ints(indices), ints(counts)
    if (label[1:] < label[:-1]).any():  # several layouts: each record's pairs in blob order
        order = np.argsort(label, kind="stable")
        label, index, count = label[order], index[order], count[order]
    unordered = (label[1:] == label[:-1]) & (index[1:] <= index[:-1])
    odd.update(plain[i] for i in np.unique(label[1:][unordered]).tolist())
    first = np.searchsorted(label, np.arange(m), "left")
    reached = np.concatenate(([0], np.cumsum(count)))  # values in all pairs before each
    total = zero + reached[np.searchsorted(label, np.arange(m), "right")] - reached[first]
    low, high = [rows[i][3] for i in plain], [rows[i][4] for i in plain]
    bounded = np.array([type(a) is float and type(b) is float for a, b in zip(low, high)],
                       bool)
    odd.update(plain[i] for i in np.flatnonzero(~bounded & (total > 0)).tolist())
    lo = np.array([a if type(a) is float else 0.0 for a in low], np.float64)[:, None]
    hi = np.array([b if type(b) is float else 0.0 for b in high], np.float64)[:, None]

    # Quantiles as Histogram.values_at_ranks takes them: the value of the rank's bucket kept
    # within [min, max]; rank 1 is the min, the last the max, a rank in the zero bucket
    # max(0, min).
    sizes, back = np.unique(total, return_inverse=True)
    ranks = np.array([[rank(q, size) for q in DERIVED_QUANTILES] for size in sizes.tolist()],
                     np.int64).reshape(len(sizes), len(DERIVED_QUANTILES))[back.ravel()]
    value = np.zeros(ranks.shape)
    if len(index):
        at = np.searchsorted(reached[1:], reached[first][:, None] + ranks - zero[:, None])
        at = np.minimum(at, len(index) - 1)  # (ranks in the zero bucket: not used)
        pair_scale = scales[label[at]]
        for s in np.unique(pair_scale).tolist():
            here = pair_scale == s
            unique, where = np.unique(index[at][here], return_inverse=True)
            bucket_value = mapping_for(s).value
            value[here] = np.array([bucket_value(i) for i in unique.tolist()])[where.ravel()]
    value = np.where(lo > value, lo, value)  # min(max(value, min), max), as Python's
    value = np.where(hi < value, hi, value)
    quantile = np.where(ranks == 1, lo, np.where(
        ranks == total[:, None], hi, np.where(
            ranks <= zero[:, None], np.where(lo > 0.0, lo, 0.0), value)))

    # Bucket counts at BUCKETS_SCALE, the zero count in the lowest bucket, as JSON text.
    shift = scales[label] - BUCKETS_SCALE if len(set(scales.tolist())) > 1 \
        else np.int64(scales[0] - BUCKETS_SCALE if m else 0)
    coarse = np.clip(np.where(shift >= 0, index >> np.maximum(shift, 0),
                              index << np.maximum(-shift, 0)), BUCKETS_LOWEST, BUCKETS_HIGHEST)
    owner, amount = label, count
    zeros = np.flatnonzero(zero)
    if len(zeros):  # each record's zero count before its pairs: in the lowest bucket
        owner = np.concatenate((zeros, label))
        owned = np.argsort(owner, kind="stable")
        owner = owner[owned]
        coarse = np.concatenate((np.full(len(zeros), BUCKETS_LOWEST), coarse))[owned]
        amount = np.concatenate((zero[zeros], count))[owned]
    run = np.flatnonzero(np.concatenate(
        ([True], (owner[1:] != owner[:-1]) | (coarse[1:] != coarse[:-1])))) if len(owner) \
        else np.empty(0, np.int64)
    summed = np.add.reduceat(amount, run) if len(run) else np.empty(0, np.int64)
    kept = summed != 0
    owner, coarse, summed = owner[run][kept], coarse[run][kept], summed[kept]
    # A few hundred distinct (bucket, count) pairs in a batch: each written once.
    pair = (coarse - BUCKETS_LOWEST) + summed * (BUCKETS_HIGHEST - BUCKETS_LOWEST + 1)
    distinct, which = np.unique(pair, return_inverse=True)
    width = BUCKETS_HIGHEST - BUCKETS_LOWEST + 1
    texts = [f'"{p % width + BUCKETS_LOWEST}":{p // width}' for p in distinct.tolist()]
    parts = [texts[j] for j in which.ravel().tolist()]
    bounds = np.searchsorted(owner, np.arange(m + 1)).tolist()

    empty = (None,) * len(DERIVED_QUANTILES)
    done = []
    for k, (i, qs, n) in enumerate(zip(plain, quantile.tolist(), total.tolist())):
        if i not in odd:
            row = rows[i]
            done.append((*(qs if n else empty),
                         "{" + ",".join(parts[bounds[k]:bounds[k + 1]]) + "}", row[0], row[1]))
    return done, [tuple(rows[i][:2]) for i in sorted(odd)]
