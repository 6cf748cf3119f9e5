"""``cachegym/Joint-v0``: one agent answers both the eviction and the prefetch questions."""

from __future__ import annotations

import functools
import math
from collections.abc import Generator, Mapping, Sequence
from typing import Any

import numpy as np
from gymnasium import spaces

from cachegym.allocator.errors import ConfigError, InvalidActionError, PoolExhausted
from cachegym.allocator.pool import Pool
from cachegym.allocator.trace import INF, Op
from cachegym.envs.common import (
    Episodes,
    PoolEnv,
    TraceSource,
    action_int,
    as_traces,
    check_args,
    check_capacity,
    check_reward_baseline,
    decision_info,
    demand_marks,
    demand_reward,
    empty_obs,
    next_use_rows,
    no_decision_message,
    observation_space,
    pool_options,
    render_mode_of,
    resolve_capacity,
    reward_scales,
    step_ends,
)
from cachegym.envs.prefetch import OPPORTUNITIES
from cachegym.policies import features
from cachegym.policies.features import FeatureTracker
from cachegym.policies.successors import SuccessorPredictor, own_predictor

__all__ = ["JointEnv", "EVICT", "PREFETCH"]

EVICT, PREFETCH = 0, 1
_DISPLACED_SCAN = 64  # LRU victims a prefetch's room is looked for among (info's displaced_next_use)
_REWARDS = ("misses", "bytes", "traffic", "stall")


