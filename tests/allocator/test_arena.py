"""Arena: best fit, splitting, coalescing, alignment, fragmentation; byte accounting."""

from __future__ import annotations

import random

import pytest

from cachegym.allocator.arena import ALIGN, Arena, ByteAccounting, align


def _tiles(arena: Arena, held: dict[int, int]) -> None:
    """Free blocks and held blocks tile [0, capacity) exactly; free blocks never touch."""
    spans = sorted([(o, n, "held") for o, n in held.items()] + [(o, n, "free") for o, n in arena.free_blocks()])
    pos = 0
    prev_kind = None
    for off, n, kind in spans:
        assert off == pos, f"gap or overlap at {off} (expected {pos})"
        assert off % ALIGN == 0 and n % ALIGN == 0 and n > 0
        assert not (kind == "free" and prev_kind == "free"), "adjacent free blocks not coalesced"
        pos += n
        prev_kind = kind
    assert pos == arena.capacity
    assert arena.used == sum(held.values())
    assert arena.free_bytes == arena.capacity - arena.used


def test_align() -> None:
    assert align(1) == ALIGN == 512
    assert align(512) == 512
    assert align(513) == 1024
    assert Arena(4096 + 100).capacity == 4096  # the region is aligned down


def test_footprint_is_aligned_and_alloc_aligns() -> None:
    a = Arena(8 * ALIGN)
    assert a.footprint(1) == ALIGN
    off = a.alloc(700)
    assert off == 0 and a.used == 2 * ALIGN
    assert a.alloc(1) == 2 * ALIGN


def test_best_fit_picks_the_smallest_block_that_fits() -> None:
    a = Arena(16 * ALIGN)
    offs = [a.alloc(ALIGN) for _ in range(16)]
    assert offs == [i * ALIGN for i in range(16)] and a.alloc(1) is None
    # holes of 3, 1 and 2 blocks, separated by held blocks
    for i in (1, 2, 3):
        a.release(offs[i], ALIGN)
    a.release(offs[6], ALIGN)
    for i in (9, 10):
        a.release(offs[i], ALIGN)
    assert a.free_blocks() == [(ALIGN, 3 * ALIGN), (6 * ALIGN, ALIGN), (9 * ALIGN, 2 * ALIGN)]
    assert a.alloc(ALIGN) == 6 * ALIGN  # exact fit, not the first hole
    assert a.alloc(2 * ALIGN) == 9 * ALIGN  # the 2-block hole, not the 3-block one
    assert a.alloc(2 * ALIGN) == ALIGN  # split the 3-block hole
    assert a.free_blocks() == [(3 * ALIGN, ALIGN)]


def test_best_fit_ties_go_to_the_lowest_offset() -> None:
    a = Arena(6 * ALIGN)
    offs = [a.alloc(ALIGN) for _ in range(6)]
    a.release(offs[4], ALIGN)
    a.release(offs[1], ALIGN)
    assert a.alloc(ALIGN) == ALIGN


def test_split_leaves_the_remainder_free() -> None:
    a = Arena(10 * ALIGN)
    assert a.alloc(3 * ALIGN) == 0
    assert a.free_blocks() == [(3 * ALIGN, 7 * ALIGN)]
    assert a.largest_free == 7 * ALIGN


@pytest.mark.parametrize("order", [(0, 1, 2), (2, 1, 0), (0, 2, 1), (1, 0, 2)])
def test_coalesce_in_any_release_order(order: tuple[int, int, int]) -> None:
    a = Arena(3 * ALIGN)
    offs = [a.alloc(ALIGN) for _ in range(3)]
    for i in order:
        a.release(offs[i], ALIGN)
    assert a.free_blocks() == [(0, 3 * ALIGN)]
    assert a.used == 0 and a.fragmentation == 0.0


def test_fragmentation_and_no_overcommit() -> None:
    a = Arena(4 * ALIGN)
    offs = [a.alloc(ALIGN) for _ in range(4)]
    a.release(offs[0], ALIGN)
    a.release(offs[2], ALIGN)
    assert a.free_bytes == 2 * ALIGN and a.largest_free == ALIGN
    assert a.fragmentation == pytest.approx(1 - ALIGN / (2 * ALIGN))
    # fits in bytes but in no single block: refused, never overcommitted
    assert a.alloc(2 * ALIGN) is None
    assert a.used == 2 * ALIGN
    a.release(offs[1], ALIGN)  # joins both holes into one block of 3
    assert a.fragmentation == 0.0
    assert a.alloc(2 * ALIGN) == 0


def test_full_arena_has_zero_fragmentation() -> None:
    a = Arena(2 * ALIGN)
    a.alloc(2 * ALIGN)
    assert a.free_bytes == 0 and a.largest_free == 0 and a.fragmentation == 0.0


def test_random_alloc_release_keeps_the_tiling() -> None:
    rng = random.Random(7)
    a = Arena(64 * ALIGN)
    held: dict[int, int] = {}
    for _ in range(3000):
        if held and (rng.random() < 0.45 or a.free_bytes < ALIGN):
            off = rng.choice(list(held))
            a.release(off, held.pop(off))
        else:
            n = rng.randint(1, 6 * ALIGN)
            off = a.alloc(n)
            if off is None:
                # refused only when no single free block is large enough
                assert a.largest_free < align(n)
            else:
                held[off] = align(n)
        _tiles(a, held)
        free = a.free_bytes
        expected = 0.0 if free == 0 else 1 - max(s for _, s in a.free_blocks()) / free
        assert a.fragmentation == pytest.approx(expected)


def test_byte_accounting() -> None:
    b = ByteAccounting(1000)
    assert b.footprint(7) == 7
    assert b.alloc(600) == 0 and b.alloc(400) == 0
    assert b.alloc(1) is None and b.used == 1000
    b.release(0, 600)
    assert b.free_bytes == b.largest_free == 600 and b.fragmentation == 0.0
