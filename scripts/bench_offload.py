"""Activation offload side by side in one run: step time and peak device bytes of one model
trained under each way of keeping its saved activations, with losses asserted bitwise equal.

    python scripts/bench.py offload [--steps N] [--pairs P] [--policy PATH] [--device cpu|cuda]

Modes (each trains a copy of one model from the same weights on the same batches):

* ``none``: no offload;
* ``save_on_cpu``: ``torch.autograd.graph.save_on_cpu(pin_memory=True on CUDA, else False)``;
* ``reload``: torchtune's behaviour, an on-demand reload of every saved tensor (copied to host
  on pack, back on unpack: :func:`~allocator.offload.on_demand_reload`);
* ``lru+reverse-pack@F``: :class:`~allocator.offload.ActivationOffload` with LRU and the
  timed :class:`~allocator.offload.ReversePackOrder` prefetcher, budget ``F`` of the activation
  footprint (25%, 50%, 75%; at least twice the largest saved tensor);
* ``learned@F``: the same with the exported policy ``--policy PATH`` (eviction; prefetch stays
  reverse-pack order);
* ``learned+head@F``: the exported policy for eviction and, where its file carries a prefetch
  head (the main job's joint policy does), for prefetch too: one object passed as both
  ``policy`` and ``prefetcher``, as a user deploys it.

Modes take their steps round robin (step ``i`` of every mode, in a rotating order, before step
``i + 1`` of any), so that machine noise hits them alike; ``step_ms`` is the median of a mode's
steps after the first. ``peak_device_bytes``: on CUDA, the most ``torch.cuda.max_memory_allocated``
rose above its value before a step, plus the pool's peak (its arena is CuPy memory); on a CPU, host and device are one memory, so it counts the
saved activations that stay where compute runs (all of them without offload, none with
``save_on_cpu`` and ``reload``, the pool's peak with this project).

Then the overhead check (target on CPU: at most 5%): plain and offload steps with a budget
twice the footprint (nothing evicted) alternate one by one (``--pairs`` of them, on two copies
of one model), so machine noise hits both alike; ``overhead`` is the median over pairs of
offload / plain - 1, ``overhead_of_medians`` compares the two median step times.
"""

from __future__ import annotations

import argparse
import copy
import statistics
from typing import Any, cast

FRACTIONS = (0.25, 0.5, 0.75)
THIRD_PARTY = ("save_on_cpu",)  # baselines whose numerics are PyTorch's, reported, not asserted


def add_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--steps", type=int, default=6,
                   help="steps per side-by-side mode (the first is a warm-up, not timed)")
    p.add_argument("--pairs", type=int, default=40, help="paired steps of the overhead check")
    p.add_argument("--policy", metavar="PATH", help="an exported policy file to run as well")
    p.add_argument("--device", choices=("auto", "cpu", "cuda"), default="auto",
                   help="cuda needs torch with CUDA and CuPy (auto: cuda when both are there)")
    p.add_argument("--preset", default="h100_pcie5", help="the pool's cost preset (or .json)")
    p.add_argument("--vocab", type=int, default=256)
    p.add_argument("--d", type=int, default=256)
    p.add_argument("--heads", type=int, default=4)
    p.add_argument("--layers", type=int, default=4)
    p.add_argument("--seq", type=int, default=128)
    p.add_argument("--batch", type=int, default=8)
    p.add_argument("--threads", type=int, default=1,
                   help="torch intra-op threads (1: steady timings on a shared machine)")
    p.add_argument("--seed", type=int, default=0)


def _device(want: str) -> str:
    import torch

    from cachegym.allocator.errors import ConfigError

    if want == "cpu":
        return "cpu"
    from cachegym.allocator.cupy_backend import cuda_available

    ok = torch.cuda.is_available() and cuda_available()
    if want == "cuda" and not ok:
        raise ConfigError("--device cuda: torch.cuda.is_available() or CuPy's CUDA is missing; "
                          "install torch with CUDA and cupy-cuda12x, or use --device cpu")
    return "cuda:0" if ok else "cpu"


