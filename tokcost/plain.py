"""Numbers of other kinds as Python's own, before strict validation (the API's arguments and the Workload)."""

from __future__ import annotations

import numbers
from typing import Any

_AS_IS = (int, float, str, bool, type(None))


def plain(value: Any) -> Any:
    """An integer of another kind (numpy's int64: an Integral by Python's own ABC) as the int it is, and a range, a
    numpy vector or a list or tuple of them as a list of ints; strict validation refuses both, and numpy's had read
    "np.int64(8) is not an integer". Anything else as it is (a bool stays a bool, refused where a count goes)."""
    if type(value) in _AS_IS:  # the common case, first
        return value
    if isinstance(value, numbers.Integral) and not isinstance(value, (bool, int)):
        return int(value)
    if getattr(value, "ndim", None) == 1 and callable(getattr(value, "tolist", None)):  # a numpy vector: its list
        return plain(value.tolist())
    if isinstance(value, range) or (isinstance(value, (list, tuple)) and any(plain(v) is not v for v in value)):
        return [plain(v) for v in value]
    return value
