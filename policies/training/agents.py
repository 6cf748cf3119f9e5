"""Agents: what ``conf/agent/*`` instantiates. Each trains a :class:`CandidateScorerNet`.

* :class:`SB3Agent` (``algo`` = ``ppo`` | ``maskable_ppo`` | ``dqn``): stable-baselines3 /
  sb3-contrib with the scorer policies of :mod:`policies.training.nets`, on vectorised envs
  (``DummyVecEnv`` or ``SubprocVecEnv``), each wrapped in SB3's ``Monitor`` (episode returns:
  TensorBoard's ``rollout/ep_rew_mean``); saves the model as ``<save_dir>/<algo>.zip`` and
  continues one (``ctx.resume``: weights, optimizer state, step count; read without unpickling).
* :class:`ImitationAgent`: behaviour cloning of the Belady(-Size) oracle with DAgger
  (:mod:`policies.training.imitation`), optionally followed by an RL fine-tune (an
  :class:`SB3Agent` started from the imitation weights).

``agent.train(ctx) -> CandidateScorerNet`` where ``ctx`` is a :class:`TrainContext` (env
factory, callbacks, log directory, seed, where to save, what to resume). ``init`` (a net)
warm-starts either agent. Agents hold hyper-parameters only. On
:class:`envs.joint.JointEnv` (an observation with a ``phase``) the network is a
:class:`JointScorerNet` (eviction and prefetch heads): imitation fits both, and PPO /
MaskablePPO take its ``K + 1`` logits (DQN is refused).
"""

from __future__ import annotations

import logging
import os
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from functools import partial
from typing import Any

import gymnasium as gym
import numpy as np
import torch as th

from cachegym.allocator.errors import ConfigError
from cachegym.allocator.files import replace_atomically
from cachegym.envs.sweep import terminate_as_interrupt
from cachegym.policies.training.imitation import DecisionSample, ImitationConfig, dagger
from cachegym.policies.training.nets import (
    CandidateScorerNet,
    JointScorerNet,
    MaskableScorerActorCriticPolicy,
    ScorerActorCriticPolicy,
    ScorerDQNPolicy,
    obs_dims,
)

__all__ = ["TrainContext", "SB3Agent", "ImitationAgent", "ALGOS"]

log = logging.getLogger(__name__)

ALGOS = ("ppo", "maskable_ppo", "dqn")


@dataclass
class TrainContext:
    """What an agent needs from the training run.

    ``make_env(i)`` builds the ``i``-th training env (seeded by the caller); ``hidden`` is the
    scorer's architecture; ``on_eval(step, net)`` is called every ``eval_every`` env steps (or
    imitation round) and returns validation figures; ``collect`` drives an env for imitation.
    ``vec``: ``dummy`` or ``subproc`` (the SB3 vectorised env); an SB3 stage saves its model as
    ``save_dir/<algo>.zip`` (appended to ``saved``); ``resume``: an SB3 zip the SB3 stage
    continues (the imitation agent then skips imitation).
    """

    make_env: Callable[[int], gym.Env]
    hidden: Sequence[int]
    ignore: Sequence[int] = ()
    seed: int = 0
    log_dir: str | None = None
    on_eval: Callable[[int, CandidateScorerNet], dict[str, float]] | None = None
    eval_every: int = 0
    progress: bool = False
    collect: Callable[..., Sequence[DecisionSample]] | None = None
    normalization_sample: Callable[[], tuple[np.ndarray, np.ndarray, np.ndarray]] | None = None
    vec: str = "dummy"
    save_dir: str | None = None
    resume: str | None = None
    saved: list[str] = field(default_factory=list)
    objective: str = "traffic"  # the env's reward: what the imitation teacher's plan was made for


