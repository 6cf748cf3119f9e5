"""Placement of objects in device memory.

Two placements share one small interface (``alloc(nbytes) -> offset | None``, ``release(offset,
nbytes)``, ``used``, ``free_bytes``, ``largest_free``, ``fragmentation``):

* :class:`Arena`: a fixed region; best-fit with splitting and coalescing, 512-byte aligned, as in
  CuPy's and PyTorch's pools. A request that fits in bytes but in no single block returns
  ``None`` and the pool evicts more: it never overcommits.
* :class:`ByteAccounting`: capacity counted in bytes alone, as caches in the literature and
  libCacheSim count it. Offsets are meaningless (always 0).
"""

from __future__ import annotations

from bisect import bisect_left, insort

import cython

ALIGN = 512
_MASK = ALIGN - 1  # ALIGN is a power of two


def align(nbytes: int, alignment: int = ALIGN) -> int:
    return (nbytes + alignment - 1) // alignment * alignment


@cython.cclass
class Placement:
    """The interface both placements share (the loop calls it as C methods where compiled):
    ``capacity`` and ``used`` bytes, ``footprint(nbytes)``, ``alloc(nbytes) -> offset | None``
    and ``release(offset, nbytes)``."""

    def __init__(self, capacity: int) -> None:
        self.capacity = int(capacity)
        self.used = 0

    def footprint(self, nbytes: int) -> int:
        raise NotImplementedError

    def alloc(self, nbytes: int) -> int | None:
        raise NotImplementedError

    def release(self, offset: int, nbytes: int) -> None:
        raise NotImplementedError


@cython.cclass
class ByteAccounting(Placement):
    """Capacity counted in bytes alone (offsets are always 0)."""

    def footprint(self, nbytes: int) -> int:
        return nbytes

    def alloc(self, nbytes: int) -> int | None:
        if self.used + nbytes > self.capacity:
            return None
        self.used += nbytes
        return 0

    def release(self, offset: int, nbytes: int) -> None:
        self.used -= nbytes

    @property
    def free_bytes(self) -> int:
        return self.capacity - self.used

    @property
    def largest_free(self) -> int:
        return self.capacity - self.used

    @property
    def fragmentation(self) -> float:
        return 0.0


@cython.cclass
class Arena(Placement):
    """Best-fit allocator over ``[0, capacity)``.

    Invariants: free blocks never overlap or touch (adjacent free blocks are coalesced);
    ``_by_size`` holds ``(size, offset)`` of every free block, sorted; ``_free`` maps each free
    block's offset to its size; ``used + free_bytes == capacity``.
    """

    def __init__(self, capacity: int) -> None:
        self.capacity = int(capacity) // ALIGN * ALIGN
        self.used = 0
        self._free: dict[int, int] = {}
        self._ends: dict[int, int] = {}  # end offset -> start offset of free blocks
        self._by_size: list[tuple[int, int]] = []
        if self.capacity:
            self._add_free(0, self.capacity)

    def footprint(self, nbytes: int) -> int:
        return (nbytes + _MASK) & ~_MASK

    def _add_free(self, off: int, size: int) -> None:
        self._free[off] = size
        self._ends[off + size] = off
        insort(self._by_size, (size, off))

    def _remove_free(self, off: int) -> int:
        size = self._free.pop(off)
        del self._ends[off + size]
        by_size = self._by_size
        del by_size[bisect_left(by_size, (size, off))]
        return size

    def alloc(self, nbytes: int) -> int | None:
        need = (nbytes + _MASK) & ~_MASK
        by_size = self._by_size
        i = bisect_left(by_size, (need, -1))
        if i == len(by_size):
            return None
        size, off = by_size[i]
        del by_size[i]
        del self._free[off]
        if size > need:  # split: the remainder stays free, its end is unchanged
            rest = off + need
            self._free[rest] = size - need
            self._ends[off + size] = rest
            insort(by_size, (size - need, rest))
        else:
            del self._ends[off + size]
        self.used += need
        return off

    def release(self, offset: int, nbytes: int) -> None:
        size = (nbytes + _MASK) & ~_MASK
        self.used -= size
        start, end = offset, offset + size
        if end in self._free:  # coalesce with the next block
            end += self._remove_free(end)
        prev = self._ends.get(start)
        if prev is not None:  # coalesce with the previous block
            self._remove_free(prev)
            start = prev
        self._add_free(start, end - start)

    @property
    def free_bytes(self) -> int:
        return self.capacity - self.used

    @property
    def largest_free(self) -> int:
        return self._by_size[-1][0] if self._by_size else 0

    @property
    def fragmentation(self) -> float:
        free = self.capacity - self.used
        return 0.0 if free == 0 else 1.0 - self.largest_free / free

    def copy(self) -> Arena:
        """A copy with its own free blocks: a model in which to place objects (a prefetcher's
        do-no-harm walk, :class:`~allocator.prefetch_timing.VictimWalk`) without touching this
        arena."""
        a: Arena = Arena(0)
        a.capacity, a.used = self.capacity, self.used
        a._free, a._ends, a._by_size = dict(self._free), dict(self._ends), list(self._by_size)
        return a

    def free_blocks(self) -> list[tuple[int, int]]:
        """``(offset, size)`` of every free block, by offset (for tests)."""
        return sorted(self._free.items())
