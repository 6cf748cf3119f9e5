"""The guards of a learned policy: they keep it from doing worse than the heuristics for long.

:class:`ShadowGuard` (the default) measures the network and the heuristics in shadow caches
and follows the best; :class:`Guard` tries the network in trial windows against LRU and
S3-FIFO; :class:`LRUGuard` is :class:`Guard` with LRU alone. :func:`make_guard` builds one by
its :class:`GuardName` (the options of the config group ``conf/policy/guard/``: ``shadow``,
``trial``, ``lru``, and ``none`` for the network alone).
"""

from __future__ import annotations

import inspect
from enum import Enum
from typing import TYPE_CHECKING, Any

from cachegym.allocator.errors import ConfigError
from cachegym.policies.learned.models import OBJECTIVES, Expert, heuristic_expert, network_expert

if TYPE_CHECKING:
    from cachegym.allocator.pool import PoolView

__all__ = ["Guard", "LRUGuard", "ShadowGuard", "GuardName", "GUARD_NAMES", "make_guard"]


class Guard:
    """Keeps a learned policy from doing worse than the heuristics for long, by trial windows
    (the default guard is :class:`ShadowGuard`, which measures the network in a shadow pool
    instead; this one is the guard ``trial``: :func:`make_guard`, ``conf/policy/guard/trial.yaml``).

    Its experts (:class:`~policies.learned.models.Expert`) are registered policies, each deciding
    alone in a shadow pool of the guarded pool's capacity that sees the same requests: LRU, and
    (``s3fifo``, on by default) S3-FIFO. Every ``window`` accesses the policy's hits are compared
    with each shadow's. A window where the learned policy lost to LRU's shadow by more than
    ``margin``, or to S3-FIFO's by more than ``s3fifo_margin`` (fractions of the window's
    accesses), hands the decisions to the better of the two heuristics for ``backoff`` windows
    (doubling on each repeated loss, up to ``max_backoff``; the heuristic is chosen again at the
    end of each of them), then the learned policy is tried again. A window of the learned policy
    is cut short, as a loss, as soon as it trails LRU's shadow by more than ``abort`` hits
    (default: four times a whole window's allowance, at least 16), so that a workload the policy
    does badly on costs a few dozen misses per trial rather than a window's worth. S3-FIFO needs
    a whole window lost by its wider margin: its decisions first evict what its shadow no longer
    holds, and the pool admits only what the shadow admits (:meth:`admit`), so that the pool
    converges to the shadow's content, which costs misses after each hand-over; and its hits
    come in bursts on loops and scans where the learned policy is ahead over a whole window.
    LRU's decisions come from the policy's tracker (the pool's LRU order).

    ``objective``: what the policy and the shadows are compared on, ``traffic`` (bytes copied,
    the default; margins count in mean requests' bytes) or ``misses`` (hits).
    ``expert`` says who decides now (``None``: the learned policy); ``lru_windows`` counts the
    windows a heuristic decided, ``s3fifo_windows`` those of S3-FIFO among them; ``decisions``
    the accesses each expert decided (``network`` for the learned policy).
    Invariant: ``_experts`` are told every request and free of the guarded pool, ``_followed``
    (those whose content the pool may converge to) every insertion and eviction too;
    ``_hits0[e]`` is expert ``e``'s hits at the start of the window.
    """

    __slots__ = ("window", "margin", "s3fifo_margin", "max_backoff", "abort", "_n", "_hits",
                 "_off", "_backoff", "lru_windows", "windows", "aborts", "lru", "model",
                 "expert", "s3fifo_windows", "_named", "_experts", "_followed", "_hits0",
                 "_view", "_last_miss", "_requests", "objective", "_bytes", "_reqs", "_own0",
                 "decisions", "switches")

    def __init__(self, window: int = 4096, margin: float = 0.003, max_backoff: int = 16,
                 abort: float | None = None, s3fifo: bool = True, s3fifo_margin: float = 0.01,
                 objective: str = "traffic") -> None:
        if objective not in OBJECTIVES:
            raise ConfigError(f"{type(self).__name__}: objective must be one of {OBJECTIVES}, got "
                              f"{objective!r}")
        self.objective = objective
        self._bytes = 0  # bytes requested so far, and requests: the traffic objective's unit
        self._reqs = 0
        self._own0 = 0  # the guarded pool's traffic at the window's start
        self.decisions: dict[str, int] = {}  # accesses decided by each expert ("network": None)
        self.switches = 0  # changes of who decides
        if not (window >= 1 and margin >= 0 and s3fifo_margin >= 0 and max_backoff >= 1
                and (abort is None or abort >= 0)):
            raise ConfigError(
                f"{type(self).__name__}: window must be >= 1 accesses, margin and s3fifo_margin "
                f">= 0, max_backoff >= 1 windows and abort >= 0 hits (or None); got "
                f"window={window!r}, margin={margin!r}, s3fifo_margin={s3fifo_margin!r}, "
                f"max_backoff={max_backoff!r}, abort={abort!r}")
        self.window, self.margin, self.max_backoff = int(window), float(margin), int(max_backoff)
        self.s3fifo_margin = float(s3fifo_margin)
        self.abort = max(16.0, 4 * self.margin * self.window) if abort is None else float(abort)
        self.aborts = 0
        self._n = self._hits = 0
        self._off = 0  # windows left to a heuristic
        self._backoff = 1
        self.lru_windows = 0
        self.s3fifo_windows = 0
        self.windows = 0
        self.lru = heuristic_expert("lru", followed=False, objective=objective)  # (decides through
        # the tracker)
        self.model: Expert | None = heuristic_expert("s3fifo", objective=objective) if s3fifo else None
        self.expert: str | None = None
        self._view: PoolView | None = None  # the guarded pool's, from its first event
        self._last_miss: int | None = None
        self._named: dict[str | None, Expert] = {}
        self._experts: tuple[Expert, ...] = ()
        self._requests: tuple[Any, ...] = ()  # each expert's request(), bound
        self._followed: tuple[Expert, ...] = ()
        self._hits0: dict[str | None, int] = {}
        self._register({"lru": self.lru} if self.model is None else
                       {"lru": self.lru, "s3fifo": self.model})

    def _register(self, named: dict[str | None, Expert]) -> None:
        """The experts, by name (``None``: the network's): all told every request and free; the
        followed ones (all but LRU's, whose decisions are the tracker's) the guarded pool's
        insertions and evictions too."""
        self._named = named
        self._experts = tuple(named.values())
        self._requests = tuple(e.request for e in self._experts)
        self._followed = tuple(e for e in named.values() if e.followed)
        self._hits0 = dict.fromkeys(named, 0)

    @property
    def experts(self) -> dict[str | None, Expert]:
        """The experts by name (``None``: the network's, under a :class:`ShadowGuard`)."""
        return dict(self._named)

    @property
    def active(self) -> bool:
        """True while a heuristic decides (``expert``)."""
        return self._off > 0

    def attach(self, policy: Any) -> None:
        """Called once by the :class:`LearnedPolicy` the guard serves."""

    @property
    def unit(self) -> float:
        """One access's worth of the objective, which margins and ``abort`` are counted in: 1
        (a miss), or for traffic the mean bytes requested per access so far."""
        if self.objective == "misses":
            return 1.0
        return self._bytes / self._reqs if self._reqs else 1.0

    def _own(self) -> float:
        """The guarded pool's gain in this window: its hits, or minus the bytes it copied."""
        if self.objective == "misses":
            return self._hits
        st = self._view.stats if self._view is not None else None  # type: ignore[attr-defined]
        return 0 if st is None else -(st.traffic_bytes - self._own0)

    def _scores(self) -> dict[str | None, int]:
        """Each expert's gain in this window (hits, or minus the bytes it copied)."""
        h0 = self._hits0
        return {n: e.gain - h0[n] for n, e in self._named.items()}

    def _model_hits(self) -> int:
        m = self.model
        return 0 if m is None else m.gain - self._hits0["s3fifo"]

    def admit(self, view: PoolView, key: int, size: int) -> bool:
        """Whether the pool admits a missed object: while S3-FIFO decides, what its shadow took
        in (it refuses objects of at least its small queue's size, as libCacheSim's does), so
        that the pool holds what S3-FIFO would; otherwise always."""
        m = self.model
        return self.expert != "s3fifo" or m is None or m.admit(key)

    def victim(self, view: PoolView, tracker: Any) -> int | None:
        """The deciding heuristic's victim."""
        if self.expert == "s3fifo" and self.model is not None:
            k = self.model.victim(view)
            if k is not None:
                return k
        return tracker.victim(view)

    def _start(self, view: PoolView) -> None:
        """The guarded pool's first event: the shadow pools are made at its capacity."""
        self._view = view
        for e in self._experts:
            e.setup(view)

    def _request(self, view: PoolView, key: int, hit: bool) -> None:
        """Every expert's shadow sees the request; the window counts it."""
        if self._view is None:
            self._start(view)
        o = view.info(key)
        size, kind, write = o.size, o.kind, view.writing
        for r in self._requests:
            r(key, size, write, kind, hit)
        if not hit:
            self._last_miss = key
        self._hits += hit
        self._n += 1
        self._bytes += size
        self._reqs += 1
        who = "network" if self.expert is None or not self.active else str(self.expert)
        self.decisions[who] = self.decisions.get(who, 0) + 1

    def access(self, view: PoolView, key: int, hit: bool) -> None:
        self._request(view, key, hit)
        if self._n >= self.window:
            self._end_window()
        elif self._off == 0 and self.lru.gain - self._hits0["lru"] - self._own() > self.abort * self.unit:
            self.aborts += 1  # the trial is lost already: back to a heuristic now
            self._end_window()

    def insert(self, view: PoolView, key: int) -> None:
        if self._view is None:
            self._start(view)
        if key != self._last_miss:  # a prefetch: every shadow sees it as a request (uncounted)
            o = view.info(key)
            for e in self._experts:
                e.prefetched(key, o.size, o.kind)
        self._last_miss = None
        for e in self._followed:
            e.insert(key)

    def evict(self, view: PoolView, key: int) -> None:
        for e in self._followed:
            e.evict(key)

    def free(self, view: PoolView, key: int) -> None:
        if self._view is None:
            self._start(view)
        for e in self._experts:
            e.free(key)

    def _reset_window(self) -> None:
        self._n = self._hits = 0
        self._hits0 = {n: e.gain for n, e in self._named.items()}
        st = self._view.stats if self._view is not None else None  # type: ignore[attr-defined]
        self._own0 = 0 if st is None else st.traffic_bytes

    def _end_window(self) -> None:
        before = self.expert if self._off > 0 else None
        self._decide()
        self.switches += (self.expert if self._off > 0 else None) != before

    def __repr__(self) -> str:
        """The guard's kind, objective and who decides now (``network``: the learned policy)."""
        now = "network" if self.expert is None or not self.active else self.expert
        return (f"{type(self).__name__}(objective={self.objective!r}, window={self.window}, "
                f"experts={[n or 'network' for n in self._named]}, deciding={now!r})")

    def decision_shares(self) -> str:
        """``"network:0.62 lru:0.30 gdsf:0.08"``: the share of accesses each expert decided."""
        n = sum(self.decisions.values())
        return " ".join(f"{k}:{v / n:.2f}" for k, v in sorted(self.decisions.items(),
                                                             key=lambda kv: -kv[1])) if n else ""

    def _decide(self) -> None:
        self.windows += 1
        unit = self.unit
        allowance = self.margin * self._n * unit
        sc = self._scores()
        model_hits = self._model_hits()
        shadow_hits = sc["lru"]
        own = self._own()
        lost_lru = own < shadow_hits - allowance
        lost_model = self.model is not None and own < model_hits - self.s3fifo_margin * self._n * unit
        best = "s3fifo" if self.model is not None and model_hits > shadow_hits else "lru"
        if self._off > 0:
            self._off -= 1
            self.lru_windows += 1
            self.s3fifo_windows += self.expert == "s3fifo"
            self.expert = best if self._off > 0 else None
        elif lost_lru or lost_model:
            self._off = self._backoff
            self._backoff = min(2 * self._backoff, self.max_backoff)
            self.expert = best
        else:
            self._backoff = max(1, self._backoff // 2)
        self._reset_window()


class LRUGuard(Guard):
    """:class:`Guard` with LRU as the only heuristic (no S3-FIFO expert: less work per access)."""

    __slots__ = ()

    def __init__(self, window: int = 4096, margin: float = 0.003, max_backoff: int = 16,
                 abort: float | None = None, objective: str = "traffic") -> None:
        super().__init__(window, margin, max_backoff, abort, s3fifo=False, objective=objective)


class ShadowGuard(Guard):
    """A :class:`Guard` that also runs the network alone in a shadow pool
    (:func:`~policies.learned.models.network_expert`), so that all its experts -- the network,
    LRU, S3-FIFO, and (by default) GDSF and LFU, each deciding alone in a shadow pool -- are
    measured on every access whoever decides, and no window is spent trying the network blind.
    Experts are judged on ``objective`` (:data:`~policies.learned.models.OBJECTIVES`): by default
    the bytes their shadow copied (``traffic``; margins and ``abort`` then count in units of the
    mean request's bytes), or their hits (``misses``); below, "hit" reads "gain" in that
    objective. Every ``window`` accesses the pool follows the expert whose shadow hit most over
    the windows so far, each weighing ``decay`` times the next (0.5: mostly the last two), if it beat the
    one followed now by more than ``margin`` of those accesses (``s3fifo_margin`` to hand over to
    S3-FIFO, GDSF or LFU, whose content the pool must first converge to, and whose hits come in
    bursts on loops and scans for S3-FIFO); within a window, as soon as the network or LRU leads
    the followed expert by more than ``abort`` hits (GDSF or LFU: if it also does over the
    windows so far). The network and S3-FIFO, GDSF, LFU decide by evicting first what their
    shadow no longer holds (the pool converges to it; they also choose what the pool admits),
    LRU through the policy's tracker. GDSF is there for variable sizes (evicting large objects
    first, it hits more often than the others on most DL traces), LFU for frequency (an LLM KV
    cache's shared prefixes).

    ``gdsf`` / ``lfu``: whether those two experts run (each costs throughput). Costs a shadow
    pool's work per expert and access (and the network's decisions happen in its shadow pool).
    ``expert`` is ``None`` while the network is followed."""

    __slots__ = ("net", "decay", "_score", "_seen", "extra", "_abort_x")

    def __init__(self, window: int = 2048, margin: float = 0.003, abort: float | None = None,
                 s3fifo_margin: float = 0.01, decay: float = 0.5, gdsf: bool = True,
                 lfu: bool = True, objective: str = "traffic") -> None:
        super().__init__(window, margin, 1, abort, True, s3fifo_margin, objective)
        if not 0 <= decay < 1:
            raise ConfigError(f"ShadowGuard: decay must be in [0, 1), got {decay!r}")
        self.decay = float(decay)
        # the experts beyond LRU and S3-FIFO (Guard.model), by name
        self.extra: dict[str, Expert] = {}
        if gdsf:
            self.extra["gdsf"] = heuristic_expert("gdsf", objective=objective)
        if lfu:
            self.extra["lfu"] = heuristic_expert("lfu", objective=objective)
        self._score: dict[str | None, float] = {None: 0.0, "lru": 0.0, "s3fifo": 0.0,
                                                **dict.fromkeys(self.extra, 0.0)}
        self._seen = 0.0
        self.net: Expert | None = None
        self._abort_x = 1.0  # the abort threshold's multiplier (doubles at each forced switch)
        self._register({"lru": self.lru, "s3fifo": self.model, **self.extra})  # type: ignore[dict-item]

    @property
    def gdsf(self) -> Expert | None:
        """The GDSF expert (``None`` without it)."""
        return self.extra.get("gdsf")

    def attach(self, policy: Any) -> None:
        self.net = network_expert(policy, self.objective)
        self._register({None: self.net, **self._named})

    @property
    def active(self) -> bool:
        return True  # every decision is the followed expert's (the network's in its shadow)

    def _follows(self) -> Expert | None:
        """The expert whose content the pool converges to now (``None``: LRU's tracker)."""
        e = self.expert
        return None if e == "lru" else self._named.get(e)

    def admit(self, view: PoolView, key: int, size: int) -> bool:
        m = self._follows()
        return True if m is None else m.admit(key)

    def victim(self, view: PoolView, tracker: Any) -> int | None:
        m = self._follows()
        k = None if m is None else m.victim(view)
        return tracker.victim(view) if k is None else k

    def access(self, view: PoolView, key: int, hit: bool) -> None:
        self._request(view, key, hit)
        if self._n >= self.window:
            self._end_window()
            return
        # another expert ahead of the followed one by ``abort`` hits in this window: the network
        # or LRU; GDSF or LFU only if it leads over the windows so far too (:meth:`_leads`)
        h0, e = self._hits0, self.expert
        cur = self._named[e].gain - h0[e]
        lead = self.lru.gain - h0["lru"]
        net = self.net
        if net is not None and net.gain - h0[None] > lead:
            lead = net.gain - h0[None]
        for name, x in self.extra.items():
            h = x.gain - h0[name]
            if h > lead and name != e and self._leads(name, h, cur):
                lead = h
        if lead - cur > self.abort * self._abort_x * self.unit:
            self.aborts += 1
            self._end_window(force=True)

    def _scores(self) -> dict[str | None, int]:
        sc = super()._scores()
        sc.setdefault(None, 0)  # (no network before attach)
        return sc

    def _leads(self, name: str, h: float, cur: float) -> bool:
        """Whether expert ``name`` (``h`` hits in this window) leads the followed expert
        (``cur``) by ``abort`` hits over the windows so far, this one included, as
        :meth:`_end_window` weighs them: within a window GDSF often leads where it loses over
        the trace (measured: the pool flapped between LRU and GDSF eleven times on a recurrent
        model's trace, and between S3-FIFO and GDSF on an LLM KV cache, 3.1% behind LFU)."""
        d, score = self.decay, self._score
        return d * score[name] + h > d * score[self.expert] + cur + self.abort * self.unit

    def _end_window(self, force: bool = False) -> None:
        self.windows += 1
        sc = self._scores()
        score, d = self._score, self.decay
        for e, h in sc.items():
            score[e] = d * score[e] + h
        self._seen = d * self._seen + self._n
        cur = self.expert
        if force:  # the network, LRU, GDSF or LFU leads the followed expert by ``abort`` hits:
            # follow it now (not S3-FIFO, whose hits come in bursts; GDSF and LFU only if they
            # also lead over the windows so far, this one now included in ``score``)
            cands: list[str | None] = [None, "lru"]
            cands += [n for n in self.extra if score[n] > score[cur] + self.abort * self.unit]
            best = max(cands, key=lambda e: (sc[e], e is None))
            better = sc[best] > sc[cur]
        else:  # over the windows so far, the last weighing most (S3-FIFO's hits come in bursts)
            best = max(score, key=lambda e: (score[e], e is None))  # ties: the network
            need = (self.margin if best in (None, "lru") else self.s3fifo_margin) * self._seen * self.unit
            better = score[best] - score[cur] > need
        if best != cur and better:
            self.expert = best
            self.switches += 1
        # forced switches back and forth between experts that trade the lead in bursts cost the
        # pool a convergence each: each one doubles the next abort's threshold, each window end
        # halves it again
        self._abort_x = min(16.0, 2 * self._abort_x) if force else max(1.0, self._abort_x / 2)
        if self.expert is not None:
            self.lru_windows += 1
            self.s3fifo_windows += self.expert == "s3fifo"
        self._reset_window()


# ---------------------------------------------------------------------- by name
class GuardName(str, Enum):
    """A guard by name: the options of the config group ``conf/policy/guard/``."""

    shadow = "shadow"  # ShadowGuard, the default
    trial = "trial"  # Guard: trial windows against LRU and S3-FIFO
    lru = "lru"  # LRUGuard: trial windows against LRU alone
    none = "none"  # no guard: the network alone

    def __str__(self) -> str:
        return str(self.value)


GUARD_NAMES: tuple[str, ...] = tuple(g.value for g in GuardName)
"""The :class:`GuardName` values, in order."""


def make_guard(name: GuardName | str, **params: Any) -> Guard | None:
    """A new guard called ``name`` (a :class:`GuardName`; ``params`` go to its constructor):
    ``shadow`` a :class:`ShadowGuard`, ``trial`` a :class:`Guard`, ``lru`` an :class:`LRUGuard`,
    ``none`` no guard (``None``; it takes no parameters). A guard serves one policy: build one
    per :class:`~policies.learned.LearnedPolicy`. Raises
    :class:`~allocator.errors.ConfigError` naming the choices for an unknown name."""
    try:
        g = GuardName(str(name).strip().lower())
    except ValueError:
        raise ConfigError(f"unknown guard {name!r}; choices: {', '.join(GUARD_NAMES)} (the options "
                          "of conf/policy/guard/)") from None
    if g is GuardName.none:
        if params:
            raise ConfigError(f"guard 'none' (the network alone) takes no parameters, got "
                              f"{', '.join(sorted(params))}")
        return None
    cls = ShadowGuard if g is GuardName.shadow else Guard if g is GuardName.trial else LRUGuard
    try:
        inspect.signature(cls).bind(**params)
    except TypeError as e:
        raise ConfigError(f"guard {g.value!r}: bad parameters: {e}; accepted: "
                          f"{inspect.signature(cls)}") from None
    return cls(**params)
