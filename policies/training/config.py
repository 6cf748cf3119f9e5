"""Structured-config schemas of training (``conf/train.yaml`` and its groups).

Registered in Hydra's ConfigStore by :func:`register_train_configs` (which also registers the
evaluation schemas of :mod:`envs.config`), so that a wrong type or a missing key fails when the
config is composed::

    train_schema            the whole conf/train.yaml
    policy/base_scorer      the network (conf/policy/*.yaml)
    agent/base_sb3          conf/agent/{ppo,maskable_ppo,dqn}.yaml
    agent/base_imitation    conf/agent/imitation*.yaml
    env/base_env            conf/env/evict.yaml (the env's own parameters)
    env/base_prefetch       conf/env/prefetch.yaml
    env/base_joint          conf/env/joint.yaml
"""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import Enum
from typing import Any

from omegaconf import MISSING

from cachegym.envs.config import AllocatorConfig, TraceConfig, register_configs

__all__ = ["VecEnvKind", "RUNNER_KEYS", "RecordedWorkload", "ScorerConfig", "SB3AgentConfig", "DaggerConfig", "ImitationAgentConfig",
           "EnvConfig", "PrefetchEnvConfig", "JointEnvConfig", "ValidationConfig", "TrainConfig", "JointStage", "MainSection",
           "register_train_configs"]


class VecEnvKind(str, Enum):
    """How the SB3 agents run their ``agent.n_envs`` training envs: ``dummy`` (one after the
    other in this process: SB3's ``DummyVecEnv``) or ``subproc`` (one process each:
    ``SubprocVecEnv``, for envs whose steps are slow next to the network's update)."""

    dummy = "dummy"
    subproc = "subproc"

    def __str__(self) -> str:
        return str(self.value)


RUNNER_KEYS = ("vec",)
"""Keys of the ``env`` config that say how training runs the envs, not what an env is: not
passed to the env's constructor (every other key is one of its arguments, with its default)."""


@dataclass
class ScorerConfig:
    """The per-candidate scorer: widths of its hidden layers (ReLU); ``ignore_features``: glob
    patterns of feature names the network does not read (their weights export as zeros)."""

    hidden: list[int] = field(default_factory=lambda: [64, 32])
    ignore_features: list[str] = field(default_factory=list)


@dataclass
class SB3AgentConfig:
    """An SB3 algorithm (``algo``: ppo | maskable_ppo | dqn); ``kwargs`` go to its constructor."""

    _target_: str = "cachegym.policies.training.agents.SB3Agent"
    algo: str = "maskable_ppo"
    total_timesteps: int = 20_000
    n_envs: int = 1
    kwargs: dict[str, Any] = field(default_factory=dict)


@dataclass
class DaggerConfig:
    """DAgger schedule (see :class:`policies.training.imitation.ImitationConfig`)."""

    _target_: str = "cachegym.policies.training.imitation.ImitationConfig"
    rounds: int = 3
    steps_per_round: int = 20_000
    beta0: float = 1.0
    beta_decay: float = 0.0
    epochs: int = 4
    batch_size: int = 256
    lr: float = 0.003
    rank_weight: float = 0.1
    regression_weight: float = 0.0
    max_samples: int | None = 200_000
    average_from: int | None = None
    teacher: str = "foo"
    prefetch_horizon: int | None = None
    prefetch_no_harm: bool = True


@dataclass
class ImitationAgentConfig:
    """Belady imitation, then an optional RL fine-tune from its weights."""

    _target_: str = "cachegym.policies.training.agents.ImitationAgent"
    dagger: DaggerConfig = field(default_factory=DaggerConfig)
    finetune: SB3AgentConfig | None = None


@dataclass
class EnvConfig:
    """The training environment (:class:`envs.evict.EvictEnv`; every key but ``_target_`` and
    :data:`RUNNER_KEYS` is a constructor argument, defaults included). Its traces and capacity
    are passed by :func:`train`: one env per entry of ``TrainConfig.capacities``. ``vec``: how
    the SB3 agents run their envs (:class:`VecEnvKind`). ``cost``: a timing preset (needed by
    ``reward: stall``, whose FOO teacher then plans for copy time), e.g. ``env.cost=h100_pcie5``."""

    _target_: str = "cachegym.envs.evict.EvictEnv"
    K: int = 32
    candidates: str = "sample"
    window: int | None = 16384
    capacity_of: str = "peak_live"
    reward: str = "traffic"
    invalid_action: str = "lru"
    cost: str | None = None
    placement: str = "bytes"
    clean_ahead: float = 0.0
    reward_baseline: float = 0.0
    vec: VecEnvKind = VecEnvKind.dummy


