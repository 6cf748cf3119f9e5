"""The quality benchmark: a learned policy against the heuristics on held-out traces, measured
in what a device pool pays (bytes copied, streamed accesses included) against an offline bound.

Per (trace, capacity): every policy's traffic and miss ratio, the bound (FOO's ``foo_l`` where
the trace has at most ``FOO_AUTO_MAX`` requests, else ``lfoo_l``: :func:`policies.bounds.auto_kind`), the
learned policy's ``gap_closed_traffic`` / ``gap_closed_misses`` (``(LRU - learned) / (LRU -
bound)``) and its traffic against the best heuristic's. Targets (issue 24, ``objective=traffic``):
on the DL sets, traffic at most the best heuristic's in every cell and at least half the gap to
the bound closed on average, never below 0; on Zipf and scan, never more than 1% more traffic
than the best heuristic. Every replay goes through :func:`envs.evaluation.run_one`.
"""

from __future__ import annotations

import math
import os
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from cachegym.allocator.errors import ConfigError
from cachegym.allocator.trace import Trace
from cachegym.envs.evaluation import RunSpec, in_workers, learned_name, resolve_capacity, run_one
from cachegym.envs.gaps import gap_closed
from cachegym.envs.paths import data_path

__all__ = ["HEURISTICS", "HeldOut", "default_held_out", "broad_held_out", "ZOO", "zoo_held_out",
           "quality_rows", "format_quality", "verdict"]

HEURISTICS = ("lru", "lfu", "arc", "s3fifo", "gdsf", "slru")  # issue 24's "best heuristic" is the best of these


@dataclass(frozen=True)
class HeldOut:
    """A held-out trace and its family: ``dl`` (normalised-hit-rate target) or ``zipf``/``scan``
    (best-heuristic target)."""

    trace: Trace
    family: str


def default_held_out(max_requests: int | None = None) -> list[HeldOut]:
    """Traces never trained on by ``conf/train.yaml`` / ``conf/main.yaml``: the bundled
    recordings of other models (``gpt_wide``, ``resnet_deep``, ``gpt_infer``), generated DL
    training loops with other shapes and seeds, and Zipf and scan workloads with other seeds."""
    from cachegym.envs.workloads import generate, read_trace

    out = [HeldOut(read_trace(data_path("traces", f"{n}.npz")), "dl")
           for n in ("gpt_wide", "resnet_deep", "gpt_infer")]
    for name, seed, params in (
        ("dl_training", 101, {"n_layers": 10, "hidden": 512, "batch_tokens": 1024, "steps": 4}),
        ("dl_training", 102, {"n_layers": 24, "hidden": 256, "batch_tokens": 2048, "steps": 3,
                              "n_optimizer_states": 1}),
    ):
        t = generate(name, seed=seed, **params)
        out.append(HeldOut(_named(t, f"dl_training_s{seed}"), "dl"))
    out.append(HeldOut(_named(generate("zipf", seed=201, n_requests=30_000, n_objects=3_000,
                                       alpha=1.0, size=4096, size_sigma=1.0), "zipf_s201"), "zipf"))
    out.append(HeldOut(_named(generate("scan", seed=202, n_requests=30_000, n_hot=800, alpha=0.8,
                                       scan_length=1500, scan_every=5000, size=4096),
                              "scan_s202"), "scan"))
    return [HeldOut(_first(h.trace, max_requests), h.family) for h in out]


def broad_held_out(max_requests: int | None = None) -> list[HeldOut]:
    """More workload families than the targets name (family ``"other"``, reported without a
    target): a Zipf/scan mixture, an LLM KV cache, embedding rows (read then update), a loop
    larger than the cache, uniform, a steep Zipf (alpha 1.2), a phase change, two long Zipf
    workloads of many objects (200,000-300,000 requests, far past the features' horizon: a
    CDN-like alpha 0.7 over 200,000 objects, and alpha 1.1 over 10,000), and the web-like
    families (a CDN edge cache with one-hit wonders and popularity churn, web sessions: page
    bursts; heavy-tailed sizes, 1 KiB - 100 MiB) and a storage-like one (block I/O: Zipf over
    50,000 blocks mixed with scans, sizes fixed per object, 512 B - 64 KiB; 200,000 requests);
    seeds and shapes never used in training (the web-like and storage-like families in no
    training set at all)."""
    from cachegym.envs.workloads import generate

    specs: list[tuple[str, dict[str, Any]]] = [
        ("mixture", {"components": [{"name": "zipf", "alpha": 0.9}, {"name": "scan", "weight": 0.5}]}),
        ("llm_kv_cache", {}),
        ("embedding", {}),
        ("loop", {}),
        ("uniform", {}),
        ("zipf", {"alpha": 1.2}),
        ("phase_change", {}),
        ("zipf", {"alpha": 0.7, "n_requests": 300_000, "n_objects": 200_000, "size": 4096,
                  "size_sigma": 1.0}),
        ("zipf", {"alpha": 1.1, "n_requests": 200_000, "n_objects": 10_000, "size": 4096,
                  "size_sigma": 0.5}),
        ("web_cdn", {"n_requests": 50_000}),
        ("web_session", {"n_requests": 50_000}),
        ("storage", {"n_requests": 200_000, "n_objects": 50_000}),
    ]
    out = []
    for name, params in specs:
        t = _first(generate(name, seed=777, **params), max_requests)
        label = f"{name}_a{params['alpha']}" if "alpha" in params else name
        if "n_objects" in params:
            label += f"_n{params['n_objects'] // 1000}k"
        out.append(HeldOut(_named(t, f"{label}_s777"), "other"))
    return out


