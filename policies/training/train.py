"""``train(cfg) -> dict``: train a learned eviction policy and export it.

``cfg`` is ``conf/train.yaml`` composed (schema :class:`policies.training.config.TrainConfig`).
The run: seed everything; load the training traces (``traces``, several at once, or your own
``trace.path=T trace.format=F`` alone) and the held-out validation traces; build one env per
training capacity (:class:`envs.evict.EvictEnv` through :func:`envs.config.instantiate`); train
the agent (``cfg.agent``: SB3 or imitation; from ``init_from=POLICY.npz``'s network, or
continuing ``resume=MODEL.zip``); validate on the held-out traces during training (miss ratio
against LRU and Belady, TensorBoard); export ``OUT/policy.npz``; save the SB3 model as
``OUT/<algo>.zip`` (SB3 agents and the imitation agent's fine-tune); write ``OUT/train.json``.
With ``env=joint`` (:class:`envs.joint.JointEnv`)
the network has an eviction and a prefetch head (:class:`policies.training.nets.JointScorerNet`),
both in the one exported file (its ``prefetch`` section: the env's ``K``, ``opportunity`` and
candidate predictor), and validation adds stall under the env's ``cost`` preset.

Determinism: one seed drives torch, NumPy and every env. With ``torch_threads=1`` and
``deterministic=true`` (``torch.use_deterministic_algorithms``) two runs with the same seed
give the same weights on the same machine; across machines or torch builds, torch's own float
nondeterminism (BLAS kernels) can still differ in the last bits.
"""

from __future__ import annotations

import csv
import json
import logging
import math
import os
import random
import time
from collections.abc import Mapping, Sequence
from typing import Any, Literal

import numpy as np
import torch as th

from cachegym.allocator.errors import ConfigError, PolicyFileError
from cachegym.allocator.files import replace_atomically
from cachegym.allocator.sizes import parse_capacity
from cachegym.allocator.trace import Trace
from cachegym.envs.common import next_use_distance
from cachegym.envs.config import enum_value, instantiate, refuse_unknown_keys, to_container
from cachegym.envs.sweep import results_dir, set_aside, write_config
from cachegym.policies.training.agents import TrainContext
from cachegym.policies.training.config import RUNNER_KEYS
from cachegym.policies.training.export import (
    config_hash,
    export_policy,
    prefetch_section,
    read_sb3_zip,
    sb3_algo,
    scorer_from_file,
    zip_fields,
)
from cachegym.policies.training.imitation import DecisionSample, teacher_targets
from cachegym.policies.training.nets import CandidateScorerNet, feature_indices, obs_dims
from cachegym.policies.training.validation import Validator

__all__ = ["train", "check_trainable_env", "load_trace_list", "training_traces", "warm_start", "recording_plan", "record_workloads", "EnvFactory", "Collector",
           "FooPlans", "seed_everything"]

log = logging.getLogger(__name__)


def seed_everything(seed: int, threads: int = 1, deterministic: bool = True) -> None:
    if threads < 0:
        raise ConfigError(f"torch_threads must be >= 0 (0: torch's default, one per core), got "
                          f"{threads}")
    random.seed(seed)
    np.random.seed(seed % 2**32)  # SB3 draws from the legacy global RNG in places
    th.manual_seed(seed)
    if threads > 0:
        th.set_num_threads(threads)
    th.use_deterministic_algorithms(deterministic, warn_only=True)


def load_trace_list(nodes: Sequence[Any], what: str) -> list[Trace]:
    """Every trace the ``trace`` config nodes name (each through :func:`instantiate`)."""
    from cachegym.envs.config import TraceConfig

    out: list[Trace] = []
    for i, node in enumerate(nodes):
        if node.get("_target_") is None:  # a plain mapping written inline in a yaml list
            from omegaconf import OmegaConf

            node = OmegaConf.merge(OmegaConf.structured(TraceConfig), node)
        try:
            out.extend(instantiate(node))
        except ConfigError as e:
            raise ConfigError(f"{what}[{i}]: {e}") from None
    return out


def recording_plan(entries: Sequence[tuple[str, int]], what: str) -> dict[str, int]:
    """``{workload: steps}`` of the ready-made PyTorch workloads to record
    (:mod:`envs.workloads.models`), checked: a :class:`ConfigError` naming ``what`` (the config
    key) for an unknown workload, a step count that is not an integer >= 1, or a workload
    listed twice (which of its entries was meant?)."""
    from cachegym.envs.workloads.models import WORKLOADS

    names = [m for m, _ in entries]
    twice = sorted({m for m in names if names.count(m) > 1})
    if twice:
        raise ConfigError(f"{what}: {twice} listed more than once; list each workload once")
    for m, n in entries:
        if m not in WORKLOADS:
            raise ConfigError(f"{what}: unknown workload {m!r}; choose from {sorted(WORKLOADS)}")
        if not isinstance(n, int) or isinstance(n, bool) or n < 1:
            raise ConfigError(f"{what}: {m}'s steps must be an integer >= 1, got {n!r}")
    return dict(entries)


