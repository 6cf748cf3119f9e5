"""Whole-trace replay throughput: the pool's one access loop vs libCacheSim, side by side.

    python scripts/bench.py replay [--requests 1000000] [--capacity 0.1] [--repeat 3]

For each trace (a Zipf trace of ``--requests`` requests; a recorded DL trace from
data/traces/, else a synthetic DL-like one) the trace is written once as an oracleGeneral file.
Both sides replay that same request stream at the same capacity (byte accounting):

* libCacheSim: ``cache.process_trace(reader)`` with the C ``TraceReader`` over the file; the
  reader and the cache are built outside the timed region, reading the file is inside it. Its
  hash table starts at ``2**hashpower`` buckets for the trace's distinct objects
  (:func:`lcs_hashpower`; it grows as needed): the Python binding's default, 24, zeroes a
  128 MiB table during the timed replay, which made libCacheSim 2-12x slower than it is.
* ours: ``Pool(capacity, make_eviction(policy), placement="bytes", oversize="bypass")
  .replay(trace)``, the one access loop (compiled where built) with the registry's policy
  classes, on the trace read back from that file; the policy's construction is inside the timed
  region (Belady's next-use pass). ``ours_e2e`` also times reading the file (``read_trace``),
  as libCacheSim's time does: the target is judged on that ratio, ``ratio_e2e``. Its request
  and byte miss ratios must equal libCacheSim's (the run stops otherwise).

The DL trace is also replayed repeated to about ``--requests`` requests (``dl_tiled``, same
object ids), since on the small recorded trace fixed per-call costs dominate.

Timings are best of ``--repeat``, ours and libCacheSim interleaved. The timing-model replay
(``--preset``) has no libCacheSim counterpart; its throughput is printed for reference.
"""

from __future__ import annotations

import argparse
import os
import tempfile
import time
from typing import Any

import numpy as np

POLICIES = ("lru", "fifo", "clock", "sieve", "lfu", "arc", "s3fifo", "slru", "gdsf", "belady")
# libCacheSim's classes; their defaults are the registry's parameters (Clock: n_bit_counter=1,
# init_freq=0; S3FIFO: small_size_ratio=0.1, ghost_size_ratio=0.9, move_to_main_threshold=2;
# SLRU: n-seg=4)
LCS_NAMES = {"lru": "LRU", "fifo": "FIFO", "clock": "Clock", "sieve": "Sieve", "lfu": "LFU",
             "arc": "ARC", "s3fifo": "S3FIFO", "slru": "SLRU", "gdsf": "GDSF", "belady": "Belady"}


def add_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--requests", type=int, default=1_000_000, help="Zipf trace length")
    p.add_argument("--objects", type=int, default=100_000, help="Zipf objects")
    p.add_argument("--alpha", type=float, default=1.0)
    p.add_argument("--capacity", type=float, default=0.1, help="fraction of the working set")
    p.add_argument("--repeat", type=int, default=3)
    p.add_argument("--policies", default=",".join(POLICIES))
    p.add_argument("--dl-trace", default=None,
                   help="DL trace (.npz); default data/traces/gpt.npz, else generated")
    p.add_argument("--preset", default="h100_pcie5", help="timing-model figure ('' to skip)")
    p.add_argument("--dl-tiled", type=int, default=None,
                   help="also replay the DL trace repeated to about this many requests "
                        "(default --requests; 0 skips)")


def _zipf(args: argparse.Namespace) -> Any:
    from cachegym.envs.workloads import generate

    return generate("zipf", seed=0, n_requests=args.requests, n_objects=args.objects,
                    alpha=args.alpha, size=4096, size_sigma=1.0)


def _dl(args: argparse.Namespace) -> Any:
    from cachegym.allocator.trace import Trace
    from cachegym.envs.paths import data_path

    if args.dl_trace is not None:  # (a missing file given is an error: no generated stand-in)
        from cachegym.envs.workloads import read_trace

        return read_trace(args.dl_trace)
    path = data_path("traces", "gpt.npz")
    if os.path.exists(path):
        return Trace.load(path)
    from cachegym.envs.workloads import generate

    return generate("dl_training", seed=0)


