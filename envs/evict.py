"""``cachegym/Evict-v0``: the agent chooses eviction victims of a real :class:`Pool`."""

from __future__ import annotations

from collections.abc import Generator, Sequence
from typing import Any

import numpy as np
from gymnasium import spaces

from cachegym.allocator.errors import ConfigError, InvalidActionError
from cachegym.allocator.pool import EvictionRequest, Pool
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
    demand_marks,
    demand_reward,
    empty_obs,
    no_decision_message,
    observation_space,
    pack_obs,
    pool_options,
    render_mode_of,
    resolve_capacity,
    reward_scales,
)
from cachegym.policies import features
from cachegym.policies.features import FeatureTracker

__all__ = ["EvictEnv", "EVICT_REWARDS", "INVALID_ACTIONS"]

EVICT_REWARDS = ("misses", "bytes", "traffic", "stall")
_FREE, _WRITE = int(Op.FREE), int(Op.WRITE)  # plain ints: comparing with an IntEnum member costs 6x
INVALID_ACTIONS = ("raise", "lru")


class EvictEnv(PoolEnv):
    """Choose which resident object to evict when the pool needs space.

    The environment wraps a real :class:`allocator.pool.Pool` and drives its one access loop
    (:meth:`Pool.steps`) over a window of a trace. Hits, misses, evictions and every statistic
    are the pool's; the agent only answers the pool's :class:`~allocator.pool.EvictionRequest`
    (several per access when one victim does not free enough room). Everything between two
    requests is fast-forwarded inside the pool: a resident object's access through
    :meth:`Pool.access` (the compiled loop, with no generator), a miss through :meth:`Pool.steps`,
    which stops at its eviction request (the interpreted core, ``CACHEGYM_PURE_PYTHON=1``, gives
    bit-identical rollouts).

    ## Action space

    ``Discrete(K)``: the index of the victim among the ``K`` candidates of the observation.
    Rows beyond the number of evictable candidates are padding: ``action_masks()`` (the
    sb3-contrib convention: a bool array of length ``K``, True = valid) marks them. An action
    out of ``[0, K)`` raises :class:`~allocator.errors.InvalidActionError`; a masked action
    is replaced by the least recently used candidate and counted in ``info["invalid_actions"]``
    (``invalid_action="lru"``, the default: never silently, and a random-action rollout never
    crashes) or raises it too (``invalid_action="raise"``).

    ## Observation space

    ``Dict``, built by :mod:`policies.features` (the code the exported policy runs in
    deployment, so the deployed policy sees exactly this)::

        "candidates": Box(0, 1, (K * F,), float32)  the (K, F) feature matrix, row-major
        "globals":    Box(0, 1, (G,), float32)      pool-wide features
        "mask":       MultiBinary(K)                1 = a real candidate

    ``F = len(policies.features.FEATURE_NAMES)``, ``G = len(policies.features.GLOBAL_NAMES)``.
    Candidates (``candidates=``): ``"lru"``, the K least recently used evictable objects,
    least recent first; ``"sample"``, K drawn uniformly among the evictable ones (as LRB does),
    from ``self.np_random``.

    ## Rewards

    Collected between a decision and the next one (the pool's counters, differenced):

    * ``"traffic"`` (default): ``-bytes copied both ways`` (demand fetches, prefetches,
      write-backs, streamed accesses: what the pool pays) ``/ mean object size of the window``.
    * ``"misses"``: ``-1`` per demand miss. Miss count is the quantity Belady's
      oracle minimises, so the oracle's actions give the optimal return and imitation and RL
      optimise the same thing; it is dense, needs no scale and does not depend on the cost model.
    * ``"bytes"``: ``-bytes of the demand misses / mean object size of the window`` (a write
      miss counts its object's bytes though it copies nothing in: ``"traffic"`` counts copies).
    * ``"stall"``: ``-stall ns / fetch time of a mean-sized object`` (needs a ``cost`` preset).

    The return of an episode is minus the traffic (misses, bytes, stall) after the first decision.

    ``reward_baseline`` (0: none) adds that many cost units per access served between the two
    decisions. Where every miss asks for one decision and costs about the same (equal sizes, a
    full pool: the default workload), each step's cost is the same whatever the agent does: the
    agent changes only how many accesses are served before the next miss, which a step's cost
    does not see, so every return discounted per decision is alike (a helper measured every
    step's reward at exactly -1 under Belady's and random actions). With ``reward_baseline=1``
    a step earns the accesses it served less what they cost (for ``misses``: its hits), which
    does; the accesses of an episode are fixed by its window, so the undiscounted ranking of
    policies is unchanged.

    ## Info

    At every decision: ``oracle_action`` (Belady: the valid candidate with the farthest next
    use; among those never used again, the largest key, as :class:`policies.priority.Belady`),
    ``next_use`` (float ``(K,)``: ticks to each candidate's next access, ``inf`` if never,
    ``-1`` for padding), ``keys`` (int64 ``(K,)``, ``-1`` for padding), ``tick``, ``misses``,
    ``invalid_actions``. At the end: the same keys with the final pool statistics in ``stats``.

    ## Episode

    Starts at a window of ``window`` rows of one of ``traces`` (trace and start row drawn from
    ``self.np_random``; ``reset(options={"trace": i, "start": row})`` fixes them) with a fresh
    pool, fast-forwarded to the first decision. Terminates when the window is exhausted, also
    where the trace goes on past it: the window's end has no decision, hence no state whose
    value an agent could bootstrap from (its observation is all padding, every slot masked); a
    window is the unit of the task, as a trace is for the evaluator. No truncation: a horizon
    is left to the registration (``max_episode_steps``).

    ## Arguments

    * ``traces``: a trace, a path, a generator spec ``{"generator": ..., **params}``, or a list
      of them (mixed uniformly); default :func:`envs.common.default_trace`.
    * ``K`` (32): candidates per decision. ``candidates`` (``"sample"``): the rule above.
    * ``window`` (16384): rows per episode (``None``: whole traces).
    * ``capacity`` (0.25): pool bytes (``int``) or a fraction (``float``) of the window's
      peak live bytes (``capacity_of="peak_live"``) or working set (``"working_set"``).

    The defaults are ``conf/env/evict.yaml``'s (the training configuration), so an env made in
    a plain script (``gymnasium.make("cachegym/Evict-v0")``) poses the problem
    ``scripts/train.py`` trains on.
    * ``reward`` (``"traffic"``: bytes copied both ways, in mean requests; or ``"misses"``,
      ``"bytes"``, ``"stall"``), ``invalid_action`` (``"lru"``; or ``"raise"``).
    * ``cost`` (None: instant copies), ``placement`` (``"bytes"``), ``write_policy``
      (``"write-back"``): passed to :class:`Pool`; objects larger than the pool are bypassed.
    * ``clean_ahead`` (0.0): the share of the capacity kept clean ahead of eviction under a
      cost preset (``Pool(clean_ahead=)``: dirty next victims are written back while compute
      runs). The agent's next victims are not known ahead of its decisions: the pool cleans
      the least recently used objects first (the candidates' order), as the exported policy's
      pool does (``LearnedPolicy.eviction_order``), so that a policy's stall here is the stall
      it has when deployed; the oracle's actions are Belady's victims, not its cleaning.
    * ``reward_baseline`` (0.0): cost units credited per access served (Rewards, above).
    * ``render_mode``: ``None`` (the env draws nothing; ``render()`` returns None).

    ## Version history

    * v0: initial version. Defaults since 2026-12-02: ``reward="traffic"`` (was ``"misses"``),
      and ``conf/env/evict.yaml``'s ``candidates="sample"``, ``window=16384``,
      ``capacity_of="peak_live"``, ``invalid_action="lru"`` (were ``"lru"``, 4096,
      ``"working_set"``, ``"raise"``); passing the old values gives the old behaviour.
    """

    def __init__(
        self,
        traces: TraceSource | Sequence[TraceSource] | None = None,
        *,
        K: int = 32,
        candidates: str = "sample",
        window: int | None = 16384,
        capacity: float = 0.25,
        capacity_of: str = "peak_live",
        reward: str = "traffic",
        invalid_action: str = "lru",
        cost: Any = None,
        placement: str = "bytes",
        write_policy: str = "write-back",
        clean_ahead: float = 0.0,
        reward_baseline: float = 0.0,
        render_mode: str | None = None,
    ) -> None:
        check_args(K, candidates=candidates, reward=reward, rewards=EVICT_REWARDS, cost=cost)
        self.reward_baseline = check_reward_baseline(reward_baseline, reward, EVICT_REWARDS)
        if invalid_action not in INVALID_ACTIONS:
            raise ConfigError(f"invalid_action must be one of {INVALID_ACTIONS}, got {invalid_action!r}")
        check_capacity(capacity, capacity_of)
        render_mode_of(render_mode)
        self.render_mode = None
        self.K = int(K)
        self.candidates = candidates
        self.reward_kind = reward
        self.invalid_action = invalid_action
        self.capacity, self.capacity_of = capacity, capacity_of
        self.pool_kwargs = pool_options(cost, placement, write_policy, clean_ahead)
        self._episodes = Episodes(as_traces(traces), window)
        self.observation_space = observation_space(self.K)
        self.action_space = spaces.Discrete(self.K)
        self.pool: Pool | None = None
        self.tracker = FeatureTracker()
        self._packed = features.packed_buffer(self.K)  # the decision's slots, codes and globals
        self._loop: Generator[EvictionRequest | None, int, None] | None = None
        self._keys: list[int] = []
        self._nx = np.zeros(self.K, np.int64)  # the candidates' next uses (_info)
        self._rows = np.zeros(self.K, np.int64)  # the candidates' last-access rows (_info)
        self._mask = np.zeros(self.K, bool)
        self._obs = empty_obs(self.K)
        self._done = True

    # ------------------------------------------------------------------ gymnasium API
    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None
              ) -> tuple[dict[str, np.ndarray], dict[str, Any]]:
        super().reset(seed=seed)
        for _ in range(16):
            self._start(self._episodes.draw(self.np_random, options))
            if self._advance(None):
                return self._obs, self._info()
        raise ConfigError(no_decision_message("eviction decision", self.pool, self.capacity,
                                              self.capacity_of))

    def step(self, action: Any) -> tuple[dict[str, np.ndarray], float, bool, bool, dict[str, Any]]:
        if self._done or self.pool is None:
            raise self._not_running()
        i = self._check_action(action)
        pool = self.pool
        assert pool is not None
        if self.reward_kind == "misses" and not self.reward_baseline:  # without demand_marks' tuple
            st = pool.stats
            m0 = st.misses
            decided = self._advance(self._keys[i])
            r = float(m0 - st.misses)  # (0.0 without a miss, not -0.0)
        else:
            marks = demand_marks(pool)
            decided = self._advance(self._keys[i])
            r = demand_reward(self.reward_kind, pool, marks, self._mean_size, self._fetch_ns,
                              self.reward_baseline)
        return self._obs, r, not decided, False, self._info()

    def action_masks(self) -> np.ndarray:
        """Valid actions (sb3-contrib's ``MaskablePPO`` convention): True for real candidates."""
        return self._mask.copy()

    # ------------------------------------------------------------------ the loop
    def _start(self, w: Window) -> None:
        self.close()  # an abandoned episode releases the pool's lock first
        self._w = w
        self.tracker.reset()
        cap = resolve_capacity(self.capacity, self.capacity_of, w.trace)
        self.pool = Pool(cap, self.tracker, **self.pool_kwargs)  # type: ignore[arg-type]
        self._view = self.pool.view
        self._invalid = 0
        # the oracle's input: a candidate's next access is the window's next_use at the row of its
        # last access, which is the tick in its tracker row (the pool's tick of row r is r)
        self._next_use = w.next_use
        self._mean_size, self._fetch_ns = reward_scales(w.trace, self.pool)
        self._loop = self._episode()

    def _episode(self) -> Generator[EvictionRequest | None, int, None]:
        """The window's rows through the pool. A miss runs as :meth:`Pool.steps`, whose
        eviction requests pass through (``yield from``) to :meth:`_advance`, which sends the
        victims back; everything else runs without stopping."""
        pool, w = self.pool, self._w
        assert pool is not None
        resident, access, free, steps = pool.view.is_resident, pool.access, pool.free, pool.steps
        keys, ops, sizes, kinds, comps = w.key, w.op, w.size, w.kind, w.compute_ns
        free_, write_ = _FREE, _WRITE  # plain ints in fast locals
        i, n = 0, len(keys)
        while i < n:
            k, op, size, kind, comp = keys[i], ops[i], sizes[i], kinds[i], comps[i]
            i += 1
            if op == free_:
                free(k)
            elif resident(k):  # a hit never needs room: the fast path of the same loop
                access(k, size, op == write_, kind=kind, compute_ns=comp)
            else:
                yield from steps(k, size, op, kind=kind, compute_ns=comp)

    def _advance(self, victim: int | None) -> bool:
        """Answer the pending request with ``victim`` (``None``: start the episode) and run
        the pool to the next eviction request (True) or to the end of the window (False)."""
        loop = self._loop
        assert loop is not None
        try:
            if victim is None:
                next(loop)
            else:
                loop.send(victim)
        except StopIteration:
            self._loop = None
            return self._end()
        return self._decision()

    def _decision(self) -> bool:
        # select_candidates + observe, without converting the keys back and forth (and, mostly,
        # reading each candidate's pool record once): the same observation
        view = self._view
        v = self._packed
        keys = features.select_keys(self.tracker, view, self.K, self.candidates, self.np_random)
        if not keys:  # cannot happen: the pool asks only when something is evictable
            raise RuntimeError("eviction request without an evictable candidate")
        cand, mask, glob = features.observe_keys(self.tracker, view, keys, self.K, v)
        self._keys, self._mask, self._obs = keys, mask, pack_obs(cand, mask, glob)
        self._done = False
        return True

    def _end(self) -> bool:
        self._keys = []
        self._mask = np.zeros(self.K, bool)
        self._obs = empty_obs(self.K)
        self._done = True
        return False

    # ------------------------------------------------------------------ the episode, for teachers
    @property
    def window(self) -> Window:
        """The running episode's window (its ``trace``, cut from ``traces[source]`` at ``start``).
        Before the first ``reset()`` there is none: an ``AttributeError`` (so that ``hasattr``,
        ``getattr(env, "window", None)`` and a vector env's ``get_attr`` answer, not raise)."""
        if self.pool is None:
            raise AttributeError("window: no episode yet; call reset() first")
        return self._w

    def candidate_rows(self) -> np.ndarray:
        """Row of the window (the pool's tick) of each current candidate's last access, in
        the order of the observation (``-1``: padding): where its current reuse interval
        starts, the interval of :func:`policies.bounds.foo_kept_rows`."""
        out = np.full(self.K, -1, np.int64)
        n = len(self._keys)
        out[:n] = self._rows[:n]  # (this decision's, from its info)
        return out

    # ------------------------------------------------------------------ helpers
    def _check_action(self, action: Any) -> int:
        a = action_int(action, self.K)
        if 0 <= a < len(self._keys):  # the mask: the first len(keys) slots
            return a
        if not 0 <= a < self.K:
            raise InvalidActionError(f"action {action!r} is out of range: Discrete({self.K}) takes 0..{self.K - 1}")
        n = len(self._keys)
        if self.invalid_action == "raise":
            raise InvalidActionError(
                f"action {a} names a padded slot: only candidates 0..{n - 1} are valid "
                f"(mask {self._mask.astype(int).tolist()}); mask actions with action_masks() "
                "(sb3-contrib MaskablePPO) or make the env with invalid_action='lru'")
        self._invalid += 1
        return self._lru_index()

    def _lru_index(self) -> int:
        if self.candidates == "lru":
            return 0
        return int(np.argmin(self._rows[:len(self._keys)]))  # (this decision's last accesses, from its info)

    def _info(self) -> dict[str, Any]:
        pool = self.pool
        assert pool is not None
        kl = self._keys
        t = self._view.tick
        info: dict[str, Any] = {"tick": t, "misses": pool.stats.misses,
                                "invalid_actions": self._invalid}
        # Belady's choice and each candidate's next-use distance: the next use after each one's
        # last access (in one kernel call; the arrays handed out are new at every decision)
        keys, dist = np.empty(self.K, np.int64), np.empty(self.K, np.float64)
        j = self.tracker.teacher(kl, self._next_use, t, True, self._rows, self._nx, keys, dist)
        info["oracle_action"] = j
        if not kl:
            info["stats"] = pool.snapshot().as_dict()
        info["keys"], info["next_use"] = keys, dist
        return info
