"""Helpers the tests' trace makers share (the goldens' makers in ``tests/golden/`` are frozen
copies and do not use them)."""

from __future__ import annotations

import numpy as np

from cachegym.allocator.trace import Op


def free_some(key: np.ndarray, op: np.ndarray, rng: np.random.Generator, p: float) -> None:
    """Turn into a free, with probability ``p`` (one ``rng.random()`` per access of a live
    key), an access of a key that is live (accessed since its last free), in place in ``op``:
    a trace frees only what it holds, and an access after a free makes a new object."""
    live: set[int] = set()
    for i in range(len(key)):
        k = int(key[i])
        if k in live and rng.random() < p:
            op[i] = Op.FREE
            live.discard(k)
        else:
            live.add(k)
