"""Validation on held-out traces during training: the learned policy against LRU and Belady.

Replays go through :func:`envs.evaluation.run_one` (the evaluator's one code path); the learned
policy is exported to a checkpoint file first, so what is validated is exactly what would be
deployed.
"""

from __future__ import annotations

import logging
import math
import os
from collections.abc import Sequence
from typing import Any

import numpy as np

from allocator.trace import Trace
from envs.evaluation import RunSpec, learned_name, normalized_hit_rate, resolve_capacity, run_one
from policies.training.export import export_policy
from policies.training.nets import CandidateScorerNet

__all__ = ["Validator"]

log = logging.getLogger(__name__)


class Validator:
    """``validator(step, net) -> figures``: exports ``net`` to ``ckpt_dir/step_<step>.npz`` and
    replays every held-out trace at every capacity with it, LRU and Belady.

    Figures: ``miss_ratio_learned``, ``miss_ratio_lru``, ``miss_ratio_belady`` (means over
    traces x capacities), ``normalized_hit_rate`` (mean) and ``normalized_hit_rate_min``.
    """

    def __init__(self, traces: Sequence[Trace], capacities: Sequence[float], capacity_of: str,
                 ckpt_dir: str, *, K: int, candidate_rule: str, placement: str = "bytes",
                 oversize: str = "bypass", write_policy: str = "write-back", seed: int = 0,
                 config: Any = None) -> None:
        self.runs = [(t, c, resolve_capacity(float(c), t, "bytes", capacity_of))
                     for t in traces for c in capacities]
        self.ckpt_dir = ckpt_dir
        self.K, self.rule = K, candidate_rule
        self.opts = {"placement": placement, "oversize": oversize, "write_policy": write_policy,
                     "seed": seed, "decision_timing": False}
        self.config = config
        self._ref: dict[tuple[int, str], dict[str, Any]] = {}
        self.history: list[dict[str, float]] = []
        self.last_path: str | None = None
        self.best_score = -math.inf
        self.best_step: int | None = None
        self.best_state: dict[str, Any] | None = None

    def _row(self, i: int, policy: str, learned: str | None = None) -> dict[str, Any]:
        t, c, cap = self.runs[i]
        spec = RunSpec(t.name, cap, str(c), "bytes", policy, "none", "none", learned=learned)
        return run_one(t, spec, **self.opts)  # type: ignore[arg-type]

    def evaluate_file(self, path: str) -> dict[str, float]:
        """Figures of an exported policy file."""
        learned, lru, bel, nhr = [], [], [], []
        for i in range(len(self.runs)):
            ref = {}
            for p in ("lru", "belady"):
                if (i, p) not in self._ref:
                    self._ref[(i, p)] = self._row(i, p)
                ref[p] = self._ref[(i, p)]
            row = self._row(i, learned_name("shadow"), learned=path)
            learned.append(row["miss_ratio"])
            lru.append(ref["lru"]["miss_ratio"])
            bel.append(ref["belady"]["miss_ratio"])
            x = normalized_hit_rate(row["hits"], ref["lru"]["hits"], ref["belady"]["hits"])
            if not math.isnan(x):
                nhr.append(x)
        if not self.runs:
            return {}
        return {
            "miss_ratio_learned": float(np.mean(learned)), "miss_ratio_lru": float(np.mean(lru)),
            "miss_ratio_belady": float(np.mean(bel)),
            "normalized_hit_rate": float(np.mean(nhr)) if nhr else math.nan,
            "normalized_hit_rate_min": float(np.min(nhr)) if nhr else math.nan,
        }

    @staticmethod
    def score(figs: dict[str, float]) -> float:
        """Model-selection score: mean normalised hit rate, minus the worst shortfall below
        LRU (a checkpoint that loses to LRU anywhere is penalised)."""
        m, lo = figs.get("normalized_hit_rate", math.nan), figs.get("normalized_hit_rate_min", math.nan)
        if math.isnan(m):
            return -figs.get("miss_ratio_learned", 1.0)
        return m + min(0.0, lo)

    def __call__(self, step: int, net: CandidateScorerNet) -> dict[str, float]:
        os.makedirs(self.ckpt_dir, exist_ok=True)
        path = export_policy(net, os.path.join(self.ckpt_dir, f"step_{step}.npz"), K=self.K,
                             candidate_rule=self.rule, config=self.config, meta={"step": step})
        self.last_path = path
        if not self.runs:
            return {}
        figs = self.evaluate_file(path)
        score = self.score(figs)
        if score > self.best_score:
            self.best_score, self.best_step = score, step
            self.best_state = {k: v.detach().clone() for k, v in net.state_dict().items()}
        self.history.append({"step": float(step), **figs})
        log.info("validation at %d: %s", step, ", ".join(f"{k}={v:.4f}" for k, v in figs.items()))
        return figs