def _sb3_callbacks(ctx: TrainContext, get_net: Callable[[], CandidateScorerNet], total: int) -> list[Any]:
    from stable_baselines3.common.callbacks import BaseCallback

    class EvalCallback(BaseCallback):
        """Every ``eval_every`` env steps, and at the end: validation figures to the logger
        (TensorBoard) and a checkpoint (written by ``ctx.on_eval``), labelled with the steps
        trained on. A validation falls due during a rollout and runs at the next rollout's
        start, after the algorithm has trained on the rollout that made it due (SB3 calls
        ``_on_step`` while it collects, before ``train()``): the checkpoint ``step_N`` holds
        the weights trained on N steps, and the last one the final weights."""

        last = 0  # the steps at the last validation (at the start: where training starts)
        due = False
        done = False  # whether any validation ran

        def _on_training_start(self) -> None:
            self.last = self.num_timesteps  # (a resumed model: its steps so far)

        def _eval(self) -> None:
            self.due = False
            if ctx.on_eval is None:
                return
            self.last, self.done = self.num_timesteps, True
            for k, v in ctx.on_eval(self.num_timesteps, get_net()).items():
                self.logger.record(f"val/{k}", v)

        def _on_step(self) -> bool:
            if ctx.eval_every and self.num_timesteps - self.last >= ctx.eval_every:
                self.due = True
            return True

        def _on_rollout_start(self) -> None:
            if self.due:
                self._eval()

        def _on_training_end(self) -> None:
            if self.num_timesteps != self.last or not self.done:
                self._eval()

    class Progress(BaseCallback):
        def _on_training_start(self) -> None:
            from tqdm.auto import tqdm

            self.bar = tqdm(total=total, desc="rl", unit="step")

        def _on_step(self) -> bool:
            self.bar.update(self.training_env.num_envs)
            return True

        def _on_training_end(self) -> None:
            self.bar.close()

    cbs: list[Any] = [EvalCallback()]
    if ctx.progress:
        cbs.append(Progress())
    return cbs


DQN_ON_JOINT = ("agent=dqn: its Q-network is one eviction scorer; env=joint (eviction and prefetch "
                "heads) trains with agent=imitation, imitation_ppo, ppo or maskable_ppo")


def sb3_algos(agent: Any) -> list[str]:
    """The SB3 algorithms ``agent`` trains with: its own, or its fine-tune's."""
    stages = [agent, getattr(agent, "finetune", None)]
    return [str(a.algo) for a in stages if a is not None and getattr(a, "algo", None)]


