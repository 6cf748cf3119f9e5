"""The guards of a learned policy: they keep it from doing worse than the heuristics for long.

:class:`ShadowGuard` (the default) measures the network and the heuristics in shadow caches
and follows the one of least cost over the trace so far, with a hysteresis that keeps the
pool close to its best expert; :class:`Guard` tries the network in trial windows against LRU and
S3-FIFO; :class:`LRUGuard` is :class:`Guard` with LRU alone. :func:`make_guard` builds one by
its :class:`GuardName` (the options of the config group ``conf/policy/guard/``: ``shadow``,
``trial``, ``lru``, and ``none`` for the network alone).
"""

from __future__ import annotations

import collections
import itertools
import math
import numbers
from collections.abc import Collection, Iterable, Sequence
from enum import Enum
from typing import TYPE_CHECKING, Any

from cachegym.allocator.errors import ConfigError
from cachegym.policies.base import construct, first_evictable
from cachegym.policies.learned.models import OBJECTIVES, Expert, heuristic_expert, network_expert

if TYPE_CHECKING:
    from cachegym.allocator.pool import PoolView

__all__ = ["Guard", "LRUGuard", "ShadowGuard", "GuardName", "GUARD_NAMES", "make_guard"]


def _numbers(owner: str, optional: tuple[str, ...] = (), infinite: tuple[str, ...] = (),
             **values: Any) -> None:
    """Refuse (:class:`ConfigError` naming ``owner`` and the parameter) a value that is not a
    finite real number (a rule that never applies is ``None`` where it may be; a parameter in
    ``infinite`` may be any real number, ``inf`` included, its range checked by the caller), or
    ``None`` where the parameter is not ``optional``."""
    for name, v in values.items():
        if v is None and name in optional:
            continue
        if (isinstance(v, bool) or not isinstance(v, numbers.Real)
                or not (name in infinite or math.isfinite(v))):
            raise ConfigError(f"{owner}: {name} must be a {'' if name in infinite else 'finite '}"
                              f"number{' or None' if name in optional else ''}, got {v!r}")


def _rule(name: str, value: float | None, unit: str, after: float,
          after_unit: str) -> tuple[float | None, float]:
    """A ShadowGuard rule's threshold ``name`` (``value``: a number >= 0 in ``unit``, or None:
    the rule never applies) and its ``<name>_after`` (a number >= 0 in ``after_unit``), as
    floats; :class:`ConfigError` naming both otherwise."""
    _numbers("ShadowGuard", (name,), (), **{name: value, f"{name}_after": after})
    if not ((value is None or value >= 0) and after >= 0):
        raise ConfigError(f"ShadowGuard: {name} ({unit}, or None: never) and {name}_after "
                          f"({after_unit}) must be >= 0; got {name}={value!r}, "
                          f"{name}_after={after!r}")
    return None if value is None else float(value), float(after)