def record_workloads(plan: Mapping[str, int], out_dir: str, *, seed: int = 0,
                     inference: bool = False) -> list[Trace]:
    """Traces of the ready-made workloads of ``plan`` (:func:`recording_plan`), each of its
    steps, recorded into ``out_dir`` on first use
    (:func:`~envs.workloads.models.record_workload`): training iterations, or forward passes
    only with ``inference`` (the short activation lifetimes of inference, which the bundled
    training traces lack)."""
    from cachegym.envs.workloads.models import record_workload

    return [Trace.load(record_workload(m, n, out_dir, seed=seed, inference=inference)) for m, n in plan.items()]


def training_traces(cfg: Any, out: str) -> list[Trace]:
    """The training traces: your own ``trace`` when it names any (``trace.path``,
    ``trace.paths`` or ``trace.generator``: that alone), else ``traces`` plus the recorded
    ``record_training`` workloads (their steps each) and ``record_inference`` ones (12 forward
    passes each), both checked before anything is recorded; recordings already in
    ``recorded_dir`` (default ``out/recorded``) are reused."""
    own = cfg.get("trace")
    if own is not None and (own.get("path") or own.get("paths") or own.get("generator")):
        return list(instantiate(own))
    traces = load_trace_list(cfg.traces, "traces")
    training = recording_plan([(r.workload, r.steps) for r in cfg.get("record_training") or ()],
                              "record_training")
    inference = recording_plan([(m, 12) for m in cfg.record_inference or ()], "record_inference")
    rec = str(cfg.get("recorded_dir") or os.path.join(out, "recorded"))
    if (training or inference) and os.path.exists(rec) and not os.path.isdir(rec):
        raise ConfigError(f"recorded_dir: {rec!r} is a file, not a folder; give a folder for the "
                          "recorded workloads (or null: OUT/recorded)")
    traces += record_workloads(training, rec, seed=int(cfg.seed))
    traces += record_workloads(inference, rec, seed=int(cfg.seed), inference=True)
    return traces


def _warn_config_changes(zip_path: str, cfg: Any) -> None:
    """Log, as a warning, the training settings (env, its reward, cost, K and candidates, the
    policy's network, the agent's hyperparameters, the capacities) in which this resumed run differs from the run that saved ``zip_path``
    (its ``config.yaml`` beside it, where there is one): a resume continues the same training
    unless the user means to change it."""
    from omegaconf import OmegaConf

    saved = os.path.join(os.path.dirname(os.path.abspath(zip_path)), "config.yaml")
    if not os.path.isfile(saved):
        return
    try:
        old = OmegaConf.load(saved)
    except Exception:  # (unreadable: nothing to compare)
        return
    keys = ("env._target_", "env.reward", "env.cost", "env.K", "env.candidates", "policy.hidden",
            "agent.kwargs", "capacities")
    changed = []
    for k in keys:
        try:  # (the saved file's values as written: an interpolation it cannot resolve is one)
            a = OmegaConf.select(old, k, default=None)
            a = OmegaConf.to_container(a) if OmegaConf.is_config(a) else a
        except Exception:  # noqa: BLE001 (OmegaConf's interpolation and validation errors)
            a = "<not resolvable in config.yaml>"
        b = OmegaConf.select(cfg, k, default=None)
        b = OmegaConf.to_container(b) if OmegaConf.is_config(b) else b
        if a != b:
            changed.append(f"{k}: {a!r} -> {b!r}")
    if changed:
        log.warning("resume=%s: this run's settings differ from those it was trained with (%s): %s",
                    zip_path, saved, "; ".join(changed))


