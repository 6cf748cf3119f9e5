"""Imitation of the Belady oracle: behaviour cloning with DAgger-style data collection.

The teacher (``ImitationConfig.teacher``, :data:`TEACHERS`) is ``"belady_size"`` by default: the
candidate whose next use is farthest *times its size* (libCacheSim's BeladySize). Belady's own
choice (farthest next use, ``"belady"``) minimises misses when objects have one size; with sizes
as varied as a DL step's tensors, evicting one large object often spares several small ones, and
imitating plain Belady left the network behind GDSF on most DL traces (by up to a tenth of the
accesses). Distances in the labels stay ticks: a candidate's is its next-use distance scaled
by its size over the mean size of the decision's candidates. ``"traffic"`` teaches what saves
bytes copied: an eviction costs a refetch and, if the object is dirty, a write-back, both
proportional to its size, and frees its size for as long as its next use is away, so the size
cancels and the teacher evicts the farthest next use over ``1 + dirty``; a dirty object used no
more before its free costs its write-back alone and frees its size until the free (the env's
free distances, ``DecisionSample.free``), where plain Belady would evict it first. ``"foo"`` follows
the optimal bound's plan: FOO's schedule of the episode window (:func:`policies.bounds.
foo_kept_rows`, for the training objective) says which reuse intervals stay cached, and the
teacher evicts a candidate whose current interval (from its last access to its next) the plan
does not keep, the traffic teacher's farthest among several; where the plan keeps every
candidate's interval (the pool has left the plan's states), or the window is too long to solve,
it is the traffic teacher. The collector marks each decision's candidates the plan does not
keep (``DecisionSample.drop``).

Round 0 drives the environment with the oracle's own choices; every later round drives it with
the learner's current policy (with probability ``1 - beta_r`` per decision, ``beta_r =
beta0 * decay**r``) while the env labels every visited state with the oracle's choice. The
datasets are aggregated and the scorer is refit on all of them after each round (DAgger, Ross
et al. 2011).

The label of a decision is the set of valid candidates whose next use is farthest (ties, e.g.
several never used again, are all optimal); the loss is the listwise cross-entropy
``-log sum_{j in best} softmax(scores)_j`` plus a small ranking term that orders the other
candidates by their next-use distance, so the scorer also learns which wrong answers are cheap.

Eviction and prefetch together (:class:`envs.joint.JointEnv`, a :class:`JointScorerNet`): the
eviction decisions (phase 0) train the eviction head as above; the prefetch decisions (phase
1) train the prefetch head and its no-op score by cross-entropy over the ``K + 1`` actions on
the env's ``oracle_action`` (the candidate used soonest, or nothing when none is used again),
or with ``prefetch_no_harm`` (the default) nothing where the room the prefetch needs would evict
an object used no later than it (docs/EXPERIMENTS.md).
Without ``prefetch_no_harm`` the two teachers are the halves of the stall reference of
:mod:`envs.gaps` (Belady's eviction with the lookahead prefetcher), restricted to the env's
candidates.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch as th

from cachegym.allocator.errors import ConfigError
from cachegym.policies.learned import CandidateScorer
from cachegym.policies.learned.policy_file import split_heads
from cachegym.policies.learned.prefetch_head import pick
from cachegym.policies.training.nets import (
    NEG,
    CandidateScorerNet,
    JointScorerNet,
    export_arrays,
    export_joint_arrays,
)

__all__ = ["Dataset", "DecisionSample", "TEACHERS", "teacher_distances", "teacher_targets", "fit",
           "fit_prefetch",
           "bc_loss", "ImitationConfig", "dagger", "learner_of", "Learner"]

TEACHERS = ("belady_size", "belady", "traffic", "foo")
_NEVER = 1e12  # ticks: a candidate never used again (finite, so that size still ranks those)
_LIFT = 64.0  # "foo": added to the rank key of a candidate the plan drops (> any log1p distance)

log = logging.getLogger(__name__)


@dataclass
class DecisionSample:
    """One labelled decision: the observation and each candidate's next-use distance
    (``inf`` for never again; ignored where ``mask`` is False); ``phase`` 0 (eviction) or 1
    (prefetch), and for a prefetch the teacher's ``action`` (``K``: prefetch nothing);
    ``drop`` (bool ``(K,)``, teacher ``"foo"``): the candidates whose current reuse interval
    FOO's plan does not keep (``None``: no plan, as all False); ``free`` (float ``(K,)``,
    teachers ``"traffic"`` and ``"foo"``): ticks to the free that ends each candidate's object,
    ``inf`` if none (``None``: unknown, as all ``inf``)."""

    cand: np.ndarray
    mask: np.ndarray
    glob: np.ndarray
    dist: np.ndarray
    phase: int = 0
    action: int = -1
    drop: np.ndarray | None = None
    free: np.ndarray | None = None


@dataclass
class Dataset:
    """Aggregated decisions, stacked: ``cand`` (N, K, F), ``mask`` (N, K), ``glob`` (N, G),
    ``dist`` (N, K) next-use distances, ``phase`` and ``action`` (N,), ``drop`` and ``free``
    (see :class:`DecisionSample`)."""

    cand: list[np.ndarray] = field(default_factory=list)
    mask: list[np.ndarray] = field(default_factory=list)
    glob: list[np.ndarray] = field(default_factory=list)
    dist: list[np.ndarray] = field(default_factory=list)
    phase: list[int] = field(default_factory=list)
    action: list[int] = field(default_factory=list)
    drop: list[np.ndarray | None] = field(default_factory=list)
    free: list[np.ndarray | None] = field(default_factory=list)

    def add(self, s: DecisionSample) -> None:
        self.cand.append(s.cand)
        self.mask.append(s.mask)
        self.glob.append(s.glob)
        self.dist.append(s.dist)
        self.phase.append(s.phase)
        self.action.append(s.action)
        self.drop.append(s.drop)
        self.free.append(s.free)

    def lists(self) -> tuple[list[Any], ...]:
        return (self.cand, self.mask, self.glob, self.dist, self.phase, self.action, self.drop,
                self.free)

    def of_phase(self, phase: int) -> Dataset:
        """The decisions of one phase (0 eviction, 1 prefetch)."""
        keep = [i for i, p in enumerate(self.phase) if p == phase]
        return Dataset(*([lst[i] for i in keep] for lst in self.lists()))

    def __len__(self) -> int:
        return len(self.cand)

    def arrays(self) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        # (one copy each: the samples' own dtypes are float32, bool-like, float32, float64)
        return (np.stack(self.cand).astype(np.float32, copy=False),
                np.stack(self.mask).astype(bool, copy=False),
                np.stack(self.glob).astype(np.float32, copy=False),
                np.stack(self.dist).astype(np.float64, copy=False))

    def drops(self) -> np.ndarray:
        """``drop`` stacked, (N, K) bool (a decision without a plan: all False)."""
        K = len(self.mask[0]) if self.mask else 0
        none = np.zeros(K, bool)
        return np.stack([none if d is None else np.asarray(d, bool) for d in self.drop]
                        ) if self.drop else np.zeros((0, K), bool)

    def frees(self) -> np.ndarray:
        """``free`` stacked, (N, K) float64 (a decision without it: all ``inf``)."""
        K = len(self.mask[0]) if self.mask else 0
        none = np.full(K, np.inf)
        return np.stack([none if f is None else np.asarray(f, np.float64) for f in self.free]
                        ) if self.free else np.zeros((0, K))


def teacher_distances(dist: np.ndarray, cand: np.ndarray, mask: np.ndarray,
                      teacher: str = "belady_size", free: np.ndarray | None = None,
                      objective: str = "traffic") -> np.ndarray:
    """The distances the teacher ranks candidates by (the farthest is its choice): the next-use
    distances ``dist`` (``(..., K)``, ticks, ``inf`` never) for ``"belady"``; for
    ``"belady_size"`` those (never: :data:`_NEVER`) times each candidate's size over the mean
    size of the valid candidates (sizes from the ``size_rel`` feature of ``cand`` (``(..., K,
    F)``), so the scale of ticks is kept); for ``"traffic"`` (and ``"foo"``, which ranks by
    it) those over ``1 + dirty``, except for a candidate used no more (``dist`` ``inf``) that is
    dirty and freed ``free`` ticks from now (``(..., K)``, ``inf``: never; ``None``: unknown):
    its eviction costs a write-back for nothing and frees its size until the free, so its
    distance is that of the free (a clean one, or one never freed, costs nothing: never).
    ``"foo"`` for the ``objective`` ``misses`` (FOO's plan for misses) ranks as ``"belady"``:
    a write-back costs no miss."""
    if teacher == "belady" or (teacher == "foo" and objective == "misses"):
        return dist
    from cachegym.policies.features import FEATURE_NAMES

    if teacher in ("traffic", "foo"):
        # bytes an eviction costs (a refetch, and a write-back if dirty) per byte-tick of space
        # it frees: size cancels, so farthest next use over (1 + dirty)
        dirty = cand[..., FEATURE_NAMES.index("dirty")].astype(np.float64) > 0.5
        d = np.where(np.isfinite(dist), dist / (1.0 + dirty), _NEVER)
        if free is not None:  # dirty, used no more, freed later: a write-back for nothing
            d = np.where(_dirty_until_free(dist, cand, free), np.minimum(np.maximum(free, 0.0), _NEVER), d)
        return np.where(mask, d, -1.0)

    size = cand[..., FEATURE_NAMES.index("size_rel")].astype(np.float64)
    size = np.where(mask, np.maximum(size, 1e-30), 0.0)
    mean = size.sum(axis=-1, keepdims=True) / np.maximum(mask.sum(axis=-1, keepdims=True), 1)
    d = np.where(np.isfinite(dist), dist, _NEVER)
    return np.where(mask, d * size / np.maximum(mean, 1e-30), -1.0)


def _dirty_until_free(dist: np.ndarray, cand: np.ndarray, free: np.ndarray) -> np.ndarray:
    """The candidates used no more (``dist`` ``inf``) that are dirty and freed later (``free``
    finite): evicting one writes it back for nothing."""
    from cachegym.policies.features import FEATURE_NAMES

    dirty = cand[..., FEATURE_NAMES.index("dirty")] > 0.5
    return ~np.isfinite(dist) & dirty & np.isfinite(free)  # type: ignore[no-any-return]


def targets(mask: np.ndarray, dist: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """``(best, rank_key)``: ``best`` (N, K) marks the optimal candidates (farthest next use among
    valid ones); ``rank_key`` is ``log1p(distance)`` (``inf`` -> a large finite value)."""
    d = np.where(mask, dist, -1.0)
    d = np.where(np.isfinite(d), d, 1e18)
    best = (d == d.max(axis=1, keepdims=True)) & mask
    key = np.log1p(np.maximum(d, 0.0)).astype(np.float32)
    return best, key


def teacher_targets(dist: np.ndarray, cand: np.ndarray, mask: np.ndarray, teacher: str,
                    drop: np.ndarray | None = None, free: np.ndarray | None = None,
                    objective: str = "traffic") -> tuple[np.ndarray, np.ndarray]:
    """``(best, rank_key)`` of decisions ``(N, K)`` as ``teacher`` labels them: :func:`targets`
    of :func:`teacher_distances`, except for ``"foo"``, whose best is the farthest (by the
    traffic teacher's distances) of the valid candidates in ``drop`` (``(N, K)`` bool; a decision
    with none: the traffic teacher's), and whose rank key puts every dropped candidate above
    every kept one (each group ordered by the traffic teacher). ``free``: as
    :func:`teacher_distances`; a dirty candidate used no more before its free is not among the
    plan's drops (the plan has no interval of it; its eviction would cost a write-back).
    ``objective``: what the plan was made for (:func:`teacher_distances`: for ``misses`` the
    ranking is by next use alone, and a write-back is no cost)."""
    d = teacher_distances(dist, cand, mask, teacher, free, objective)
    best, key = targets(mask, d)
    if teacher != "foo" or drop is None:
        return best, key
    drop = np.asarray(drop, bool) & mask
    if free is not None and objective != "misses":
        drop &= ~_dirty_until_free(dist, cand, free)
    has = drop.any(axis=-1, keepdims=True)
    dd = np.where(drop, d, -np.inf)
    plan = (dd == dd.max(axis=-1, keepdims=True)) & drop
    return np.where(has, plan, best), (key + _LIFT * drop).astype(np.float32)


def bc_loss(scores: th.Tensor, best: th.Tensor, mask: th.Tensor, key: th.Tensor,
            rank_weight: float = 0.1, regression_weight: float = 0.0) -> th.Tensor:
    """Listwise cross-entropy on the optimal set, plus a pairwise logistic ranking term over the
    candidates ordered by next use, plus (``regression_weight``) a per-candidate regression of
    the score on ``log1p(next-use distance)`` (the relaxed-Belady target of LRB)."""
    logp = th.log_softmax(scores, dim=1)
    if regression_weight > 0:
        target = key.clamp(max=float(np.log1p(1e6)))
        err = (scores - target) ** 2 * mask
        reg = err.sum() / mask.sum().clamp_min(1)
    else:
        reg = scores.new_zeros(())
    ce = -(th.logsumexp(logp.masked_fill(~best, NEG), dim=1)).mean() + regression_weight * reg
    if rank_weight <= 0:
        return ce
    # pairs (i, j) of valid candidates with key_i > key_j: want s_i > s_j
    diff_k = key.unsqueeze(2) - key.unsqueeze(1)
    valid = mask.unsqueeze(2) & mask.unsqueeze(1) & (diff_k > 0.05)
    s = scores.masked_fill(~mask, 0.0)
    diff_s = s.unsqueeze(2) - s.unsqueeze(1)
    pair = th.nn.functional.softplus(-diff_s)
    n = valid.sum().clamp_min(1)
    return ce + rank_weight * (pair * valid).sum() / n


def fit(net: CandidateScorerNet | JointScorerNet, data: Dataset, *, epochs: int = 5,
        batch_size: int = 256, lr: float = 3e-3, rank_weight: float = 0.1,
        regression_weight: float = 0.0, seed: int = 0, weight_decay: float = 1e-5,
        set_normalization: bool = True, teacher: str = "belady_size",
        progress: Callable[[int, float], None] | None = None,
        objective: str = "traffic") -> list[float]:
    """Fit ``net`` on ``data`` (behaviour cloning of ``teacher``); returns the mean loss of
    every epoch (a :class:`JointScorerNet`: both heads', summed)."""
    if isinstance(net, JointScorerNet):
        kw: dict[str, Any] = dict(epochs=epochs, batch_size=batch_size, lr=lr, seed=seed,
                                  weight_decay=weight_decay, set_normalization=set_normalization)
        ev = data.of_phase(0)
        h_ev = fit(net.evict, ev, rank_weight=rank_weight, regression_weight=regression_weight,
                   teacher=teacher, objective=objective, **kw) if len(ev) else []
        h_pf = fit_prefetch(net, data.of_phase(1), **kw)
        hist = [a + b for a, b in zip(h_ev, h_pf)] if h_ev and h_pf else h_ev or h_pf
        if progress is not None:
            for i, x in enumerate(hist):
                progress(i, x)
        return hist
    cand, mask, glob, dist = data.arrays()
    if set_normalization:
        net.set_normalization(cand, mask, glob)
    best, key = teacher_targets(dist, cand, mask, teacher, data.drops(), data.frees(), objective)
    keep = best.any(axis=1) & (mask.sum(axis=1) > 1)  # decisions with a real choice
    if not keep.all():  # (else the arrays as they are: no copy of the largest)
        cand, mask, glob, best, key = cand[keep], mask[keep], glob[keep], best[keep], key[keep]
    tc, tm, tg = th.as_tensor(cand), th.as_tensor(mask), th.as_tensor(glob)
    tb, tk = th.as_tensor(best), th.as_tensor(key)
    n = len(tc)
    if n == 0:
        log.warning("imitation: no decision with more than one candidate; nothing to fit")
        return []

    def loss_of(idx: th.Tensor) -> th.Tensor:
        scores = net(tc[idx], tg[idx], tm[idx].float())
        return bc_loss(scores, tb[idx], tm[idx], tk[idx], rank_weight, regression_weight)

    return _optimise(net, n, loss_of, epochs=epochs, batch_size=batch_size, lr=lr, seed=seed,
                     weight_decay=weight_decay, progress=progress)


def fit_prefetch(net: JointScorerNet, data: Dataset, *, epochs: int = 5, batch_size: int = 256,
                 lr: float = 3e-3, seed: int = 0, weight_decay: float = 1e-5,
                 set_normalization: bool = True) -> list[float]:
    """Fit the prefetch head and the no-op score of ``net`` on prefetch decisions: cross-entropy
    of the ``K + 1`` logits on the teacher's action (:func:`bc_loss` with one optimal action)."""
    if not len(data):
        log.warning("imitation: no prefetch decision; the prefetch head is not fitted")
        return []
    cand, mask, glob, _ = data.arrays()
    if set_normalization:
        net.prefetch.set_normalization(cand, mask, glob)
    action = np.asarray(data.action, np.int64)
    K = mask.shape[1]
    full = np.concatenate([mask, np.ones((len(mask), 1), bool)], axis=1)  # the no-op: always valid
    best = np.zeros_like(full)
    best[np.arange(len(action)), np.where(action < 0, K, action)] = True
    tc, tm, tg = th.as_tensor(cand), th.as_tensor(mask), th.as_tensor(glob)
    tf, tb = th.as_tensor(full), th.as_tensor(best)
    key = th.zeros(full.shape, dtype=th.float32)  # (no ranking term: one optimal action)

    def loss_of(idx: th.Tensor) -> th.Tensor:
        logits = net.prefetch_logits(tc[idx], tg[idx], tm[idx].float())
        return bc_loss(logits, tb[idx], tf[idx], key[idx], 0.0, 0.0)

    return _optimise(net, len(tc), loss_of, epochs=epochs, batch_size=batch_size, lr=lr,
                     seed=seed, weight_decay=weight_decay, params=[
                         *net.prefetch.parameters(), net.noop])


def _optimise(net: th.nn.Module, n: int, loss_of: Callable[[th.Tensor], th.Tensor], *,
              epochs: int, batch_size: int, lr: float, seed: int, weight_decay: float,
              progress: Callable[[int, float], None] | None = None,
              params: Sequence[th.Tensor] | None = None) -> list[float]:
    """Adam with a cosine schedule over ``epochs`` shuffled passes of ``n`` samples, minimising
    ``loss_of(batch indices)`` over ``params`` (all of ``net``'s by default); returns the mean
    loss of every epoch."""
    gen = th.Generator().manual_seed(seed)
    opt = th.optim.Adam(list(net.parameters()) if params is None else list(params), lr=lr,
                        weight_decay=weight_decay)
    steps = epochs * math.ceil(n / batch_size)
    sched = th.optim.lr_scheduler.CosineAnnealingLR(opt, max(steps, 1))
    net.train()
    history: list[float] = []
    for ep in range(epochs):
        perm = th.randperm(n, generator=gen)
        total, count = 0.0, 0
        for i in range(0, n, batch_size):
            idx = perm[i:i + batch_size]
            loss = loss_of(idx)
            opt.zero_grad()
            loss.backward()
            opt.step()
            sched.step()
            total += float(loss.detach()) * len(idx)
            count += len(idx)
        history.append(total / count)
        if progress is not None:
            progress(ep, history[-1])
    net.eval()
    return history


def agreement(net: CandidateScorerNet | JointScorerNet, data: Dataset,
              teacher: str = "belady_size", objective: str = "traffic") -> float:
    """Fraction of decisions where the net's choice is one of the teacher's optimal ones (a
    :class:`JointScorerNet`: of both phases' decisions)."""
    if isinstance(net, JointScorerNet):
        ev, pf = data.of_phase(0), data.of_phase(1)
        n_ev, n_pf = len(ev), len(pf)
        a_ev = agreement(net.evict, ev, teacher, objective) * n_ev if n_ev else 0.0
        a_pf = 0.0
        if n_pf:
            cand, mask, glob, _ = pf.arrays()
            s = _batched(net.prefetch_logits, cand, glob, mask)
            want = np.asarray(pf.action)
            want = np.where(want < 0, mask.shape[1], want)
            a_pf = float((s.argmax(axis=1) == want).sum())
        return (a_ev + a_pf) / max(n_ev + n_pf, 1)
    cand, mask, glob, dist = data.arrays()
    best, _ = teacher_targets(dist, cand, mask, teacher, data.drops(), data.frees(), objective)
    s = _batched(net, cand, glob, mask)
    choice = s.argmax(axis=1)
    return float(best[np.arange(len(choice)), choice].mean()) if len(choice) else 0.0


def _batched(forward: Callable[[th.Tensor, th.Tensor, th.Tensor], th.Tensor], cand: np.ndarray,
             glob: np.ndarray, mask: np.ndarray, batch: int = 4096) -> np.ndarray:
    """``forward(cand, glob, mask)`` over the decisions a batch at a time (the whole dataset at
    once held every hidden layer's activations, (N, K, width) floats: 3.4 GB for 100,000
    decisions of a quick training run)."""
    out = []
    with th.no_grad():
        for i in range(0, len(cand), batch):
            out.append(forward(th.as_tensor(cand[i:i + batch]), th.as_tensor(glob[i:i + batch]),
                               th.as_tensor(mask[i:i + batch]).float()).numpy())
    return np.concatenate(out) if out else np.zeros((0, mask.shape[1]), np.float32)


@dataclass
class ImitationConfig:
    """DAgger schedule: ``rounds`` collections of ``steps_per_round`` decisions each, the
    expert driving with probability ``beta0 * beta_decay**r`` in round ``r`` (round 0: 1).

    ``average_from``: when set, the network that comes out is the mean of the weights at the end
    of rounds ``average_from`` .. ``rounds - 1`` (each round's fit anneals its learning rate to
    zero, so these are the ends of the cycles of stochastic weight averaging, Izmailov et al.
    2018); the rounds' own rollouts still use the latest weights. ``None``: the last round's.

    ``teacher``: whose choices are imitated (:data:`TEACHERS`; see the module docstring):
    ``"belady_size"`` (next use times size), ``"belady"`` (next use), ``"traffic"`` (next use
    over ``1 + dirty``) or ``"foo"`` (FOO's plan, else ``"traffic"``).

    ``prefetch_horizon`` (ticks; a joint env's prefetch decisions): the teacher prefetches the
    candidate used soonest only when that use is at most this far ahead, else nothing (an
    object fetched long before its use occupies the pool meanwhile); ``None``: whenever a
    candidate is used again (the env's ``oracle_action``). ``prefetch_no_harm``: nor when the
    objects its room would evict (the env's ``displaced_next_use``) include one used before it
    ("do no harm", Cao et al. 1995: a prefetch that displaces an earlier use adds a miss)."""

    rounds: int = 3
    steps_per_round: int = 20_000
    beta0: float = 1.0
    beta_decay: float = 0.0
    epochs: int = 4
    batch_size: int = 256
    lr: float = 3e-3
    rank_weight: float = 0.1
    regression_weight: float = 0.0
    max_samples: int | None = 200_000
    average_from: int | None = None
    teacher: str = "belady_size"
    prefetch_horizon: int | None = None
    prefetch_no_harm: bool = True

    def __post_init__(self) -> None:  # a bad schedule fails when the agent is built, not later
        bad = [f"{k}={getattr(self, k)!r} (must be an int >= 1)"
               for k in ("rounds", "steps_per_round", "epochs", "batch_size")
               if not (isinstance(getattr(self, k), int) and getattr(self, k) >= 1)]
        if self.max_samples is not None and not self.max_samples >= 1:
            bad.append(f"max_samples={self.max_samples!r} (must be >= 1, or null: keep all)")
        if not self.lr >= 0:
            bad.append(f"lr={self.lr!r} (must be >= 0)")
        if not (0.0 <= self.beta0 <= 1.0 and self.beta_decay >= 0.0):
            bad.append(f"beta0={self.beta0!r}, beta_decay={self.beta_decay!r} (beta0 in [0, 1], "
                       "beta_decay >= 0)")
        if not (self.rank_weight >= 0 and self.regression_weight >= 0):
            bad.append(f"rank_weight={self.rank_weight!r}, regression_weight="
                       f"{self.regression_weight!r} (must be >= 0)")
        if self.prefetch_horizon is not None and not (
                isinstance(self.prefetch_horizon, int) and self.prefetch_horizon >= 1):
            bad.append(f"prefetch_horizon={self.prefetch_horizon!r} (ticks >= 1, or null: the "
                       "env's oracle)")
        if self.teacher not in TEACHERS:
            bad.append(f"teacher={self.teacher!r} (one of {', '.join(TEACHERS)})")
        if bad:
            raise ConfigError("agent.dagger: " + "; ".join(bad))
        if self.average_from is not None and not 0 <= self.average_from < self.rounds:
            raise ConfigError(f"dagger.average_from must be a round in 0..{self.rounds - 1} (rounds="
                              f"{self.rounds}) or null, got {self.average_from}")


Learner = Callable[[np.ndarray, np.ndarray, np.ndarray, int], int]
"""``learner(cand, mask, glob, phase) -> action`` (the env's action index)."""


def learner_of(net: CandidateScorerNet | JointScorerNet) -> Learner:
    """The NumPy twin of ``net`` (the deployed forward pass, for fast rollouts) as a learner."""
    if not isinstance(net, JointScorerNet):
        twin = CandidateScorer(export_arrays(net))
        return lambda c, m, g, phase: twin.choose(c, g, m)
    evict, pf = split_heads(export_joint_arrays(net))
    ev_twin = CandidateScorer(evict)
    noop = float(pf.pop("noop")[0])
    pf_twin = CandidateScorer(pf)

    def act(c: np.ndarray, m: np.ndarray, g: np.ndarray, phase: int) -> int:
        if phase == 0:
            return ev_twin.choose(c, g, m)
        j = pick(pf_twin.scores(c, g, m), len(m), noop)
        return j[0] if j else len(m)

    return act


def dagger(net: CandidateScorerNet | JointScorerNet,
           collect: Callable[[Learner | None, float, int, np.random.Generator], Sequence[DecisionSample]],
           cfg: ImitationConfig, *, seed: int = 0,
           on_round: Callable[[int, dict[str, Any]], None] | None = None,
           normalize: bool = True, objective: str = "traffic") -> Dataset:
    """Run DAgger. ``collect(learner, beta, n, rng)`` drives the env for ``n`` decisions,
    choosing the oracle's action with probability ``beta`` and ``learner(cand, mask, glob,
    phase)`` otherwise, and returns the labelled decisions it visited. ``normalize``: set the
    net's input standardisation from the first round's decisions (``False`` for a net that
    starts from a policy file's weights, whose normalisation they already hold). ``objective``:
    the env's reward, which the ``foo`` teacher's plan was made for (:func:`teacher_targets`)."""
    rng = np.random.default_rng(seed)
    data = Dataset()

    learner: Learner | None = None
    ends: list[list[th.Tensor]] = []  # the weights at the end of the averaged rounds
    for r in range(cfg.rounds):
        beta = 1.0 if r == 0 else cfg.beta0 * cfg.beta_decay ** r
        samples = collect(learner, beta, cfg.steps_per_round, rng)
        for s in samples:
            data.add(s)
        if cfg.max_samples is not None and len(data) > cfg.max_samples:
            drop = len(data) - cfg.max_samples  # keep the most recent rounds' states
            for lst in data.lists():
                del lst[:drop]
        hist = fit(net, data, epochs=cfg.epochs, batch_size=cfg.batch_size, lr=cfg.lr,
                   rank_weight=cfg.rank_weight, regression_weight=cfg.regression_weight,
                   seed=seed + r, set_normalization=normalize and r == 0, teacher=cfg.teacher,
                   objective=objective)
        if cfg.average_from is not None and r >= cfg.average_from:
            ends.append([p.detach().clone() for p in net.parameters()])
        learner = learner_of(net)
        stats = {"round": r, "beta": beta, "samples": len(data), "new": len(samples),
                 "loss": hist[-1] if hist else float("nan"),
                 "agreement": agreement(net, data, cfg.teacher, objective)}
        log.info("dagger round %d: %s", r, stats)
        if on_round is not None:
            on_round(r, stats)
    if len(ends) > 1:
        with th.no_grad():
            for p, *at_ends in zip(net.parameters(), *ends):
                p.copy_(th.stack(at_ends).mean(0))
        log.info("dagger: weights averaged over the ends of rounds %d..%d (agreement %.4g)",
                 cfg.average_from, cfg.rounds - 1, agreement(net, data, cfg.teacher, objective))
    return data
