"""The learned policy: :class:`LearnedPolicy`, an exported policy file's network deciding
evictions in the pool, under a guard (:mod:`policies.learned.guards`).
"""

from __future__ import annotations

import functools
import inspect
import logging
import numbers
import os
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import TYPE_CHECKING, Any, cast

import numpy as np

from cachegym.allocator.errors import ConfigError, PolicyFileError
from cachegym.policies import features as _features
from cachegym.policies import kernels
from cachegym.policies.base import EvictionPolicyBase
from cachegym.policies.learned.guards import Guard, GuardName, ShadowGuard, make_guard
from cachegym.policies.learned.network import CandidateScorer
from cachegym.policies.learned.policy_file import diff_feature_spec, read_policy_file, split_heads
from cachegym.policies.learned.prefetch_head import PrefetchHead
from cachegym.policies.lru import LRU
from cachegym.policies.prefetch import HISTORY_DEPTH

if TYPE_CHECKING:
    from cachegym.allocator.pool import PoolView

__all__ = ["LearnedPolicy", "DEFAULT_BUDGET_US", "DEFAULT_PREFETCH_DEPTH", "DEFAULT_PREFETCH_BUDGET"]

log = logging.getLogger(__name__)

DEFAULT_BUDGET_US: float | None = None
"""Default latency budget per decision (``None``: no limit). Wall-clock budgets make results
depend on machine load, so evaluation runs without one by default; a deployment sets its own
(``LearnedPolicy.load(path, budget_us=50)``): a decision slower than that falls back to LRU."""

DEFAULT_PREFETCH_DEPTH = 2
"""Default most prefetches per opportunity of a file's prefetch head
(:class:`~policies.learned.prefetch_head.PrefetchHead`): its choice as trained, then at most one
more candidate that beats the no-op (the predictor proposes only objects whose prefetch is due).
On the main job's held-out cells 4 left the same stall as 2 within 0.5% (docs/RESULTS.md,
2026-12-03, thirteenth session); 2 issues the fewest extra copies."""

DEFAULT_PREFETCH_BUDGET = 0.5
"""Default bytes-in-flight limit of a file's prefetch head, as a share of the pool's capacity: a
prefetch that would bring the bytes in flight to the device past half the pool is not issued.
On the regret benchmark under stall (32 cells, docs/EXPERIMENTS.md, 2026-12-05) half the pool
changed one DL trace's stall by 2% either way and nothing else; a quarter cost 28% on
mlp_embedding at 50% of peak live bytes (its prefetches of embedding rows run many at once)."""