def _dl_tiled(args: argparse.Namespace) -> Any:
    """The DL trace's requests repeated to about ``--dl-tiled`` requests, with the same object
    ids (later iterations touch the same tensors), so that fixed per-call costs do not dominate
    the small recorded trace."""
    from cachegym.allocator.trace import Trace
    from cachegym.envs.workloads import read_trace, write_oracle_general

    src = _dl(args)
    with tempfile.TemporaryDirectory() as d:  # the stream oracleGeneral holds (no frees)
        write_oracle_general(src, os.path.join(d, "t.og"))
        base = read_trace(os.path.join(d, "t.og"), format="oracleGeneral")
    want = args.dl_tiled if args.dl_tiled is not None else args.requests
    k = max(1, round(want / max(1, len(base))))
    n = len(base) * k
    return Trace.from_arrays(np.tile(base.key, k), np.tile(base.size, k), step=np.arange(n),
                             name=f"{src.name}x{k}")


def lcs_hashpower(n_objects: int) -> int:
    """libCacheSim's initial hash table size for a trace of ``n_objects`` distinct objects,
    as a power of two: about one bucket per object, at least 2**16 (libCacheSim's table grows
    where they are more)."""
    return max(16, int(np.ceil(np.log2(max(2, n_objects)))))


def _best(fn: Any, repeat: int) -> tuple[float, Any]:
    best, out = float("inf"), None
    for _ in range(repeat):
        t0 = time.perf_counter()
        out = fn()
        best = min(best, time.perf_counter() - t0)
    return best, out


def _pool_replay(trace: Any, cap: int, pol: str, preset: str | None = None) -> Any:
    """The pool's replay of ``trace`` with the registry's ``pol`` (its stats)."""
    from cachegym.allocator.pool import Pool
    from cachegym.policies.registry import make_eviction

    return Pool(cap, make_eviction(pol, trace=trace), placement="bytes", cost=preset,
                oversize="bypass").replay(trace)


TARGET = 3.0
"""Issue #22's target: the pool's replay at least 3x libCacheSim's speed (``ratio_e2e``: both
sides read the trace file in their timed region)."""


def run(args: argparse.Namespace) -> dict[str, Any]:
    from cachegym.allocator.errors import ConfigError
    from cachegym.policies.parity import _libcachesim

    lcs = _libcachesim()  # (a one-line error naming what to install)
    if args.dl_tiled is not None and args.dl_tiled < 0:
        raise ConfigError("--dl-tiled must be >= 0 requests (0 skips the tiled trace)")
    if args.dl_trace is not None:  # (refused before the Zipf table, not after it)
        _dl(args)
    if not 0 < args.capacity <= 1:
        raise ConfigError(f"--capacity {args.capacity}: a fraction of the working set in (0, 1]")
    policies = list(dict.fromkeys(p.strip() for p in args.policies.split(",") if p.strip()))
    bad = [p for p in policies if p not in LCS_NAMES]
    if not policies or bad:
        raise ConfigError(f"--policies {args.policies!r}: give some of {', '.join(POLICIES)} (the "
                          f"policies both sides replay alike){f'; not {bad}' if bad else ''}")
    with tempfile.TemporaryDirectory(prefix="bench_replay_") as tmp:  # (removed however it ends)
        return _run(args, lcs, policies, tmp)


