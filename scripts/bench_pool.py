"""Per-access cost of ``Pool.access`` against a bare ``OrderedDict`` LRU loop, side by side.

    python scripts/bench.py pool [--accesses 200000] [--repeat 5] [--placement bytes]

Two phases, each over the same key/size stream for both sides:

* hits: ``--objects`` objects that all fit, accessed in random order (every access a hit);
* misses: a cyclic scan over twice as many objects as fit, so LRU misses on every access and
  evicts one object each time (for the pool, with no backend and no timing model).

The reference is the smallest LRU cache loop Python allows (``move_to_end`` on a hit;
``popitem(last=False)`` until the new object fits in bytes, then insert). The pool runs the
same decisions through its one access loop with the :class:`policies.lru.LRU` object.
``placement="bytes"`` is the like-for-like setting (the reference counts bytes too); the arena
placement is timed as well for reference. The two sides run interleaved ``--repeat`` times; ns/access are the best
runs, ``ratio`` is the median of the ratios of adjacent runs (robust to load that comes and
goes; ``best/best`` is printed too). Targets: a hit at most 3x the bare loop's step,
a miss with eviction at most 10x.
"""

from __future__ import annotations

import argparse
import gc
import random
import statistics
import threading
import time
from collections import OrderedDict
from collections.abc import Callable
from typing import Any

HIT_TARGET = 3.0
MISS_TARGET = 10.0


def add_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--accesses", type=int, default=50_000, help="accesses per phase and run")
    p.add_argument("--objects", type=int, default=1000, help="objects that fit in the pool")
    p.add_argument("--size", type=int, default=4096, help="object size in bytes")
    p.add_argument("--repeat", type=int, default=15, help="interleaved runs per side")
    p.add_argument("--placement", choices=("bytes", "arena", "both"), default="both",
                   help="pool placement; 'bytes' is the like-for-like comparison")
    p.add_argument("--seed", type=int, default=0)


def bare_lru(order: OrderedDict[int, int], used: int, keys: list[int], sizes: list[int],
             capacity: int) -> tuple[int, int]:
    """The reference: an OrderedDict LRU over bytes, continuing from ``(order, used)``.
    Returns ``(used, misses)``."""
    misses = 0
    for k, s in zip(keys, sizes):
        if k in order:
            order.move_to_end(k)
            continue
        misses += 1
        while used + s > capacity:
            used -= order.popitem(last=False)[1]
        order[k] = s
        used += s
    return used, misses


class _Floor:
    """The least any thread-safe ``access(key, size)`` method costs on a hit: a method call,
    the lock, a dict lookup and the recency update (reported as ``floor``)."""

    def __init__(self, order: OrderedDict[int, int]) -> None:
        self._lock = threading.RLock()
        self._acquire, self._release = self._lock.acquire, self._lock.release
        self._order = order

    def access(self, key: int, size: int, write: bool = False) -> bool:
        self._acquire()
        try:
            if key in self._order:
                self._order.move_to_end(key)
                return True
            return False
        finally:
            self._release()


def floor_loop(floor: _Floor, keys: list[int], sizes: list[int]) -> int:
    access = floor.access
    for k, s in zip(keys, sizes):
        access(k, s)
    return 0


def pool_lru(pool: Any, keys: list[int], sizes: list[int]) -> int:
    """The same stream through ``Pool.access`` (the pool's LRU policy decides)."""
    access = pool.access
    for k, s in zip(keys, sizes):
        access(k, s)
    return int(pool.stats.misses)


def _workloads(args: argparse.Namespace) -> dict[str, tuple[list[int], list[int], int]]:
    """phase -> (warm-up keys, timed keys, capacity). A warm-up (not timed) fills the cache
    with objects 0..n-1: every timed access of the hit phase is a hit; the miss phase scans
    n..2n-1, 0..n-1, ... so that every timed access misses and evicts exactly one object."""
    rng = random.Random(args.seed)
    n, cap = args.objects, args.objects * args.size
    hits = [rng.randrange(n) for _ in range(args.accesses)]
    scan = [(n + i) % (2 * n) for i in range(args.accesses)]
    return {"hit": (list(range(n)), hits, cap), "miss": (list(range(n)), scan, cap)}


def _timed(fn: Callable[[], Any]) -> tuple[float, Any]:
    gc.collect()
    gc.disable()
    try:
        t0 = time.perf_counter()
        out = fn()
        return time.perf_counter() - t0, out
    finally:
        gc.enable()


