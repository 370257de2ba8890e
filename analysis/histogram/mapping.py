"""Value-to-bucket mapping of the exponential histogram.

The scheme is the one of Prometheus native histograms and OpenTelemetry exponential
histograms: at scale ``s`` the base is ``2 ** (2 ** -s)`` and bucket ``i`` holds the values
in ``(base**i, base**(i+1)]``.

The index is computed from the float's binary exponent plus a search in a table of the
``2**s`` sub-bucket boundaries inside one power of two, not from ``log()``: the scalar path
(``bisect``) and the vectorised path (``numpy.searchsorted``) then agree to the last bit,
and the boundaries of scale ``s - k`` are exactly every ``2**k``-th boundary of scale ``s``,
so ``index(v, s) >> k == index(v, s - k)`` holds for every value, edges included.
"""

from __future__ import annotations

import math
from bisect import bisect_left
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import numpy as np

MIN_SCALE = -4  # as Prometheus native histograms
MAX_SCALE = 12
DEFAULT_SCALE = 5


class ExponentialMapping:
    """Maps positive values to bucket indices at one scale, and indices back to bounds."""

    __slots__ = ("_bounds", "_bounds_array", "base", "relative_accuracy", "scale")

    def __init__(self, scale: int = DEFAULT_SCALE) -> None:
        if not isinstance(scale, int) or not MIN_SCALE <= scale <= MAX_SCALE:
            raise ValueError(f"scale must be an integer in {MIN_SCALE}..{MAX_SCALE}, got {scale!r}")
        self.scale = scale
        self.base = 2.0 ** (2.0**-scale)
        # Representing a bucket by 2*lo*hi/(lo+hi) bounds the relative error of any value in it.
        self.relative_accuracy = (self.base - 1.0) / (self.base + 1.0)
        # Sub-bucket lower edges inside [1, 2) at scale max(scale, 0); the exponents j / 2**s
        # are exact binary fractions, so coarser scales pick exactly the same floats.
        sub = 1 << max(scale, 0)
        self._bounds = [2.0 ** (j / sub) for j in range(sub)]
        self._bounds_array = None  # numpy copy, made on first vectorised use

    @property
    def _bounds_np(self) -> np.ndarray:
        if self._bounds_array is None:
            import numpy as np

            self._bounds_array = np.array(self._bounds, dtype=np.float64)
        return self._bounds_array

    def __repr__(self) -> str:
        return f"ExponentialMapping(scale={self.scale})"

    def __eq__(self, other: object) -> bool:
        return isinstance(other, ExponentialMapping) and other.scale == self.scale

    def __hash__(self) -> int:
        return hash(self.scale)

    def index(self, value: float) -> int:
        """Bucket index of one positive, finite value."""
        mantissa, exponent = math.frexp(value)  # mantissa in [0.5, 1)
        if self.scale >= 0:
            sub = bisect_left(self._bounds, mantissa * 2.0)
            return ((exponent - 1) << self.scale) + sub - 1
        return (exponent - 2 if mantissa == 0.5 else exponent - 1) >> -self.scale

    def indices(self, values: np.ndarray) -> np.ndarray:
        """Bucket indices of an array of positive, finite values, in one vectorised pass."""
        import numpy as np

        mantissa, exponent = np.frexp(np.asarray(values, dtype=np.float64))
        exponent = exponent.astype(np.int64)
        if self.scale >= 0:
            sub = np.searchsorted(self._bounds_np, mantissa * 2.0, side="left")
            return ((exponent - 1) << self.scale) + sub - 1
        return np.where(mantissa == 0.5, exponent - 2, exponent - 1) >> -self.scale

    def lower_bound(self, index: int) -> float:
        """Exclusive lower edge of bucket ``index`` (``base ** index``)."""
        if self.scale >= 0:
            return math.ldexp(self._bounds[index & ((1 << self.scale) - 1)], index >> self.scale)
        return math.ldexp(1.0, index << -self.scale)

    def upper_bound(self, index: int) -> float:
        """Inclusive upper edge of bucket ``index`` (``base ** (index + 1)``)."""
        return self.lower_bound(index + 1)

    def bounds(self, indices: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Lower and upper edges of an array of indices, vectorised."""
        import numpy as np

        idx = np.asarray(indices, dtype=np.int64)
        if self.scale >= 0:
            mask = (1 << self.scale) - 1
            lower = np.ldexp(self._bounds_np[idx & mask], idx >> self.scale)
            nxt = idx + 1
            upper = np.ldexp(self._bounds_np[nxt & mask], nxt >> self.scale)
        else:
            shift = -self.scale
            lower = np.ldexp(1.0, idx << shift)
            upper = np.ldexp(1.0, (idx + 1) << shift)
        return lower, upper

    def value(self, index: int) -> float:
        """The value representing bucket ``index``: within ``relative_accuracy`` of its members."""
        lower = self.lower_bound(index)
        upper = self.upper_bound(index)
        return 2.0 * lower * upper / (lower + upper)