def _run(args: argparse.Namespace, lcs: Any, policies: list[str], tmp: str) -> dict[str, Any]:
    from cachegym.envs.workloads import read_trace, write_oracle_general
    from cachegym.scripts.bench import loop_build

    figures: dict[str, Any] = {"capacity_fraction": args.capacity, "repeat": args.repeat,
                               "compiled": loop_build()}
    print(f"{'trace':<10} {'policy':<7} {'requests':>9} {'ours Mreq/s':>12} {'ours e2e':>9} "
          f"{'lcs Mreq/s':>11} {'ratio':>6} {'ratio e2e':>9} {'miss ours':>9} {'miss lcs':>9}")
    sources = [("zipf", _zipf), ("dl", _dl)]
    if args.dl_tiled != 0:
        sources.append(("dl_tiled", _dl_tiled))
    for tname, make in sources:
        src = make(args)
        og = os.path.join(tmp, f"{tname}.oracleGeneral")
        write_oracle_general(src, og)
        trace = read_trace(og, format="oracleGeneral")  # the stream libCacheSim reads
        n = len(trace)
        cap = max(1, int(trace.working_set_bytes() * args.capacity))
        hashpower = lcs_hashpower(int(trace.object_ids().max()) + 1 if n else 1)
        figures[tname] = {"requests": n, "capacity": cap, "source": src.name,
                          "lcs_hashpower": hashpower}
        for pol in policies:
            def ours(pol: str = pol, trace: Any = trace, cap: int = cap) -> Any:
                return _pool_replay(trace, cap, pol)

            def ours_e2e(pol: str = pol, og: str = og, cap: int = cap) -> Any:
                return _pool_replay(read_trace(og, format="oracleGeneral"), cap, pol)

            t_ours, t_e2e, t_lcs = float("inf"), float("inf"), float("inf")
            st = mr_lcs = None
            for _ in range(max(1, args.repeat)):  # interleaved: both see the same machine load
                dt, st = _best(ours, 1)
                t_ours = min(t_ours, dt)
                dt, _ = _best(ours_e2e, 1)
                t_e2e = min(t_e2e, dt)
                reader = lcs.TraceReader(og, lcs.TraceType.ORACLE_GENERAL_TRACE)
                cache = getattr(lcs, LCS_NAMES[pol])(cap, hashpower=hashpower)
                t0 = time.perf_counter()
                mr_lcs = cache.process_trace(reader)
                t_lcs = min(t_lcs, time.perf_counter() - t0)
            assert st is not None and mr_lcs is not None
            row = {
                "ours_rps": n / t_ours, "ours_e2e_rps": n / t_e2e, "lcs_rps": n / t_lcs,
                "ratio": t_lcs / t_ours, "ratio_e2e": t_lcs / t_e2e,
                "ours_miss_ratio": st.miss_ratio, "lcs_miss_ratio": float(mr_lcs[0]),
                "ours_byte_miss_ratio": st.byte_misses / max(1, int(trace.size.sum())),
                "lcs_byte_miss_ratio": float(mr_lcs[1]),
            }
            for what in ("miss_ratio", "byte_miss_ratio"):
                a, b = row[f"ours_{what}"], row[f"lcs_{what}"]
                if abs(a - b) > 1e-9 * max(1.0, abs(b)):
                    raise AssertionError(f"{tname}/{pol}: {what.replace('_', ' ')} {a} differs "
                                         f"from libCacheSim's {b}")
            if args.preset:
                dt, _ = _best(lambda pol=pol, trace=trace, cap=cap: _pool_replay(
                    trace, cap, pol, args.preset), 1)
                row["ours_timed_rps"] = n / dt
            figures[tname][pol] = row
            print(f"{tname:<10} {pol:<7} {n:>9} {row['ours_rps'] / 1e6:>12.3f} "
                  f"{row['ours_e2e_rps'] / 1e6:>9.3f} {row['lcs_rps'] / 1e6:>11.2f} "
                  f"{row['ratio']:>6.3f} {row['ratio_e2e']:>9.3f} "
                  f"{row['ours_miss_ratio']:>9.4f} {row['lcs_miss_ratio']:>9.4f}")
    if args.preset:
        print(f"timing model ({args.preset}), ours only, Mreq/s: " + ", ".join(
            f"{t}/{p}={figures[t][p]['ours_timed_rps'] / 1e6:.3f}"
            for t, _ in sources for p in policies if "ours_timed_rps" in figures[t][p]))
    print(f"ratio = libCacheSim time / ours (>= 1: ours at least as fast), e2e: ours reading the "
          f"file too, as libCacheSim does; best of {args.repeat}, interleaved; libCacheSim's hash "
          "table sized to each trace's objects (hashpower " + ", ".join(
              f"{t} {figures[t]['lcs_hashpower']}" for t, _ in sources) + ")")
    ratios = [figures[t][p]["ratio_e2e"] for t, _ in sources for p in policies]
    low = min(ratios)
    figures["target_ratio"], figures["min_ratio"] = TARGET, low
    figures["target_met"] = low >= TARGET
    print(f"target (issue #22): every e2e ratio >= {TARGET:g}: "
          f"{'met' if low >= TARGET else 'NOT met'} (lowest {low:.3f})")
    return figures


if __name__ == "__main__":  # (the same as `python scripts/bench.py replay ...`)
    import sys

    from cachegym.scripts.bench import main

    sys.exit(main(["replay", *sys.argv[1:]]))