@dataclass
class SB3Agent:
    """An SB3 algorithm over the scorer policies. ``kwargs`` go to the algorithm's
    constructor (``learning_rate``, ``n_steps``, ``batch_size``, ``gamma``, ...)."""

    algo: str = "maskable_ppo"
    total_timesteps: int = 20_000
    n_envs: int = 1
    kwargs: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if self.algo not in ALGOS:
            raise ConfigError(f"agent.algo: unknown algorithm {self.algo!r}; choose one of {ALGOS}")
        if self.total_timesteps < 1 or self.n_envs < 1:
            raise ConfigError(f"agent.total_timesteps and agent.n_envs must be >= 1, got "
                              f"total_timesteps={self.total_timesteps}, n_envs={self.n_envs}")
        self._check_kwargs()

    def _classes(self) -> tuple[Any, Any]:
        from sb3_contrib import MaskablePPO
        from stable_baselines3 import DQN, PPO

        return {"ppo": (PPO, ScorerActorCriticPolicy),
                "maskable_ppo": (MaskablePPO, MaskableScorerActorCriticPolicy),
                "dqn": (DQN, ScorerDQNPolicy)}[self.algo]

    def _check_kwargs(self) -> None:
        """``kwargs`` the algorithm takes, with the sizes and rates SB3 itself does not check in
        range (``batch_size=0`` ends in a tensor reshape error deep inside ``learn``)."""
        import inspect

        cls = self._classes()[0]
        where = f"agent.kwargs ({self.algo})"
        takes = inspect.signature(cls.__init__).parameters
        ours = {"policy": "the scorer policies", "env": "the env config", "policy_kwargs": "policy.*",
                "seed": "seed=", "tensorboard_log": "tensorboard=", "device": "the CPU"}
        mine = sorted(k for k in self.kwargs if k in ours)
        if mine:
            raise ConfigError(f"{where}: {mine} are set by cachegym (from "
                              f"{', '.join(ours[k] for k in mine)}); leave them out")
        unknown = sorted(k for k in self.kwargs if k not in takes)
        if unknown:
            allowed = sorted(k for k in takes if k not in ours and k != "self" and not k.startswith("_"))
            raise ConfigError(f"{where}: {unknown} are not settings of {cls.__name__}; it takes {allowed}")
        bad = [f"{k}={v!r} (must be an int >= 1)" for k, v in self.kwargs.items()
               if k in ("batch_size", "n_steps", "n_epochs", "buffer_size")
               and not (isinstance(v, int) and not isinstance(v, bool) and v >= 1)]
        lr = self.kwargs.get("learning_rate")
        if isinstance(lr, (int, float)) and not lr >= 0:  # 0 freezes the weights (a test does)
            bad.append(f"learning_rate={lr!r} (must be >= 0)")
        gamma = self.kwargs.get("gamma")
        if isinstance(gamma, (int, float)) and not 0 <= gamma <= 1:
            bad.append(f"gamma={gamma!r} (must be in [0, 1])")
        if bad:
            raise ConfigError(f"{where}: " + "; ".join(bad))

    def build(self, ctx: TrainContext, from_network: bool = False) -> Any:
        """The SB3 model on ``ctx``'s envs; ``from_network``: it will start from a trained
        network's weights (a fine-tune), so its critic does not train the scorer's layers
        (:class:`~policies.training.nets.ScorerExtractor`'s ``critic_detached``)."""
        from stable_baselines3.common.vec_env import DummyVecEnv, SubprocVecEnv

        fns: list[Callable[[], gym.Env]] = [partial(monitored, ctx.make_env, i) for i in range(self.n_envs)]
        if ctx.vec not in ("dummy", "subproc"):
            raise ConfigError(f"env.vec: {ctx.vec!r} is not a vectorised env; choose dummy or subproc")
        venv = SubprocVecEnv(fns) if ctx.vec == "subproc" else DummyVecEnv(fns)
        if self.algo == "dqn" and "phase" in venv.observation_space.spaces:  # type: ignore[attr-defined]
            venv.close()
            raise ConfigError(DQN_ON_JOINT)
        venv.seed(ctx.seed)
        cls, pol = self._classes()
        kw = dict(self.kwargs)
        kw.setdefault("verbose", 0)
        pk: dict[str, Any] = {"hidden": list(ctx.hidden), "ignore": list(ctx.ignore)}
        if from_network and self.algo != "dqn":  # (DQN has no critic)
            pk["critic_detached"] = True
        model = cls(pol, venv, policy_kwargs=pk, seed=ctx.seed, tensorboard_log=ctx.log_dir,
                    device="cpu", **kw)
        if ctx.log_dir is None:
            quiet_logger(model, verbose=bool(kw["verbose"]))
        return model

    def start(self, model: Any, ctx: TrainContext, init: CandidateScorerNet | None = None) -> None:
        """The weights ``model`` (:meth:`build`) starts from: ``ctx.resume``'s zip, else
        ``init``'s (the scorer, its normalisation included: the model then scores every
        candidate as ``init``'s exported file does), else fresh weights with the input
        normalisation of ``ctx.normalization_sample``."""
        net: CandidateScorerNet = model.policy.scorer
        if ctx.resume is not None:
            resume_model(model, ctx.resume)
        elif init is not None:
            if list(init.hidden) != list(net.hidden):
                raise ConfigError(f"fine-tune: imitation net hidden {init.hidden} != RL net {net.hidden}")
            net.load_state_dict(init.state_dict())
            if self.algo == "dqn":
                model.q_net_target.scorer.load_state_dict(init.state_dict())
        elif ctx.normalization_sample is not None:
            cand, mask, glob = ctx.normalization_sample()
            net.set_normalization(cand, mask, glob)
            if self.algo == "dqn":
                model.q_net_target.scorer.load_state_dict(net.state_dict())

    def train(self, ctx: TrainContext, init: CandidateScorerNet | None = None,
              from_network: bool | None = None) -> CandidateScorerNet:
        """Train from ``init`` (or as :meth:`start` says); ``from_network`` (default: ``init``
        given) builds the model for a fine-tune of trained weights (:meth:`build`)."""
        model = self.build(ctx, from_network=init is not None if from_network is None else from_network)
        self.start(model, ctx, init)
        cbs = _sb3_callbacks(ctx, lambda: model.policy.scorer, self.total_timesteps)
        interrupted = False
        try:
            with terminate_as_interrupt():
                model.learn(self.total_timesteps, callback=cbs, tb_log_name=self.algo,
                            reset_num_timesteps=ctx.resume is None)
        except KeyboardInterrupt as e:  # (SIGINT, or SIGTERM) the model so far, to continue from
            interrupted = True
            if ctx.save_dir is not None:
                path = self._save(model, ctx.save_dir)
                e.resume_with = (f"interrupted after {model.num_timesteps} timesteps: the model "  # type: ignore[attr-defined]
                                 f"so far is saved in {path}; continue it with resume={path} (and "
                                 "the same settings)")
                log.warning("%s", e.resume_with)  # type: ignore[attr-defined]
            raise
        finally:
            try:
                model.get_env().close()  # (subprocesses end)
            except (EOFError, OSError):  # (BrokenPipeError: a signal to the process group
                if not interrupted:      # ended them first; the interrupt is what is said)
                    raise
        model.policy.set_training_mode(False)
        if ctx.save_dir is not None:
            ctx.saved.append(self._save(model, ctx.save_dir))
        return model.policy.scorer  # type: ignore[no-any-return]

    def _save(self, model: Any, save_dir: str) -> str:
        """``model`` as ``save_dir/<algo>.zip`` (written whole: an older zip stays as it was
        if the write fails)."""
        return replace_atomically(os.path.join(save_dir, f"{self.algo}.zip"), model.save,
                                  binary=True)




