"""The main job (``make demo`` / ``python scripts/main.py``): train, export, evaluate, report.

``run_main(cfg) -> dict``: trains with ``cfg`` (``conf/main.yaml``: imitation of the ``foo``
teacher, then a short MaskablePPO fine-tune on the traffic reward) into ``OUT/train``; with
``main.prefetch`` (the default) trains a prefetch head in a second short run
(``main.joint``: ``env=joint``, stall under a timing preset) into ``OUT/joint`` and writes
``OUT/policy.npz``, the eviction scorer of the first run with the prefetch head of the second
(:func:`policies.training.export.export_file` with ``prefetch_from``); writes the held-out
workloads (never trained on) as trace files and evaluates them with
:func:`envs.evaluation.evaluate` (the evaluator of ``scripts/evaluate.py``) against
``cfg.main.baselines`` at ``cfg.main.capacities`` of each trace's peak live bytes, the policy
under each guard of ``cfg.main.learned_guards`` (by default ``shadow``, the deployed guard, and
``none``, the network alone: ``learned[shadow]`` and ``learned[none]`` in the results), each
policy without prefetch, with ``lookahead`` (the trace's future), with ``history`` (the
heuristic on the head's candidates) and with the file's prefetch head
(``learned:PATH``; without ``main.prefetch``: no prefetch only); the results table, CSV/JSON
and plots land in ``OUT/eval``; ``summary`` is the deployed policy's figures per held-out cell
beside its baselines and the offline figures (:mod:`envs.summary`).
"""

from __future__ import annotations

import logging
import os
import time
from typing import Any

from omegaconf import OmegaConf

from cachegym.allocator.errors import CachegymError, ConfigError
from cachegym.envs.config import EvaluateConfig, guard_node, instantiate, refuse_unknown_keys
from cachegym.envs.evaluation import (
    LEARNED_PREFETCH,
    check_bounds_kinds,
    check_capacities,
    check_eviction_names,
    check_jobs,
    check_presets,
    evaluate,
    learned_name,
)
from cachegym.envs.summary import format_summary, summarize
from cachegym.envs.sweep import results_dir, set_aside, write_config
from cachegym.policies.training.export import export_file
from cachegym.policies.training.quality import HeldOut, default_held_out
from cachegym.policies.training.train import train

__all__ = ["run_main", "held_out_traces", "check_main", "train_prefetch_head", "PREFETCHERS"]

log = logging.getLogger(__name__)

PREFETCHERS = ("none", "lookahead", "history")
"""The heuristic prefetchers beside the exported file's prefetch head (``learned:PATH``) in the
main job's evaluation when ``main.prefetch`` is on."""


def _held_out_files(spec: list[str]) -> list[str] | None:
    """The files ``main.held_out`` names (checked), or ``None`` for ``["default"]``."""
    if list(spec) == ["default"]:
        return None
    if not spec:
        raise ConfigError("main.held_out: the list is empty; give trace files or [default]")
    from cachegym.envs.paths import resolve_data_path

    files = [resolve_data_path(os.path.expanduser(p)) for p in spec]  # (a bundled name too)
    for i, p in enumerate(files):
        if not os.path.isfile(p):
            raise ConfigError(f"main.held_out[{i}]: no such trace file {spec[i]!r}; give trace "
                              "files (a bundled trace by its name, e.g. gpt_wide.npz) or [default]")
    return files


def held_out_traces(spec: list[str]) -> list[HeldOut]:
    """Trace files, or ``["default"]`` (see :func:`policies.training.quality.default_held_out`);
    a file that does not read is refused naming ``main.held_out[i]`` (read before any training:
    :func:`run_main`)."""
    files = _held_out_files(spec)
    if files is None:
        return default_held_out()
    from cachegym.envs.workloads import read_trace

    out = []
    for i, p in enumerate(files):
        try:
            out.append(HeldOut(read_trace(p), "dl"))
        except CachegymError as e:
            raise ConfigError(f"main.held_out[{i}]: {e} (main.held_out takes .npz traces, or "
                              "files whose name gives their format: .oracleGeneral, .csv, ...)"
                              ) from None
    return out