def run(args: argparse.Namespace) -> dict[str, Any]:
    import torch

    from cachegym.allocator.backends import NumpyBackend
    from cachegym.allocator.offload import (
        ActivationOffload,
        TinyTransformer,
        activation_footprint,
        make_batches,
        on_demand_reload,
        train,
    )
    from cachegym.policies.learned import LearnedPolicy

    torch.set_num_threads(args.threads)
    torch.manual_seed(args.seed)
    device = _device(args.device)
    cuda = device != "cpu"
    sync = torch.cuda.synchronize if cuda else None
    model = TinyTransformer(args.vocab, args.d, args.heads, args.layers, args.seq).to(device)
    batches = make_batches(args.vocab, args.seq, args.batch, 4, seed=args.seed, device=device)
    fp = activation_footprint(model, batches[0])

    def backend() -> Any:
        if cuda:
            from cachegym.allocator.cupy_backend import CupyBackend

            return CupyBackend(stall_timing=True)  # the compute stream's waits, timed
        return NumpyBackend()

    def budget(frac: float) -> int:
        return max(int(frac * fp["total"]), 2 * fp["largest"])

    def offload(frac: float, policy: str | None) -> ActivationOffload:
        return ActivationOffload(budget(frac), backend=backend(), policy=policy, cost=args.preset)

    def joint(frac: float) -> ActivationOffload:
        pol = LearnedPolicy.load(args.policy, guard="shadow")
        return ActivationOffload(budget(frac), backend=backend(), policy=pol, prefetcher=pol,
                                 cost=args.preset)

    # whether the file carries a prefetch head (read once here; each mode loads its own policy)
    head = args.policy is not None and LearnedPolicy.load(args.policy, guard="none").prefetch_head is not None

    modes: list[tuple[str, float | None, Any]] = [
        ("none", None, lambda: None),
        ("save_on_cpu", None, lambda: torch.autograd.graph.save_on_cpu(pin_memory=cuda)),
        ("reload", None, lambda: on_demand_reload(pin_memory=cuda)),
    ]
    for f in FRACTIONS:
        modes.append((f"lru+reverse-pack@{f:.0%}", f, lambda f=f: offload(f, None)))
        if args.policy:
            modes.append((f"learned@{f:.0%}", f, lambda f=f: offload(f, args.policy)))
        if head:
            modes.append((f"learned+head@{f:.0%}", f, lambda f=f: joint(f)))
    # round robin: step i of every mode before step i + 1 of any (the order rotating), so that
    # machine noise hits every mode alike; each mode trains its own copy of the model
    models = [copy.deepcopy(model) for _ in modes]
    ctxs = [make() for _, _, make in modes]
    step_ns: list[list[int]] = [[] for _ in modes]
    losses: list[list[float]] = [[] for _ in modes]
    peaks = [0] * len(modes)
    try:
        for i in range(args.steps):
            b = [batches[i % len(batches)]]
            for j in range(len(modes)):
                j = (j + i) % len(modes)
                if cuda:
                    before = torch.cuda.memory_allocated()
                    torch.cuda.reset_peak_memory_stats()
                r = train(models[j], b, 1, offload=ctxs[j], sync=sync)
                if cuda:
                    peaks[j] = max(peaks[j], torch.cuda.max_memory_allocated() - before)
                step_ns[j] += r["step_ns"]
                losses[j] += r["losses"]
        stats = [c.stats() if isinstance(c, ActivationOffload) else None for c in ctxs]
        waits: list[int | None] = [  # CupyBackend(stall_timing=True)'s
            cast(Any, c.backend).stall_ns() if cuda and isinstance(c, ActivationOffload) else None
            for c in ctxs]
    finally:
        for c in ctxs:
            if isinstance(c, ActivationOffload):
                c.close()
    rows: list[dict[str, Any]] = []
    for j, (name, frac, _) in enumerate(modes):
        st = stats[j]
        pool_peak = st["peak_device_bytes"] if st else 0
        if cuda:
            peak = peaks[j] + pool_peak
        else:
            peak = fp["total"] if name == "none" else pool_peak
        timed = step_ns[j][1:] or step_ns[j]
        row: dict[str, Any] = {"mode": name, "budget_fraction": frac,
               "step_ms": statistics.median(timed) / 1e6, "peak_device_bytes": int(peak)}
        if st:
            row.update({k: st[k] for k in ("stall_ns", "late_prefetches", "late_stall_ns",
                                           "prefetches", "prefetch_hits", "evictions", "misses",
                                           "bytes_h2d", "bytes_d2h")})
            # the hooks' host time per step, and the part of it inside Pool.access (policies)
            row["hooks_ms_per_step"] = (st["pack_ns"] + st["unpack_ns"]) / 1e6 / args.steps
            row["pool_ms_per_step"] = (st["pack_pool_ns"] + st["unpack_pool_ns"]) / 1e6 / args.steps
            wait = waits[j]
            if wait is not None:  # the device time compute waited for copies, all steps
                row["device_stall_ms_per_step"] = wait / 1e6 / args.steps
        rows.append(row)
        row["losses_bitwise_equal"] = losses[j] == losses[0]  # the same floats, step by step
        row["max_loss_diff"] = max(abs(a - b) for a, b in zip(losses[j], losses[0]))
        # PyTorch's save_on_cpu saves a contiguous copy (a transposed view comes back
        # contiguous, and a matmul's backward may then take another kernel): reported, not
        # asserted; this project's modes give back the saved layout and must not change a bit
        # on the CPU. On a GPU some kernels are not deterministic run to run (an embedding's
        # backward adds with atomics): reported there (max_loss_diff), never a lost run
        if not row["losses_bitwise_equal"] and name not in THIRD_PARTY and str(device) == "cpu":
            raise AssertionError(f"offload bench: mode {name} changed the losses: {losses[j]} "
                                 f"against {losses[0]} without offload; offload must not change "
                                 "the training numerics")
    base = rows[0]["step_ms"]
    for row in rows:
        row["slowdown"] = row["step_ms"] / base
    fig = {
        "device": device, "threads": args.threads, "preset": args.preset,
        "model": {k: getattr(args, k) for k in ("vocab", "d", "heads", "layers", "seq", "batch")},
        "activation_bytes": fp["total"], "saved_tensors": fp["count"],
        "steps_per_mode": args.steps, "modes": rows,
        "losses_bitwise_equal": [r["mode"] for r in rows if r["losses_bitwise_equal"]],
        "policy": args.policy, "policy_prefetch_head": head,
        "peak_measure": ("torch.cuda.max_memory_allocated over a step + pool peak" if cuda else
                         "saved-activation bytes kept where compute runs (host = device on CPU)"),
    }
    print(f"activation offload on {device}: {fp['total'] / 2**20:.1f} MiB saved per step "
          f"({fp['count']} tensors); losses bitwise equal to no offload in "
          f"{len(fig['losses_bitwise_equal'])} of {len(rows)} modes; peak: {fig['peak_measure']}"
          + ("" if cuda else " -- counted by rule, not measured: none keeps the footprint, "
             "save_on_cpu and reload keep nothing, the pool its peak"))
    for row in rows:
        moved = ""
        if "bytes_h2d" in row:
            moved = (f"  h2d+d2h {(row['bytes_h2d'] + row['bytes_d2h']) / 2**20 / args.steps:8.1f} "
                     f"MiB/step")
        if "hooks_ms_per_step" in row:
            moved += (f"  hooks {row['hooks_ms_per_step']:.1f} ms/step "
                      f"({row['pool_ms_per_step']:.1f} in Pool.access)")
        if "device_stall_ms_per_step" in row:
            moved += f"  compute waited {row['device_stall_ms_per_step']:.2f} ms/step"
        if not row["losses_bitwise_equal"]:
            moved += f"  losses differ (max {row['max_loss_diff']:.1e})"
        print(f"  {row['mode']:<24} {row['step_ms']:8.2f} ms/step  x{row['slowdown']:.3f}  "
              f"peak {row['peak_device_bytes'] / 2**20:7.2f} MiB{moved}")
    fig.update(_overhead(args, model, batches, fp, backend, sync))
    return fig