def monitored(make_env: Callable[[int], gym.Env], i: int) -> gym.Env:
    """Training env ``i`` in SB3's ``Monitor``: its episodes' returns and lengths reach the
    logger (``rollout/ep_rew_mean``, ``rollout/ep_len_mean``). A module-level function, so that
    ``SubprocVecEnv`` can send it to its processes."""
    from stable_baselines3.common.monitor import Monitor

    return Monitor(make_env(i))


def resume_model(model: Any, path: str) -> None:
    """Load the SB3 zip ``path`` (saved by an earlier run of the same agent and policy
    settings) into ``model``: the policy's tensors (value head and target network included),
    the optimizer's state and the step count, read without unpickling
    (:func:`~policies.training.export.read_sb3_zip`)."""
    from cachegym.allocator.errors import PolicyFileError
    from cachegym.policies.training.export import read_sb3_zip, sb3_algo

    state, opt, fields = read_sb3_zip(path)
    try:
        model.policy.load_state_dict(state, strict=True)
    except RuntimeError as e:
        first = str(e).strip().splitlines()
        algo = sb3_algo(fields)  # (said where it is another algorithm's)
        if algo is not None and algo.replace("_", "") == type(model).__name__.lower():
            algo = None
        raise PolicyFileError(
            f"resume: {path} {f'holds a {algo} model, which ' if algo else ''}does not fit "
            f"{type(model).__name__} with {type(model.policy).__name__} "
            f"and these policy.hidden/ignore settings ({first[0] if first else e} ...); resume with "
            "the agent and policy settings the zip was trained with") from None
    if opt is not None:
        try:
            model.policy.optimizer.load_state_dict(opt)
        except (ValueError, KeyError, RuntimeError) as e:
            log.warning("resume: %s: the optimizer state does not fit (%s); starting it afresh", path, e)
    steps = fields.get("num_timesteps")
    model.num_timesteps = int(steps) if isinstance(steps, int) and steps >= 0 else 0
    # the gradient updates so far (what TensorBoard's train/n_updates counts on from)
    updates = fields.get("_n_updates")
    model._n_updates = int(updates) if isinstance(updates, int) and updates >= 0 else 0
    log.info("resuming %s from %s at step %d (weights%s)", type(model).__name__, path,
             model.num_timesteps, ", optimizer state" if opt is not None else "")