ZOO: dict[str, int] = {"gru_lm": 3, "lstm_lm": 30, "speech_gru": 3, "unet": 16, "vae": 24, "mixer": 10,
                       "vit": 8, "tcn": 20, "densenet": 20}
"""The architectures of :mod:`envs.workloads.models` that no training config here uses, and the
training steps recorded of each (12,000-43,000 requests, like the bundled traces)."""


def zoo_held_out(cache_dir: str | None = None, max_requests: int | None = None,
                 names: Sequence[str] | None = None) -> list[HeldOut]:
    """DL training traces of architectures never trained on (:data:`ZOO`: recurrent language
    models, a speech model, a U-Net, a VAE, an MLP-Mixer, a ViT, a TCN, a DenseNet; ``names``
    picks some), family ``dl_zoo`` (the DL target, reported apart from the default set's by
    :func:`verdict`). Recorded with :func:`envs.workloads.recorder.record` (seed 0) on first
    use, a minute or so for all nine, and kept in ``cache_dir`` (default ``outputs/recorded``)
    for the next runs. Recording needs torch; the keys, sizes and ops depend on torch's operator decompositions, so
    another torch version may record slightly different traces."""
    from cachegym.envs.workloads import read_trace
    from cachegym.envs.workloads.models import record_workload

    unknown = [n for n in names or () if n not in ZOO]
    if unknown:
        raise ConfigError(f"zoo_held_out: unknown architecture(s) {unknown}; choose from {sorted(ZOO)}")
    cache_dir = cache_dir or os.path.join("outputs", "recorded")
    out = []
    for name in names or ZOO:
        path = record_workload(name, ZOO[name], cache_dir)
        out.append(HeldOut(_named(_first(read_trace(path), max_requests), name), "dl_zoo"))
    return out


def _named(t: Trace, name: str) -> Trace:
    return Trace(t.key, t.size, t.op, t.compute_ns, t.kind, t.step, t.meta, name)


def _first(t: Trace, max_requests: int | None) -> Trace:
    """``t``'s first ``max_requests`` rows (all of it for ``None``), under its name."""
    if not max_requests or len(t) <= max_requests:
        return t
    return _named(t.window(0, max_requests), t.name)


def quality_rows(policy_path: str, held_out: Sequence[HeldOut], capacities: Sequence[float] = (0.25, 0.5),
                 heuristics: Sequence[str] = HEURISTICS, seed: int = 0,
                 progress: bool = False, jobs: int = 1) -> list[dict[str, Any]]:
    """One row per (trace, capacity): every policy's traffic and miss ratio, the bound's, the
    learned policy's gap closed to it and its traffic against the best heuristic's. ``jobs``:
    runs and bounds computed at once in worker processes (:func:`~envs.evaluation.in_workers`;
    1: one after the other, here)."""
    from tqdm.auto import tqdm

    from cachegym.policies.bounds import Bound, auto_lower_bound

    names = ["learned", *heuristics, "belady"]
    cells = [(h, c, resolve_capacity(float(c), h.trace, "bytes", "peak_live"))
             for h in held_out for c in capacities]
    tasks: list[tuple[Any, tuple[Any, ...], dict[str, Any], str]] = []
    of: list[tuple[int, str]] = []  # each task's (cell, "bound" or the policy's name)
    for j, (h, c, cap) in enumerate(cells):  # per cell: its bound, then its runs
        t = h.trace
        tasks.append((auto_lower_bound, (t, cap), {}, f"the bound of {t.name!r} at {c}"))
        of.append((j, "bound"))
        for n in names:
            spec = (RunSpec(t.name, cap, str(c), "bytes", learned_name("shadow"), "none", "none",
                            learned=policy_path, guard="shadow") if n == "learned"
                    else RunSpec(t.name, cap, str(c), "bytes", n, "none", "none"))
            tasks.append((run_one, (t, spec), {"seed": seed, "decision_timing": n == "learned"},
                          f"{n} on {t.name!r} at {c}"))
            of.append((j, n))
    done: list[dict[str, Any]] = [{} for _ in cells]  # per cell: its bound and its runs' rows
    with tqdm(total=len(tasks), desc="quality", unit="task", disable=not progress) as bar:
        for i, got in in_workers(tasks, range(len(tasks)), jobs, bar):
            j, n = of[i]
            done[j][n] = got
            bar.update(1)
    rows = []
    for j, (h, c, cap) in enumerate(cells):
        t = h.trace
        res = {n: done[j][n] for n in names}
        # (a trace outside the bounds' model has no gap figures)
        bound = done[j]["bound"] or Bound("none", True, math.nan, math.nan, 0.0)
        traffic = {n: int(r["traffic_bytes"]) for n, r in res.items()}
        misses = {n: int(r["misses"]) for n, r in res.items()}
        best_h = min(heuristics, key=lambda n: traffic[n])
        row: dict[str, Any] = {
            "trace": t.name, "family": h.family, "capacity": c, "capacity_bytes": cap,
            **{f"traffic_{n}": traffic[n] for n in names},
            **{f"miss_{n}": res[n]["miss_ratio"] for n in names},
            "bound": bound.name, "traffic_bound": bound.traffic_bytes, "misses_bound": bound.misses,
            "gap_closed_traffic": gap_closed(traffic["lru"], traffic["learned"], bound.traffic_bytes),
            "gap_closed_misses": gap_closed(misses["lru"], misses["learned"], bound.misses),
            "best_heuristic": best_h,
            "traffic_vs_best": (traffic["learned"] / traffic[best_h] - 1.0 if traffic[best_h]
                                else float(traffic["learned"] > 0)),
            "decision_p50_us": res["learned"].get("decision_p50_us", math.nan),
            "fallbacks": res["learned"].get("fallbacks", 0),
        }
        rows.append(row)
    return rows