def _overhead(args: argparse.Namespace, model: Any, batches: Any, fp: dict[str, int],
              backend: Any, sync: Any) -> dict[str, Any]:
    """Plain against offload with a budget twice the footprint, steps alternating."""
    from cachegym.allocator.offload import ActivationOffload, train

    plain_m, off_m = copy.deepcopy(model), copy.deepcopy(model)
    off = ActivationOffload(2 * fp["total"], backend=backend(), cost=args.preset)
    plain_ns: list[int] = []
    off_ns: list[int] = []
    try:
        train(plain_m, batches, 2, sync=sync)  # warm up both
        train(off_m, batches, 2, offload=off, sync=sync)
        for i in range(args.pairs):
            b = [batches[i % len(batches)]]
            order: list[tuple[Any, Any]] = [(plain_m, None), (off_m, off)]
            if i % 2:  # alternate which goes first
                order.reverse()
            for m, o in order:
                ns = train(m, b, 1, offload=o, sync=sync)["step_ns"][0]
                (off_ns if o is not None else plain_ns).append(ns)
        st = off.stats()
    finally:
        off.close()
    plain = statistics.median(plain_ns) / 1e6
    offl = statistics.median(off_ns) / 1e6
    fig = {
        "budget_bytes": 2 * fp["total"], "plain_step_ms": plain, "offload_step_ms": offl,
        "overhead": statistics.median(o / p for o, p in zip(off_ns, plain_ns)) - 1,
        "overhead_of_medians": offl / plain - 1, "pairs": len(plain_ns),
        "offload_evictions": st["evictions"], "offload_packed": st["packed"],
        "pack_ms_per_step": st["pack_ns"] / 1e6 / (len(off_ns) + 2),
        "unpack_ms_per_step": st["unpack_ns"] / 1e6 / (len(off_ns) + 2),
        "pack_pool_ms_per_step": st["pack_pool_ns"] / 1e6 / (len(off_ns) + 2),
        "unpack_pool_ms_per_step": st["unpack_pool_ns"] / 1e6 / (len(off_ns) + 2),
    }
    print(f"overhead with nothing to evict (budget 2x): plain {plain:.2f} ms/step, offload "
          f"{offl:.2f} ms/step, overhead {100 * fig['overhead']:+.1f}% (median of "
          f"{len(plain_ns)} paired steps; {100 * fig['overhead_of_medians']:+.1f}% between the "
          f"medians; {args.threads} thread(s)); host time in the hooks per step: pack "
          f"{fig['pack_ms_per_step']:.2f} ms ({fig['pack_pool_ms_per_step']:.2f} in Pool.access), "
          f"unpack {fig['unpack_ms_per_step']:.2f} ms ({fig['unpack_pool_ms_per_step']:.2f} in "
          "Pool.access)")
    fig["target_overhead"], fig["target_met"] = OVERHEAD_TARGET, fig["overhead"] <= OVERHEAD_TARGET
    print(f"target (issue #25, CPU): overhead at most {100 * OVERHEAD_TARGET:.0f}% with a budget "
          f"above the footprint: {'met' if fig['target_met'] else 'NOT met'} "
          f"({100 * fig['overhead']:+.1f}%)")
    return fig


OVERHEAD_TARGET = 0.05
"""Issue #25's CPU target: with a budget above the footprint, offload's step at most 5% slower."""


if __name__ == "__main__":  # (the same as `python scripts/bench.py offload ...`)
    import sys

    from cachegym.scripts.bench import main

    sys.exit(main(["offload", *sys.argv[1:]]))