def _measure(warm: list[int], keys: list[int], cap: int, size: int, placement: str,
             repeat: int, floor: bool) -> dict[str, Any]:
    from cachegym.allocator.pool import Pool
    from cachegym.policies.lru import LRU

    wsizes, sizes = [size] * len(warm), [size] * len(keys)
    t_bare: list[float] = []
    t_pool: list[float] = []
    t_floor: list[float] = []
    misses_bare = misses_pool = -1
    for _ in range(max(1, repeat)):  # interleaved: both sides see the same machine load
        order: OrderedDict[int, int] = OrderedDict()
        used, _ = bare_lru(order, 0, warm, wsizes, cap)
        dt, (_, misses_bare) = _timed(lambda: bare_lru(order, used, keys, sizes, cap))  # noqa: B023
        t_bare.append(dt)
        pool = Pool(cap, LRU(), placement=placement)  # type: ignore[arg-type]
        pool_lru(pool, warm, wsizes)
        before = pool.stats.misses
        dt, after = _timed(lambda: pool_lru(pool, keys, sizes))  # noqa: B023
        misses_pool = after - before
        t_pool.append(dt)
        if floor:
            f = _Floor(OrderedDict((k, size) for k in warm))
            t_floor.append(_timed(lambda: floor_loop(f, keys, sizes))[0])  # noqa: B023
    if misses_bare != misses_pool:
        raise AssertionError(f"the pool and the reference disagree: {misses_pool} vs {misses_bare} misses")
    n = len(keys)
    out = {"pool_ns": min(t_pool) / n * 1e9, "bare_ns": min(t_bare) / n * 1e9,
           # the median of the ratios of adjacent runs: robust to load that comes and goes
           "ratio": statistics.median(p / b for p, b in zip(t_pool, t_bare)),
           "ratio_of_best": min(t_pool) / min(t_bare), "misses": misses_pool, "accesses": n}
    if floor:
        out["floor_ns"] = min(t_floor) / n * 1e9
        out["floor_ratio"] = statistics.median(f / b for f, b in zip(t_floor, t_bare))
    return out


def run(args: argparse.Namespace) -> dict[str, Any]:
    from cachegym.allocator.arena import ALIGN
    from cachegym.allocator.errors import ConfigError

    placements = ("bytes", "arena") if args.placement == "both" else (args.placement,)
    if args.accesses < 1000:  # (4 ended in a division by zero: nothing to time)
        raise ConfigError(f"--accesses {args.accesses}: give at least 1,000 accesses per phase "
                          "(fewer take less time than the clock resolves)")
    if "arena" in placements and args.size % ALIGN:  # (refused before the bytes rows are run)
        raise ConfigError(f"--size {args.size}: the arena placement's blocks are {ALIGN} bytes, so "
                          f"its objects' sizes are multiples of {ALIGN} (one eviction per miss); "
                          "give such a --size, or --placement bytes")
    work = _workloads(args)
    figures: dict[str, Any] = {"accesses": args.accesses, "objects": args.objects,
                               "size": args.size, "repeat": args.repeat,
                               "targets": {"hit": HIT_TARGET, "miss": MISS_TARGET}}
    from cachegym.scripts.bench import loop_build

    figures["compiled"] = loop_build()
    print(f"{'placement':<9} {'phase':<5} {'pool ns/access':>15} {'bare ns/access':>15} "
          f"{'ratio':>6} {'best/best':>9} {'target':>7} {'misses':>8}")
    # one untimed pass first: the interpreter's specialisation and the CPU's clock settle
    for warm, keys, cap in work.values():
        _measure(warm, keys[: len(keys) // 5], cap, args.size, placements[0], 2, floor=True)
    for placement in placements:
        for phase, (warm, keys, cap) in work.items():
            r = _measure(warm, keys, cap, args.size, placement, args.repeat, floor=phase == "hit")
            target = HIT_TARGET if phase == "hit" else MISS_TARGET
            r["target"] = target
            r["met"] = r["ratio"] <= target
            figures[f"{placement}_{phase}"] = r
            print(f"{placement:<9} {phase:<5} {r['pool_ns']:>15.0f} {r['bare_ns']:>15.0f} "
                  f"{r['ratio']:>5.2f}x {r['ratio_of_best']:>8.2f}x {'<=' + str(target) + 'x':>7} "
                  f"{r['misses']:>8}{'' if r['met'] else '  MISSED'}")
            if "floor_ns" in r:
                print(f"{'':<9} {'floor':<5} {r['floor_ns']:>15.0f} {'':>15} {r['floor_ratio']:>5.2f}x"
                      "   (method call + lock + dict lookup + move_to_end: the least a "
                      "thread-safe access costs)")
    return figures


if __name__ == "__main__":  # (the same as `python scripts/bench.py pool ...`)
    import sys

    from cachegym.scripts.bench import main

    sys.exit(main(["pool", *sys.argv[1:]]))