def warm_start(cfg: Any, agent: Any, hidden: Sequence[int], ignore: Sequence[int]) -> tuple[
        CandidateScorerNet | None, str | None]:
    """``(init net, resume zip)`` from ``init_from`` / ``resume``, both checked (the files read)
    before any work."""
    init_from, resume = cfg.get("init_from"), cfg.get("resume")
    if init_from and resume:
        raise ConfigError(f"init_from={init_from} and resume={resume}: give one (resume continues an "
                          "SB3 model .zip; init_from starts from a policy .npz's network)")
    if init_from:
        path = os.path.expanduser(str(init_from))
        if str(cfg.env.get("_target_")) == "cachegym.envs.joint.JointEnv":
            raise ConfigError(f"init_from={path} with env=joint: a warm start loads an eviction "
                              "network, and the joint env trains eviction and prefetch heads "
                              "together; train env=joint from fresh weights (as the main job's "
                              "joint stage does), or warm-start an eviction policy with env=evict")
        if path.endswith(".zip"):
            raise ConfigError(f"init_from={path}: an SB3 model .zip; continue it with resume={path}, "
                              "or give a policy file (.npz) here")
        if not path.endswith(".npz"):  # (a trace given here was called a corrupt policy file)
            raise ConfigError(f"init_from={path}: not a policy file; give the .npz that training "
                              "or `cachegym export` wrote (OUT/policy.npz)")
        try:
            net = scorer_from_file(path, ignore)
        except PolicyFileError as e:
            raise PolicyFileError(f"init_from: {e}") from None
        if list(net.hidden) != list(hidden):
            raise ConfigError(f"init_from={path}: its network's hidden layers are {net.hidden}, policy.hidden "
                              f"is {list(hidden)}; set policy.hidden=[{','.join(map(str, net.hidden))}]")
        log.info("starting from the network of %s (init_from)", path)
        return net, None
    if resume:
        path = os.path.expanduser(str(resume))
        if not path.endswith(".zip"):
            raise ConfigError(f"resume={path}: not an SB3 model .zip (OUT/<algo>.zip of an earlier run); "
                              "to start from a policy file use init_from=POLICY.npz")
        if not os.path.isfile(path):
            raise PolicyFileError(f"resume={path}: no such file; give the OUT/<algo>.zip an earlier "
                                  "training run saved")
        if not (hasattr(agent, "algo") or getattr(agent, "finetune", None) is not None):
            raise ConfigError("resume: the imitation agent has no SB3 stage to resume; use "
                              "agent=imitation_ppo, or warm-start with init_from=POLICY.npz")
        try:
            state, _, fields = read_sb3_zip(path)
        except PolicyFileError as e:
            raise PolicyFileError(f"resume: {e}") from None
        theirs_hidden = _zip_hidden(state)  # (refused here, before an earlier run is set aside)
        if theirs_hidden is not None and theirs_hidden != list(hidden):
            raise ConfigError(f"resume={path}: its network's hidden layers are {theirs_hidden}, "
                              f"policy.hidden is {list(hidden)}; set policy.hidden="
                              f"[{','.join(map(str, theirs_hidden))}] (or the policy preset it "
                              "was trained with)")
        mine = getattr(agent, "algo", None) or getattr(getattr(agent, "finetune", None), "algo", None)
        theirs = sb3_algo(fields)
        if theirs is not None and mine is not None and theirs != mine:
            raise ConfigError(f"resume={path}: it holds a {theirs} model, and this run's agent "
                              f"trains {mine}; resume with the agent that saved it (agent={theirs}, "
                              f"or an imitation agent whose fine-tune is {theirs})")
        _warn_config_changes(path, cfg)
        return None, path
    return None, None


def _zip_hidden(state: Any) -> list[int] | None:
    """The hidden layer widths of the candidate scorer in an SB3 zip's policy state (its
    ``cand_in`` and ``layers.i`` weights' rows), or ``None`` where it holds none."""
    ends = [k for k in state if k.endswith("cand_in.weight")]
    if not ends:
        return None
    prefix = min(ends, key=len)[:-len("cand_in.weight")]
    widths = [int(state[prefix + "cand_in.weight"].shape[0])]
    i = 0
    while prefix + f"layers.{i}.weight" in state:
        widths.append(int(state[prefix + f"layers.{i}.weight"].shape[0]))
        i += 1
    return widths


def _capacity(value: Any) -> Any:
    """A training capacity as the envs take it: a fraction (float), bytes (int), or a size or
    percentage string (``"512MiB"``, ``"25%"``), parsed."""
    return parse_capacity(value, "capacities") if isinstance(value, str) else value


def _starts_with(t: Trace, v: Trace) -> bool:
    """Whether trace ``v``'s requests (keys, sizes, ops) are ``t``'s first ones."""
    n = len(v)
    return 0 < n <= len(t) and all(np.array_equal(a[:n], b) for a, b in (
        (t.key, v.key), (t.size, v.size), (t.op, v.op)))


