"""Activation-offload overhead: a training step with the pool (budget larger than the
activation footprint, so nothing is evicted) against plain training, side by side in one run.

    python scripts/bench.py offload [--steps N] [--rounds R] [--d D] [--layers L] ...

Plain and offload steps alternate one by one (on two copies of one model), so machine noise
hits both alike. ``overhead`` is the median over pairs of offload / plain - 1 (target: at most
0.05 on CPU); ``overhead_of_medians`` compares the two median step times.
"""

from __future__ import annotations

import argparse
import copy
import statistics
from typing import Any


def add_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--steps", type=int, default=40, help="timed steps per mode")
    p.add_argument("--vocab", type=int, default=256)
    p.add_argument("--d", type=int, default=256)
    p.add_argument("--heads", type=int, default=4)
    p.add_argument("--layers", type=int, default=4)
    p.add_argument("--seq", type=int, default=128)
    p.add_argument("--batch", type=int, default=8)
    p.add_argument("--threads", type=int, default=1,
                   help="torch intra-op threads (1: steady timings on a shared machine)")
    p.add_argument("--seed", type=int, default=0)


def run(args: argparse.Namespace) -> dict[str, Any]:
    import torch

    from cachegym.allocator.backends import NumpyBackend
    from cachegym.allocator.offload import (
        ActivationOffload,
        TinyTransformer,
        activation_footprint,
        make_batches,
        train,
    )

    torch.set_num_threads(args.threads)
    torch.manual_seed(args.seed)
    model = TinyTransformer(args.vocab, args.d, args.heads, args.layers, args.seq)
    twin = copy.deepcopy(model)
    batches = make_batches(args.vocab, args.seq, args.batch, 4, seed=args.seed)
    fp = activation_footprint(model, batches[0])
    off = ActivationOffload(2 * fp["total"], backend=NumpyBackend())
    plain_ns: list[int] = []
    off_ns: list[int] = []
    try:
        train(model, batches, 2)  # warm up both
        train(twin, batches, 2, offload=off)
        for i in range(args.steps):
            b = [batches[i % len(batches)]]
            first: tuple[Any, Any] = (model, None)
            second: tuple[Any, Any] = (twin, off)
            if i % 2:  # alternate which goes first
                first, second = second, first
            for m, o in (first, second):
                ns = train(m, b, 1, offload=o)["step_ns"][0]
                (off_ns if o is not None else plain_ns).append(ns)
        st = off.stats()
    finally:
        off.close()
    plain = statistics.median(plain_ns) / 1e6
    offl = statistics.median(off_ns) / 1e6
    fig = {
        "model": {k: getattr(args, k) for k in ("vocab", "d", "heads", "layers", "seq", "batch")},
        "threads": args.threads,
        "activation_bytes": fp["total"], "saved_tensors": fp["count"],
        "budget_bytes": 2 * fp["total"],
        "plain_step_ms": plain, "offload_step_ms": offl,
        "overhead": statistics.median(o / p for o, p in zip(off_ns, plain_ns)) - 1,
        "overhead_of_medians": offl / plain - 1,
        "steps_per_mode": len(plain_ns),
        "offload_evictions": st["evictions"], "offload_packed": st["packed"],
        "pack_ms_per_step": st["pack_ns"] / 1e6 / max(len(off_ns) + 2, 1),
        "unpack_ms_per_step": st["unpack_ns"] / 1e6 / max(len(off_ns) + 2, 1),
    }
    print(f"activation offload, nothing to evict ({fp['total'] / 2**20:.1f} MiB saved per step, "
          f"{fp['count']} tensors, budget 2x): plain {plain:.2f} ms/step, offload {offl:.2f} "
          f"ms/step, overhead {100 * fig['overhead']:+.1f}% (median of {len(plain_ns)} paired "
          f"steps; {100 * fig['overhead_of_medians']:+.1f}% between the medians; "
          f"{args.threads} thread(s))")
    return fig
