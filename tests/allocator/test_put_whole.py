"""Pool.put replaces every byte of its object (from a data-plane audit): it fetches nothing
first and counts no copy it does not make; a write that fails part-way leaves the earlier bytes
where they are in host memory; a CPU torch tensor of any dtype is stored as its bytes."""

from __future__ import annotations

import numpy as np
import pytest

from cachegym.allocator.backends import NumpyBackend
from cachegym.allocator.errors import BackendError, ConfigError
from cachegym.allocator.pool import Pool
from cachegym.policies.lru import LRU


class _Counting(NumpyBackend):
    """Counts the bytes each way that really move."""

    def __init__(self) -> None:
        super().__init__(threads=False)
        self.h2d = self.d2h = 0

    def copy_h2d(self, key, offset, nbytes):  # type: ignore[no-untyped-def]
        self.h2d += nbytes
        return super().copy_h2d(key, offset, nbytes)

    def copy_d2h(self, key, offset, nbytes):  # type: ignore[no-untyped-def]
        self.d2h += nbytes
        return super().copy_d2h(key, offset, nbytes)

    def stream_in(self, key, nbytes):  # type: ignore[no-untyped-def]
        self.h2d += nbytes
        return super().stream_in(key, nbytes)

    def stream_out(self, key, data):  # type: ignore[no-untyped-def]
        self.d2h += data.nbytes
        return super().stream_out(key, data)


def test_a_put_of_an_object_in_host_memory_fetches_nothing() -> None:
    be = _Counting()
    pool = Pool(2048, LRU(), backend=be)
    for k in range(3):
        pool.put(k, np.full(1024, k, np.uint8))  # 0 is evicted (written back)
    assert pool.state(0) == "host"
    pool.put(0, np.full(1024, 7, np.uint8))  # the stale bytes of 0 were fetched, then overwritten
    st = pool.snapshot()
    assert (st.bytes_h2d, st.bytes_d2h) == (be.h2d, be.d2h) == (0, 2048)
    np.testing.assert_array_equal(pool.get(0), np.full(1024, 7, np.uint8))


def test_a_put_of_a_streamed_object_counts_no_copy_in() -> None:
    """An object larger than a bypassing pool, put again: bytes_h2d counted 3000 never copied."""
    be = _Counting()
    pool = Pool(1024, LRU(), backend=be, oversize="bypass")
    big = np.arange(3000, dtype=np.uint16).astype(np.uint8)
    pool.put(1, big)
    pool.put(1, big[::-1].copy())
    st = pool.snapshot()
    assert (st.bytes_h2d, st.bytes_d2h) == (be.h2d, be.d2h) == (0, 6000)
    np.testing.assert_array_equal(pool.get(1), big[::-1])


class _HalfWrite(NumpyBackend):
    """Stores half of the bytes, then fails (an interrupted copy)."""

    fail = False

    def write(self, offset, data):  # type: ignore[no-untyped-def]
        if self.fail:
            self.device[offset:offset + data.nbytes // 2] = data[:data.nbytes // 2]
            raise OSError("interrupted")
        super().write(offset, data)


@pytest.mark.parametrize("where", ["clean on the device", "pinned, clean", "in host memory"])
def test_a_write_that_fails_part_way_keeps_the_earlier_bytes_of_host_memory(where: str) -> None:
    be = _HalfWrite(threads=False)
    pool = Pool(2048, LRU(), backend=be)
    pool.put(1, np.full(1000, 1, np.uint8))
    pool.flush()  # written back: the host copy holds the earlier bytes
    if where == "pinned, clean":
        pool.pin(1)
    elif where == "in host memory":
        pool.put(2, np.full(1024, 2, np.uint8))
        pool.put(3, np.full(1024, 3, np.uint8))
        assert pool.state(1) == "host"
    be.fail = True
    with pytest.raises(BackendError, match="keeps its previous bytes, in host memory") as e:
        pool.put(1, np.full(1000, 9, np.uint8))
    assert (e.value.key, e.value.direction) == (1, "h2d")
    be.fail = False
    np.testing.assert_array_equal(pool.get(1), np.full(1000, 1, np.uint8))
    pool.flush()
    np.testing.assert_array_equal(be.host_buffer(1)[:1000], np.full(1000, 1, np.uint8))
    pool._check()


def test_a_dirty_object_whose_write_fails_says_its_bytes_may_be_mixed() -> None:
    be = _HalfWrite(threads=False)
    pool = Pool(2048, LRU(), backend=be)
    pool.put(1, np.full(1000, 1, np.uint8))  # dirty: on the device only
    be.fail = True
    with pytest.raises(BackendError, match="unless the failed write stored part of the new ones"):
        pool.put(1, np.full(1000, 9, np.uint8))
    pool._check()


def test_torch_tensors_of_any_dtype_are_stored_as_their_bytes() -> None:
    torch = pytest.importorskip("torch")
    pool = Pool(1 << 16, LRU(), backend=NumpyBackend(threads=False))
    for i, t in enumerate([torch.randn(33, dtype=torch.bfloat16), torch.randn(5, 7, requires_grad=True),
                           torch.arange(10, dtype=torch.int64)[::2], torch.tensor(3.5)]):
        pool.put(i, t)
        want = t.detach().contiguous().reshape(-1).view(torch.uint8).numpy()
        np.testing.assert_array_equal(pool.get(i), want)
    with pytest.raises(ConfigError, match="has no bytes to store"):
        pool.put(9, {"not": "an array"})