class JointEnv(PoolEnv):
    """Choose eviction victims and prefetches of one pool: the decisions of
    :class:`envs.evict.EvictEnv` and :class:`envs.prefetch.PrefetchEnv` in one episode.

    The loop is the pool's (:meth:`Pool.steps` for demand accesses, :meth:`Pool.prefetch` for
    the agent's prefetches). The agent answers every eviction a demand access needs, and every
    prefetch opportunity (``opportunity``) for which the predictor has candidates. Evictions
    that a prefetch needs are answered by LRU (the pool's generator form covers accesses only).

    ## Spaces

    Action ``Discrete(K + 1)``: in the eviction phase ``a < K`` evicts candidate ``a`` (``K``
    is masked); in the prefetch phase ``a < K`` prefetches candidate ``a``, ``K`` does nothing.
    Observation: :func:`envs.common.observation_space` plus ``"phase": Discrete(2)`` (0 evict,
    1 prefetch); the candidates are the eviction rule's (``candidates``) or the predictor's.
    ``action_masks()`` follows sb3-contrib; a masked action becomes the default of its phase,
    the LRU candidate or no prefetch, counted in ``info["invalid_actions"]``
    (``invalid_action="default"``, the default: a random-action rollout never crashes), or
    raises :class:`~allocator.errors.InvalidActionError` (``invalid_action="raise"``).

    ## Rewards

    ``"misses"`` (default: ``-1`` per demand miss; it prices a useless prefetch by the misses
    its evictions cause, and a timely one by the miss it saves), ``"bytes"``, ``"traffic"``,
    ``"stall"`` (as :class:`envs.evict.EvictEnv`).

    ## Info

    ``phase``, ``oracle_action`` (Belady's victim in the eviction phase; the candidate used
    soonest, or no prefetch, in the prefetch phase), ``next_use``, ``keys``, ``tick``,
    ``misses``, ``invalid_actions``, ``dropped_prefetches`` (prefetches chosen for which no
    room could be made: everything else pinned or in flight), in the prefetch phase
    ``displaced_next_use`` (ticks to the soonest next use among what the chosen oracle
    prefetch would evict, ``inf`` if none: the teacher's "do no harm" test); at the end
    ``stats`` (and ``oracle_action`` -1, as in Evict-v0; Prefetch-v0's is ``K``, its no-op).

    ## Episode and arguments

    As :class:`envs.evict.EvictEnv` (``traces``, ``window``, ``capacity``, ``capacity_of``,
    ``cost``, ``placement``, ``write_policy``, ``clean_ahead``, ``reward_baseline``, ``K``,
    ``candidates``; ``reward``
    ``"misses"`` by default, or ``"bytes"``, ``"traffic"``, ``"stall"`` as there) and
    :class:`envs.prefetch.PrefetchEnv` (``opportunity``, ``predictor``).

    ## Version history

    * v0: initial version. Default since 2026-12-02: ``invalid_action="default"`` (was ``"raise"``).
    * Since 2026-12-05: ``capacity_of="peak_live"`` by default (was ``"working_set"``, of
      which 0.25 held whole windows of most DL traces: no decision arose), as Evict-v0;
      ``opportunity="step"`` asks at the last access of a step where frees follow it
      (it asked never on traces whose steps end with frees, as the bundled ones do).
    """

    def __init__(
        self,
        traces: TraceSource | Sequence[TraceSource] | None = None,
        *,
        K: int = 16,
        candidates: str = "lru",
        opportunity: str | int = "miss",
        window: int | None = 4096,
        capacity: float = 0.25,
        capacity_of: str = "peak_live",
        reward: str = "misses",
        invalid_action: str = "default",
        predictor: SuccessorPredictor | Mapping[str, int] | None = None,
        cost: Any = None,
        placement: str = "bytes",
        write_policy: str = "write-back",
        clean_ahead: float = 0.0,
        reward_baseline: float = 0.0,
        render_mode: str | None = None,
    ) -> None:
        check_args(K, candidates=candidates, reward=reward, rewards=_REWARDS, cost=cost,
                   opportunity=opportunity, opportunities=OPPORTUNITIES)
        self.reward_baseline = check_reward_baseline(reward_baseline, reward, _REWARDS)
        if invalid_action not in ("raise", "default"):
            raise ConfigError(f"invalid_action must be 'raise' or 'default', got {invalid_action!r}")
        check_capacity(capacity, capacity_of)
        render_mode_of(render_mode)
        self.render_mode = None
        self.K = int(K)
        self.candidates = candidates
        self.opportunity = int(opportunity) if isinstance(opportunity, np.integer) else opportunity
        self.reward_kind, self.invalid_action = reward, invalid_action
        self.capacity, self.capacity_of = capacity, capacity_of
        self.pool_kwargs = pool_options(cost, placement, write_policy, clean_ahead)
        self.predictor = own_predictor(predictor)
        self._episodes = Episodes(as_traces(traces), window)
        self.observation_space = spaces.Dict(
            {**observation_space(self.K).spaces, "phase": spaces.Discrete(2)})
        self.action_space = spaces.Discrete(self.K + 1)
        self.pool: Pool | None = None
        self.tracker = FeatureTracker()
        self._packed = features.packed_buffer(self.K)  # the decision's slots, codes and globals
        self._loop: Generator[None, int | None, None] | None = None
        self._keys: list[int] = []
        self._phase = EVICT
        self._mask = np.zeros(self.K + 1, bool)
        self._obs: dict[str, Any] = {**empty_obs(self.K), "phase": np.int64(0)}

    # ------------------------------------------------------------------ gymnasium API
    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None
              ) -> tuple[dict[str, Any], dict[str, Any]]:
        super().reset(seed=seed)
        for _ in range(16):
            self._start(self._episodes.draw(self.np_random, options))
            if self._resume(None):
                return self._obs, self._info()
        raise ConfigError(no_decision_message("decision", self.pool, self.capacity,
                                              self.capacity_of))

    def step(self, action: Any) -> tuple[dict[str, Any], float, bool, bool, dict[str, Any]]:
        if self._loop is None:
            raise self._not_running()
        a = self._check_action(action)
        pool = self.pool
        assert pool is not None
        marks = demand_marks(pool)
        decided = self._resume(self._keys[a] if a < len(self._keys) else None)
        r = demand_reward(self.reward_kind, pool, marks, self._mean_size, self._fetch_ns,
                          self.reward_baseline)
        return self._obs, r, not decided, False, self._info()

    def action_masks(self) -> np.ndarray:
        """Valid actions (sb3-contrib convention); the last one, no prefetch, only in the
        prefetch phase."""
        return self._mask.copy()

    # ------------------------------------------------------------------ the loop
    def _start(self, w: Any) -> None:
        self.close()  # an abandoned episode releases the pool's lock first
        self._w = w
        self.tracker.reset()
        self.predictor.reset()
        self.pool = Pool(resolve_capacity(self.capacity, self.capacity_of, w.trace), self.tracker,
                         **self.pool_kwargs)  # type: ignore[arg-type]
        self._invalid = 0
        self._dropped = 0
        self._accessed = -1  # the object whose access the prefetch phase follows
        self._last_row: dict[int, int] = {}
        self._next_use = w.next_use  # (int64: next_use_rows reads it as it is)
        self._next_use_list = w.next_use.tolist()  # (_displaced reads it row by row)
        self._mean_size, self._fetch_ns = reward_scales(w.trace, self.pool)
        self._loop = self._episode()
        self._started = False

    def _resume(self, choice: int | None) -> bool:
        """Send the agent's choice into the episode loop; True at the next decision."""
        assert self._loop is not None
        try:
            if not self._started:
                self._started = True
                next(self._loop)
            else:
                self._loop.send(choice)
            return True
        except StopIteration:
            self._loop = None
            self._keys, self._mask = [], np.zeros(self.K + 1, bool)
            self._obs = {**empty_obs(self.K), "phase": np.int64(0)}
            return False

    def _episode(self) -> Generator[None, int | None, None]:
        """The window's rows through the pool; yields at each decision (``self._keys`` etc.
        set) and receives the chosen key (``None``: no prefetch)."""
        pool, w = self.pool, self._w
        assert pool is not None
        view, tracker, K, rule = pool.view, self.tracker, self.K, self.candidates
        resident, access, free, steps = view.is_resident, pool.access, pool.free, pool.steps
        observe, propose, opp = self.predictor.observe, self.predictor.propose, self.opportunity
        compute, select, decide = pool.cost.compute, features.select_keys, self._decide
        last_row = self._last_row
        # the opportunity rule as an int: every `every`-th access; 0 after a miss, -1 at the
        # last access of a trace step
        every = 1 if opp == "access" else 0 if opp == "miss" else -1 if opp == "step" else int(opp)
        ends = step_ends(w.trace) if every == -1 else np.zeros(0, bool)  # (read for "step" only)
        free_, write_, evict_, prefetch_ = int(Op.FREE), int(Op.WRITE), EVICT, PREFETCH
        n_access = 0
        for i, (k, op, size, kind, comp) in enumerate(zip(w.key, w.op, w.size, w.kind, w.compute_ns)):
            if op == free_:
                free(k)
                continue
            last_row[k] = i
            if resident(k):
                hit = access(k, size, op == write_, kind=kind)
            else:  # the consumer's compute is deferred past the prefetch decision below
                gen = steps(k, size, op, kind=kind)
                try:
                    next(gen)
                    while True:
                        keys = select(tracker, view, K, rule, self.np_random)
                        decide(evict_, keys)
                        gen.send((yield))  # type: ignore[arg-type]
                except StopIteration as e:
                    hit = bool(e.value)
                finally:
                    gen.close()  # releases the pool's lock if the episode is abandoned here
            observe(k, view)
            n_access += 1
            if every > 0:
                ask = every == 1 or n_access % every == 0
            elif every == 0:
                ask = not hit
            else:
                ask = bool(ends[i])
            if ask:
                cands = propose(k, K, view)
                if cands:
                    self._accessed = k  # (held while its prefetch is served: not room for it)
                    decide(prefetch_, cands)
                    key = yield
                    if key is not None:
                        hold = view.evictable(k)  # as the pool's own prefetch hook: hold the accessed object
                        if hold:
                            pool.pin(k)
                        try:
                            pool.prefetch(key)
                        except PoolExhausted:  # a prefetch is a hint: no room now
                            self._dropped += 1
                        finally:
                            if hold:
                                pool.unpin(k)
            if comp:
                compute(comp)  # the access's compute (Pool.access's last step)

    def _decide(self, phase: int, keys: list[int]) -> None:
        pool = self.pool
        assert pool is not None
        cand, mask, glob = features.observe_keys(self.tracker, pool.view, keys, self.K, self._packed)
        self._phase, self._keys = phase, keys
        self._mask = _mask_table(self.K)[2 * len(keys) + phase]
        self._obs = {"candidates": cand.reshape(-1), "globals": glob, "mask": mask.astype(np.int8),
                     "phase": np.int64(phase)}

    # ------------------------------------------------------------------ helpers
    def _check_action(self, action: Any) -> int:
        K = self.K
        a = action_int(action, K + 1)
        if 0 <= a < len(self._keys) or (a == K and self._phase == PREFETCH):  # the mask
            return a
        if not 0 <= a <= K:
            raise InvalidActionError(f"action {action!r} is out of range: Discrete({K + 1}) takes 0..{K}")
        phase = "eviction" if self._phase == EVICT else "prefetch"
        if self.invalid_action == "raise":
            raise InvalidActionError(
                f"action {a} is masked in the {phase} phase (mask {self._mask.astype(int).tolist()}); "
                "mask actions with action_masks() or make the env with invalid_action='default'")
        self._invalid += 1
        if self._phase == PREFETCH:
            return K
        last = self.tracker.last_access(self._keys)
        return int(np.argmin(last))

    def _info(self) -> dict[str, Any]:
        pool = self.pool
        assert pool is not None
        K, kl, t = self.K, self._keys, pool.view.tick
        info: dict[str, Any] = {"tick": t, "misses": pool.stats.misses, "phase": self._phase,
                                "invalid_actions": self._invalid, "dropped_prefetches": self._dropped}
        get = self._last_row.get
        nxt = next_use_rows(self._next_use, np.array([get(k, -1) for k in kl], np.int64))
        # eviction: Belady's victim; prefetch: the candidate used soonest, or no prefetch
        j, keys, dist = decision_info(kl, nxt, t, K, self._phase == EVICT)
        if not kl:
            info["oracle_action"] = -1
            info["stats"] = pool.snapshot().as_dict()
        else:
            info["oracle_action"] = K if j < 0 else j
            if self._phase == PREFETCH and j >= 0:
                info["displaced_next_use"] = self._displaced(kl[j], t)
        info["keys"], info["next_use"] = keys, dist
        return info

    def _displaced(self, key: int, t: int) -> float:
        """Ticks to the soonest next use among the objects a prefetch of ``key`` would evict
        (the pool's policy, the tracker's LRU order, makes its room; the accessed object is
        held meanwhile), ``inf`` when it fits in the free bytes or none of them is used again
        (the teacher's "do no harm" test: Cao et al., SIGMETRICS 1995)."""
        pool = self.pool
        assert pool is not None
        view = pool.view
        short = view.size(key) - (view.capacity - view.used)
        if short <= 0:
            return math.inf
        nu, lr, never = self._next_use_list, self._last_row, INF
        soonest = math.inf
        keys = features.select_keys(self.tracker, view, _DISPLACED_SCAN, "lru", None)
        held = self._accessed
        for k in keys:
            if k == held:
                continue
            r = nu[lr[k]] if k in lr else never
            if r < never:
                soonest = min(soonest, float(r - t))
            short -= view.size(k)
            if short <= 0:
                return soonest
        return 0.0  # (more than the scan would have to go: count it as harm)


@functools.cache
def _mask_table(K: int) -> np.ndarray:
    """Row ``2 * n + phase``: the action mask with ``n`` candidates in ``phase`` (the no-op,
    last, valid in the prefetch phase only); read-only, shared."""
    t = np.repeat(np.tri(K + 1, K + 1, -1, bool), 2, axis=0)
    t[1::2, K] = True
    t.setflags(write=False)
    return t