class EnvFactory:
    """``factory(i)`` builds training env ``i``: capacity ``capacities[i % n]``, seeded
    ``seed + i``, over all the training traces. The ``env`` config's :data:`RUNNER_KEYS` (how
    the envs are run) are not passed to the env."""

    def __init__(self, node: Any, traces: list[Trace], capacities: Sequence[float], seed: int) -> None:
        if not capacities:
            raise ConfigError("capacities: the list is empty; give fractions such as [0.25, 0.5]")
        self.traces, self.capacities, self.seed = traces, list(capacities), seed
        if any(k in node for k in RUNNER_KEYS):
            import copy

            from omegaconf import open_dict

            node = copy.deepcopy(node)  # (keeps its key, "env", for error messages)
            with open_dict(node):
                for k in RUNNER_KEYS:
                    node.pop(k, None)
        # partial: Trace objects must not pass through OmegaConf (it would turn them into configs)
        self.make = instantiate(node, _partial_=True)

    def __call__(self, i: int) -> Any:
        try:
            env = self.make(traces=self.traces,
                            capacity=_capacity(self.capacities[i % len(self.capacities)]))
        except ConfigError as e:  # (the env names its parameter, "K must be ...": say where)
            if str(e).startswith(("env", "capacities")):
                raise
            raise ConfigError(f"env (the env config: env.<key>=... on the command line): {e}") from e
        env.reset(seed=self.seed + i)
        return env


class FooPlans:
    """The ``"foo"`` teacher's plans: FOO's schedule (:func:`policies.bounds.foo_kept_rows`)
    of each episode window of an :class:`envs.evict.EvictEnv` at its pool's capacity, for the
    env's objective (``misses`` for a ``misses`` reward, ``stall`` for a ``stall`` reward under
    the env's timing preset: the plan of least copy time; else ``traffic``), solved once per
    window and kept (the last ``cache`` windows). A window longer than ``max_rows`` is not
    solved (the traffic teacher labels it), nor one outside the bound's model (an object that
    changes size without a free: warned once): FOO's LP took 2-6 s on 16,384-row windows of the
    training traces and 4-7 s on 27,000 rows (2 shared cores), so the limit is
    :data:`~policies.bounds.FOO_AUTO_MAX`, where the bounds switch to PFOO-L too."""

    def __init__(self, max_rows: int | None = None, cache: int = 64) -> None:
        from cachegym.policies.bounds import FOO_AUTO_MAX

        self.max_rows = FOO_AUTO_MAX if max_rows is None else int(max_rows)
        self.cache = int(cache)
        self._plans: dict[tuple[int, int, int, int, str], np.ndarray | None] = {}
        self.solved, self.skipped, self.seconds = 0, 0, 0.0
        self.unplannable = 0  # windows the bound cannot model (skipped too; warned once)
        self.decisions, self.planned = 0, 0  # decisions asked about; those the plan labels

    def drop(self, env: Any) -> np.ndarray | None:
        """The current decision's candidates (``(K,)`` bool, in the observation's order) whose
        reuse interval, from their last access on, the plan of ``env``'s window does not keep;
        ``None`` where the window has no plan (too long)."""
        from cachegym.policies.bounds import foo_kept_rows

        w, cap = env.window, int(env.pool.capacity)
        preset = env.pool.cost.preset
        objective: Literal["misses", "traffic", "stall"] = (
            "misses" if env.reward_kind == "misses" else
            "stall" if env.reward_kind == "stall" and preset is not None else "traffic")
        key = (w.source, w.start, len(w), cap, objective)
        if key not in self._plans:
            if len(w) > self.max_rows:
                plan = None
                self.skipped += 1
            else:
                t0 = time.perf_counter()
                try:
                    plan = foo_kept_rows(w.trace, cap, objective, preset)
                    self.solved += 1
                except ConfigError as e:  # a window outside the bound's model (an object that
                    plan = None  # changes size without a free): the traffic teacher's labels
                    self.skipped += 1
                    if not self.unplannable:
                        log.warning("the FOO teacher has no plan for a window of trace %s (%s); "
                                    "such windows take the traffic teacher's labels", w.source, e)
                    self.unplannable += 1
                self.seconds += time.perf_counter() - t0
            if len(self._plans) >= self.cache:
                del self._plans[next(iter(self._plans))]
            self._plans[key] = plan
        plan = self._plans[key]
        self.decisions += 1
        if plan is None:
            return None
        rows = env.candidate_rows()
        drop = (rows >= 0) & ~plan[np.maximum(rows, 0)]
        self.planned += bool(drop.any())
        return drop


