"""The candidate scorer (torch) and the stable-baselines3 policies that carry it (public API).

Use these policy classes in your own SB3 script; a model trained with them exports to a policy
file that :meth:`cachegym.LearnedPolicy.load` reads with NumPy alone::

    import gymnasium as gym
    import cachegym  # registers cachegym/Evict-v0
    from sb3_contrib import MaskablePPO
    from cachegym.policies.training import MaskableScorerActorCriticPolicy, export_model

    # (reward_baseline=1: on the default workload, equal sizes and a full pool, every step's
    # reward is otherwise -1 whatever the agent does; see EvictEnv's docstring)
    env = gym.make("cachegym/Evict-v0", reward_baseline=1.0)
    model = MaskablePPO(MaskableScorerActorCriticPolicy, env, policy_kwargs={"hidden": [64, 32]})
    model.learn(2048)
    export_model(model, "policy.npz")

Policy classes, by algorithm:

* :class:`MaskableScorerActorCriticPolicy`: ``sb3_contrib.MaskablePPO`` (masked candidates are
  never sampled);
* :class:`ScorerActorCriticPolicy`: ``stable_baselines3.PPO`` (masked candidates get -1e9
  logits);
* :class:`ScorerDQNPolicy`: ``stable_baselines3.DQN`` (the Q-network is the scorer; masked
  candidates get Q = -1e9).

The action space must be what the scorer emits: ``Discrete(K)`` (``cachegym/Evict-v0``), or
with a ``phase`` in the observation ``Discrete(K + 1)`` (``cachegym/Joint-v0``: the actor-critic
policies then carry a :class:`JointScorerNet`, and ``export_model`` writes both heads); any other
(``cachegym/Prefetch-v0``, whose decisions alone have no scorer policy; DQN in Joint-v0) is a
:class:`~cachegym.allocator.errors.ConfigError` naming the env and policy class to use.

``policy_kwargs``: ``hidden`` (the scorer's hidden widths, default ``[64, 64]``; the training
configs use ``[64, 32]``) and ``ignore`` (indices of features the network does not read). The
observation must be the cachegym envs' Dict space (``candidates``, ``globals``, ``mask``).
SB3's generic ``"MultiInputPolicy"`` trains an MLP over the flattened observation, which has
no per-candidate scorer to export: :func:`~cachegym.policies.training.export.export_model`
refuses it and names the class to use.

One module, :class:`CandidateScorerNet`, is what every algorithm trains and what
:func:`export_arrays` turns into the NumPy weights :class:`policies.learned.CandidateScorer`
reads (:func:`import_arrays` is the inverse, for warm starts): PPO and MaskablePPO use it as the
actor (their logits are its scores; a small value head reads its pooled hidden layer), DQN uses
it as the Q-network, imitation trains it directly.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import torch as th
from gymnasium import spaces
from sb3_contrib.common.maskable.policies import MaskableActorCriticPolicy
from stable_baselines3.common.policies import ActorCriticPolicy, BasePolicy
from stable_baselines3.common.torch_layers import BaseFeaturesExtractor
from stable_baselines3.dqn.policies import DQNPolicy
from torch import nn

from cachegym.allocator.errors import ConfigError

__all__ = [
    "CandidateScorerNet", "feature_indices", "export_arrays", "import_arrays", "ScorerActorCriticPolicy",
    "MaskableScorerActorCriticPolicy", "ScorerDQNPolicy", "obs_dims", "NEG", "JointScorerNet",
    "export_joint_arrays", "check_action_space",
]

NEG = -1.0e9
"""Score given to invalid (masked) candidates."""


def obs_dims(space: spaces.Space) -> tuple[int, int, int]:
    """``(K, F, G)`` of the envs' Dict observation space (``candidates`` either ``(K, F)`` or
    flattened to ``(K * F,)``; ``K`` is the length of ``mask``). A :class:`ConfigError` for any
    other space: the scorer reads each candidate's row and the mask, which observation wrappers
    (flattening, frame stacking) take apart."""
    from cachegym.allocator.errors import ConfigError

    wrapped = ("the Scorer policies read the cachegym envs' Dict observation (candidates, globals, "
               "mask) as the env gives it: leave observation wrappers (FlattenObservation, "
               "FrameStackObservation, ...) out, or use SB3's MultiInputPolicy")
    if not isinstance(space, spaces.Dict) or not {"candidates", "globals", "mask"} <= set(space.spaces):
        raise ConfigError(f"expected a Dict space with candidates/globals/mask, got {space}; {wrapped}")
    mask_shape = space["mask"].shape
    cshape = space["candidates"].shape
    gshape = space["globals"].shape
    if mask_shape is None or cshape is None or gshape is None or len(mask_shape) != 1 or len(gshape) != 1:
        raise ConfigError(f"observation shapes mask {mask_shape}, globals {gshape}: {wrapped}")
    K = int(np.prod(mask_shape))
    F = int(np.prod(cshape)) // K
    if int(np.prod(cshape)) != F * K:
        raise ConfigError(f"candidates shape {cshape} is not K={K} rows of features; {wrapped}")
    return K, F, int(gshape[0])


def feature_indices(patterns: Sequence[str], names: Sequence[str]) -> list[int]:
    """Indices of the feature ``names`` matching any of the glob ``patterns`` (``kind_*``)."""
    import fnmatch

    out = [i for i, n in enumerate(names) if any(fnmatch.fnmatch(n, p) for p in patterns)]
    unmatched = [p for p in patterns if not any(fnmatch.fnmatch(n, p) for n in names)]
    if unmatched:
        raise ValueError(f"ignore_features {unmatched} match no feature; features are {list(names)}")
    return out


class CandidateScorerNet(nn.Module):
    """Scores each candidate with the same MLP over ``[(cand - mu) / sd, (glob - mu_g) / sd_g]``.

    Shapes: ``cand`` (B, K, F), ``glob`` (B, G), ``mask`` (B, K) -> scores (B, K), invalid
    candidates set to :data:`NEG`. Permuting the candidates permutes the scores; nothing depends
    on ``K``. The first layer is split into a candidate part and a global part so the NumPy twin
    computes the global part once per decision.
    """

    cand_keep: th.Tensor
    cand_mean: th.Tensor
    cand_std: th.Tensor
    glob_mean: th.Tensor
    glob_std: th.Tensor

    def __init__(self, n_features: int, n_globals: int, hidden: Sequence[int] = (64, 64),
                 ignore: Sequence[int] = ()) -> None:
        super().__init__()
        if not hidden or min(hidden) < 1:
            raise ValueError(f"hidden needs at least one layer, every width >= 1; got {list(hidden)}")
        self.n_features, self.n_globals, self.hidden = n_features, n_globals, list(hidden)
        keep = th.ones(n_features)
        keep[list(ignore)] = 0.0
        self.register_buffer("cand_keep", keep)  # 0 = feature ignored (its weights export as 0)
        self.register_buffer("cand_mean", th.zeros(n_features))
        self.register_buffer("cand_std", th.ones(n_features))
        self.register_buffer("glob_mean", th.zeros(n_globals))
        self.register_buffer("glob_std", th.ones(n_globals))
        self.cand_in = nn.Linear(n_features, hidden[0])
        self.glob_in = nn.Linear(n_globals, hidden[0], bias=False)
        self.layers = nn.ModuleList(nn.Linear(a, b) for a, b in zip(hidden[:-1], hidden[1:]))
        self.out = nn.Linear(hidden[-1], 1)

    def set_normalization(self, cand: np.ndarray, mask: np.ndarray, glob: np.ndarray) -> None:
        """Standardise inputs with statistics of observations (valid candidates only)."""
        c = cand[mask.astype(bool)] if mask.any() else cand.reshape(-1, self.n_features)
        for name, x in (("cand", c), ("glob", glob.reshape(-1, self.n_globals))):
            mu = x.mean(0) if len(x) else np.zeros(x.shape[1])
            sd = x.std(0) if len(x) else np.ones(x.shape[1])
            sd = np.where(sd > 1e-6, sd, 1.0)
            getattr(self, f"{name}_mean").copy_(th.as_tensor(mu, dtype=th.float32))
            getattr(self, f"{name}_std").copy_(th.as_tensor(sd, dtype=th.float32))

    def hidden_features(self, cand: th.Tensor, glob: th.Tensor) -> th.Tensor:
        """Last hidden layer per candidate, (B, K, H)."""
        c = (cand - self.cand_mean) / self.cand_std * self.cand_keep
        g = (glob - self.glob_mean) / self.glob_std
        h = th.relu(self.cand_in(c) + self.glob_in(g).unsqueeze(-2))
        for layer in self.layers:
            h = th.relu(layer(h))
        return h

    def forward(self, cand: th.Tensor, glob: th.Tensor, mask: th.Tensor) -> th.Tensor:
        s = self.out(self.hidden_features(cand, glob)).squeeze(-1)
        return s.masked_fill(mask < 0.5, NEG)


def import_arrays(arrays: Mapping[str, np.ndarray], ignore: Sequence[int] = ()) -> CandidateScorerNet:
    """The inverse of :func:`export_arrays`: a :class:`CandidateScorerNet` computing the same
    scores as the exported weights ``arrays`` (normalisation stays folded into the first layer:
    means 0, deviations 1), to train further (``init_from=POLICY.npz``)."""
    n_more = sum(1 for k in arrays if k.startswith("w") and k[1:].isdigit())
    wc = np.asarray(arrays["wc"], np.float32)
    hidden = [int(wc.shape[1])] + [int(np.shape(arrays[f"b{i}"])[0]) for i in range(1, n_more + 1)]
    net = CandidateScorerNet(int(wc.shape[0]), int(np.shape(arrays["wg"])[0]), hidden, ignore)

    def t(a: Any) -> th.Tensor:
        return th.as_tensor(np.ascontiguousarray(a, np.float32))

    with th.no_grad():
        net.cand_in.weight.copy_(t(wc.T))
        net.cand_in.bias.copy_(t(arrays["b0"]))
        net.glob_in.weight.copy_(t(np.asarray(arrays["wg"]).T))
        for i, layer in enumerate(net.layers, 1):
            assert isinstance(layer, nn.Linear)
            layer.weight.copy_(t(np.asarray(arrays[f"w{i}"]).T))
            layer.bias.copy_(t(arrays[f"b{i}"]))
        net.out.weight.copy_(t(np.asarray(arrays["wo"]).reshape(1, -1)))
        net.out.bias.copy_(t(np.asarray(arrays["bo"]).reshape(1)))
    return net


def export_arrays(net: CandidateScorerNet) -> dict[str, np.ndarray]:
    """The NumPy weights of ``net`` with input normalisation folded into the first layer
    (the layout :class:`policies.learned.CandidateScorer` reads)."""
    with th.no_grad():
        cs, cm = net.cand_std.double(), net.cand_mean.double()
        gs, gm = net.glob_std.double(), net.glob_mean.double()
        wc = net.cand_in.weight.double().T * (net.cand_keep.double() / cs)[:, None]  # (F, H0)
        wg = net.glob_in.weight.double().T / gs[:, None]  # (G, H0)
        b0 = net.cand_in.bias.double() - cm @ wc - gm @ wg
        out: dict[str, np.ndarray] = {"wc": wc.numpy(), "wg": wg.numpy(), "b0": b0.numpy()}
        for i, layer in enumerate(net.layers, 1):
            assert isinstance(layer, nn.Linear)
            out[f"w{i}"] = layer.weight.double().T.numpy()
            out[f"b{i}"] = layer.bias.double().numpy()
        out["wo"] = net.out.weight.double()[0].numpy()
        out["bo"] = net.out.bias.double().numpy()
    return {k: np.ascontiguousarray(v, np.float32) for k, v in out.items()}


# ---------------------------------------------------------------------- SB3 plumbing
class DictPassthrough(BaseFeaturesExtractor):
    """Concatenates ``[candidates.flatten(), globals, mask]`` (and the ``phase`` of
    :class:`envs.joint.JointEnv`, 0 or 1, last); the scorer splits them again."""

    def __init__(self, observation_space: spaces.Dict) -> None:
        K, F, G = obs_dims(observation_space)
        self.joint = "phase" in observation_space.spaces
        super().__init__(observation_space, K * F + G + K + self.joint)
        self.K, self.F, self.G = K, F, G

    def forward(self, obs: dict[str, th.Tensor]) -> th.Tensor:  # type: ignore[override]
        b = obs["candidates"].shape[0]
        parts = [obs["candidates"].reshape(b, -1).float(), obs["globals"].float(),
                 obs["mask"].reshape(b, -1).float()]
        if self.joint:  # SB3 one-hot encodes a Discrete(2) entry: its second column is the phase
            ph = obs["phase"].float().reshape(b, -1)
            parts.append(ph[:, 1:2] if ph.shape[1] == 2 else ph)
        return th.cat(parts, dim=1)


def split_obs(x: th.Tensor, K: int, F: int, G: int) -> tuple[th.Tensor, th.Tensor, th.Tensor]:
    return x[:, :K * F].reshape(-1, K, F), x[:, K * F:K * F + G], x[:, K * F + G:K * F + G + K]


def phase_of(x: th.Tensor, K: int, F: int, G: int) -> th.Tensor:
    """The phase column :class:`DictPassthrough` appends for a joint env, ``(B,)``."""
    return x[:, K * F + G + K]


def check_action_space(policy: str, observation_space: spaces.Space, action_space: spaces.Space,
                       joint_ok: bool = True) -> None:
    """Refuse (:class:`ConfigError`, naming the env and policy class to use) an action space
    other than the scorer's output: ``Discrete(K)`` (one logit per candidate, ``K`` the length
    of the observation's ``mask``: ``cachegym/Evict-v0``) or, with a ``phase`` in the
    observation and ``joint_ok``, ``Discrete(K + 1)`` (:class:`JointScorerNet`'s eviction or
    prefetch scores and the no-op: ``cachegym/Joint-v0``). ``cachegym/Prefetch-v0``'s
    ``Discrete(K + 1)`` without a phase has no scorer policy."""
    K = obs_dims(observation_space)[0]
    joint = isinstance(observation_space, spaces.Dict) and "phase" in observation_space.spaces
    n = int(action_space.n) if isinstance(action_space, spaces.Discrete) else None
    if joint and not joint_ok:
        raise ConfigError(f"{policy}: its Q-network is one eviction scorer (Discrete(K) actions), and "
                          f"this env has a phase (cachegym/Joint-v0: eviction and prefetch, "
                          f"{action_space}); train it in cachegym/Evict-v0, or train Joint-v0 with "
                          "MaskablePPO(MaskableScorerActorCriticPolicy, env) or "
                          "PPO(ScorerActorCriticPolicy, env)")
    if n == K + joint:
        return
    if n == K + 1 and not joint:
        raise ConfigError(f"{policy}: the action space is {action_space}, K={K} candidates and a no-op "
                          "(cachegym/Prefetch-v0), but the scorer emits one score per candidate and has "
                          "no no-op: Prefetch-v0 has no scorer policy; train eviction in "
                          "cachegym/Evict-v0, or eviction and prefetch in cachegym/Joint-v0 (with "
                          "MaskablePPO(MaskableScorerActorCriticPolicy, env))")
    raise ConfigError(f"{policy}: the action space is {action_space}, but the scorer emits "
                      f"{K + joint} scores (K={K}, the observation's mask{', and the no-op' if joint else ''}); "
                      "use cachegym/Evict-v0 (Discrete(K)) or cachegym/Joint-v0 (Discrete(K + 1), "
                      "with a phase)")


class ScorerExtractor(nn.Module):
    """SB3 ``mlp_extractor``: actor latent = the scorer's masked scores (K), critic latent =
    masked mean of the scorer's hidden layer with the (normalised) globals, through one layer.

    ``critic_detached``: the critic reads the scorer's hidden layer without training it, so the
    value loss trains the critic's own layers (``value_in`` and SB3's ``value_net``) only: what
    a fine-tune of imitation weights needs (shared, the untrained critic's regression on
    returns -- value loss ~150 against a policy-gradient loss of ~0.002 in the main job's
    fine-tune, explained variance ~0 throughout -- set the direction of every update of the
    scorer's hidden layers, which the deployed scores are made of: docs/RESULTS.md). From
    scratch the shared layer is SB3's usual actor-critic, whose value loss shapes the features
    too (``False``, the default)."""

    def __init__(self, K: int, F: int, G: int, hidden: Sequence[int], ignore: Sequence[int] = (),
                 joint: bool = False, critic_detached: bool = False) -> None:
        super().__init__()
        self.K, self.F, self.G = K, F, G
        self.critic_detached = critic_detached
        self.joint = joint  # a JointScorerNet: K + 1 logits, the phase picks the head
        self.scorer: Any = (JointScorerNet if joint else CandidateScorerNet)(F, G, hidden, ignore)
        self.latent_dim_pi = K + joint
        self.latent_dim_vf = hidden[-1]
        self.value_in = nn.Linear(hidden[-1] + G, hidden[-1])

    def forward(self, x: th.Tensor) -> tuple[th.Tensor, th.Tensor]:
        return self.forward_actor(x), self.forward_critic(x)

    def forward_actor(self, x: th.Tensor) -> th.Tensor:
        cand, glob, mask = split_obs(x, self.K, self.F, self.G)
        if self.joint:
            return self.scorer(cand, glob, mask, phase_of(x, self.K, self.F, self.G))  # type: ignore[no-any-return]
        return self.scorer(cand, glob, mask)  # type: ignore[no-any-return]

    def forward_critic(self, x: th.Tensor) -> th.Tensor:
        cand, glob, mask = split_obs(x, self.K, self.F, self.G)
        net = self.scorer.evict if self.joint else self.scorer
        h = net.hidden_features(cand, glob)
        if self.joint:  # the hidden layer of the phase's head
            ph = phase_of(x, self.K, self.F, self.G).reshape(-1, 1, 1) > 0.5
            h = th.where(ph, self.scorer.prefetch.hidden_features(cand, glob), h)
        if self.critic_detached:
            h = h.detach()  # the value loss does not train the scorer (the class docstring)
        m = mask.unsqueeze(-1)
        pooled = (h * m).sum(1) / m.sum(1).clamp_min(1.0)
        g = (glob - net.glob_mean) / net.glob_std
        return th.tanh(self.value_in(th.cat([pooled, g], dim=1)))


class _ScorerActorCriticMixin:
    """Replaces SB3's MLP extractor by :class:`ScorerExtractor` and its action head by the
    identity, so the logits are the scorer's scores; its constructor takes the scorer's
    ``hidden`` widths, the ``ignore``d features and ``critic_detached`` (saved with the model)."""

    hidden: Sequence[int]
    ignore: Sequence[int]
    critic_detached: bool
    action_net: Any
    mlp_extractor: Any

    def __init__(self, *args: Any, hidden: Sequence[int] = (64, 64), ignore: Sequence[int] = (),
                 critic_detached: bool = False, **kwargs: Any) -> None:
        self.hidden, self.ignore = list(hidden), list(ignore)
        self.critic_detached = bool(critic_detached)
        super().__init__(*args, **_init_kwargs(kwargs))  # type: ignore[call-arg]

    def _get_constructor_parameters(self) -> dict[str, Any]:
        d: dict[str, Any] = super()._get_constructor_parameters()  # type: ignore[misc]
        d.update(hidden=self.hidden, ignore=self.ignore, critic_detached=self.critic_detached)
        return d

    def _build_mlp_extractor(self) -> None:
        check_action_space(type(self).__name__, self.observation_space,  # type: ignore[attr-defined]
                           self.action_space)  # type: ignore[attr-defined]
        K, F, G = obs_dims(self.observation_space)  # type: ignore[attr-defined]
        joint = "phase" in self.observation_space.spaces  # type: ignore[attr-defined]
        self.mlp_extractor = ScorerExtractor(K, F, G, self.hidden, self.ignore, joint=joint,
                                             critic_detached=self.critic_detached)

    def _build(self, lr_schedule: Any) -> None:
        super()._build(lr_schedule)  # type: ignore[misc]
        self.action_net = nn.Identity()
        self.optimizer = self.optimizer_class(  # type: ignore[attr-defined]
            self.parameters(), lr=lr_schedule(1), **self.optimizer_kwargs)  # type: ignore[attr-defined]

    @property
    def scorer(self) -> CandidateScorerNet:
        return self.mlp_extractor.scorer  # type: ignore[no-any-return]


def _init_kwargs(kwargs: dict[str, Any]) -> dict[str, Any]:
    kwargs.setdefault("features_extractor_class", DictPassthrough)
    kwargs.setdefault("ortho_init", False)
    kwargs.setdefault("share_features_extractor", True)
    return kwargs


class ScorerActorCriticPolicy(_ScorerActorCriticMixin, ActorCriticPolicy):
    """PPO policy whose actor is a :class:`CandidateScorerNet` (invalid candidates get
    :data:`NEG` logits, so plain PPO never picks them either)."""


class MaskableScorerActorCriticPolicy(_ScorerActorCriticMixin, MaskableActorCriticPolicy):
    """MaskablePPO policy whose actor is a :class:`CandidateScorerNet`."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        if "use_sde" in kwargs:  # (PPO and A2C pass it; MaskablePPO does not)
            raise ConfigError("MaskableScorerActorCriticPolicy is MaskablePPO's policy (plain PPO passes "
                              "use_sde, which it does not take); use MaskablePPO, or "
                              "ScorerActorCriticPolicy with PPO")
        super().__init__(*args, **kwargs)


class ScorerQNetwork(BasePolicy):
    """DQN's Q-network: Q(s, a) is the scorer's score of candidate ``a`` (invalid: :data:`NEG`)."""

    def __init__(self, observation_space: spaces.Dict, action_space: spaces.Discrete,
                 features_extractor: BaseFeaturesExtractor, features_dim: int,
                 hidden: Sequence[int] = (64, 64), ignore: Sequence[int] = (), **_: Any) -> None:
        check_action_space("ScorerDQNPolicy", observation_space, action_space, joint_ok=False)
        super().__init__(observation_space, action_space, features_extractor=features_extractor)
        self.K, self.F, self.G = obs_dims(observation_space)
        self.hidden, self.ignore = list(hidden), list(ignore)
        self.scorer = CandidateScorerNet(self.F, self.G, hidden, ignore)

    def forward(self, obs: Any) -> th.Tensor:  # type: ignore[override]
        x = self.extract_features(obs, self.features_extractor)
        cand, glob, mask = split_obs(x, self.K, self.F, self.G)  # type: ignore[arg-type]
        return self.scorer(cand, glob, mask)  # type: ignore[no-any-return]

    def _predict(self, observation: Any, deterministic: bool = True) -> th.Tensor:
        return self(observation).argmax(dim=1).reshape(-1)

    def _get_constructor_parameters(self) -> dict[str, Any]:
        d = super()._get_constructor_parameters()
        d.update(hidden=self.hidden, ignore=self.ignore, features_extractor=self.features_extractor)
        return d


class ScorerDQNPolicy(DQNPolicy):
    """DQN policy whose q_net and q_net_target are :class:`ScorerQNetwork`."""

    def __init__(self, *args: Any, hidden: Sequence[int] = (64, 64), ignore: Sequence[int] = (),
                 **kwargs: Any) -> None:
        self.hidden, self.ignore = list(hidden), list(ignore)
        kwargs.setdefault("features_extractor_class", DictPassthrough)
        super().__init__(*args, **kwargs)

    def make_q_net(self) -> ScorerQNetwork:  # type: ignore[override]
        net_args = self._update_features_extractor(self.net_args, features_extractor=None)
        net_args.update(hidden=self.hidden, ignore=self.ignore)
        return ScorerQNetwork(**net_args).to(self.device)

    def _get_constructor_parameters(self) -> dict[str, Any]:
        d = super()._get_constructor_parameters()
        d.update(hidden=self.hidden, ignore=self.ignore)
        return d

    @property
    def scorer(self) -> CandidateScorerNet:
        return self.q_net.scorer  # type: ignore[return-value]


# ---------------------------------------------------------------------- eviction + prefetch
class JointScorerNet(nn.Module):
    """Two :class:`CandidateScorerNet` heads, one per decision of :class:`envs.joint.JointEnv`:
    ``evict`` scores eviction candidates, ``prefetch`` prefetch candidates, and ``noop`` is the
    score of prefetching nothing. :meth:`forward` gives the env's ``K + 1`` action logits of a
    batch of either phase (eviction: the no-op is :data:`NEG`). Exported as one policy file
    (:func:`policies.training.export.export_policy`): the eviction scorer, and the prefetch
    scorer under ``p/``."""

    def __init__(self, n_features: int, n_globals: int, hidden: Sequence[int] = (64, 64),
                 ignore: Sequence[int] = ()) -> None:
        super().__init__()
        self.n_features, self.n_globals, self.hidden = n_features, n_globals, list(hidden)
        self.evict = CandidateScorerNet(n_features, n_globals, hidden, ignore)
        self.prefetch = CandidateScorerNet(n_features, n_globals, hidden, ignore)
        self.noop = nn.Parameter(th.zeros(1))

    def set_normalization(self, cand: np.ndarray, mask: np.ndarray, glob: np.ndarray) -> None:
        """Both heads' input standardisation from the same observations."""
        self.evict.set_normalization(cand, mask, glob)
        self.prefetch.set_normalization(cand, mask, glob)

    def prefetch_logits(self, cand: th.Tensor, glob: th.Tensor, mask: th.Tensor) -> th.Tensor:
        """``(B, K + 1)``: the prefetch head's scores, then the no-op's."""
        s = self.prefetch(cand, glob, mask)
        return th.cat([s, self.noop.expand(s.shape[0], 1)], dim=1)

    def forward(self, cand: th.Tensor, glob: th.Tensor, mask: th.Tensor, phase: th.Tensor) -> th.Tensor:
        ev = self.evict(cand, glob, mask)
        ev = th.cat([ev, ev.new_full((ev.shape[0], 1), NEG)], dim=1)
        pf = self.prefetch_logits(cand, glob, mask)
        return th.where(phase.reshape(-1, 1) > 0.5, pf, ev)


def export_joint_arrays(net: JointScorerNet) -> dict[str, np.ndarray]:
    """:func:`export_arrays` of both heads: the eviction scorer's names, the prefetch scorer's
    under ``p/`` with ``p/noop`` (the layout :meth:`policies.learned.LearnedPolicy.load` reads)."""
    from cachegym.policies.learned.policy_file import PREFETCH_PREFIX

    out = export_arrays(net.evict)
    out.update({PREFETCH_PREFIX + k: v for k, v in export_arrays(net.prefetch).items()})
    out[PREFETCH_PREFIX + "noop"] = net.noop.detach().numpy().astype(np.float32).reshape(1)
    return out
