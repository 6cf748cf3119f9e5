"""``cachegym/Prefetch-v0``: the agent chooses what a real :class:`Pool` prefetches."""

from __future__ import annotations

import copy
import functools
import math
from collections.abc import Generator, Mapping, Sequence
from typing import Any

import numpy as np
from gymnasium import spaces

from cachegym.allocator.errors import ConfigError, InvalidActionError, PoolExhausted
from cachegym.allocator.pool import Pool
from cachegym.allocator.seams import check_policies
from cachegym.allocator.trace import Op
from cachegym.envs.common import (
    Episodes,
    PoolEnv,
    TraceSource,
    Window,
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
    observation_space,
    pack_obs,
    pool_options,
    render_mode_of,
    resolve_capacity,
    reward_scales,
    step_ends,
)
from cachegym.policies import features
from cachegym.policies.base import EvictionPolicy
from cachegym.policies.features import FeatureTracker, Observed
from cachegym.policies.successors import SuccessorPredictor, own_predictor

__all__ = ["PrefetchEnv", "PREFETCH_REWARDS", "OPPORTUNITIES", "PYTHIA_WEIGHTS"]

PREFETCH_REWARDS = ("pythia", "misses", "bytes", "traffic", "stall")
OPPORTUNITIES = ("miss", "access", "step")
_FREE, _WRITE = int(Op.FREE), int(Op.WRITE)  # plain ints: comparing with an IntEnum member costs 6x
PYTHIA_WEIGHTS: Mapping[str, float] = {"timely": 1.0, "late": 0.5, "useless": -1.0, "none": 0.0}
"""Default weights of the Pythia-style reward (Bera et al., MICRO 2021, rank their rewards the
same way: accurate and timely > accurate but late > no prefetch > inaccurate)."""