def _behind_lru(rows: Sequence[dict[str, Any]]) -> int:
    """How many of ``rows`` the learned policy copied more bytes than LRU in."""
    return sum(r["traffic_learned"] > r["traffic_lru"] for r in rows)


def _finite(xs: Sequence[float]) -> list[float]:
    return [x for x in xs if not math.isnan(x)]


def _family(rows: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """The figures of one family's cells."""
    gaps = _finite([r["gap_closed_traffic"] for r in rows])
    vs = [r["traffic_vs_best"] for r in rows]
    return {
        "cells": len(rows), "cells_behind_lru": _behind_lru(rows),
        "cells_behind_best": sum(v > 0 for v in vs),
        "mean_gap_closed_traffic": sum(gaps) / len(gaps) if gaps else math.nan,
        "min_gap_closed_traffic": min(gaps) if gaps else math.nan,
        "worst_traffic_vs_best": max(vs) if vs else math.nan,
        "mean_traffic_vs_best": sum(vs) / len(vs) if vs else math.nan,
    }


def verdict(rows: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """Per family (``dl``, ``dl_zoo``, ``zipf``+``scan`` as ``zipf_scan``, ``other``), its
    figures (:func:`_family`), and whether the targets are met."""
    out: dict[str, Any] = {}
    for fam, members in (("dl", ("dl",)), ("zoo", ("dl_zoo",)), ("zipf_scan", ("zipf", "scan")),
                         ("other", ("other",))):
        for k, v in _family([r for r in rows if r["family"] in members]).items():
            out[f"{fam}_{k}"] = v
    dl = [r for r in rows if r["family"] in ("dl", "dl_zoo")]
    out["dl_target_met"] = bool(dl) and all(r["traffic_vs_best"] <= 0 for r in dl) and (
        _family(dl)["mean_gap_closed_traffic"] >= 0.5) and _family(dl)["min_gap_closed_traffic"] >= 0
    out["zipf_scan_target_met"] = out["zipf_scan_cells"] > 0 and (
        out["zipf_scan_worst_traffic_vs_best"] <= 0.01)
    return out


def format_quality(rows: Sequence[dict[str, Any]], heuristics: Sequence[str] = HEURISTICS) -> str:
    """Traffic per policy (MiB), the bound's, the learned policy's gap closed (traffic, misses)
    and its traffic against the best heuristic's."""
    names = ["learned", *heuristics, "belady"]
    head = (["trace", "cap"] + [f"MiB:{n}" for n in names]
            + ["bound", "MiB:bound", "gap_traffic", "gap_misses", "vs_best"])
    lines = [head]

    def fmt(v: float, f: str) -> str:
        return "-" if math.isnan(v) else f.format(v)

    for r in rows:
        lines.append([r["trace"], f"{r['capacity']:g}"]
                     + [f"{r[f'traffic_{n}'] / 2**20:.2f}" for n in names]
                     + [r["bound"], f"{r['traffic_bound'] / 2**20:.2f}",
                        fmt(r["gap_closed_traffic"], "{:.3f}"), fmt(r["gap_closed_misses"], "{:.3f}"),
                        f"{r['traffic_vs_best']:+.2%}"])
    w = [max(len(x[i]) for x in lines) for i in range(len(head))]
    return "\n".join("  ".join(c.rjust(w[i]) if i else c.ljust(w[i]) for i, c in enumerate(x)) for x in lines)
