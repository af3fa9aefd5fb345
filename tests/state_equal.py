"""Deep equality of checkpoint state, for the tests that save and restore it.

A resumed state must come back with the same structure, key order or key set,
container types, tensor dtypes and shapes, and leaf types as what was saved;
``==`` alone would let a list stand for a tuple or a float for an int.
"""

from __future__ import annotations

import numpy as np
import torch


def assert_same_state(a, b) -> None:  # type: ignore[no-untyped-def]
    """Assert that ``b`` is ``a`` again, down to every leaf's type."""
    if isinstance(a, torch.Tensor):
        assert isinstance(b, torch.Tensor) and a.dtype == b.dtype and a.shape == b.shape
        assert torch.equal(a, b)
    elif isinstance(a, np.ndarray):
        assert a.dtype == b.dtype and np.array_equal(a, b)
    elif isinstance(a, dict):
        assert list(a) == list(b) or set(a) == set(b), (list(a), list(b))
        for k in a:
            assert_same_state(a[k], b[k])
    elif isinstance(a, (list, tuple)):
        assert type(a) is type(b) and len(a) == len(b)
        for x, y in zip(a, b, strict=True):
            assert_same_state(x, y)
    else:
        assert type(a) is type(b) and a == b