def _check_env_args(node: Any, key: str) -> None:
    """The env config ``node`` (config key ``key``) made into an env over a tiny trace, so that
    its arguments (``K``, ``opportunity``, ``reward``, ...) are refused, naming ``key``, before
    the stages that train before it, not after them."""
    from cachegym.allocator.trace import Trace
    from cachegym.policies.training.train import EnvFactory

    tiny = Trace.from_arrays([1, 2, 1, 3, 2, 1], [8] * 6, name="config-check")
    try:
        EnvFactory(node, [tiny], [0.5], 0).make(traces=[tiny], capacity=0.5).close()
    except ConfigError as e:
        raise ConfigError(f"{key}: {e}") from None


def check_main(m: Any) -> None:
    """The ``main`` section (held-out traces, capacities, baselines, guards) checked before
    training, so a typo there does not surface only after minutes of it."""
    _held_out_files([str(p) for p in m.held_out])
    check_capacities("main.capacities", list(m.capacities))
    baselines = [str(b) for b in m.baselines]
    if baselines:  # none is fine: the evaluator always adds LRU
        check_eviction_names("main.baselines", baselines)
    check_bounds_kinds([str(b) for b in m.bounds], "main.bounds")
    check_presets([str(p) for p in m.presets], "main.presets")
    check_jobs(m.jobs, "main.jobs")
    guards = [str(g) for g in m.learned_guards]
    if not guards:
        raise ConfigError("main.learned_guards: the list is empty; give guards of the exported "
                          "policy (options of conf/policy/guard/, e.g. [shadow,none])")
    for g in guards:
        guard_node(g, "main.learned_guards")
    if bool(m.prefetch):
        j = m.joint
        if j.env is None or j.agent is None:
            raise ConfigError("main.joint: the prefetch stage needs main.joint.env and "
                              "main.joint.agent (conf/main.yaml's defaults: env@main.joint.env: joint, "
                              "agent@main.joint.agent: imitation); or set main.prefetch=false")
        if str(j.env.get("_target_")) != "cachegym.envs.joint.JointEnv":
            raise ConfigError(f"main.joint.env: the prefetch stage trains in env=joint "
                              f"(cachegym.envs.joint.JointEnv), got {j.env.get('_target_')!r}")
        check_capacities("main.joint.capacities", list(j.capacities))
        if j.env.get("cost") is not None:
            check_presets([str(j.env.cost)], "main.joint.env.cost")
        try:  # its config checked before any training
            instantiate(j.agent)
        except ConfigError as e:  # (its messages name agent.*: here it is main.joint.agent.*)
            msg = str(e)
            raise ConfigError(f"main.joint.{msg}" if msg.startswith("agent") else
                              f"main.joint.agent: {msg}") from None
        _check_env_args(j.env, "main.joint.env")