@dataclass
class _PrefetchingEnvConfig:
    """The keys :class:`PrefetchEnvConfig` and :class:`JointEnvConfig` share (their envs'
    constructor arguments of the same name and default)."""

    opportunity: Any = "miss"
    # the candidates' proposer (policies.successors.SuccessorPredictor's parameters; None: its
    # defaults, the successor table; with horizon > 0, the aligned history)
    predictor: Any = None
    window: int | None = 4096
    capacity_of: str = "peak_live"
    cost: str | None = None
    placement: str = "bytes"
    write_policy: str = "write-back"
    clean_ahead: float = 0.0
    reward_baseline: float = 0.0
    vec: VecEnvKind = VecEnvKind.dummy


@dataclass
class PrefetchEnvConfig(_PrefetchingEnvConfig):
    """:class:`envs.prefetch.PrefetchEnv` (``cachegym/Prefetch-v0``): every key but
    ``_target_`` and :data:`RUNNER_KEYS` is a constructor argument, each default the constructor's."""

    _target_: str = "cachegym.envs.prefetch.PrefetchEnv"
    K: int = 8
    reward: str = "pythia"
    invalid_action: str = "noop"


@dataclass
class JointEnvConfig(_PrefetchingEnvConfig):
    """:class:`envs.joint.JointEnv` (``cachegym/Joint-v0``): every key but ``_target_`` and
    :data:`RUNNER_KEYS` is a constructor argument, each default the constructor's. ``cost``: a
    timing preset (needed by ``reward: stall``), e.g. ``env.cost=h100_pcie5``."""

    _target_: str = "cachegym.envs.joint.JointEnv"
    K: int = 16
    candidates: str = "lru"
    reward: str = "misses"
    invalid_action: str = "default"


@dataclass
class RecordedWorkload:
    """``steps`` training iterations of the ready-made workload ``workload``."""

    workload: str = MISSING
    steps: int = 3


@dataclass
class ValidationConfig:
    """Held-out traces replayed every ``every`` env steps (or imitation round): traffic and miss
    ratio of the learned policy against LRU and an offline bound (FOO's ``foo_l``, or LFOO-L) at
    ``capacities`` (fractions of ``capacity_of``).
    ``select_best``: export the checkpoint with the best validation score instead of the last."""

    traces: list[TraceConfig] = field(default_factory=list)
    capacities: list[Any] = field(default_factory=lambda: [0.25, 0.5])
    capacity_of: str = "peak_live"
    every: int = 5_000
    max_requests: int | None = 20_000
    select_best: bool = False


@dataclass
class JointStage:
    """The main job's prefetch stage: a short training run in ``env`` (``conf/env/joint.yaml``,
    placed here by ``conf/main.yaml``'s defaults: ``env@main.joint.env``) with ``agent``
    (``agent@main.joint.agent``) at ``capacities``, on the main job's traces; its prefetch
    head joins the main training's eviction scorer in the one exported file. ``None`` outside
    the main job."""

    env: Any = None
    agent: Any = None
    capacities: list[Any] = field(default_factory=lambda: [0.25, 0.5])  # (as main.capacities: 25% too)


