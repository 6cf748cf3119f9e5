"""``python scripts/bench.py guardmem``: the resident memory of a process serving an exported
policy under its guard, sampled every ``--every`` requests over ``--requests`` (default 10M)
requests to a saturated set of ``--objects`` objects (Zipf popularity, fixed sizes, a pool of a
quarter of them): once every object has been seen, a policy whose memory is bounded by the
objects it tracks keeps the process flat within noise. Also printed: the largest structure the
pool and its policy reach (:func:`policies.footprint.structure_sizes`), which must stay O(objects).

    python scripts/bench.py guardmem [--policy PATH] [--guard shadow] [--requests 10000000]

With ``--distinct N``: the memory per object seen instead, on a trace of N requests to N
distinct objects (a third-party trace of many objects, where memory grows with the objects
seen): the process's RSS growth over the replay divided by N, for the guarded policy, and for
LRU in the same kind of pool (the pools' records are most of it; a guard's heuristic shadows
keep only the keys of what left their device once they hold more than 65,536 records:
``Pool(forget_evicted=True)``).

    python scripts/bench.py guardmem --distinct 300000
"""

from __future__ import annotations

import argparse
import time
from typing import Any

import numpy as np

from cachegym.envs.paths import golden_policy


def add_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--policy", default=None,
                   help="exported policy file (default: the goldens' tests/golden/policy.npz)")
    p.add_argument("--guard", default="shadow", help="guard (conf/policy/guard/: shadow, trial, lru, none)")
    p.add_argument("--requests", type=int, default=10_000_000, help="requests in all (default 10M)")
    p.add_argument("--objects", type=int, default=2000, help="objects requested (default 2000)")
    p.add_argument("--every", type=int, default=1_000_000, help="requests between samples (default 1M)")
    p.add_argument("--alpha", type=float, default=1.0, help="Zipf exponent (default 1.0)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--distinct", type=int, default=0,
                   help="measure bytes per object seen over this many distinct objects instead")


def run(args: argparse.Namespace) -> dict[str, Any]:
    from cachegym.allocator.pool import Pool
    from cachegym.allocator.trace import Trace
    from cachegym.envs.workloads.synthetic import zipf_ranks
    from cachegym.policies.footprint import rss_bytes, structure_sizes
    from cachegym.policies.registry import make_eviction

    if args.distinct:
        return _per_object(args)
    m, every = args.objects, min(args.every, args.requests)
    rng = np.random.default_rng(args.seed)
    keys = rng.permutation(m).astype(np.int64)
    size = 4096
    policy = args.policy or golden_policy()
    pol = make_eviction("learned", path=policy, guard=args.guard)
    pool = Pool(max(1, m // 4) * size, pol, placement="bytes", oversize="bypass")
    samples: list[dict[str, Any]] = []
    done = 0
    t0 = time.perf_counter()
    print(f"{'requests':>12} {'RSS MiB':>9} {'req/s':>9}  largest structure")
    while done < args.requests:  # (chunks of at most 100,000 that end on every sample)
        n = min(100_000, every - done % every, args.requests - done)
        tr = Trace.from_arrays(keys[zipf_ranks(rng, n, m, args.alpha)], size)
        pool.replay(tr)
        done += n
        if done % every == 0 or done == args.requests:
            dt = time.perf_counter() - t0
            sizes = structure_sizes(pool, "pool")
            path, largest = max(sizes.items(), key=lambda kv: kv[1])
            s = {"requests": done, "rss_mib": rss_bytes() / 2**20, "req_per_s": done / dt,
                 "largest": largest, "largest_path": path}
            samples.append(s)
            print(f"{done:>12,} {s['rss_mib']:>9.1f} {s['req_per_s']:>9,.0f}  {largest:,} ({path})",
                  flush=True)
    first, last = samples[0], samples[-1]
    growth = last["rss_mib"] - first["rss_mib"]
    print(f"RSS from {first['requests']:,} to {last['requests']:,} requests: {growth:+.1f} MiB "
          f"({m:,} objects, guard {args.guard})")
    # flat: once every object has been seen (the second half of the samples), RSS grows by no
    # more than noise (FLAT_MIB + FLAT_SHARE of it), nor does the largest structure
    mid = samples[len(samples) // 2]
    late = last["rss_mib"] - mid["rss_mib"]
    flat: bool | None = (late <= FLAT_MIB + FLAT_SHARE * mid["rss_mib"]
                         and last["largest"] <= 1.1 * mid["largest"])
    if len(samples) < 3 or mid["requests"] < m:  # (one sample, or before the objects were seen,
        flat = None  # was called flat)
        print(f"target: not judged ({len(samples)} samples, the second half from "
              f"{mid['requests']:,} requests over {m:,} objects): give --requests of at least "
              "3 --every and --every of at least the objects (--objects)")
    else:
        print(f"target: flat over the second half ({mid['requests']:,} to {last['requests']:,} "
              f"requests: RSS {late:+.1f} MiB, largest structure {mid['largest']:,} -> "
              f"{last['largest']:,}; at most {FLAT_MIB} MiB + {100 * FLAT_SHARE:.0f}% and "
              f"+10%): {'met' if flat else 'NOT met'}")
    return {"objects": m, "guard": args.guard, "samples": samples, "rss_growth_mib": growth,
            "rss_growth_second_half_mib": late, "target_met": flat}


FLAT_MIB, FLAT_SHARE = 5.0, 0.02
"""What "flat within noise" allows over the second half of the samples: 5 MiB + 2% of RSS."""


def _per_object(args: argparse.Namespace) -> dict[str, Any]:
    """RSS growth per object seen: ``--distinct`` requests to as many distinct objects, replayed
    by the guarded policy, then by LRU, each in a new pool of 10,000 objects' bytes (the guarded
    one first: memory a run frees is reused by the next one, not returned)."""
    from cachegym.allocator.errors import ConfigError
    from cachegym.allocator.pool import Pool
    from cachegym.allocator.trace import Trace
    from cachegym.policies.footprint import rss_bytes
    from cachegym.policies.registry import make_eviction

    n = args.distinct
    if n < 1:
        raise ConfigError(f"--distinct: {n} is not a number of objects; give one >= 1")
    # distinct keys in no simple order (an odd multiplier is a bijection modulo 2**40)
    tr = Trace.from_arrays(np.arange(n, dtype=np.int64) * 2654435761 % (1 << 40), 4096)
    policy = args.policy or golden_policy()
    out: dict[str, Any] = {"objects": n, "guard": args.guard}
    for name in ("learned", "lru"):
        pol = (make_eviction("learned", path=policy, guard=args.guard) if name == "learned"
               else make_eviction("lru"))
        pool = Pool(10_000 * 4096, pol, placement="bytes", oversize="bypass")
        before = rss_bytes()
        t0 = time.perf_counter()
        pool.replay(tr)
        dt = time.perf_counter() - t0
        per = (rss_bytes() - before) / n
        label = f"learned[{args.guard}]" if name == "learned" else "lru"
        print(f"{label:>16}: {per:,.0f} bytes per object seen ({n:,} objects, {n / dt:,.0f} "
              "requests/s)", flush=True)
        out[name] = {"bytes_per_object": per, "req_per_s": n / dt}
        del pool, pol
    return out


if __name__ == "__main__":  # (the same as `python scripts/bench.py guardmem ...`)
    import sys

    from cachegym.scripts.bench import main

    sys.exit(main(["guardmem", *sys.argv[1:]]))
