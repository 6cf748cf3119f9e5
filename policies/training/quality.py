"""The quality benchmark: a learned policy against the heuristics and Belady on held-out traces.

Targets (from the issue): on DL-training traces of models not trained on, at 25% and 50% of
peak live bytes, normalised hit rate ``(hit - hit_lru) / (hit_belady - hit_lru)`` at least 0.7
on average and never below 0; on Zipf and scan workloads, the hit rate never more than 2% (of
accesses) below the best heuristic's. Every replay goes through :func:`envs.evaluation.run_one`.
"""

from __future__ import annotations

import math
import os
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from allocator.errors import ConfigError
from allocator.trace import Trace
from envs.evaluation import RunSpec, learned_name, normalized_hit_rate, resolve_capacity, run_one
from envs.paths import PROJECT_ROOT

__all__ = ["HEURISTICS", "HeldOut", "default_held_out", "broad_held_out", "ZOO", "zoo_held_out",
           "quality_rows", "format_quality", "verdict"]

HEURISTICS = ("lru", "lfu", "arc", "s3fifo", "gdsf")
ROOT = PROJECT_ROOT


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
    from envs.workloads import generate, read_trace

    out = [HeldOut(read_trace(os.path.join(ROOT, "data", "traces", f"{n}.npz")), "dl")
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
    larger than the cache, uniform, a steep Zipf (alpha 1.2), a phase change, and two long Zipf
    workloads of many objects (200,000-300,000 requests, far past the features' horizon: a
    CDN-like alpha 0.7 over 200,000 objects, and alpha 1.1 over 10,000); seeds and shapes never
    used in training."""
    from envs.workloads import generate

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
    from envs.workloads import read_trace
    from envs.workloads.models import make_workload
    from envs.workloads.recorder import record

    unknown = [n for n in names or () if n not in ZOO]
    if unknown:
        raise ConfigError(f"zoo_held_out: unknown architecture(s) {unknown}; choose from {sorted(ZOO)}")
    cache_dir = cache_dir or os.path.join(ROOT, "outputs", "recorded")
    out = []
    for name in names or ZOO:
        steps = ZOO[name]
        path = os.path.join(cache_dir, f"{name}_s0_steps{steps}.npz")
        if not os.path.isfile(path):
            w = make_workload(name, seed=0)
            t = record(w.model, w.optimizer, w.make_batch, w.loss_fn, steps=steps, seed=0, name=name,
                       meta={"workload": name, "description": w.description})
            os.makedirs(cache_dir, exist_ok=True)
            t.save(path)
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
                 progress: bool = False) -> list[dict[str, Any]]:
    """One row per (trace, capacity): every policy's miss ratio and hit ratio, the learned
    policy's normalised hit rate and its hit-ratio gap to the best heuristic."""
    from tqdm.auto import tqdm

    names = ["learned", *heuristics, "belady"]
    rows = []
    jobs = [(h, c) for h in held_out for c in capacities]
    for h, c in tqdm(jobs, desc="quality", unit="cell", disable=not progress):
        t = h.trace
        cap = resolve_capacity(float(c), t, "bytes", "peak_live")
        res = {}
        for n in names:
            spec = (RunSpec(t.name, cap, str(c), "bytes", learned_name("shadow"), "none", "none",
                            learned=policy_path, guard="shadow") if n == "learned"
                    else RunSpec(t.name, cap, str(c), "bytes", n, "none", "none"))
            res[n] = run_one(t, spec, seed=seed, decision_timing=n == "learned")
        hits = {n: r["hits"] for n, r in res.items()}
        acc = max(1, res["lru"]["hits"] + res["lru"]["misses"])
        best_h = max(heuristics, key=lambda n: hits[n])
        row: dict[str, Any] = {
            "trace": t.name, "family": h.family, "capacity": c, "capacity_bytes": cap,
            **{f"miss_{n}": res[n]["miss_ratio"] for n in names},
            "normalized_hit_rate": normalized_hit_rate(hits["learned"], hits["lru"], hits["belady"]),
            "best_heuristic": best_h,
            "gap_to_best": (hits[best_h] - hits["learned"]) / acc,
            "decision_p50_us": res["learned"].get("decision_p50_us", math.nan),
            "fallbacks": res["learned"].get("fallbacks", 0),
        }
        rows.append(row)
    return rows


def _behind_lru(rows: Sequence[dict[str, Any]]) -> int:
    """How many of ``rows`` the learned policy missed more often than LRU."""
    return sum(r["miss_learned"] > r["miss_lru"] for r in rows)


def verdict(rows: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """Whether the targets are met, and by how much they are missed."""
    dl = [r["normalized_hit_rate"] for r in rows if r["family"] == "dl" and not math.isnan(r["normalized_hit_rate"])]
    other = [r["gap_to_best"] for r in rows if r["family"] in ("zipf", "scan")]
    mean_dl = sum(dl) / len(dl) if dl else math.nan
    min_dl = min(dl) if dl else math.nan
    worst_gap = max(other) if other else math.nan
    other_rows = [r for r in rows if r["family"] == "other"]
    broad = [r["gap_to_best"] for r in other_rows]
    dl_rows = [r for r in rows if r["family"] == "dl"]
    zoo = [r for r in rows if r["family"] == "dl_zoo"]
    zoo_nhr = sorted(r["normalized_hit_rate"] for r in zoo if not math.isnan(r["normalized_hit_rate"]))
    return {
        "dl_cells": len(dl_rows),
        "dl_cells_behind_lru": _behind_lru(dl_rows),
        "zoo_cells": len(zoo),
        "zoo_cells_behind_lru": _behind_lru(zoo),
        "zoo_mean_gain_over_lru": (sum(r["miss_lru"] - r["miss_learned"] for r in zoo) / len(zoo)
                                   if zoo else math.nan),
        "zoo_median_normalized_hit_rate": zoo_nhr[len(zoo_nhr) // 2] if zoo_nhr else math.nan,
        "zoo_min_normalized_hit_rate": zoo_nhr[0] if zoo_nhr else math.nan,
        "other_worst_gap": max(broad) if broad else math.nan,
        "other_mean_gap": sum(broad) / len(broad) if broad else math.nan,
        "other_cells_behind_lru": _behind_lru(other_rows),
        "other_cells": len(broad),
        "dl_mean_normalized_hit_rate": mean_dl, "dl_min_normalized_hit_rate": min_dl,
        "dl_target_met": bool(dl) and mean_dl >= 0.7 and min_dl >= 0.0,
        "zipf_scan_worst_gap": worst_gap,
        "zipf_scan_target_met": bool(other) and worst_gap <= 0.02,
    }


def format_quality(rows: Sequence[dict[str, Any]], heuristics: Sequence[str] = HEURISTICS) -> str:
    names = ["learned", *heuristics, "belady"]
    head = ["trace", "cap"] + [f"miss:{n}" for n in names] + ["nhr", "gap_best"]
    lines = [head]
    for r in rows:
        lines.append([r["trace"], f"{r['capacity']:g}"] + [f"{r[f'miss_{n}']:.4f}" for n in names]
                     + [f"{r['normalized_hit_rate']:.3f}" if not math.isnan(r["normalized_hit_rate"]) else "-",
                        f"{r['gap_to_best']:+.4f}"])
    w = [max(len(x[i]) for x in lines) for i in range(len(head))]
    return "\n".join("  ".join(c.rjust(w[i]) if i else c.ljust(w[i]) for i, c in enumerate(x)) for x in lines)