class PrefetchEnv(PoolEnv):
    """Choose which host object to prefetch (copy to the device ahead of use), or nothing.

    The environment wraps a real :class:`allocator.pool.Pool` and drives its access loop over a
    window of a trace (:meth:`Pool.access`, then :meth:`Pool.prefetch` with the agent's
    choice). Evictions, for demand misses and for prefetches, are answered by the pool's
    eviction policy (``eviction``, LRU by default); hits, misses, prefetch hits, late and
    useless prefetches and every statistic are the pool's. The agent is consulted only at
    prefetch opportunities (``opportunity``) for which the predictor has candidates; the pool
    fast-forwards through everything else.

    ## Action space

    ``Discrete(K + 1)``: ``a < K`` prefetches candidate ``a``; ``a == K`` does nothing (valid at
    every decision of an episode; before ``reset()`` and after the episode ends every slot is
    masked: there is no decision to take). ``action_masks()`` (sb3-contrib convention, bool of length ``K + 1``) marks the
    padded candidate slots invalid. Out-of-range actions raise
    :class:`~allocator.errors.InvalidActionError`; masked ones become the no-op, counted in
    ``info["invalid_actions"]`` (``invalid_action="noop"``, the default: a random-action
    rollout never crashes), or raise it too (``invalid_action="raise"``).

    ## Observation space

    As :class:`envs.evict.EvictEnv`: ``{"candidates": Box(0, 1, (K * F,)), "globals":
    Box(0, 1, (G,)), "mask": MultiBinary(K)}`` from :func:`policies.features.observe`, the
    candidates being non-resident objects proposed by a :class:`policies.successors.SuccessorPredictor`
    (the objects that followed the accessed one before), most likely first.

    ## Rewards

    Collected between a decision and the next one:

    * ``"pythia"`` (default): ``timely * prefetch hits + late * late prefetches + useless *
      useless prefetches + none * [the action was the no-op]``, weights ``pythia_weights``
      (default :data:`PYTHIA_WEIGHTS`). Each prefetch is credited when its fate is known, so
      the reward judges prefetching alone, whatever the eviction policy's misses, and is
      defined with or without a cost model (without one copies are instant: nothing is late).
      A prefetch whose fate is still open when the episode ends (neither used nor evicted) is
      never credited, so a useless prefetch near the end costs nothing.
    * ``"misses"``: ``-1`` per demand miss. ``"bytes"``: ``-bytes fetched on demand / mean
      object size``. ``"traffic"``: as :class:`envs.evict.EvictEnv`'s (bytes copied both
      ways, prefetches included, in mean objects). ``"stall"``: ``-stall ns / fetch time of a mean-sized object`` (needs
      ``cost``; with ``cost`` the trace's ``compute_ns`` is the time a prefetch can hide in).

    ## Info

    At every decision: ``oracle_action`` (the valid candidate used soonest; the no-op ``K``
    when none is used again), ``next_use`` (float ``(K,)``, ticks to each candidate's next
    access, ``inf`` if never, ``-1`` for padding), ``keys`` (``-1`` for padding), ``tick``,
    ``misses``, ``invalid_actions``, ``dropped_prefetches`` (no room could be made: everything
    else pinned or in flight); at the end ``stats`` (the pool's final statistics).

    ## Episode

    As :class:`envs.evict.EvictEnv`: a window of ``window`` rows of one of ``traces`` drawn
    from ``self.np_random`` (``reset(options={"trace": i, "start": row})`` fixes it), a fresh
    pool and predictor; terminates at the window's end; no truncation (left to registration).

    ## Arguments

    * ``traces``, ``window`` (4096), ``capacity`` (0.25), ``capacity_of``, ``cost`` (None),
      ``placement`` (``"bytes"``), ``write_policy``, ``clean_ahead`` (0.0), ``reward_baseline``
      (0.0; with the demand rewards only): as :class:`envs.evict.EvictEnv`.
    * ``K`` (8): candidates per decision.
    * ``opportunity`` (``"miss"``): when the agent is asked, after an access: ``"miss"`` (a
      demand miss), ``"access"`` (every access), ``"step"`` (the last access of each value of
      the trace's ``step`` column: each training iteration of the bundled and generated DL
      traces, so few opportunities per window) or an int ``N`` (every ``N`` accesses).
    * ``reward`` (``"pythia"``), ``pythia_weights``, ``invalid_action`` (``"noop"``; or ``"raise"``:
      then Gymnasium's and SB3's ``check_env``, which step unmasked random actions, fail by design).
    * ``eviction``: the pool's eviction policy, ``"lru"`` or an :class:`EvictionPolicy`.
    * ``predictor``: a :class:`SuccessorPredictor` (the env makes its own of the same
      parameters: envs made from the same arguments never share one) or its parameters (default ``depth=2, width=4,
      hops=3``: the successor table; ``horizon > 0``: the aligned history instead, as the main
      job's prefetch stage uses it, ``conf/main.yaml``).
    * ``render_mode``: ``None`` (the env draws nothing; ``render()`` returns None).

    ## Version history

    * v0: initial version. Default since 2026-12-02: ``invalid_action="noop"`` (was ``"raise"``).
    * Since 2026-12-05: ``capacity_of="peak_live"`` by default (was ``"working_set"``, of
      which 0.25 held whole windows of most DL traces: no decision arose), as Evict-v0;
      ``opportunity="step"`` asks at the last access of a step where frees follow it
      (it asked never on traces whose steps end with frees, as the bundled ones do).
    """

    def __init__(
        self,
        traces: TraceSource | Sequence[TraceSource] | None = None,
        *,
        K: int = 8,
        opportunity: str | int = "miss",
        window: int | None = 4096,
        capacity: float = 0.25,
        capacity_of: str = "peak_live",
        reward: str = "pythia",
        pythia_weights: Mapping[str, float] | None = None,
        invalid_action: str = "noop",
        eviction: str | EvictionPolicy = "lru",
        predictor: SuccessorPredictor | Mapping[str, int] | None = None,
        cost: Any = None,
        placement: str = "bytes",
        write_policy: str = "write-back",
        clean_ahead: float = 0.0,
        reward_baseline: float = 0.0,
        render_mode: str | None = None,
    ) -> None:
        check_args(K, reward=reward, rewards=PREFETCH_REWARDS, cost=cost,
                   opportunity=opportunity, opportunities=OPPORTUNITIES)
        self.reward_baseline = check_reward_baseline(reward_baseline, reward, PREFETCH_REWARDS[1:])
        weights = dict(PYTHIA_WEIGHTS)
        unknown = set(pythia_weights or {}) - set(weights)
        if unknown:
            raise ConfigError(f"pythia_weights: unknown outcome(s) {sorted(unknown)}; known: {sorted(weights)}")
        for name, w in (pythia_weights or {}).items():  # (a NaN or inf made every reward NaN)
            if isinstance(w, bool) or not isinstance(w, (int, float, np.integer, np.floating)) \
                    or not math.isfinite(w):
                raise ConfigError(f"pythia_weights[{name!r}] must be a finite number, got {w!r}")
        if pythia_weights and reward != "pythia":
            raise ConfigError(f"pythia_weights weigh the 'pythia' reward's outcomes; this env's "
                              f"reward is {reward!r}: drop them or set reward='pythia'")
        weights.update({k: float(v) for k, v in (pythia_weights or {}).items()})
        if invalid_action not in ("raise", "noop"):
            raise ConfigError(f"invalid_action must be 'raise' or 'noop', got {invalid_action!r}")
        if isinstance(eviction, str) and eviction != "lru":
            raise ConfigError(f"eviction must be 'lru' or an EvictionPolicy object, got {eviction!r}")
        if not isinstance(eviction, str):  # an object: the pool's checks now, not at reset
            try:
                check_policies(eviction, None)
            except ConfigError as e:
                raise ConfigError(f"eviction ('lru' or an EvictionPolicy object): {e}") from None
        check_capacity(capacity, capacity_of)
        render_mode_of(render_mode)
        self.render_mode = None
        self.K = int(K)
        self.opportunity = int(opportunity) if isinstance(opportunity, np.integer) else opportunity
        self.reward_kind = reward
        self.weights = weights
        self.invalid_action = invalid_action
        # (a policy object: a copy of it as given at each episode, so that an episode starts
        # from the same state whatever ran before: reset(seed=s) fixes the rollout)
        self.eviction = eviction if isinstance(eviction, str) else copy.deepcopy(eviction)
        self.capacity, self.capacity_of = capacity, capacity_of
        self.pool_kwargs = pool_options(cost, placement, write_policy, clean_ahead)
        self.predictor = own_predictor(predictor)
        self._episodes = Episodes(as_traces(traces), window)
        self.observation_space = observation_space(self.K)
        self.action_space = spaces.Discrete(self.K + 1)
        self.pool: Pool | None = None
        self.tracker = FeatureTracker()
        self._loop: Generator[None, int | None, None] | None = None
        self._keys: list[int] = []
        self._mask = np.zeros(self.K + 1, bool)
        self._obs = empty_obs(self.K)
        self._done = True

    # ------------------------------------------------------------------ gymnasium API
    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None
              ) -> tuple[dict[str, Any], dict[str, Any]]:
        super().reset(seed=seed)
        for _ in range(16):
            self._start(self._episodes.draw(self.np_random, options))
            if self._advance(start=True):
                return self._obs, self._info()
        advice = [] if self.opportunity == "access" else ["opportunity='access'"]
        advice.append("a smaller capacity (a pool that holds its window misses nothing)")
        if self.capacity_of != "peak_live":
            advice.append("capacity_of='peak_live' on a DL trace (whose working set is many times "
                          "what is live at once)")
        advice.append("a predictor that proposes something on this trace (predictor={'horizon': "
                      "N} proposes what followed the same access N steps before: it needs a trace "
                      "that repeats itself, as a training loop does; the successor table proposes "
                      "what followed an object before)")
        raise ConfigError("no prefetch opportunity with candidates arose in 16 episode windows "
                          f"(opportunity={self.opportunity!r}, capacity={self.capacity!r} of "
                          f"{self.capacity_of}, predictor {self.predictor.params()}); try "
                          + ", or ".join(advice))

    def step(self, action: Any) -> tuple[dict[str, Any], float, bool, bool, dict[str, Any]]:
        if self._done or self.pool is None:
            raise self._not_running()
        a = self._check_action(action)
        pool = self.pool
        assert pool is not None
        st, kind = pool.stats, self.reward_kind
        if kind == "pythia":
            p0, l0, u0 = st.prefetch_hits, st.late_prefetches, st.useless_prefetches
            decided = self._advance(self._keys[a] if a < self.K else None)
            w = self.weights
            r = (w["timely"] * (st.prefetch_hits - p0) + w["late"] * (st.late_prefetches - l0)
                 + w["useless"] * (st.useless_prefetches - u0))
            if a == self.K:
                r += w["none"]
        else:
            marks = demand_marks(pool)
            decided = self._advance(self._keys[a] if a < self.K else None)
            r = demand_reward(kind, pool, marks, self._mean_size, self._fetch_ns,
                              self.reward_baseline)
        return self._obs, float(r), not decided, False, self._info()

    def action_masks(self) -> np.ndarray:
        """Valid actions (sb3-contrib convention): real candidates and the no-op (last)."""
        return self._mask.copy()

    # ------------------------------------------------------------------ the loop
    def _prefetch(self, pool: Pool, key: int) -> None:
        """Prefetch as the pool's own prefetch hook does: the object just accessed is held
        while room is made, and a prefetch that finds no room is dropped (it is a hint)."""
        k = self._keys_accessed
        hold = pool.view.evictable(k)
        if hold:
            pool.pin(k)
        try:
            pool.prefetch(key)
        except PoolExhausted:
            self._dropped += 1
        finally:
            if hold:
                pool.unpin(k)

    def _start(self, w: Window) -> None:
        self.close()  # an abandoned episode releases the pool's lock first
        self._w = w
        self.tracker.reset()
        self.predictor.reset()
        policy: EvictionPolicy = self.tracker if self.eviction == "lru" else Observed(
            copy.deepcopy(self.eviction), self.tracker)  # type: ignore[arg-type]
        cap = resolve_capacity(self.capacity, self.capacity_of, w.trace)
        self.pool = Pool(cap, policy, **self.pool_kwargs)  # type: ignore[arg-type]
        self._invalid = 0
        self._dropped = 0
        self._keys_accessed = -1
        self._last_row: dict[int, int] = {}
        self._next_use = w.next_use  # (int64: next_use_rows reads it as it is)
        self._mean_size, self._fetch_ns = reward_scales(w.trace, self.pool)
        self._loop = self._episode()

    def _advance(self, choice: int | None = None, start: bool = False) -> bool:
        """Prefetch ``choice`` (a key; ``None``: nothing) at the pending opportunity, or start
        the episode (``start``), and run the pool to the next opportunity with candidates
        (True) or to the end of the window (False)."""
        loop = self._loop
        assert loop is not None
        try:
            if start:
                next(loop)
            else:
                loop.send(choice)
        except StopIteration:
            self._loop = None
            self._keys = []
            self._mask = np.zeros(self.K + 1, bool)
            self._obs = empty_obs(self.K)
            self._done = True
            return False
        return True

    def _episode(self) -> Generator[None, int | None, None]:
        """The window's rows through the pool; yields at each opportunity with candidates
        (``self._keys`` etc. set) and receives the key to prefetch (``None``: nothing)."""
        pool, w, K, tracker = self.pool, self._w, self.K, self.tracker
        assert pool is not None
        access, free, view, compute = pool.access, pool.free, pool.view, pool.cost.compute
        observe, propose = self.predictor.observe, self.predictor.propose
        last_row, opp = self._last_row, self.opportunity
        masks = _mask_table(K)
        # the opportunity rule as an int: every `every`-th access; 0 after a miss, -1 at the
        # last access of a trace step
        every = 1 if opp == "access" else 0 if opp == "miss" else -1 if opp == "step" else int(opp)
        ends = step_ends(w.trace) if every == -1 else np.zeros(0, bool)  # (read for "step" only)
        free_, write_ = _FREE, _WRITE  # plain ints in fast locals
        n_access = 0
        for i, (k, op, size, kind, comp) in enumerate(zip(w.key, w.op, w.size, w.kind, w.compute_ns)):
            if op == free_:
                free(k)
                continue
            last_row[k] = i
            # the consumer's compute runs after the prefetch decision, as with the pool's own
            # prefetch hook, so that a prefetch overlaps it
            hit = access(k, size, op == write_, kind=kind)
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
                    cand, mask, glob = features.observe_keys(tracker, view, cands, K)
                    self._keys, self._keys_accessed = cands, k
                    self._mask = masks[len(cands)]
                    self._obs = pack_obs(cand, mask, glob)
                    self._done = False
                    choice = yield
                    if choice is not None:
                        self._prefetch(pool, choice)
            if comp:
                compute(comp)

    # ------------------------------------------------------------------ helpers
    def _check_action(self, action: Any) -> int:
        K = self.K
        a = action_int(action, K + 1, f" ({K} = no prefetch)")
        if 0 <= a < len(self._keys) or a == K:  # the mask: the candidates and the no-op
            return a
        if not 0 <= a <= K:
            raise InvalidActionError(f"action {action!r} is out of range: Discrete({K + 1}) takes "
                                     f"0..{K} ({K} = no prefetch)")
        if self.invalid_action == "raise":
            raise InvalidActionError(
                f"action {a} names a padded slot: valid are candidates 0..{len(self._keys) - 1} "
                f"and {K} (no prefetch) (mask {self._mask.astype(int).tolist()}); mask actions "
                "with action_masks() (sb3-contrib MaskablePPO) or make the env with "
                "invalid_action='noop'")
        self._invalid += 1
        return K

    def _info(self) -> dict[str, Any]:
        pool = self.pool
        assert pool is not None
        K, kl = self.K, self._keys
        t = pool.view.tick
        info: dict[str, Any] = {"tick": t, "misses": pool.stats.misses,
                                "invalid_actions": self._invalid, "dropped_prefetches": self._dropped}
        get = self._last_row.get
        nxt = next_use_rows(self._next_use, np.array([get(k, -1) for k in kl], np.int64))
        # the candidate used soonest (the no-op when none is used again)
        j, keys, dist = decision_info(kl, nxt, t, K, False)
        info["oracle_action"] = K if j < 0 else j
        if not kl:
            info["stats"] = pool.snapshot().as_dict()
        info["keys"], info["next_use"] = keys, dist
        return info


@functools.cache
def _mask_table(K: int) -> np.ndarray:
    """Row ``n``: the action mask with ``n`` candidates (and the no-op); read-only, shared."""
    t = np.tri(K + 1, K + 1, -1, bool)
    t[:, K] = True
    t.setflags(write=False)
    return t