class Collector:
    """Drives the envs for imitation: ``collect(learner, beta, n, rng)`` returns ``n`` labelled
    decisions. Each decision is acted on by the teacher with probability ``beta`` (always when
    ``learner`` is None), else by ``learner(cand, mask, glob, phase)``; every visited state is
    labelled with the env's next-use distances. The teacher
    (:data:`policies.training.imitation.TEACHERS`) of an eviction is Belady (the env's
    ``info["oracle_action"]``) or Belady-Size (the candidate whose next use times size is
    farthest: :func:`~policies.training.imitation.teacher_distances`); of a prefetch (an env
    with a ``phase``, :class:`envs.joint.JointEnv`) the env's ``oracle_action`` (the candidate
    used soonest, or nothing; nothing too with ``prefetch_no_harm`` where its room would evict
    an object used no later: the env's ``displaced_next_use``), recorded in the sample. The teacher ``"foo"`` also marks each
    decision's candidates that FOO's plan drops (:class:`FooPlans`); on an env with prefetching
    (no plan) it is the traffic teacher."""

    def __init__(self, factory: EnvFactory, progress: bool = False, teacher: str = "belady_size",
                 prefetch_horizon: int | None = None, prefetch_no_harm: bool = True,
                 objective: str = "traffic") -> None:
        self.envs = [factory(i) for i in range(len(factory.capacities))]
        self.K, self.F, self.G = obs_dims(self.envs[0].observation_space)
        self.joint = "phase" in self.envs[0].observation_space.spaces  # eviction and prefetch
        self.progress = progress
        self.teacher = teacher
        self.objective = objective  # the env's reward (the foo teacher's plan's objective)
        self.horizon = prefetch_horizon  # the prefetch teacher's (ImitationConfig.prefetch_horizon)
        self.no_harm = prefetch_no_harm  # (ImitationConfig.prefetch_no_harm)
        self._n_resets = 0
        self.plans: FooPlans | None = None
        # the traffic teachers read when each candidate is freed (an env that tells it; not the
        # foo teacher of a plan for misses, which ranks by next use alone)
        self.frees = ((teacher == "traffic" or (teacher == "foo" and objective != "misses"))
                      and hasattr(self.envs[0], "candidate_rows"))
        if teacher == "foo":
            if self.joint or not hasattr(self.envs[0], "candidate_rows"):
                log.warning("teacher foo: FOO's plan models eviction alone; %s's decisions are "
                            "labelled by the traffic teacher", type(self.envs[0]).__name__)
            else:
                self.plans = FooPlans()

    def __call__(self, learner: Any, beta: float, n: int, rng: np.random.Generator) -> list[DecisionSample]:
        from tqdm.auto import tqdm

        out: list[DecisionSample] = []
        K, F = self.K, self.F
        bar = tqdm(total=n, desc="collect", unit="dec", disable=not self.progress, leave=False)
        while len(out) < n:
            env = self.envs[self._n_resets % len(self.envs)]
            obs, info = env.reset(seed=int(rng.integers(2**31)))
            self._n_resets += 1
            done = False
            while not done and len(out) < n:
                cand = np.asarray(obs["candidates"], np.float32).reshape(K, F)
                mask = np.asarray(obs["mask"]).astype(bool)
                glob = np.asarray(obs["globals"], np.float32)
                dist = np.asarray(info["next_use"], np.float64)
                phase = int(obs["phase"]) if self.joint else 0
                oracle = int(info["oracle_action"])
                if phase and self.horizon is not None and oracle < self.K and dist[oracle] > self.horizon:
                    oracle = self.K  # used, but too far ahead: the teacher waits
                if (phase and self.no_harm and oracle < self.K
                        and dist[oracle] >= info.get("displaced_next_use", math.inf)):
                    oracle = self.K  # its room would evict an object used before it
                drop = self.plans.drop(env) if self.plans is not None else None
                free = (next_use_distance(env.window.trace.free_row(), env.candidate_rows(),
                                          env.pool.view.tick)
                        if self.frees and not phase else None)
                out.append(DecisionSample(cand, mask, glob, dist, phase, oracle if phase else -1,
                                          drop, free))
                if learner is None or rng.random() < beta:
                    if self.teacher == "belady" or phase:
                        a = oracle
                    else:
                        best, _ = teacher_targets(dist[None], cand[None], mask[None], self.teacher,
                                                  None if drop is None else drop[None],
                                                  None if free is None else free[None],
                                                  self.objective)
                        a = int(np.argmax(best[0]))
                else:
                    a = int(learner(cand, mask, glob, phase))
                obs, _, term, trunc, info = env.step(a)
                done = term or trunc
                bar.update(1)
        bar.close()
        if self.plans is not None:
            p = self.plans
            log.info("teacher foo: %d windows solved (%.1f s in all), %d too long for FOO; %d of %d "
                     "decisions labelled by the plan (the others: traffic teacher)", p.solved,
                     p.seconds, p.skipped, p.planned, p.decisions)
        return out

    def normalization_sample(self, n: int = 2000, seed: int = 0) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        s = self(None, 1.0, n, np.random.default_rng(seed))
        return (np.stack([x.cand for x in s]), np.stack([x.mask for x in s]),
                np.stack([x.glob for x in s]))

    def close(self) -> None:
        for e in self.envs:
            e.close()


def _ignored(patterns: Sequence[str]) -> list[int]:
    from cachegym.policies.features import FEATURE_NAMES

    try:
        return feature_indices(list(patterns), FEATURE_NAMES)
    except ValueError as e:
        raise ConfigError(f"policy.{e}") from None


