"""Validation on held-out traces during training: the learned policy against LRU and an offline
bound (FOO's ``foo_l``, or LFOO-L on long traces: :mod:`policies.bounds`).

Replays go through :func:`envs.evaluation.run_one` (the evaluator's one code path); the learned
policy is exported to a checkpoint file first, so what is validated is exactly what would be
deployed.
"""

from __future__ import annotations

import json
import logging
import math
import os
from collections.abc import Sequence
from typing import Any

import numpy as np

from cachegym.allocator.trace import Trace
from cachegym.envs.evaluation import RunSpec, learned_name, resolve_capacity, run_one
from cachegym.envs.gaps import gap_closed
from cachegym.policies.training.export import export_policy
from cachegym.policies.training.nets import CandidateScorerNet, JointScorerNet

__all__ = ["Validator"]

log = logging.getLogger(__name__)


class Validator:
    """``validator(step, net) -> figures``: exports ``net`` to ``ckpt_dir/step_<step>.npz`` and
    replays every held-out trace at every capacity with it and LRU, beside the offline bound.

    Figures (means over traces x capacities): ``miss_ratio_learned``, ``miss_ratio_lru``,
    ``traffic_learned``, ``traffic_lru`` (bytes copied), ``gap_closed_traffic`` and
    ``gap_closed_misses`` (``(LRU - learned) / (LRU - bound)``) and their minima (``_min``):
    the file under its default guard, what a pool deploys (and what :meth:`score` selects on);
    ``traffic_network`` and ``gap_closed_traffic_network`` the network alone (guard ``none``),
    which the guard's figures hide wherever it follows a heuristic: what training changes.
    A joint network (``prefetch`` given) under a timing preset (``preset``, the training env's
    ``cost``) adds ``stall_learned`` (ns: the file's eviction and prefetch heads, the network
    alone), ``stall_lru_lookahead`` (LRU with the lookahead prefetcher) and
    ``stall_ratio`` (their ratio's mean); an eviction network under a preset (a ``reward:
    stall`` env) adds ``stall_learned`` (the network alone, no prefetcher), ``stall_lru`` and
    ``stall_ratio``.
    """

    def __init__(self, traces: Sequence[Trace], capacities: Sequence[float], capacity_of: str,
                 ckpt_dir: str, *, K: int, candidate_rule: str, placement: str = "bytes",
                 oversize: str = "bypass", write_policy: str = "write-back", seed: int = 0,
                 config: Any = None, prefetch: dict[str, Any] | None = None,
                 preset: str | None = None, objective: str = "traffic") -> None:
        self.runs = [(t, c, resolve_capacity(c, t, "bytes", capacity_of))
                     for t in traces for c in capacities]
        self.ckpt_dir = ckpt_dir
        self.K, self.rule = K, candidate_rule
        self.opts = {"placement": placement, "oversize": oversize, "write_policy": write_policy,
                     "seed": seed, "decision_timing": False}
        self.config = config
        self.prefetch = prefetch  # a joint network's prefetch section (export_policy's prefetch=)
        self.preset = preset  # a timing preset: stall figures
        self.objective = objective  # what the network is trained for (the env's reward)
        self._ref: dict[tuple[Any, ...], dict[str, Any]] = {}  # (run, policy[, preset]) -> row
        self._bounds: dict[int, Any] = {}  # run -> its offline bound (policies.bounds.Bound)
        self.history: list[dict[str, float]] = []
        self.last_path: str | None = None
        self.best_score = -math.inf
        self.best_step: int | None = None
        self.best_state: dict[str, Any] | None = None
        # the best checkpoint of the run a resume continues (its weights are in that file, not
        # in best_state): :meth:`continue_from`
        self.best_file: str | None = None
        # what makes scores comparable between runs (a resumed run's are compared to its own)
        self.fingerprint = {"runs": [[t.name, len(t), str(c), int(cap)] for t, c, cap in self.runs],
                            "objective": objective, "preset": preset,
                            "pool": {k: v for k, v in self.opts.items() if k != "decision_timing"},
                            "prefetch": prefetch}

    STATE = "validation.json"
    """The file of ``ckpt_dir`` that keeps the validations so far (history and best step), so
    that a resumed run selects among its whole history's checkpoints."""

    def continue_from(self, ckpt_dir: str, until: int | None = None) -> bool:
        """Take the validations of the run whose checkpoints are in ``ckpt_dir`` (the run a
        resume continues) as this run's so far, where they were made on the same traces,
        capacities, objective and pool settings, and at steps up to ``until`` (the resumed
        model's: a run resumed twice from one model keeps the first time's alone); the best's
        weights stay in its checkpoint file (:attr:`best_file`, wherever an earlier resume found
        it). True when taken; a file that cannot be read, or holds other settings, is said."""
        where = os.path.join(ckpt_dir, self.STATE)
        if not os.path.exists(where):
            return False
        try:
            with open(where) as f:
                state = json.load(f)
            if not isinstance(state, dict):
                raise ValueError("not a JSON object")
            history = [dict(h, step=float(h["step"])) for h in state.get("history") or []]
            best = state.get("best_step")
            best = None if best is None else int(best)
            score = None if best is None else float(state["best_score"])
            best_file = state.get("best_file")
            if best_file is not None and not isinstance(best_file, str):
                raise ValueError("best_file is no path")
        except (OSError, ValueError, TypeError, KeyError) as e:
            log.warning("resume: %s cannot be read (%s): the resumed run's checkpoints are not "
                        "compared with this run's", where, e)
            return False
        if state.get("fingerprint") != self.fingerprint:
            log.warning("resume: %s validated on other traces, capacities, objective or pool "
                        "settings: its checkpoints are not compared with this run's", ckpt_dir)
            return False
        if until is not None:  # (validations past the model resumed: a run that went on from it)
            history = [h for h in history if h["step"] <= until]
            if best is not None and best > until:
                best = None
        self.history = history
        if best is not None:
            name = f"step_{best}.npz"  # (the record's file where it is that step's)
            path = (best_file if best_file and os.path.basename(best_file) == name
                    else os.path.join(ckpt_dir, name))
            if os.path.isfile(path) and score is not None:
                self.best_score, self.best_step, self.best_file = score, best, os.path.abspath(path)
            else:
                log.warning("resume: the best checkpoint of the run resumed (step %d) is gone "
                            "(%s): it is not compared with this run's", best, path)
        log.info("resume: %d validations of the run resumed taken (best: step %s)",
                 len(self.history), self.best_step)
        return True

    def _save_state(self) -> None:
        from cachegym.allocator.files import replace_atomically

        best_file = self.best_file or (None if self.best_step is None else os.path.abspath(
            os.path.join(self.ckpt_dir, f"step_{self.best_step}.npz")))
        state = {"fingerprint": self.fingerprint, "history": self.history,
                 "best_step": self.best_step, "best_file": best_file,
                 "best_score": self.best_score if math.isfinite(self.best_score) else None}
        # (whole or not at all: an interrupted run, the one a resume reads, is the usual case)
        replace_atomically(os.path.join(self.ckpt_dir, self.STATE),
                           lambda f: json.dump(state, f, indent=1))

    def _row(self, i: int, policy: str, learned: str | None = None, prefetch: str = "none",
             preset: str = "none", guard: str | None = None) -> dict[str, Any]:
        """One replay; a learned file under ``guard`` (default: the shadow guard without a
        preset, the network alone under one)."""
        t, c, cap = self.runs[i]
        if guard is None:
            guard = "shadow" if preset == "none" else "none"
        spec = RunSpec(t.name, cap, str(c), "bytes", policy, prefetch, preset, learned=learned,
                       guard=guard)
        return run_one(t, spec, **self.opts)  # type: ignore[arg-type]

    def _bound(self, i: int) -> Any:
        if i not in self._bounds:  # (None: a trace outside the bounds' model, no gap figures)
            from cachegym.policies.bounds import auto_lower_bound

            t, _, cap = self.runs[i]
            self._bounds[i] = auto_lower_bound(t, cap)
        return self._bounds[i]

    def evaluate_file(self, path: str) -> dict[str, float]:
        """Figures of an exported policy file."""
        learned, lru, t_learned, t_lru, t_net = [], [], [], [], []
        gaps: dict[str, list[float]] = {"traffic": [], "misses": [], "traffic_network": []}
        for i in range(len(self.runs)):
            if (i, "lru") not in self._ref:
                self._ref[(i, "lru")] = self._row(i, "lru")
            ref, bound = self._ref[(i, "lru")], self._bound(i)
            row = self._row(i, learned_name("shadow"), learned=path)
            net = self._row(i, learned_name("none"), learned=path, guard="none")
            learned.append(row["miss_ratio"])
            lru.append(ref["miss_ratio"])
            t_learned.append(row["traffic_bytes"])
            t_lru.append(ref["traffic_bytes"])
            t_net.append(net["traffic_bytes"])
            if bound is None:
                continue
            for obj, r, field, b in (("traffic", row, "traffic_bytes", bound.traffic_bytes),
                                     ("misses", row, "misses", bound.misses),
                                     ("traffic_network", net, "traffic_bytes", bound.traffic_bytes)):
                x = gap_closed(float(ref[field]), float(r[field]), b)
                if not math.isnan(x):
                    gaps[obj].append(x)
        if not self.runs:
            return {}
        out = {
            "miss_ratio_learned": float(np.mean(learned)), "miss_ratio_lru": float(np.mean(lru)),
            "traffic_learned": float(np.mean(t_learned)), "traffic_lru": float(np.mean(t_lru)),
            "traffic_network": float(np.mean(t_net)),
        }
        for obj, xs in gaps.items():
            out[f"gap_closed_{obj}"] = float(np.mean(xs)) if xs else math.nan
            if obj != "traffic_network":
                out[f"gap_closed_{obj}_min"] = float(np.min(xs)) if xs else math.nan
        if self.preset is not None:
            out.update(self._stall(path, self.preset))
        return out

    def _stall(self, path: str, preset: str) -> dict[str, float]:
        """Stall of the network alone against LRU: with the file's two heads against LRU with
        the lookahead prefetcher (a joint network), or without prefetching (an eviction one)."""
        from cachegym.envs.evaluation import LEARNED_PREFETCH

        joint = self.prefetch is not None
        pf, name = ("lookahead", "stall_lru_lookahead") if joint else ("none", "stall_lru")
        own = LEARNED_PREFETCH + path if joint else "none"  # the file's prefetch head, if any
        mine, ref, issued = [], [], 0
        for i in range(len(self.runs)):
            if (i, pf, preset) not in self._ref:
                self._ref[(i, pf, preset)] = self._row(i, "lru", prefetch=pf, preset=preset)
            ref.append(float(self._ref[(i, pf, preset)]["stall_ns"]))
            row = self._row(i, learned_name("none"), learned=path, prefetch=own, preset=preset)
            mine.append(float(row["stall_ns"]))
            issued += int(row["prefetches"])
        ratios = [m / r for m, r in zip(mine, ref) if r > 0]
        out = {"stall_learned": float(np.mean(mine)), name: float(np.mean(ref)),
               "stall_ratio": float(np.mean(ratios)) if ratios else math.nan}
        if joint:  # (a head that never prefetches leaves all of its stall ratio to eviction)
            out["prefetches_learned"] = float(issued)
        return out

    def score(self, figs: dict[str, float]) -> float:
        """Model-selection score: for a network trained for stall (``objective``), minus its
        stall ratio to the reference (``stall_ratio``); else the mean gap closed to the bound in
        the objective (traffic: what the pool pays; misses for a network trained for misses),
        minus the worst shortfall below LRU (a checkpoint that does worse than LRU anywhere is
        penalised)."""
        ratio = figs.get("stall_ratio", math.nan)
        if self.objective == "stall" and not math.isnan(ratio):
            return -ratio
        if self.objective == "misses" and not math.isnan(figs.get("gap_closed_misses", math.nan)):
            return figs["gap_closed_misses"] + min(0.0, figs.get("gap_closed_misses_min", 0.0))
        m, lo = figs.get("gap_closed_traffic", math.nan), figs.get("gap_closed_traffic_min", math.nan)
        if math.isnan(m):
            return -figs.get("traffic_learned", math.inf)
        return m + min(0.0, lo)

    def __call__(self, step: int, net: CandidateScorerNet | JointScorerNet) -> dict[str, float]:
        os.makedirs(self.ckpt_dir, exist_ok=True)
        path = export_policy(net, os.path.join(self.ckpt_dir, f"step_{step}.npz"), K=self.K,
                             candidate_rule=self.rule, config=self.config, meta={"step": step},
                             prefetch=self.prefetch)
        self.last_path = path
        if not self.runs:
            return {}
        figs = self.evaluate_file(path)
        score = self.score(figs)
        if score > self.best_score:
            self.best_score, self.best_step, self.best_file = score, step, None
            self.best_state = {k: v.detach().clone() for k, v in net.state_dict().items()}
        self.history.append({"step": float(step), **figs})
        self._save_state()
        log.info("validation at %d: %s", step, ", ".join(f"{k}={v:.4f}" for k, v in figs.items()))
        if figs.get("prefetches_learned") == 0:
            log.warning(
                "validation at %d: the prefetch head issued no prefetch on the validation traces "
                "(its no-prefetch score led at every decision): with it a pool prefetches "
                "nothing, and the stall figures are its eviction's. Train it longer "
                "(agent.dagger.rounds, agent.dagger.steps_per_round) or, as the main job does "
                "(conf/main.yaml), with env.opportunity=access and the aligned history predictor "
                "(env.predictor='{depth: 2, width: 4, hops: 3, horizon: 64, memory: 262144}')",
                step)
        return figs