@dataclass
class MainSection:
    """The main job's evaluation: ``held_out`` trace files (or ``[default]``: the traces of
    :func:`policies.training.quality.default_held_out`), the pool
    ``capacities`` (fractions of peak live bytes) and the ``baselines`` evaluated beside the
    learned policy, which runs under each of ``learned_guards`` (options of
    ``conf/policy/guard/``)."""

    held_out: list[str] = field(default_factory=lambda: ["default"])
    capacities: list[Any] = field(default_factory=lambda: [0.25, 0.5])
    baselines: list[str] = field(default_factory=lambda: ["lru", "lfu", "arc", "s3fifo", "slru", "gdsf", "belady"])
    learned_guards: list[str] = field(default_factory=lambda: ["shadow", "none"])
    bounds: list[str] = field(default_factory=lambda: ["auto"])
    """Offline bounds beside the results (``eval.bounds``; ``auto``: FOO up to 30,000 requests,
    LFOO-L up to 5M, PFOO-L beyond)."""
    presets: list[str] = field(default_factory=lambda: ["h100_pcie5"])
    """Timing presets of the evaluation (stall, its bound and the stall reference; ``none``:
    instant copies, traffic only)."""
    plots: bool = True
    jobs: int = 0
    """The evaluation's runs replayed at once (``eval.jobs``: worker processes; 0, the default,
    one per CPU core; 1: one after the other, in this process). The same rows either way but for
    wall times and decision latencies, which runs side by side disturb."""
    prefetch: bool = True
    """Train a prefetch head (``joint``) and export it in the policy file beside the eviction
    scorer; the evaluation then runs the prefetchers ``none``, ``lookahead`` and the file's
    head (``learned:PATH``). ``false``: eviction only, no prefetchers."""
    joint: JointStage = field(default_factory=JointStage)


@dataclass
class TrainConfig:
    """Schema of ``conf/train.yaml`` (and ``conf/main.yaml``, which adds the ``main`` section)."""

    traces: list[TraceConfig] = MISSING
    trace: TraceConfig = field(default_factory=TraceConfig)
    """Your own trace, with the keys of evaluation (``trace.path=T trace.format=F``, or
    ``trace.paths``, or ``trace.generator``): when set, the training traces are this one alone
    (it replaces ``traces``, ``record_training`` and ``record_inference``)."""
    resume: str | None = None
    """An SB3 model ``.zip`` (``OUT/<algo>.zip`` of an earlier run) to continue training from:
    its weights, optimizer state and step count (read without unpickling)."""
    init_from: str | None = None
    """A policy file (``OUT/policy.npz``) whose network training starts from (a fine-tune)."""
    record_training: list[RecordedWorkload] = field(default_factory=list)
    """Ready-made workloads (:mod:`envs.workloads.models`) whose training iterations are recorded
    at the start of the run into ``OUT/recorded`` and trained on with ``traces``."""
    record_inference: list[str] = field(default_factory=list)
    """Ready-made workloads recorded forward-only (12 steps each) and trained on with ``traces``."""
    recorded_dir: str | None = None
    """Where those recordings are kept and looked for first (a file per workload, seed and
    steps): ``None`` is ``OUT/recorded`` (the main job's stages share ``OUT/recorded`` of the
    run). A folder kept across runs (``recorded_dir=outputs/recorded``) makes a rerun train on
    the same recordings, bit for bit: a fresh recording has other ``compute_ns`` (measured op
    times), which the stall-trained prefetch head learns from. Delete it after changing a
    workload or the recorder: the file names hold only workload, seed and steps."""
    validation: ValidationConfig = field(default_factory=ValidationConfig)
    env: Any = MISSING  # conf/env/: EnvConfig (evict), PrefetchEnvConfig or JointEnvConfig
    capacities: list[Any] = field(default_factory=lambda: [0.25, 0.5])
    allocator: AllocatorConfig = field(default_factory=AllocatorConfig)
    policy: ScorerConfig = field(default_factory=ScorerConfig)
    agent: Any = MISSING
    seed: int = 0
    out_dir: str | None = None
    export_name: str = "policy.npz"
    progress: bool = True
    tensorboard: bool = True
    torch_threads: int = 1  # torch's threads (1: reproducible and fair on a shared machine);
    # 0: torch's default (one per core); negative values are refused
    deterministic: bool = True
    main: MainSection = field(default_factory=MainSection)  # read by the main job only


_registered = False


def register_train_configs() -> None:
    """Store the training schemas (and the evaluation ones) in Hydra's ConfigStore."""
    global _registered
    register_configs()
    if _registered:
        return
    from hydra.core.config_store import ConfigStore

    cs = ConfigStore.instance()
    cs.store(name="train_schema", node=TrainConfig)
    cs.store(group="policy", name="base_scorer", node=ScorerConfig)
    cs.store(group="agent", name="base_sb3", node=SB3AgentConfig)
    cs.store(group="agent", name="base_imitation", node=ImitationAgentConfig)
    cs.store(group="env", name="base_env", node=EnvConfig)
    cs.store(group="env", name="base_prefetch", node=PrefetchEnvConfig)
    cs.store(group="env", name="base_joint", node=JointEnvConfig)
    _registered = True