def quiet_logger(model: Any, verbose: bool = False) -> None:
    """A logger that writes no folder (``verbose``: the progress to standard output, as SB3's
    ``verbose=1``; else nothing): without one, every ``learn()`` of a model without a
    TensorBoard folder makes an ``SB3-<time>`` folder in the system's temporary directory
    (stable-baselines3's ``configure``)."""
    import sys

    from stable_baselines3.common.logger import HumanOutputFormat, Logger

    model.set_logger(Logger(folder=None, output_formats=[HumanOutputFormat(sys.stdout)] if verbose else []))


@dataclass
class ImitationAgent:
    """Belady imitation (BC + DAgger), then ``finetune`` (an :class:`SB3Agent` or ``None``)."""

    dagger: ImitationConfig = field(default_factory=ImitationConfig)
    finetune: SB3Agent | None = None

    def train(self, ctx: TrainContext, init: CandidateScorerNet | None = None) -> CandidateScorerNet:
        if ctx.resume is not None:  # continue the fine-tune: the imitation stage is done
            if self.finetune is None:
                raise ConfigError("resume: the imitation agent has no SB3 stage to resume; warm-start "
                                  "it from a policy file with init_from=POLICY.npz instead")
            return self.finetune.train(ctx, from_network=True)  # (a fine-tune, as it began)
        if ctx.collect is None:
            raise ConfigError("imitation needs an env that labels decisions with the oracle")
        env = ctx.make_env(0)
        K, F, G = obs_dims(env.observation_space)
        joint = "phase" in env.observation_space.spaces  # type: ignore[attr-defined]
        env.close()
        th.manual_seed(ctx.seed)
        net: Any = init if init is not None else (JointScorerNet if joint else CandidateScorerNet)(
            F, G, ctx.hidden, ctx.ignore)
        writer = _tb_writer(ctx.log_dir, "imitation")

        last_round = int(self.dagger.rounds) - 1

        def on_round(r: int, stats: dict[str, Any]) -> None:
            figs = dict(stats)
            # every round; with validation.every=0 the last one only ("at the end only")
            if ctx.on_eval is not None and (ctx.eval_every or r == last_round):
                figs.update(ctx.on_eval(r, net))
            if writer is not None:
                for k, v in figs.items():
                    if isinstance(v, (int, float)):
                        writer.add_scalar(f"imitation/{k}", v, r)
            log.info("imitation round %d: %s", r,
                     ", ".join(f"{k}={v:.4g}" if isinstance(v, float) else f"{k}={v}"
                               for k, v in figs.items()))

        # (a net from init_from holds its file's normalisation folded into its weights)
        dagger(net, ctx.collect, self.dagger, seed=ctx.seed, on_round=on_round,
               normalize=init is None, objective=ctx.objective)
        if writer is not None:
            writer.close()
        if self.finetune is not None:
            net = self.finetune.train(ctx, init=net)
        return net


def _tb_writer(log_dir: str | None, name: str) -> Any:
    if not log_dir:
        return None
    try:
        from torch.utils.tensorboard import SummaryWriter
    except ImportError:  # pragma: no cover - tensorboard is in the train extra
        log.warning("tensorboard is not installed; no TensorBoard logs for %s", name)
        return None
    return SummaryWriter(f"{log_dir}/{name}")