def _hidden(widths: Any) -> list[int]:
    w = list(widths)
    if not w or not all(isinstance(x, int) and not isinstance(x, bool) and x >= 1 for x in w):
        raise ConfigError(f"policy.hidden: the hidden layers' widths must be ints >= 1, one layer "
                          f"at least, got {w}; e.g. policy.hidden=[64,32]")
    return w


def _check_outputs(cfg: Any) -> None:
    """What training reads only at its end, checked at its start: the validation settings and
    the export file name."""
    from cachegym.envs.evaluation import check_capacities, check_capacity_of

    val = cfg.validation
    every = val.every
    if not isinstance(every, int) or isinstance(every, bool) or every < 0:
        raise ConfigError(f"validation.every: {every!r}; give the env steps (or imitation rounds) "
                          "between validations, an integer >= 0 (0: validate at the end only)")
    if val.traces:
        check_capacities("validation.capacities", list(val.capacities))
    check_capacity_of(str(val.capacity_of), "validation.capacity_of")
    name = str(cfg.export_name)
    if not os.path.basename(name.strip()):
        raise ConfigError(f"export_name: {name!r} names no file; give one such as policy.npz")
    if os.path.basename(name) != name or name in (".", ".."):
        raise ConfigError(f"export_name: {name!r} is a path; give a file name (the file is "
                          "written in out_dir: set out_dir to write it elsewhere)")
    if not name.endswith(".npz"):  # (NumPy wrote foo.txt.npz for foo.txt)
        raise ConfigError(f"export_name: {name!r}; a policy file is a .npz: give a name ending "
                          f"in .npz ({os.path.splitext(name)[0] or 'policy'}.npz)")


def write_results_csv(final: dict[str, float], name: str, out_dir: str) -> str:
    """``out_dir/results.csv``: the exported policy's validation figures (one row, ``policy``
    ``name``) and LRU's on the same runs, in the evaluator's column names, so that a training
    multirun merges into one table like an evaluation sweep (:mod:`envs.sweep`); a run
    validated on stall adds ``prefetch``, ``stall_ns`` (mean over the validation cells) and the
    learned row's ``stall_ratio``."""
    learned = {"policy": name, "miss_ratio": final.get("miss_ratio_learned"),
               "traffic_bytes": final.get("traffic_learned"),
               # (the deployed policy's gaps; not the network alone's, ``*_network``)
               **{k: v for k, v in final.items()
                  if k.startswith("gap_closed_") and not k.endswith("_network")}}
    lru = {"policy": "lru", "miss_ratio": final.get("miss_ratio_lru"),
           "traffic_bytes": final.get("traffic_lru")}
    if "stall_learned" in final:  # (a run for stall under a preset: validated on stall too)
        joint = "stall_lru_lookahead" in final  # its prefetch head, against LRU + lookahead
        learned.update(prefetch="learned" if joint else "none", stall_ns=final["stall_learned"],
                       stall_ratio=final.get("stall_ratio"))
        lru.update(prefetch="lookahead" if joint else "none",
                   stall_ns=final.get("stall_lru_lookahead" if joint else "stall_lru"))
    cols = list(learned)

    def write(f: Any) -> None:
        w = csv.DictWriter(f, fieldnames=cols)
        w.writeheader()
        for row in (learned, lru):
            w.writerow({c: ("" if v is None or (isinstance(v, float) and math.isnan(v)) else v)
                        for c, v in ((c, row.get(c)) for c in cols)})

    return replace_atomically(os.path.join(out_dir, "results.csv"), write)


def check_trainable_env(node: Any, agent: Any = None) -> None:
    """Refuse (:class:`ConfigError`) an ``env`` config whose env training cannot export: a
    :class:`envs.prefetch.PrefetchEnv` (``env=prefetch``) poses prefetch decisions alone
    (``Discrete(K + 1)``, no eviction), which no agent's scorer answers; a
    :class:`envs.joint.JointEnv` with ``agent`` (instantiated) training DQN at any stage (its
    Q-network scores evictions alone: refused by the model's build too, after an imitation
    stage's work); an unknown target is left to :func:`instantiate`, which names it."""
    import importlib

    from cachegym.envs.joint import JointEnv
    from cachegym.envs.prefetch import PrefetchEnv
    from cachegym.policies.training.agents import DQN_ON_JOINT, sb3_algos

    target = str(node.get("_target_") or "")
    mod, _, name = target.rpartition(".")
    try:
        cls = getattr(importlib.import_module(mod), name) if mod else None
    except (ImportError, AttributeError, ValueError):
        return
    if isinstance(cls, type) and issubclass(cls, PrefetchEnv):
        raise ConfigError("env=prefetch (cachegym/Prefetch-v0): its decisions are prefetches alone, which "
                          "train no eviction scorer, and training exports one; use env=evict (an eviction "
                          "policy) or env=joint (eviction and prefetch heads in one file)")
    if agent is not None and isinstance(cls, type) and issubclass(cls, JointEnv) \
            and "dqn" in sb3_algos(agent):
        raise ConfigError(DQN_ON_JOINT)