def run_main(cfg: Any) -> dict[str, Any]:
    """Train, export and evaluate as ``cfg`` says; returns ``{"policy", "out_dir", "table",
    "summary", "csv", "plots", "train", "joint", "wall_s"}``."""
    t0 = time.perf_counter()
    refuse_unknown_keys(cfg)
    check_main(cfg.main)
    held = held_out_traces([str(p) for p in cfg.main.held_out])  # (read before any training)
    out = results_dir(cfg, "main")
    # an earlier main job's files here (its policy, config, held-out traces): set aside
    # (out/previous/), as its training and evaluation set theirs aside in train/ and eval/; its
    # recorded workloads stay (they are reused)
    set_aside(out, ["config.yaml", str(cfg.export_name), "held_out"])
    write_config(cfg, out)
    # one recording of each workload per run, shared by the two stages (unless recorded_dir)
    cfg = OmegaConf.merge(cfg, {"recorded_dir": cfg.get("recorded_dir") or os.path.join(out, "recorded")})
    tcfg = OmegaConf.merge(cfg, {"out_dir": os.path.join(out, "train")})
    log.info("main job: training (outputs under %s)", out)
    res = train(tcfg, out_dir=tcfg.out_dir)
    policy = res["policy"]
    joint = None
    if bool(cfg.main.prefetch):
        joint = train_prefetch_head(cfg, os.path.join(out, "joint"))
        policy = os.path.abspath(export_file(policy, os.path.join(out, str(cfg.export_name)),
                                             prefetch_from=joint["policy"]))
        log.info("main job: %s carries the eviction scorer of %s and the prefetch head of %s",
                 policy, res["policy"], joint["policy"])
    else:  # (the eviction scorer alone, at the documented OUT/policy.npz too: it was only in train/)
        policy = os.path.abspath(export_file(policy, os.path.join(out, str(cfg.export_name))))
    tdir = os.path.join(out, "held_out")
    os.makedirs(tdir, exist_ok=True)
    paths = []
    for h in held:
        p = os.path.join(tdir, f"{h.trace.name}.npz")
        h.trace.save(p)
        paths.append(p)
    ecfg = OmegaConf.structured(EvaluateConfig)
    ecfg = OmegaConf.merge(ecfg, {
        "trace": {"paths": paths},
        "allocator": OmegaConf.to_container(cfg.allocator),
        "eval": {"capacities": list(cfg.main.capacities), "capacity_of": "peak_live",
                 # the exported policy under each guard (by default the deployed one and
                 # none: the network alone), side by side with the baselines
                 "learned": [policy], "learned_guards": [str(g) for g in cfg.main.learned_guards],
                 "policies": [str(b) for b in cfg.main.baselines],
                 # each policy without prefetch, with a heuristic, with the file's prefetch head
                 "prefetchers": [*PREFETCHERS, LEARNED_PREFETCH + policy] if joint else ["none"],
                 "bounds": [str(b) for b in cfg.main.bounds],
                 "presets": [str(p) for p in cfg.main.presets],
                 "plots": bool(cfg.main.plots), "progress": bool(cfg.progress),
                 "jobs": int(cfg.main.jobs),
                 "decision_timing": True},
        "out_dir": os.path.join(out, "eval"),
        "seed": int(cfg.seed),
    })
    log.info("main job: evaluating on %d held-out traces", len(paths))
    ev = evaluate(ecfg, out_dir=ecfg.out_dir)
    deployed = learned_name(str(cfg.main.learned_guards[0]))  # the file under the first guard
    preset = next((str(p) for p in cfg.main.presets if str(p) != "none"), "none")
    cells = summarize(ev["rows"], deployed, LEARNED_PREFETCH + policy if joint else None,
                      heuristics=tuple(str(b) for b in cfg.main.baselines), preset=preset)
    summary = format_summary(cells, deployed, preset, with_head=joint is not None)
    return {"policy": policy, "out_dir": os.path.abspath(out), "table": ev["table"],
            "summary": summary, "csv": ev["csv"], "plots": ev["plots"], "train": res,
            "joint": joint, "wall_s": time.perf_counter() - t0}


def train_prefetch_head(cfg: Any, out_dir: str) -> dict[str, Any]:
    """The prefetch stage: :func:`train` with the main job's config, its env, agent and
    capacities those of ``cfg.main.joint`` (no ``init_from`` nor ``resume``: those name the
    eviction run's network), in ``out_dir``; returns its result (``policy``: a file with both
    heads, of which the main job keeps the prefetch head)."""
    j = cfg.main.joint
    jcfg = OmegaConf.merge(cfg, {"out_dir": out_dir, "init_from": None, "resume": None,
                                 "capacities": list(j.capacities)})
    OmegaConf.update(jcfg, "env", j.env, merge=False)
    OmegaConf.update(jcfg, "agent", j.agent, merge=False)
    log.info("main job: training the prefetch head (env=joint, outputs under %s)", out_dir)
    return train(jcfg, out_dir=out_dir)
