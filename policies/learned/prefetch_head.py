"""The prefetch head of an exported policy: :class:`PrefetchHead`, the network that answers
``prefetch(view, key)`` exactly as the agent answered in :class:`envs.prefetch.PrefetchEnv` and
:class:`envs.joint.JointEnv`.

After each access it records the access in its :class:`policies.successors.SuccessorPredictor`
(the envs' candidate proposer, same parameters), and at an opportunity (the file's
``prefetch.opportunity``: after a demand miss, after every access, or every N accesses) it
scores the predictor's up-to-``K`` candidates with the features of :mod:`policies.features`
and the forward pass of :class:`policies.kernels.Scorer` (one pass), and compares the best
score with the no-op's: the env's action is the argmax over ``K`` candidates and the no-op,
the no-op last, so a candidate that ties it is prefetched.

Beyond that choice (``depth > 1``) it prefetches the next best candidates that beat the no-op,
up to ``depth``. The candidates are already timed: the predictor proposes only objects whose use
is due (the compute the previous period spent before their use no longer covers their copy and
the queue ahead of it, with margins moved earlier where a prefetch arrived late, as Capuchin
moves its triggers: :class:`~allocator.prefetch_timing.PrefetchTiming`). Measured on the main
job's held-out traces (docs/RESULTS.md): a head trained to prefetch one candidate per access
leaves half its stall on late prefetches where the compute between accesses is short
(``gpt_infer``); a second filter of the head's own (a further candidate only if its previous
prefetch arrived late, while the queue ahead of it was no longer than its copy) held the late
objects back one period more than the ``history`` heuristic does and is gone (LRU + the head on
``gpt_infer`` at 25%: 2.71 ms with it, 2.05 without, as LRU + ``history``; docs/EXPERIMENTS.md).

Accuracy feedback (feedback-directed prefetching, Srinath et al., HPCA 2007): the head counts
its resolved prefetches (used: a prefetch hit or a late one; wasted: evicted unused, the pool's
``useless_prefetches``) and, every :data:`ACCURACY_INTERVAL` of them, pauses when fewer than
``min_accuracy`` of them were used: it issues nothing for a pause of accesses that doubles on
each inaccurate interval in a row (:data:`MIN_PAUSE` .. :data:`MAX_PAUSE`) and halves on an
accurate one, then tries again. A pool too small to hold the prefetched objects until their use
(the generated ``dl_training`` traces at 25-50% of their peak: most prefetches, even the trace's
own lookahead's, are evicted unused) then pays for few wasted copies instead of many.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

import numpy as np

from cachegym.allocator.errors import ConfigError
from cachegym.policies import features as _features
from cachegym.policies.learned.network import CandidateScorer
from cachegym.policies.successors import make_predictor

if TYPE_CHECKING:
    from cachegym.allocator.pool import PoolView
    from cachegym.allocator.prefetch_timing import PrefetchTiming

__all__ = ["PrefetchHead", "pick", "ACCURACY_INTERVAL", "MIN_PAUSE", "MAX_PAUSE"]

ACCURACY_INTERVAL = 16
"""Resolved prefetches (used or wasted) per accuracy check of a :class:`PrefetchHead`."""
MIN_PAUSE, MAX_PAUSE = 256, 16384
"""The shortest and longest pause (accesses) after an inaccurate interval."""


def pick(scores: np.ndarray, n: int, noop: float, depth: int = 1) -> list[int]:
    """Up to ``depth`` of the first ``n`` candidates to prefetch, best first: those scoring at
    least the no-op's ``noop`` (the first of equal scores first). With ``depth=1`` it is the
    env's action, the argmax over the candidates then the no-op (empty: the no-op). The one rule
    of training (:mod:`policies.training.imitation`'s learner) and deployment."""
    s = scores[:n]
    if depth == 1:  # (the common case, without a sort)
        j = int(s.argmax())
        return [j] if s[j] >= noop else []
    out = []
    for j in np.argsort(-s, kind="stable")[:depth].tolist():
        if s[j] < noop:
            break
        out.append(j)
    return out


class PrefetchHead:
    """The prefetch scorer of a policy file (``header["prefetch"]``, weights ``arrays``) with the
    state it keeps across accesses (its predictor, the misses it has seen).

    ``depth``: the most prefetches per opportunity, the best-scored candidates that beat the
    no-op (1: the env's decision, what the head was trained on; those after the first are
    counted in ``early``).
    ``budget_bytes``: the most bytes in flight host-to-device (``view.bytes_in_flight``, its
    own prefetches included) a prefetch may bring the total to: bytes, a size string, or a
    share in (0, 1] of the pool's capacity (a float); ``None``: no limit (as in training). A prefetch beyond it is not issued, nor any after it at that opportunity
    (counted in ``over_budget``). ``min_accuracy``: the share of resolved prefetches that must
    have been used for the head to go on prefetching (the module's docstring; 0: never
    pauses); ``pauses`` counts the pauses."""

    def __init__(self, section: Mapping[str, Any], arrays: Mapping[str, np.ndarray], *,
                 budget_bytes: int | float | str | None = None, depth: int = 1,
                 min_accuracy: float = 0.5) -> None:
        if isinstance(budget_bytes, str):  # a size string ("1MiB"), as elsewhere
            from cachegym.allocator.sizes import parse_size

            budget_bytes = parse_size(budget_bytes, "prefetch_budget_bytes")
        share = isinstance(budget_bytes, (float, np.floating)) and 0.0 < budget_bytes <= 1.0
        if budget_bytes is not None and not share and (
                isinstance(budget_bytes, bool) or not isinstance(budget_bytes, (int, np.integer))
                or budget_bytes < 0):
            raise ConfigError(f"prefetch_budget_bytes must be bytes >= 0, a size string, a share in "
                              f"(0, 1] of the pool's capacity or None (no limit), got {budget_bytes!r}")
        if isinstance(depth, bool) or not isinstance(depth, int) or depth < 1:
            raise ConfigError(f"prefetch_depth must be an int >= 1 (prefetches per opportunity), "
                              f"got {depth!r}")
        if isinstance(min_accuracy, bool) or not (isinstance(min_accuracy, (int, float))
                                                  and 0.0 <= min_accuracy <= 1.0):
            raise ConfigError(f"prefetch_min_accuracy must be a share in 0..1 (0: never pause), "
                              f"got {min_accuracy!r}")
        self.min_accuracy = float(min_accuracy)
        self.depth = depth
        self.scorer = CandidateScorer({k: v for k, v in arrays.items() if k != "noop"})
        self.noop = float(np.asarray(arrays["noop"], np.float32).reshape(-1)[0])  # (exact: a float32)
        self.K = int(section["K"])
        self.opportunity: str | int = section["opportunity"]
        self.predictor = make_predictor(section["predictor"])
        # bytes, or (a float) a share of the pool's capacity
        self.budget_bytes: int | float | None = (None if budget_bytes is None else
                                                 float(budget_bytes) if share else int(budget_bytes))
        self._buf = np.zeros((self.K + 1, _features.F), np.float32)
        self._packed = _features.packed_buffer(self.K)
        self._scores = np.zeros(self.K, np.float32)
        self.reset()

    def within_budget(self, view: Any, keys: Sequence[int]) -> list[int]:
        """``keys`` up to the first that would bring the bytes in flight host-to-device in
        ``view`` past :attr:`budget_bytes` (all of them without a budget): the head's own
        choices, and the ``history`` proposals a guard's twin makes from its predictor."""
        budget = self.budget_bytes
        if budget is None:
            return list(keys)
        if isinstance(budget, float):
            budget = int(budget * view.capacity)
        out: list[int] = []
        in_flight = view.bytes_in_flight
        for k in keys:
            size = view.info(k).size
            if in_flight + size > budget:
                break
            in_flight += size
            out.append(k)
        return out

    def reset(self) -> None:
        """Forget the predictor's history and the counters (a new pool)."""
        self.predictor.reset()
        self._misses = 0
        self._accesses = 0
        self.decisions = 0  # opportunities with candidates (the env's decisions)
        self.issued = 0  # prefetches returned
        self.over_budget = 0
        self.early = 0  # prefetches after the first of an opportunity
        self.pauses = 0  # inaccurate intervals (each a pause)
        self._used0 = self._wasted0 = 0  # the pool's counts at the interval's start
        self._resume = 0  # no prefetch before this access count
        self._pause = MIN_PAUSE  # the next pause's length
        self._open = False  # whether the latest opportunity was taken (asked, not paused)

    def _paused(self, view: PoolView) -> bool:
        """Whether the head pauses now, after checking its accuracy each ``ACCURACY_INTERVAL``
        resolved prefetches (the pool's counters: the head is its only prefetcher)."""
        st = view.stats
        used = st.prefetch_hits + st.late_prefetches
        wasted = st.useless_prefetches
        n = used - self._used0 + wasted - self._wasted0
        if n >= ACCURACY_INTERVAL:
            if used - self._used0 < self.min_accuracy * n:
                self.pauses += 1
                self._resume = self._accesses + self._pause
                self._pause = min(2 * self._pause, MAX_PAUSE)
            else:
                self._pause = max(self._pause // 2, MIN_PAUSE)
            self._used0, self._wasted0 = used, wasted
        return self._accesses < self._resume

    def _asked(self, view: PoolView) -> bool:
        opp = self.opportunity
        if opp == "access":
            return True
        if opp == "miss":
            m = view.stats.misses
            missed, self._misses = m != self._misses, m
            return missed
        return self._accesses % int(opp) == 0

    def choose(self, tracker: _features.FeatureTracker, view: PoolView, key: int,
               muted: bool = False) -> list[int]:
        """After the access of ``key``: the keys to prefetch, best first (``tracker`` holds the
        pool's feature history); ``muted``: none, the head's state advancing as it would."""
        self.predictor.observe(key, view)
        self._accesses += 1
        self._open = self._asked(view) and not self._paused(view)
        if not self._open or muted:
            return []
        return self._choose(tracker, view, key, self.predictor.timing, True)

    def choose_for(self, tracker: _features.FeatureTracker, view: PoolView, key: int) -> list[int]:
        """What :meth:`choose` would return at its latest opportunity (after the access of
        ``key``) in another pool, ``view`` (a guard's shadow pool under the same trace), called
        after each access there: the same predictor, opportunity, pause, network and rules, that
        pool's residency, copies in flight and features, and late-arrival margins learnt from
        that pool's late prefetches (kept per pool); the head's own state is not changed."""
        pt = self.predictor.timing_in(view, key)
        return self._choose(tracker, view, key, pt, False) if self._open else []

    def _choose(self, tracker: _features.FeatureTracker, view: PoolView, key: int,
                pt: PrefetchTiming, count: bool) -> list[int]:
        """The prefetches of an open opportunity in ``view``, with the predictor's timing ``pt``
        there (``count``: into the head's counters)."""
        cands = self.predictor.propose(key, self.K, view, pt)
        n = len(cands)
        if not n:
            return []
        _features.fill_observation(tracker, view, cands, self.K, self._packed, self._buf)
        self.scorer.kernel.scores(self._buf, n, self._scores)  # the one forward pass
        chosen = [cands[j] for j in pick(self._scores, n, self.noop, self.depth)]
        out = self.within_budget(view, chosen)
        over = len(out) < len(chosen)
        if count:
            self.decisions += 1
            self.over_budget += over
            self.issued += len(out)
            self.early += max(len(out) - 1, 0)
        return out