def _of_expert(name: str, expert: str) -> bool:
    """Whether ``name`` is ``expert`` or one of its twins (``<expert>-<kind>``:
    :meth:`ShadowGuard._start`)."""
    return name == expert or name.startswith(expert + "-")


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
                 "_stats_of", "_clock_of", "_last_miss", "_requests", "objective", "_bytes", "_reqs", "_own0",
                 "decisions", "switches", "_compute0", "_pf_key", "_pf_for", "served", "_base")

    _OBJECTIVES: tuple[str, ...] = ("traffic", "misses")  # (trial windows count in requests' bytes)

    def __init__(self, window: int = 4096, margin: float = 0.003, max_backoff: int = 16,
                 abort: float | None = None, s3fifo: bool = True, s3fifo_margin: float = 0.01,
                 objective: str = "traffic") -> None:
        _numbers(type(self).__name__, ("abort",), ("abort",), window=window, margin=margin,
                 max_backoff=max_backoff, abort=abort, s3fifo_margin=s3fifo_margin)
        if objective not in self._OBJECTIVES:
            raise ConfigError(f"{type(self).__name__}: objective must be one of "
                              f"{self._OBJECTIVES}, got {objective!r}")
        self.objective = objective
        self.served = False  # attached to its LearnedPolicy (a guard serves one)
        self._base = (0.0, 0.0)  # the pool's traffic and stall when the guard began (_start)
        self._compute0 = 0  # the guarded pool's compute_ns at its previous request
        self._bytes = 0  # bytes requested so far, and requests: the traffic objective's unit
        self._reqs = 0
        self._own0 = 0  # the guarded pool's traffic at the window's start
        self.decisions: dict[str, int] = {}  # accesses decided by each expert ("network": None)
        self.switches = 0  # changes of who decides
        if not (window >= 1 and margin >= 0 and s3fifo_margin >= 0 and max_backoff >= 1
                and (abort is None or abort >= 0)):
            raise ConfigError(
                f"{type(self).__name__}: window must be >= 1 accesses, margin and s3fifo_margin "
                f">= 0, max_backoff >= 1 windows and abort >= 0 hits (inf: never; None: "
                f"the default); got "
                f"window={window!r}, margin={margin!r}, s3fifo_margin={s3fifo_margin!r}, "
                f"max_backoff={max_backoff!r}, abort={abort!r}")
        if not (float(window).is_integer() and float(max_backoff).is_integer()):
            raise ConfigError(f"{type(self).__name__}: window (accesses) and max_backoff "
                              f"(windows) must be whole numbers; got window={window!r}, "
                              f"max_backoff={max_backoff!r}")
        if not isinstance(s3fifo, bool):
            raise ConfigError(f"{type(self).__name__}: s3fifo (whether S3-FIFO is an expert) "
                              f"must be a bool, got {s3fifo!r}")
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
        eo = "traffic" if objective == "auto" else objective  # (auto: decided on the first event)
        self.lru = heuristic_expert("lru", followed=False, objective=eo)  # (decides through the
        # tracker)
        self.model: Expert | None = heuristic_expert("s3fifo", objective=eo) if s3fifo else None
        self.expert: str | None = None
        # the guarded pool's counters and clock, from its first event (not its view: a policy
        # kept by its user would keep the pool, its copy threads and host buffers alive)
        self._stats_of: Any = None
        self._clock_of: Any = None
        self._last_miss: int | None = None
        # the stall objective, with a pool's prefetcher that answers ``prefetch_for``: the key of
        # the previous request, whose prefetches each shadow starts before the next request, and
        # that prefetcher's ``prefetch_for`` (None: the shadows take the pool's own prefetches)
        self._pf_key: int | None = None
        self._pf_for: Any = None
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
        st = self._stats_of
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
        """The guarded pool's first event: the shadow pools are made at its capacity. The
        pool's counters so far (a policy set on a pool in use) are not the guard's: its own
        cost counts from here, as its experts' do."""
        self._stats_of, self._clock_of = view.stats, view.cost
        self._base = (float(view.stats.traffic_bytes), float(view.cost.stall_ns))
        for e in self._experts:
            e.setup(view)

    def _request(self, view: PoolView, key: int, hit: bool) -> None:
        """Every expert's shadow sees the request; the window counts it."""
        if self._stats_of is None:
            self._start(view)
        o = view.info(key)
        size, kind, write = o.size, o.kind, view.writing
        dc = 0  # the compute since the previous request: the stall objective's shadows replay it
        if self.objective == "stall":
            dc = self._compute_since(view)
        for r in self._requests:
            r(key, size, write, kind, hit, dc)
        if not hit:
            self._last_miss = key
        self._hits += hit
        self._n += 1
        self._bytes += size
        self._reqs += 1
        who = "network" if self.expert is None or not self.active else str(self.expert)
        self.decisions[who] = self.decisions.get(who, 0) + 1

    def prepare(self, view: PoolView, key: int) -> None:
        """Called by the guarded policy on the access of ``key`` before its feature tracker
        sees it (then :meth:`access`): under the stall objective each shadow starts the
        prefetches the pool's prefetcher made after the previous request, chosen from the
        features the pool's prefetcher saw then (not yet this access's)."""
        if self._stats_of is None:
            self._start(view)
        if self.objective == "stall":
            self._shadow_prefetches(view, key)

    def _compute_since(self, view: PoolView) -> int:
        """The guarded pool's compute since this was last asked (its previous request, or a
        free the shadows caught up at)."""
        c = view.cost.compute_ns
        dc, self._compute0 = c - self._compute0, c
        return dc  # type: ignore[no-any-return]

    def _shadow_prefetches(self, view: PoolView, key: int | None) -> None:
        """Under the stall objective, before the request of ``key`` (``None``: before a free):
        each shadow starts the prefetches the pool's prefetcher would have made there after the
        previous request, if not started yet (``prefetch_for`` of its view), where the
        prefetcher can say; otherwise the shadows take
        the pool's own prefetches (:meth:`insert`). (A prefetcher's choice depends on what the
        pool holds: given the guarded pool's prefetches, a shadow would miss what the followed
        expert keeps and it does not, and the guard would stay with the expert it follows.)"""
        pf = view.prefetcher
        self._pf_for = fn = None if pf is None else getattr(pf, "prefetch_for", None)
        prev, self._pf_key = self._pf_key, key
        if fn is None or prev is None:
            return
        for e in self._experts:
            e.prefetch(fn, prev)

    def access(self, view: PoolView, key: int, hit: bool) -> None:
        self._request(view, key, hit)
        if self._n >= self.window:
            self._end_window()
        elif self._off == 0 and self.lru.gain - self._hits0["lru"] - self._own() > self.abort * self.unit:
            self.aborts += 1  # the trial is lost already: back to a heuristic now
            self._end_window()

    def insert(self, view: PoolView, key: int) -> None:
        if self._stats_of is None:
            self._start(view)
        if key != self._last_miss and self._pf_for is None:  # a prefetch: every shadow sees it
            # as a request (uncounted), or as a prefetch under the stall objective
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
        if self._stats_of is None:
            self._start(view)
        if self.objective == "stall" and self._pf_key is not None:
            # the guarded pool started the previous request's prefetches and ran its compute
            # before this free: so do the shadows now (at the next request, after the free, an
            # LRU shadow's stall was 14% above LRU's own on a DL trace that frees)
            dc = self._compute_since(view)
            self._shadow_prefetches(view, None)
            for e in self._experts:
                e.advance(dc)
        for e in self._experts:
            e.free(key)

    def _reset_window(self) -> None:
        self._n = self._hits = 0
        self._hits0 = {n: e.gain for n, e in self._named.items()}
        st = self._stats_of
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

    def network_share(self) -> float:
        """The share of accesses the network decided (its shadow and its twins: ``network``,
        ``network-no-prefetch``, ``network-history``), exact; NaN before any access."""
        n = sum(self.decisions.values())
        net = sum(v for k, v in self.decisions.items() if _of_expert(k, "network"))
        return net / n if n else float("nan")

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
    measured on every access whoever decides, and the pool follows the one whose whole-trace
    cost is lowest, with a hysteresis that makes it end close to its best expert.

    Experts are judged on ``objective`` (:data:`~policies.learned.models.OBJECTIVES`): the bytes
    their shadow copied (``traffic``), the time their shadow's requests waited for copies under
    the guarded pool's timing preset (``stall``: each shadow runs the pool's compute between
    requests; a prefetcher that answers ``prefetch_for`` -- a learned head, the history and
    lookahead prefetchers -- decides in each shadow as it would there, any other prefetcher's
    prefetches start there as prefetches), or their misses (``misses``), counted from the first
    request, never decayed. The default ``auto`` is ``stall`` in a pool with a timing preset
    (where each copy's latency makes object misses weigh beside bytes: GDSF, which keeps small
    objects, stalls least on the DL traces though it copies more bytes) and ``traffic`` in one
    without. Under ``stall`` with a prefetcher that answers ``prefetch_for`` and can be muted
    (``prefetch_muted``: a learned head, the history and lookahead prefetchers;
    ``without_prefetch``, the default), each expert is also judged without it (a twin shadow
    named ``<expert>-no-prefetch``); while the pool follows a twin the prefetcher is muted, so
    that the pool does not end behind its experts without prefetches where the prefetcher's
    copies cost more stall than they hide. With a learned head (``with_history``, the default),
    each expert is also judged with the ``history`` prefetcher's proposals from the head's own
    proposer (``<expert>-history``: :meth:`LearnedPolicy.history_for`), which the pool then
    prefetches while it follows such a twin, so that it does not end behind the heuristic where
    the head chooses worse (the replayed activation-offload journey at 25%: 4.47 -> 3.72 ms,
    ``history`` 3.59; docs/RESULTS.md). On every access the pool switches from the followed expert
    ``f`` to the expert ``b`` of lowest cost when ``C_f - C_b`` exceeds ``margin * (1 + s) * C_b``
    (``s``: the switches so far) plus a hand-over charge: ``handover`` pool capacities (bytes;
    objects of the mean request's size for ``misses``; their copy-in times for ``stall``) plus ``handover_weight`` times the mean hand-over cost measured so far. The
    hand-over cost is what the pool paid beyond the experts it followed, each over the accesses
    it was followed (the misses while the pool converges to a new expert's content): the pool's
    cost minus the followed shadows' costs over their spans, per switch.

    Why it stays close to the best expert: following the leader with hysteresis, the pool's
    cost is the last followed expert's plus, per switch, the lead it switched at and the hand-over
    it paid (telescoping the spans), so it ends within ``margin * (1 + s)`` of the best expert's
    cost plus the switches' charges. A switch needs a lead over the whole trace that grows with
    the trace and with the switches (the ``s``-th needs ``s`` times the first's relative lead),
    and that pays for the hand-overs measured, so experts that trade the lead in bursts (the periods of a training step) make the pool switch rarely, and a trace where one
    expert is best from the start costs one early switch. The bound is on the charges actually
    met: ``python scripts/bench.py regret`` prints the ratio to the best expert per trace and
    capacity (``docs/EXPERIMENTS.md``).

    The network and S3-FIFO, GDSF, LFU, ARC, SLRU decide by evicting first what their shadow no
    longer holds (the pool converges to it; they also choose what the pool admits; under
    ``stall`` what the shadow evicted leaves the pool right after the access, as in the shadow,
    so that its write-back overlaps the compute), LRU through the policy's tracker. GDSF is
    there for variable sizes, LFU for frequency (an LLM KV cache's shared prefixes), ARC and
    SLRU because each copies least on some traces (ARC 12% less than any other on the GPT
    inference trace at 10%; docs/EXPERIMENTS.md). ``gdsf`` / ``lfu`` / ``arc`` / ``slru``:
    whether those experts run (each costs throughput: a shadow pool's work per access); ``arc``
    and ``slru`` default to ``None``: they run under ``traffic`` and ``misses``, not under
    ``stall`` (:data:`NOT_UNDER_STALL`). ``retire``: a heuristic expert whose cost exceeds ``1 +
    retire`` times the best expert's, once that is ``retire_after`` pool capacities, stops
    running under ``traffic`` and ``misses`` (never the network, never the followed one;
    ``retired`` keeps its cost; ``None``: never), which makes long replays faster where the
    heuristics are behind (the 1M-request replay of ``bench.py guard``: 2.7x); a retired expert
    can no longer be followed, so the guard's bound is then against the experts still running.
    The defaults (5% behind after 128 capacities) retire nothing on the quality and regret
    benchmarks' traces (a phase of a trace where a heuristic falls behind and later leads ends
    before it); at 5% after 32 capacities one zoo cell (``tcn`` 10%) ended 6% behind, and
    retiring the network too left ``llm_kv`` 50% 19% behind it (docs/EXPERIMENTS.md). Under
    ``stall`` (where an expert's twins run too, up to 15 shadow pools) ``retire_stall``: an
    expert or twin (never the network itself, never the followed one) whose stall exceeds both
    ``1 + retire_stall`` times the best's and the best's plus ``retire_stall_after`` times the
    time to copy a pool's worth of objects of the mean request's size stops running (``None``:
    never). The defaults (2x and 32 pool copies) left every stall of the main job's 14
    held-out cells unchanged, also replayed four times over, where they retire 2-12 of the 15
    shadows (docs/RESULTS.md).
    ``prefetched_first`` (default on): under ``stall``, the pool evicts first what its prefetcher
    brought in (oldest first, used or not yet; not while it follows a twin judged without the
    prefetcher, which it then replicates), then what the followed expert would: as PACMan
    (Wu et al., MICRO 2011) demotes prefetched cache lines, since the prefetcher that brought an
    object in time can bring it back in time, while a demand-fetched object was missed by it and
    stalls again when it is evicted. The shadows do not apply it (they judge the experts as
    they are), so the pool may end below every expert: with a main job's policy of 2026-12-06
    and its head, on the seven held-out traces and gpt, resnet and mlp_embedding at 25% and 50%
    of peak live bytes, the pool stalled 568.8 ms in all against 596.1 without it (gpt 25% 13.2
    -> 8.6 ms; dl_training_s102 50% 17.4 -> 18.3, the one cell worse by more than 1%;
    docs/EXPERIMENTS.md).
    ``floor`` (default 0.1) and ``floor_after`` (0.5): under ``stall``, the pool that has stalled
    more than its fallback -- LRU's expert or twin of least stall, i.e. LRU with the best of
    the prefetchers it is judged with -- by ``floor`` times the fallback's stall and by
    ``floor_after`` pool copies goes over to the fallback, whoever leads (checked every 64
    requests, once per trace: after it the rule above may leave it again; ``None``: never).
    The rule above compares whole-trace costs and charges the hand-overs already paid against
    each later switch, so a pool that paid much converging to an early leader may stay behind
    a fallback that leads it by less than that: on gpt_infer at 50% of peak live bytes (a main
    job's policy of 2026-12-06 and its head) the pool followed GDSF, which led while the
    ``history`` twins had no pass to follow yet, and ended at 2.95 ms against LRU + ``history``'s
    1.94; with the floor 2.12. Over the 20 cells of ``prefetched_first`` above, 576.9 -> 575.4 ms
    in all, no cell worse; ``bench.py regret --objective stall --prefetch learned`` (48 cells),
    worst ratio to the best expert 1.435 -> 1.268, mean 0.962 -> 0.951; on a small generated
    training trace where it trips early, 2.41 -> 2.48 ms (docs/EXPERIMENTS.md).
    ``floor_trend`` (default ``None``: off) and ``floor_window`` (4.0): the floor also trips where the
    pool has stalled more than its fallback at all and, over the last ``floor_window`` pool
    objects' requests (objects of the mean request's size; at least 256 requests), the followed
    expert stalled more than the fallback by ``floor_trend`` times its own stall there: the
    whole-trace rule keeps following an early leader that now loses to the fallback every pass
    (gpt_infer at 50%, the main job's policy of 2026-12-07: GDSF led from the second pass, then
    stalled 0.07 ms per pass against the fallback's 0.01; 2.122 -> 1.954 ms, the fallback
    1.943). Off by default: with the next main job's policy it tripped there while the window
    still held the ``history`` twins' first passes, and the pool went back to GDSF: 2.467 ->
    2.689 ms (docs/EXPERIMENTS.md). Once the floor has tripped (either way), the pool switches
    only to a leader that has also cost less than the expert it follows over the last
    ``floor_window`` pool objects' requests (else the rule above took it straight back from the
    fallback to GDSF: that policy's gpt_infer 50% 2.467 -> 2.151 ms with this alone).
    ``demote_limit`` (default 0.25): ``prefetched_first`` stops for the rest of the trace where,
    throughout a window as above with no switch in it, the pool, behind its best expert, stalled
    more than the expert it follows (whose shadow does not demote) by ``demote_limit`` times that
    expert's stall and a twentieth of a pool copy: where the pool is too small for the
    prefetcher to bring objects back in time, demoting them costs more than it saves (gpt_infer
    at 10% of peak live bytes: 17.54 -> 12.14 ms against the best expert's 11.07; over
    ``prefetched_first``'s 20 cells, with this and the rule above, 576.58 -> 576.58 ms, gpt_infer
    50% 2.122 -> 2.147 the one cell worse; docs/EXPERIMENTS.md). ``None``: never.
    ``expert`` is ``None`` while the network is followed; ``switches`` counts the switches,
    ``decisions`` the accesses each expert decided.
    Invariant: ``_spent`` is the followed experts' costs over their spans before the current
    one, which began when the current expert's cost was ``_since``."""

    __slots__ = ("net", "extra", "handover", "handover_weight", "_spent", "_since", "_capacity",
                 "_items", "auto", "without_prefetch", "with_history", "_muted", "_unless_stall",
                 "retire", "retire_after", "retired", "retire_stall", "retire_stall_after",
                 "prefetched_first", "_prefetched", "floor", "floor_after", "_floored",
                 "floor_trend", "floor_window", "_marks", "demote_limit", "_demote_off",
                 "_demote_since")

    _OBJECTIVES = ("auto", *OBJECTIVES)
    NOT_UNDER_STALL = ("arc", "slru")
    """Experts that run by default under the objectives ``traffic`` and ``misses`` only. Under
    ``stall`` a pool following SLRU once stalled far more than SLRU (40.0 ms against 15.8 on
    gpt_wide at 10% of peak live bytes with the ``history`` prefetcher): it evicted what SLRU's
    shadow had given up only when it needed the room, and waited for their write-backs there.
    Since it evicts them after the access (:meth:`ShadowGuard.pending_evictions`) it follows
    SLRU at SLRU's stall, but the two add little under stall (the main job's 14 held-out cells
    with the learned head: one moved, gpt_wide 25% 10.85 -> 10.29 ms) for four more shadow pools
    (with their twins without the prefetcher), so they stay off there (docs/EXPERIMENTS.md)."""

    def __init__(self, margin: float = 0.003, handover: float = 0.005,
                 handover_weight: float = 2.0, gdsf: bool = True, lfu: bool = True,
                 objective: str = "auto", without_prefetch: bool = True, arc: bool | None = None,
                 slru: bool | None = None, retire: float | None = 0.05,
                 retire_after: float = 128.0, with_history: bool = True,
                 retire_stall: float | None = 1.0, retire_stall_after: float = 32.0,
                 prefetched_first: bool = True, floor: float | None = 0.1,
                 floor_after: float = 0.5, floor_trend: float | None = None,
                 floor_window: float = 4.0, demote_limit: float | None = 0.25) -> None:
        _numbers("ShadowGuard", margin=margin, handover=handover, handover_weight=handover_weight)
        if not (margin >= 0 and handover >= 0 and handover_weight >= 0):
            raise ConfigError(f"ShadowGuard: margin (a fraction of the best expert's cost), "
                              f"handover (pool capacities) and handover_weight must be >= 0; got "
                              f"margin={margin!r}, handover={handover!r}, "
                              f"handover_weight={handover_weight!r}")
        # "auto": stall under the guarded pool's timing preset, else traffic (decided on its first
        # event, when the pool is known; the experts are made for traffic until then)
        self.auto = objective == "auto"
        super().__init__(1, margin, 1, None, True, 0.0, objective)
        if self.auto:
            objective = "traffic"
        self.handover, self.handover_weight = float(handover), float(handover_weight)
        if not isinstance(without_prefetch, bool):
            raise ConfigError(f"ShadowGuard: without_prefetch must be a bool, got "
                              f"{without_prefetch!r}")
        self.without_prefetch = without_prefetch
        if not isinstance(with_history, bool):
            raise ConfigError(f"ShadowGuard: with_history must be a bool, got {with_history!r}")
        self.with_history = with_history
        if not isinstance(prefetched_first, bool):
            raise ConfigError(f"ShadowGuard: prefetched_first must be a bool, got "
                              f"{prefetched_first!r}")
        self.prefetched_first = prefetched_first
        self.floor, self.floor_after = _rule("floor", floor, "a fraction of the fallback's stall",
                                             floor_after, "pool copies")
        self._floored = False  # the floor has moved the pool to its fallback (once at most)
        _numbers("ShadowGuard", ("floor_trend", "demote_limit"), floor_trend=floor_trend,
                 floor_window=floor_window, demote_limit=demote_limit)
        if not ((floor_trend is None or floor_trend >= 0) and floor_window > 0
                and (demote_limit is None or demote_limit >= 0)):
            raise ConfigError(f"ShadowGuard: floor_trend (a fraction of the followed expert's "
                              f"recent stall) and demote_limit (a fraction of its shadow's recent "
                              f"stall) must be >= 0 or None (never), floor_window (pool objects) "
                              f"> 0; got floor_trend={floor_trend!r}, "
                              f"floor_window={floor_window!r}, demote_limit={demote_limit!r}")
        self.floor_trend = None if floor_trend is None else float(floor_trend)
        self.floor_window = float(floor_window)
        self.demote_limit = None if demote_limit is None else float(demote_limit)
        self._demote_off = False  # the pool stalled more than its expert while demoting: stopped
        self._demote_since = -1  # the request since which it has (-1: it does not now)
        # (requests, the pool's cost, its switches, each expert's gain) every 64 requests under
        # stall, the oldest at least floor_window pool objects' requests back (_recent)
        self._marks: collections.deque[tuple[int, float, int, dict[str | None, float]]] = (
            collections.deque())
        self._prefetched: dict[int, None] = {}  # what the pool prefetched and holds, oldest first
        self.retire, self.retire_after = _rule("retire", retire, "a fraction of the best expert's "
                                               "cost", retire_after, "pool capacities")
        self.retire_stall, self.retire_stall_after = _rule(
            "retire_stall", retire_stall, "a fraction of the best expert's stall",
            retire_stall_after, "pool copies")
        self.retired: dict[str, float] = {}  # expert -> its cost when it stopped running
        flags = {"gdsf": gdsf, "lfu": lfu, "arc": arc, "slru": slru}
        for name, flag in flags.items():
            if not (isinstance(flag, bool) or (flag is None and name in self.NOT_UNDER_STALL)):
                raise ConfigError(f"ShadowGuard: {name} must be a bool"
                                  f"{' or None' if name in self.NOT_UNDER_STALL else ''}, got {flag!r}")
        self._muted: Any = None  # the pool's prefetcher, muted while a twin is followed
        # the experts beyond LRU and S3-FIFO (Guard.model), by name; those left to the objective
        # (None) leave when it is stall
        self.extra: dict[str, Expert] = {}
        self._unless_stall = {n for n, flag in flags.items() if flag is None}
        for name, flag in flags.items():
            if flag or (flag is None and self.objective != "stall"):
                self.extra[name] = heuristic_expert(name, objective=objective)
        self.net: Expert | None = None
        self._spent = 0.0
        self._since = 0.0
        self._capacity = 0.0  # one pool capacity in the objective's unit, from the first event
        self._items: tuple[tuple[str | None, Expert], ...] = ()
        self._register({"lru": self.lru, "s3fifo": self.model, **self.extra})  # type: ignore[dict-item]

    def _register(self, named: dict[str | None, Expert]) -> None:
        super()._register(named)
        self._items = tuple(named.items())

    @property
    def gdsf(self) -> Expert | None:
        """The GDSF expert (``None`` without it)."""
        return self.extra.get("gdsf")

    def attach(self, policy: Any) -> None:
        self.net = network_expert(policy, "traffic" if self.auto else self.objective)
        self._register({None: self.net, **self._named})

    @property
    def active(self) -> bool:
        return True  # every decision is the followed expert's (the network's in its shadow)

    def _follows(self) -> Expert | None:
        """The expert whose content the pool converges to now (``None``: LRU's tracker)."""
        m = self._named.get(self.expert)
        return m if m is not None and m.followed else None

    def admit(self, view: PoolView, key: int, size: int) -> bool:
        m = self._follows()
        return True if m is None else m.admit(key)

    def insert(self, view: PoolView, key: int) -> None:
        super().insert(view, key)
        # (the pool's own flag: a prefetch sets it before on_insert; a demand miss, a policy
        # given to a pool that holds objects, a write-back that failed and stays do not)
        if view.info(key).prefetched:
            if self.prefetched_first and self.objective == "stall":
                self._prefetched[key] = None
        elif self._prefetched:
            self._prefetched.pop(key, None)

    def evict(self, view: PoolView, key: int) -> None:
        self._prefetched.pop(key, None)
        super().evict(view, key)

    def free(self, view: PoolView, key: int) -> None:
        self._prefetched.pop(key, None)
        super().free(view, key)

    def _demoted(self) -> bool:
        """Whether what the pool prefetched is evicted first now: ``prefetched_first`` recorded
        some, and the pool prefetches (it does not follow a twin judged without its prefetcher,
        which the guard then mutes: the pool then replicates that twin)."""
        pf: Any = self._muted
        return (bool(self._prefetched) and not self._demote_off
                and (pf is None or not pf.prefetch_muted))

    def victim(self, view: PoolView, tracker: Any) -> int | None:
        if self._demoted():
            k = first_evictable(view, self._prefetched)
            if k is not None:
                return k
        m = self._follows()
        k = None if m is None else m.victim(view)
        return tracker.victim(view) if k is None else k

    def eviction_order(self, tracker: Any) -> Iterable[int]:
        """The pool's next victims in :meth:`victim`'s order, without changing any state: what
        the pool prefetched (``prefetched_first``), the followed expert's
        (:meth:`Expert.eviction_order`), then ``tracker``'s (the pool's LRU)."""
        m = self._follows()
        own = tracker.eviction_order()
        order = own if m is None else itertools.chain(m.eviction_order(), own)
        return itertools.chain(tuple(self._prefetched), order) if self._demoted() else order

    def pending_evictions(self) -> Sequence[int]:
        """Under the objective stall, what the followed expert's shadow has evicted and the
        guarded pool still holds (:meth:`Expert.given_up`), which the pool then evicts
        after the access, as the shadow pool did: a dirty object's write-back starts then, beside
        the compute, rather than when its room is needed, where the allocation would wait for it.
        Under traffic and misses nothing (the pool evicts them when it needs room)."""
        if self.objective != "stall":
            return ()
        m = self._follows()
        return () if m is None else m.given_up()

    def _start(self, view: PoolView) -> None:
        """The objective ``auto`` becomes ``stall`` if the guarded pool has a timing preset, else
        ``traffic``; then the shadow pools are made."""
        if self.auto:
            self.objective = "stall" if view.cost.preset is not None else "traffic"
            if self.objective == "stall":
                self._drop(self._unless_stall)
            for e in self._experts:
                e.objective = self.objective
        pf = view.prefetcher
        if (self.objective == "stall" and pf is not None
                and getattr(pf, "prefetch_for", None) is not None and hasattr(pf, "prefetch_muted")):
            history = getattr(pf, "history_for", None) if self.with_history else None
            if history is not None and getattr(pf, "prefetch_head", None) is None:
                history = None  # (a file without a head proposes nothing)
            kinds = ("no-prefetch",) * self.without_prefetch + ("history",) * (history is not None)
            twins: dict[str | None, Expert] = {}
            for name, e in self._named.items():
                for kind in kinds:
                    t = (network_expert(self.net.owner, self.objective)  # type: ignore[union-attr]
                         if name is None else
                         heuristic_expert(name, followed=e.followed, objective=self.objective))
                    t.name = f"{name or 'network'}-{kind}"
                    if kind == "no-prefetch":
                        t.prefetching = False
                    else:
                        t.prefetch_fn = history
                    twins[t.name] = t
            if twins:
                self._register({**self._named, **twins})
                self._muted = pf
                pf.prefetch_muted = False
                if history is not None:
                    self._muted.prefetch_history = False  # (pf: a LearnedPolicy)
        super()._start(view)

    def _cost(self, gain: float) -> float:
        """An expert's cost so far from its gain: bytes copied, ns of stall, or misses."""
        return self._reqs - gain if self.objective == "misses" else -gain

    def own_cost(self) -> float:
        """The guarded pool's cost so far: bytes it copied, its stall (ns; with its prefetcher
        and compute, so below the shadows' as often as not: the hand-over charge measured is then
        0), or its misses."""
        if self.objective == "misses":
            return self._reqs - self._hits
        if self._stats_of is None:
            return 0.0
        if self.objective == "stall":
            return float(self._clock_of.stall_ns) - self._base[1]
        return float(self._stats_of.traffic_bytes) - self._base[0]

    def handover_cost(self) -> float:
        """The mean cost per switch the pool paid beyond the experts it followed (0 before
        the first switch)."""
        if not self.switches:
            return 0.0
        cur = self._cost(self._named[self.expert].gain) - self._since
        return max(0.0, self.own_cost() - self._spent - cur) / self.switches

    def _capacity_cost(self, view: PoolView) -> float:
        """One pool capacity in the objective's unit: its bytes (traffic), its number of
        objects of the mean request's size (misses), or the time to copy those objects in, one
        copy each (stall)."""
        if self.objective == "traffic":
            return float(view.capacity)
        mean = self._bytes / max(1, self._reqs)
        n = view.capacity / max(1.0, mean)  # objects of the mean size
        return n if self.objective == "misses" else n * view.cost.copy_time(0, int(mean))

    def _capacity_unit(self, view: PoolView) -> float:
        """:meth:`_capacity_cost`, computed once (at the first call that needs it)."""
        if not self._capacity:
            self._capacity = self._capacity_cost(view)
        return self._capacity

    def access(self, view: PoolView, key: int, hit: bool) -> None:
        self._request(view, key, hit)
        cur = self.expert
        g = bg = self._named[cur].gain
        best = cur
        for name, e in self._items:
            if e.gain > bg:
                best, bg = name, e.gain
        if not self._reqs & 255:
            if self.objective != "stall":
                if self.retire is not None:
                    self._retire(view, bg)
            elif self.retire_stall is not None:
                self._retire_stall(view, bg)
        if self.objective == "stall" and not self._reqs & 63:
            then = self._recent(view)
            if (then is not None and self.demote_limit is not None and not self._demote_off
                    and self._demoted()):
                self._check_demotion(view, cur, then)
            if self.floor is not None and not self._floored:
                fallback = self._below_floor(view, cur, then)
                if fallback is not None:
                    self._floored = True
                    self._switch(view, g, *fallback)
                    return
        if best == cur:
            return
        if self._floored and self._marks and not self._leads_recently(best, cur):
            return  # (since the floor tripped: not for a leader losing to the followed now)
        lead = bg - g
        need = self.margin * (1 + self.switches) * self._cost(bg)
        if lead <= need:
            return
        need += self.handover * self._capacity_unit(view) + self.handover_weight * self.handover_cost()
        if lead > need:
            self._switch(view, g, best, bg)

    def _switch(self, view: PoolView, g: float, best: str | None, bg: float) -> None:
        """The pool follows ``best`` (gain ``bg``) from now on instead of the expert it followed
        (gain ``g``)."""
        self._spent += self._cost(g) - self._since
        self._since = self._cost(bg)
        self.expert = best
        self.switches += 1
        pf: Any = self._muted
        same = view.prefetcher is pf  # (a bool first: mypy would narrow pf to the view's type)
        if pf is not None and same:
            # a twin, judged without the prefetcher: mute it (not a prefetcher the pool has
            # given up since: another pool may use it now)
            e = self._named[best]
            pf.prefetch_muted = not e.prefetching
            if hasattr(pf, "prefetch_history"):  # a twin judged with the history
                pf.prefetch_history = e.prefetch_fn is not None

    def _below_floor(self, view: PoolView, cur: str | None,
                     then: tuple[int, float, int, dict[str | None, float]] | None
                     ) -> tuple[str, float] | None:
        """Under ``stall``: LRU's expert or twin of least stall (the fallback: LRU with the best
        of the prefetchers it is judged with) and its gain, where the pool, following another,
        has stalled more than its stall by ``floor`` times it and by ``floor_after`` pool
        copies, or more than its stall at all while the followed expert has stalled more than
        the fallback over the window of ``then`` (:meth:`_recent`) by ``floor_trend`` times its
        own stall there; else ``None``."""
        name: str | None = None
        gain = 0.0
        for n, e in self._items:
            if n is not None and _of_expert(n, "lru") and (
                    name is None or e.gain > gain):
                name, gain = n, e.gain
        if name is None or name == cur:
            return None
        cf = self._cost(gain)
        deficit = self.own_cost() - cf
        if deficit > max(self.floor * cf,  # type: ignore[operator]
                         self.floor_after * self._capacity_cost(view)):
            return name, gain
        if self.floor_trend is not None and deficit > 0 and then is not None:
            old = then[3]
            if cur in old and name in old:
                df = self._cost_since(old, cur)
                if df - self._cost_since(old, name) > self.floor_trend * df:
                    return name, gain
        return None

    def _leads_recently(self, best: str | None, cur: str | None) -> bool:
        """Whether ``best`` has cost less than ``cur`` since the oldest record of
        :meth:`_recent` (about ``floor_window`` pool objects' requests)."""
        old = self._marks[0][3]
        if best not in old or cur not in old:
            return True
        return self._cost_since(old, best) < self._cost_since(old, cur)

    def _cost_since(self, old: dict[str | None, float], name: str | None) -> float:
        """What expert ``name`` has cost since the record of gains ``old`` (:meth:`_recent`)."""
        return old[name] - self._named[name].gain

    def _recent(self, view: PoolView) -> tuple[int, float, int, dict[str | None, float]] | None:
        """Records this moment (every 64 requests under stall) and returns the record of about
        ``floor_window`` pool objects' requests ago (objects of the mean request's size; at
        least 256 requests), ``None`` before there is one. Kept: a few dozen records at most
        (one per sixteenth of the window)."""
        marks = self._marks
        mean = self._bytes / max(1, self._reqs)
        window = max(256.0, self.floor_window * view.capacity / max(1.0, mean))
        if not marks or self._reqs - marks[-1][0] >= window / 16:
            marks.append((self._reqs, self.own_cost(), self.switches,
                          {n: e.gain for n, e in self._items}))
        while len(marks) > 1 and self._reqs - marks[1][0] >= window:
            marks.popleft()
        return marks[0] if self._reqs - marks[0][0] >= window else None

    def _check_demotion(self, view: PoolView, cur: str | None,
                        then: tuple[int, float, int, dict[str | None, float]]) -> None:
        """``prefetched_first`` stops for the rest of the trace where the pool, behind its best
        expert, stalled more than the expert it follows (whose shadow does not demote) over
        the window of ``then`` (:meth:`_recent`, with no switch in it) by ``demote_limit`` times
        that expert's stall and a twentieth of a pool copy, at every check throughout a window:
        demoting what the prefetcher brought in then costs this pool more than it saves (a
        hand-over's transient passes before a window does)."""
        reqs, own, switches, old = then
        now = self.own_cost()
        worse = (switches == self.switches and cur in old
                 and now > min(self._cost(e.gain) for _, e in self._items)
                 and now - own > (1.0 + self.demote_limit)  # type: ignore[operator]
                 * self._cost_since(old, cur) + 0.05 * self._capacity_cost(view))
        if not worse:
            self._demote_since = -1
        elif self._demote_since < 0:
            self._demote_since = self._reqs
        elif self._reqs - self._demote_since >= self._reqs - reqs:  # (throughout a window)
            self._demote_off = True

    def _retire(self, view: PoolView, bg: float) -> None:
        """Experts too far behind to lead again stop running: once the best expert has cost
        ``retire_after`` pool capacities, one whose cost is above ``1 + retire`` times its
        (never the followed one) leaves, its shadow pool released; ``retired`` keeps its cost.
        Not under the objective stall: :meth:`_retire_stall` there."""
        cb = self._cost(bg)
        if cb < self.retire_after * self._capacity_unit(view):
            return
        self._retire_above((1.0 + self.retire) * cb)  # type: ignore[operator]

    def _retire_stall(self, view: PoolView, bg: float) -> None:
        """Under ``stall``: experts (and twins) whose stall exceeds ``1 + retire_stall`` times
        the best's and the best's plus ``retire_stall_after`` pool copies leave. (The pool copy
        is computed anew, not :meth:`_capacity_unit`'s, which the hand-over charge fixes at its
        first use.)"""
        cb = self._cost(bg)
        self._retire_above(max((1.0 + self.retire_stall) * cb,  # type: ignore[operator]
                               cb + self.retire_stall_after * self._capacity_cost(view)))

    def _retire_above(self, limit: float) -> None:
        """Every expert whose cost exceeds ``limit`` but the network and the followed one stops
        running, its shadow pool released; ``retired`` keeps its cost."""
        out = [n for n, e in self._items
               if n not in (self.expert, None) and self._cost(e.gain) > limit]
        for n in out:
            e = self._named[n]
            self.retired[n or "network"] = self._cost(e.gain)
            e.release()
        self._drop(out)

    def _drop(self, names: Collection[str | None]) -> None:
        """The experts ``names`` stop being experts (before the first event: never run)."""
        if names:
            self.extra = {n: e for n, e in self.extra.items() if n not in names}
            self._register({n: e for n, e in self._named.items() if n not in names})

    def __repr__(self) -> str:
        """The guard's kind, objective, experts and who decides now (``network``: the learned
        policy)."""
        return (f"ShadowGuard(objective={self.objective!r}, margin={self.margin}, "
                f"handover={self.handover}, experts={[n or 'network' for n in self._named]}, "
                f"deciding={self.expert or 'network'!r})")


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
    return construct(f"guard {g.value!r}", cls, params)