def train(cfg: Any, *, out_dir: str | None = None) -> dict[str, Any]:
    """Train, validate and export as ``cfg`` says, in ``out_dir`` if given, else in
    :func:`envs.sweep.results_dir` of ``cfg`` (with ``config.yaml``, ``train.json`` and, with
    validation traces, ``results.csv``); returns ``{"policy": path, "out_dir": ...,
    "validation": {...}, "score": ..., "objective": ..., "history": [...], "wall_s": ...}``
    (``score``: the exported file's validation score in ``objective``, as ``select_best``
    compares checkpoints, :meth:`Validator.score`; ``None`` without validation)."""
    t0 = time.perf_counter()
    refuse_unknown_keys(cfg)
    from cachegym.envs.evaluation import check_capacities

    check_capacities("capacities", list(cfg.capacities))  # named, before any work
    for c in cfg.capacities:  # (the env took 2.0 for a fraction, and was blamed for it)
        if isinstance(c, float) and not 0 < c <= 1:
            raise ConfigError(f"capacities: {c!r} is no fraction in (0, 1]; give fractions of "
                              "each window's env.capacity_of (0.25), bytes as an int, or a size "
                              "string ('512MiB')")
    check_capacities("validation.capacities", list(cfg.validation.capacities))
    cut = cfg.validation.get("max_requests")
    if cut is not None and (isinstance(cut, bool) or not isinstance(cut, int) or cut < 1):
        raise ConfigError(f"validation.max_requests: {cut!r} is not a number of requests; give an "
                          "int >= 1 (each validation trace cut to its first N requests) or null "
                          "(whole traces)")
    seed = int(cfg.seed)
    hidden, ignore = _hidden(cfg.policy.hidden), _ignored(cfg.policy.ignore_features)  # before any work
    _check_outputs(cfg)
    check_trainable_env(cfg.env)
    seed_everything(seed, int(cfg.torch_threads), bool(cfg.deterministic))
    agent = instantiate(cfg.agent)  # its config checked too, before any trace is read
    check_trainable_env(cfg.env, agent)  # (before an earlier run's outputs are set aside)
    init, resume = warm_start(cfg, agent, hidden, ignore)
    out = results_dir(cfg, "train", exact=out_dir)
    # the traces read (and recorded, into out/recorded, which stays) before an earlier run's
    # outputs are set aside: a refused trace leaves that run where it was
    traces = training_traces(cfg, out)
    if not traces:
        raise ConfigError("traces: the list is empty; give at least one training trace")
    val = cfg.validation
    val_traces = load_trace_list(val.traces, "validation.traces")
    if val.max_requests:
        for t in val_traces:
            if len(t) > val.max_requests:
                log.info("validation: trace %s cut to its first %d of %d requests "
                         "(validation.max_requests; null: whole)", t.name, val.max_requests, len(t))
        val_traces = [t if len(t) <= val.max_requests else t.window(0, int(val.max_requests))
                      for t in val_traces]
    for v in val_traces:  # (allowed, but its figures are then no held-out figures: say so)
        same = next((t for t in traces if _starts_with(t, v)), None)
        if same is not None:
            log.warning("validation trace %s is %s training trace %s: its validation figures "
                        "are not held-out figures (validation.traces chooses traces never "
                        "trained on)", v.name, "the" if len(same) == len(v) else "the start of",
                        same.name)
    env_node = cfg.env
    K, rule = int(env_node.K), str(env_node.get("candidates", "lru"))
    factory = EnvFactory(env_node, traces, list(cfg.capacities), seed)
    dagger_cfg = getattr(agent, "dagger", None)  # (an RL agent's collector only normalises)
    collector = Collector(factory, progress=bool(cfg.progress),
                          teacher=str(getattr(dagger_cfg, "teacher", "belady_size")),
                          prefetch_horizon=getattr(dagger_cfg, "prefetch_horizon", None),
                          prefetch_no_harm=bool(getattr(dagger_cfg, "prefetch_no_harm", True)),
                          objective=str(env_node.get("reward", "traffic")))
    prefetch = prefetch_section(collector.envs[0])  # None: an eviction env
    # an earlier run's outputs here: set aside (out/previous/), so that neither run's files mix
    # nor a failed run loses the earlier ones (its recorded workloads stay: they are reused);
    # after the envs are built, so that an env config they refuse leaves that run where it was
    from cachegym.policies.training.agents import ALGOS

    keep = [str(p) for p in (cfg.get("resume"), cfg.get("init_from")) if p]
    # a resume continues its run's checkpoints (select_best compares them all): where it
    # continues in the same folder they stay
    resumed_ckpts = os.path.join(os.path.dirname(os.path.abspath(resume)), "checkpoints") if resume else None
    if resumed_ckpts is not None and os.path.realpath(resumed_ckpts) == os.path.realpath(
            os.path.join(out, "checkpoints")):
        keep.append(resumed_ckpts)
    set_aside(out, ["config.yaml", "train.json", "results.csv", str(cfg.export_name), "checkpoints",
                    "tb", *(f"{a}.zip" for a in ALGOS)], keep=keep)
    write_config(cfg, out)
    alloc = cfg.allocator
    validator = Validator(val_traces, list(val.capacities), str(val.capacity_of),
                          os.path.join(out, "checkpoints"), K=K, candidate_rule=rule,
                          placement=str(enum_value(alloc.placement)),
                          oversize=str(enum_value(alloc.oversize)),
                          write_policy=str(enum_value(alloc.write_policy)), seed=seed, config=cfg,
                          prefetch=prefetch, preset=env_node.get("cost"),
                          objective=str(env_node.get("reward", "traffic")))
    if resumed_ckpts is not None and val_traces:  # (up to the resumed model's step count)
        steps = zip_fields(str(resume)).get("num_timesteps")  # (its data alone, no tensors)
        validator.continue_from(resumed_ckpts, until=steps if isinstance(steps, int) else None)
    ctx = TrainContext(
        make_env=factory, hidden=hidden, seed=seed, ignore=ignore,
        log_dir=os.path.join(out, "tb") if cfg.tensorboard else None,
        on_eval=validator, eval_every=int(val.every), progress=bool(cfg.progress),
        collect=collector, normalization_sample=lambda: collector.normalization_sample(seed=seed),
        vec=str(enum_value(env_node.get("vec", "dummy"))), save_dir=out, resume=resume,
        objective=collector.objective)
    log.info("training %s on %d traces (%s), validating on %d (%s; validation.traces chooses "
             "them)", type(agent).__name__, len(traces), ", ".join(t.name for t in traces),
             len(val_traces), ", ".join(t.name for t in val_traces) or "none")
    from cachegym.envs.sweep import terminate_as_interrupt

    try:
        with terminate_as_interrupt():  # (SIGTERM too: imitation ended with no word, rc 143)
            net = agent.train(ctx, init=init)
    except KeyboardInterrupt as e:  # (an SB3 stage says how to resume its saved model)
        if not hasattr(e, "resume_with"):
            e.resume_with = (f"interrupted: the checkpoints so far are in "  # type: ignore[attr-defined]
                             f"{os.path.join(out, 'checkpoints')} (init_from=CHECKPOINT.npz starts "
                             "a run from one)")
        raise
    collector.close()
    exported = "last"  # which weights the file holds (best_step: the step that validated best)
    path = os.path.join(out, str(cfg.export_name))
    if bool(val.select_best) and (validator.best_state is not None or validator.best_file):
        log.info("exporting the best validated checkpoint (step %s, score %.4f)",
                 validator.best_step, validator.best_score)
        exported = "best_step"
    if exported == "best_step" and validator.best_file is not None:
        # the best is a checkpoint of the run this one resumed: that file, as validated
        import shutil

        path = path if path.endswith(".npz") else path + ".npz"
        shutil.copyfile(validator.best_file, path)
    else:
        if exported == "best_step":
            net.load_state_dict(validator.best_state)
        meta = {"agent": to_container(cfg.agent), "traces": [t.name for t in traces],
                "validation_traces": [t.name for t in val_traces], "seed": seed}
        path = export_policy(net, path, K=K, candidate_rule=rule, config=cfg, meta=meta,
                             prefetch=prefetch)
    final = validator.evaluate_file(path) if validator.runs else {}
    # the figure a sweeper maximises: the score select_best compares checkpoints by, in the
    # run's objective (NaN without validation)
    score = validator.score(final) if final else math.nan
    result = {"policy": os.path.abspath(path), "out_dir": os.path.abspath(out), "validation": final,
              "score": score if math.isfinite(score) else None, "objective": validator.objective,
              "history": validator.history, "best_step": validator.best_step,
              "exported": exported,
              "sb3_model": os.path.abspath(ctx.saved[-1]) if ctx.saved else None,
              "config_sha256": config_hash(cfg),
              "wall_s": time.perf_counter() - t0}
    with open(os.path.join(out, "train.json"), "w") as f:
        json.dump(result, f, indent=2, default=str)
    if final:
        write_results_csv(final, "learned", out)
    log.info("exported %s (validation: %s)", path, final)
    return result