class LearnedPolicy(EvictionPolicyBase):
    """An exported eviction policy, and prefetch policy where the file carries a prefetch head.
    Satisfies :class:`policies.base.EvictionPolicy` and :class:`~policies.base.PrefetchPolicy`
    (a file without a prefetch head answers no prefetches).

    At each decision it draws up to ``K`` candidates (the rule recorded in the file), computes
    their features with :mod:`policies.features` (the code the env trains with), scores them and
    evicts the best. The scores come from :class:`CandidateScorer` (``compiled`` says whether
    :mod:`policies.kernels` runs compiled or interpreted: the same scores either way). A
    decision that takes longer than ``budget_us`` or fails falls back to LRU and increments
    ``view.stats.fallbacks``; so does one with no valid candidate.

    ``guard`` (default on: a :class:`ShadowGuard`; ``False`` for the network alone,
    a :class:`~policies.learned.guards.GuardName` -- ``"shadow"``, ``"trial"``, ``"lru"``,
    ``"none"``, the options of ``conf/policy/guard/`` -- or a :class:`ShadowGuard` /
    :class:`Guard` / :class:`LRUGuard` of your own): the network, LRU, S3-FIFO, GDSF and LFU
    (and ARC and SLRU under the objectives traffic and misses) run in shadow caches of the
    pool's capacity, and the pool follows
    whichever cost least over the trace so far (``guard_decisions`` counts the decisions a
    heuristic made), so a workload unlike the training data costs little.

    ``prefetch`` (a :class:`~policies.learned.prefetch_head.PrefetchHead`, from the file's
    ``prefetch`` section): :meth:`prefetch` returns its choice after each access, read from the
    features of ``tracker`` (a :class:`~policies.features.FeatureTracker`, also under a
    :class:`ShadowGuard` then). As the pool's prefetcher beside another eviction policy, wrap
    that policy so the tracker sees the pool's hooks: ``Observed(policy, learned.tracker)``.

    Build with :meth:`load`.
    """

    name = "learned"

    def __init__(self, scorer: CandidateScorer, header: Mapping[str, Any], *,
                 budget_us: float | None = DEFAULT_BUDGET_US, seed: int = 0,
                 path: str | None = None, K: int | None = None,
                 guard: bool | GuardName | str | Guard = True,
                 prefetch: PrefetchHead | None = None) -> None:
        self.scorer = scorer
        self.prefetch_head = prefetch
        # set by a ShadowGuard while it follows an expert judged without prefetches: the head
        # then issues nothing (its history and timing still advance)
        self.prefetch_muted = False
        # set by a ShadowGuard while it follows an expert judged with the history's proposals
        # instead of the head's choice (:meth:`history_for`): the pool then prefetches those
        self.prefetch_history = False
        self._said_no_preset = False  # (the warning that the head prefetches only under a preset)
        self.header = dict(header)
        self.path = path
        if K is not None and (isinstance(K, bool) or not isinstance(K, numbers.Integral)):
            raise ConfigError(f"K must be an int (candidates per decision), got {K!r}")
        self.K = int(header["K"]) if K is None else int(K)
        if not 1 <= self.K <= _features.MAX_K:
            raise ConfigError(f"K must be in 1..{_features.MAX_K} candidates, got {self.K}")
        self.candidate_rule = str(header.get("candidate_rule", "lru"))
        if self.candidate_rule not in _features.RULES:
            raise ConfigError(f"candidate_rule must be one of {list(_features.RULES)}, got "
                              f"{self.candidate_rule!r}")
        if (scorer.n_features, scorer.n_globals) != (_features.F, _features.G):
            raise ConfigError(f"the network reads {scorer.n_features} features and {scorer.n_globals} "
                              f"globals; this code computes {_features.F} and {_features.G}")
        if budget_us is not None and (isinstance(budget_us, bool)
                                      or not isinstance(budget_us, numbers.Real)
                                      or not budget_us >= 0):
            raise ConfigError(f"budget_us must be a number >= 0 (microseconds) or None, got "
                              f"{budget_us!r}")
        self.budget_us = budget_us
        self._budget_ns = None if budget_us is None else int(budget_us * 1000)
        self.seed = seed  # (the candidate sampler's; the guard's network shadow takes it too)
        self._rng = np.random.default_rng(seed)
        if isinstance(guard, str):  # a GuardName ("none": no guard)
            guard = make_guard(guard) or False
        if not isinstance(guard, (bool, Guard)):
            raise ConfigError(f"guard must be True (the default ShadowGuard), False (none), a guard's "
                              f"name (shadow, trial, lru, none) or a ShadowGuard / Guard / LRUGuard "
                              f"instance, got {guard!r}")
        self.guard = (ShadowGuard() if guard is True else guard) if guard else None
        # the tracker keeps the features of this pool's objects and their LRU order (the
        # fallback's, and LRU's decisions under a guard); under a ShadowGuard the network decides
        # in its shadow pool, and this pool needs the LRU order alone
        self.tracker: _features.FeatureTracker | LRU = (
            LRU() if isinstance(self.guard, ShadowGuard) and prefetch is None
            else _features.FeatureTracker())
        if self.guard is not None:
            if self.guard.served:
                raise ConfigError(f"guard: {self.guard!r} already serves another LearnedPolicy (a "
                                  "guard keeps the state of its policy's experts and pool): give "
                                  "each policy its own, e.g. guard='shadow' or a new ShadowGuard()")
            self.guard.attach(self)
            self.guard.served = True
        self.guard_decisions = 0
        self.decisions = 0
        self.fallbacks = 0
        self.compiled = _features.COMPILED  # the kernels run compiled (else interpreted)
        self._buf = np.zeros((self.K + 1, _features.F), np.float32)  # features, globals in row K
        self._buf_k = kernels.observation(self._buf)  # the same memory, as the kernels take it
        self._packed = _features.packed_buffer(self.K)
        self.decision_ns: list[int] = []
        self.record_latency = False


    def __getstate__(self) -> dict[str, Any]:  # pickle/copy: _buf_k is rebuilt from _buf
        state = self.__dict__.copy()
        del state["_buf_k"]
        return state

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)
        self._buf_k = kernels.observation(self._buf)

    # construction ------------------------------------------------------
    @classmethod
    def load(cls, path: str | os.PathLike[str], *, budget_us: float | None = DEFAULT_BUDGET_US,
             seed: int = 0, K: int | None = None, guard: bool | GuardName | str | Guard = True,
             prefetch_budget_bytes: int | float | str | None = DEFAULT_PREFETCH_BUDGET,
             prefetch_depth: int = DEFAULT_PREFETCH_DEPTH,
             prefetch_min_accuracy: float = 0.5,
             **unknown: Any) -> LearnedPolicy:
        """Load an exported policy file (NumPy only). ``budget_us`` and ``seed`` as the
        constructor takes them (a decision over ``budget_us`` falls back to LRU; ``None``: no
        limit; ``seed``: the candidate sampler's); ``K`` overrides the number of candidates
        the file was trained with (the network does not depend on it); ``guard`` as the
        constructor takes it (``guard="none"``: the network alone); ``prefetch_budget_bytes``:
        the prefetch head's bytes-in-flight limit (:class:`PrefetchHead`: bytes, or a float, a
        share of the pool's capacity; by default :data:`DEFAULT_PREFETCH_BUDGET`; ``None``: none),
        ``prefetch_depth`` its most prefetches per opportunity, the best candidates that beat the
        no-op (1: as trained; by default :data:`DEFAULT_PREFETCH_DEPTH`), ``prefetch_min_accuracy`` the share of its resolved
        prefetches that must have been used for it to go on prefetching (0: never pauses).
        Raises
        :class:`~allocator.errors.PolicyFileError` on a corrupt, truncated or mismatched file,
        and :class:`~allocator.errors.ConfigError` naming any other keyword (a misspelt
        ``gaurd=False`` would otherwise leave the guard on)."""
        if unknown:
            from cachegym.policies.registry import refuse_unknown

            refuse_unknown("LearnedPolicy.load", unknown, cls.load_keywords())
        p = os.path.expanduser(os.fspath(path))
        header, arrays = read_policy_file(p)
        if header.get("task", "evict") != "evict":
            raise PolicyFileError(f"policy file {p} is a {header.get('task')!r} policy; "
                                  "LearnedPolicy loads eviction policies")
        diffs = diff_feature_spec(header.get("feature_spec") or {}, _features.feature_spec())
        if diffs:
            raise PolicyFileError(
                f"policy file {p} was trained with another feature specification than this code "
                f"computes: {'; '.join(diffs)}. Retrain/export with this version, or run the "
                "version that wrote it")
        # read_policy_file validated the header and the weights' shapes against it; the spec
        # equals this code's, so the network reads exactly the features this code computes
        evict, pf_arrays = split_heads(arrays)
        scorer = CandidateScorer(evict)
        pf = header.get("prefetch")
        head = None if pf is None else PrefetchHead(pf, pf_arrays, budget_bytes=prefetch_budget_bytes,
                                                    depth=prefetch_depth,
                                                    min_accuracy=prefetch_min_accuracy)
        return cls(scorer, header, budget_us=budget_us, seed=seed, path=p, K=K, guard=guard,
                   prefetch=head)

    @classmethod
    def load_keywords(cls) -> list[str]:
        """The keyword arguments :meth:`load` takes."""
        params = inspect.signature(cls.load).parameters.values()
        return [p.name for p in params if p.kind is p.KEYWORD_ONLY]

    # decisions ---------------------------------------------------------
    def observe(self, view: PoolView) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        """``(keys, cand, mask, glob)`` exactly as the env builds them for this view (the network
        decides in this pool: not under a :class:`ShadowGuard`, where it decides in the guard's
        shadow pool)."""
        if not isinstance(self.tracker, _features.FeatureTracker):
            raise ConfigError("observe(): under a ShadowGuard the network decides in the guard's "
                              "shadow pool and this pool keeps no features; load the policy with "
                              "guard='none' (or 'trial', 'lru') to observe the pool it serves")
        keys = _features.select_candidates(self.tracker, view, self.K, self.candidate_rule, self._rng)
        cand, mask, glob = _features.observe(self.tracker, view, keys, self.K)
        return keys, cand, mask, glob

    # the hooks: the tracker sees each one, then the guard (where there is one); on an access
    # and a free the guard's shadows first start the prefetches made after the previous
    # request (Guard.prepare), from the features the pool's head saw then
    def on_hit(self, view: PoolView, key: int) -> None:
        g = self.guard
        if g is not None:
            g.prepare(view, key)
        self.tracker.on_hit(view, key)
        if g is not None:
            g.access(view, key, True)

    def on_miss(self, view: PoolView, key: int) -> None:
        g = self.guard
        if g is not None:
            g.prepare(view, key)
        self.tracker.on_miss(view, key)
        if g is not None:
            g.access(view, key, False)

    def on_free(self, view: PoolView, key: int) -> None:
        if self.guard is not None:  # (first: its shadows' prefetches read the tracker)
            self.guard.free(view, key)
        self.tracker.on_free(view, key)

    def on_insert(self, view: PoolView, key: int) -> None:
        self.tracker.on_insert(view, key)
        if self.guard is not None:
            self.guard.insert(view, key)

    def on_evict(self, view: PoolView, key: int) -> None:
        self.tracker.on_evict(view, key)
        if self.guard is not None:
            self.guard.evict(view, key)

    # the optional members (allocator/seams.py): the guard's. Methods, not properties that
    # answer None without a guard: a pool unpickled with this policy in a reference cycle (the
    # guard's view of its pool) reads them before this object's state is restored
    def on_free_untracked(self, view: PoolView, key: int) -> None:
        """A freed object the pool held in host memory only: the guard's shadow caches may
        still hold it (they are not told whom the pool evicts) and must drop it."""
        if self.guard is not None:
            self.guard.free(view, key)

    def admit(self, view: PoolView, key: int, size: int) -> bool:
        """The pool's admission question (``policies.base``), asked after ``on_miss``: the
        guard's answer (:meth:`Guard.admit`); without a guard every miss is admitted."""
        g = self.guard
        return True if g is None else g.admit(view, key, size)

    def pending_evictions(self) -> Sequence[int]:
        """What the pool evicts after an access (``policies.base``): under a
        :class:`ShadowGuard`, what the followed expert's shadow has given up and the pool
        still holds (:meth:`ShadowGuard.pending_evictions`); nothing under any other guard or
        none (only a ShadowGuard's experts give up early)."""
        g = self.guard
        return g.pending_evictions() if isinstance(g, ShadowGuard) else ()

    @property
    def eviction_order(self) -> Callable[[], Iterable[int]] | None:  # type: ignore[override]
        """Under a :class:`ShadowGuard`, the pool's next victims in :meth:`victim`'s order
        (:meth:`ShadowGuard.eviction_order`: under stall what the pool prefetched, then the
        followed expert's, then the pool's LRU); otherwise the pool's LRU order, where the
        network's candidates come from (rule ``lru``): what a pool with ``clean_ahead`` writes
        back ahead, as the environments' pools did in training (the network alone cleaned
        nothing, and its stall was not the one it was trained on)."""
        g = self.guard
        if isinstance(g, ShadowGuard):
            return functools.partial(g.eviction_order, self.tracker)
        return self.tracker.eviction_order

    def victim(self, view: PoolView) -> int | None:
        if self.guard is not None and self.guard.active:
            self.guard_decisions += self.guard.expert is not None
            return self.guard.victim(view, self.tracker)
        budget = self._budget_ns
        timed = budget is not None or self.record_latency  # else the decision reads no clock
        t0 = time.perf_counter_ns() if timed else 0
        self.decisions += 1
        choice: int | None = None
        try:
            # (a FeatureTracker: only a ShadowGuard's policy has an LRU, and it never gets here)
            tracker, K, v = cast(_features.FeatureTracker, self.tracker), self.K, self._packed
            keys = _features.select_keys(tracker, view, K, self.candidate_rule, self._rng)
            n = len(keys)
            if n:
                buf = self._buf
                _features.fill_observation(tracker, view, keys, K, v, buf)
                choice = keys[self.scorer.kernel.best(self._buf_k, n)]
        except Exception:  # a failing decision falls back to LRU (counted), never crashes the pool
            log.exception("learned policy decision failed; falling back to LRU")
            choice = None
        if timed:
            dt = time.perf_counter_ns() - t0
            if self.record_latency:
                self.decision_ns.append(dt)
            if budget is not None and dt > budget:
                choice = None
        if choice is None:
            self.fallbacks += 1
            view.stats.fallbacks += 1
            return self.tracker.victim(view)
        return choice

    def prefetch(self, view: PoolView, key: int) -> Sequence[int]:
        """The prefetch head's choices after the access of ``key`` (none without a head)."""
        head = self.prefetch_head
        if head is None:
            return ()
        if not self._said_no_preset and view.cost.preset is None:
            self._said_no_preset = True
            log.warning("a learned prefetch head times each copy against the compute ahead of its "
                        "use, under a timing preset: in a pool without one (cost=None) copies take "
                        "no time, every proposal is due at once, its choices are not those it "
                        "was trained to make (often none) and no stall is measured; give the pool "
                        "a preset (cost='h100_pcie5')")
        history = self.prefetch_history
        out = head.choose(cast(_features.FeatureTracker, self.tracker), view, key,
                          self.prefetch_muted or history)
        if history and not self.prefetch_muted:  # (within the head's bytes-in-flight budget)
            return head.within_budget(view, head.predictor.propose(key, HISTORY_DEPTH, view))
        return out

    def history_for(self, view: PoolView, key: int) -> Sequence[int]:
        """What the ``history`` prefetcher (:class:`~policies.prefetch.HistoryPrefetcher`, the
        heuristic on the head's own proposer) would prefetch after the access of ``key`` in
        ``view`` (a guard's shadow pool): the head's predictor's due proposals, at most
        :data:`HISTORY_DEPTH`, without changing its state (none without a head). A
        :class:`ShadowGuard` judges twins of its experts with them, so that the pool does not
        end behind the heuristic where the head chooses worse."""
        head = self.prefetch_head
        if head is None:
            return ()
        return head.within_budget(view, head.predictor.propose_for(key, HISTORY_DEPTH, view))

    def prefetch_for(self, view: PoolView, key: int) -> Sequence[int]:
        """What :meth:`prefetch` would have returned after the same access of ``key`` in another
        pool, ``view`` (a guard's shadow pool), without changing the head's state
        (:meth:`PrefetchHead.choose_for`; none without a head)."""
        head = self.prefetch_head
        if head is None:
            return ()
        return head.choose_for(cast(_features.FeatureTracker, self.tracker), view, key)

    @property
    def network_decision_ns(self) -> list[int]:
        """The network's decision times (ns; recorded while ``record_latency`` is set, which
        must be before the first access): its own, and under a :class:`ShadowGuard` those it
        made in the guard's shadow pool, where the network decides."""
        net = getattr(self.guard, "net", None)
        shadow = net.policy if net is not None else None
        return self.decision_ns + (shadow.decision_ns if shadow is not None else [])

    def __repr__(self) -> str:
        return (f"LearnedPolicy({self.path!r}, K={self.K}, budget_us={self.budget_us}, "
                f"guard={self.guard!r})")
