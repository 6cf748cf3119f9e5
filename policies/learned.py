"""Learned (exported) policies: one self-describing file, loaded with NumPy alone.

File format (``.npz``, no pickle)::

    header      uint8 array: UTF-8 JSON object (see below)
    w/<name>    float32 weight arrays of the network

The header holds ``format`` (``"cachegym-policy"``), ``format_version``, ``task``
(``"evict"``), ``arch`` (``{"type": "candidate_mlp", "n_features", "n_globals", "hidden",
"activation"}``), ``feature_spec`` (exactly :func:`policies.features.feature_spec` of the code
that trained it: names, order, normalisation), ``K`` and ``candidate_rule`` (how the candidate
set is drawn), ``library_version``, ``config_sha256`` (hash of the training config),
``weights_sha256`` (checksum of every weight array: name, dtype, shape and bytes) and free-form
``meta``. Input normalisation is folded into the first layer at export, so the file's network
reads raw feature values.

The network scores every candidate with the same small MLP over ``[candidate features,
global features]``; the victim is the valid candidate with the highest score. Permuting the
candidates permutes the scores, and nothing depends on ``K`` but the candidate selection.

A file that is truncated or corrupt, whose checksum does not match, or whose feature
specification differs from the running code's is refused with
:class:`~allocator.errors.PolicyFileError` naming what differs.
"""

from __future__ import annotations

import functools
import hashlib
import json
import logging
import os
import time
import zipfile
from collections import OrderedDict
from collections.abc import Iterable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

import numpy as np

from allocator.errors import ConfigError, PolicyFileError
from allocator.pool import load_accelerator
from allocator.trace import not_a_zip_archive
from policies import features as _features
from policies.adaptive import S3FIFO
from policies.base import EvictionPolicyBase
from policies.priority import GDSF
from policies.shadow import ShadowPolicy

if TYPE_CHECKING:
    from allocator.pool import PoolView

__all__ = [
    "FORMAT", "FORMAT_VERSION", "CandidateScorer", "LearnedPolicy", "save_policy_file",
    "read_policy_file", "weights_checksum", "diff_feature_spec", "DEFAULT_BUDGET_US", "Guard", "LRUGuard",
    "ShadowGuard",
]

log = logging.getLogger(__name__)

FORMAT = "cachegym-policy"
FORMAT_VERSION = 1
DEFAULT_BUDGET_US: float | None = None
"""Default latency budget per decision (``None``: no limit). Wall-clock budgets make results
depend on machine load, so evaluation runs without one by default; a deployment sets its own
(``LearnedPolicy.load(path, budget_us=50)``): a decision slower than that falls back to LRU."""

_NEG = np.float32(-3.0e38)


# ---------------------------------------------------------------------- the network
class CandidateScorer:
    """NumPy twin of :class:`policies.training.nets.CandidateScorerNet` (forward pass only).

    Weights: ``wc`` (F, H0), ``wg`` (G, H0), ``b0`` (H0,), then ``w{i}`` (H{i-1}, H{i}) and
    ``b{i}`` for the further hidden layers, then ``wo`` (H_last,) and ``bo`` (1,). Activation
    ReLU. Buffers are preallocated per K, so a decision allocates nothing but the argmax.
    """

    def __init__(self, arrays: Mapping[str, np.ndarray]) -> None:
        try:
            self.wc = np.ascontiguousarray(arrays["wc"], np.float32)
            self.wg = np.ascontiguousarray(arrays["wg"], np.float32)
            self.b0 = np.ascontiguousarray(arrays["b0"], np.float32)
            self.wo = np.ascontiguousarray(arrays["wo"], np.float32)
            self.bo = float(np.asarray(arrays["bo"], np.float32).reshape(-1)[0])
            n_more = sum(1 for k in arrays if k.startswith("w") and k[1:].isdigit())
            self.layers = [(np.ascontiguousarray(arrays[f"w{i}"], np.float32),
                            np.ascontiguousarray(arrays[f"b{i}"], np.float32))
                           for i in range(1, n_more + 1)]
        except KeyError as e:
            raise PolicyFileError(f"weight array {e.args[0]!r} is missing") from None
        self._check_shapes()
        self._bufs: dict[int, tuple[np.ndarray, list[np.ndarray], np.ndarray]] = {}
        self._g = np.empty(self.b0.shape[0], np.float32)
        self._native: Any = False  # not built yet (see native())

    def _check_shapes(self) -> None:
        h = self.b0.shape[0] if self.b0.ndim == 1 else -1
        if self.wc.ndim != 2 or self.wg.ndim != 2 or self.wc.shape[1] != h or self.wg.shape[1] != h:
            raise PolicyFileError(
                f"first layer shapes do not fit: wc {self.wc.shape}, wg {self.wg.shape}, b0 {self.b0.shape}")
        for i, (w, b) in enumerate(self.layers, 1):
            if w.ndim != 2 or w.shape[0] != h or b.shape != (w.shape[1],):
                raise PolicyFileError(f"layer {i} shapes do not fit: w{i} {w.shape}, b{i} {b.shape}, "
                                      f"previous width {h}")
            h = w.shape[1]
        if self.wo.shape != (h,):
            raise PolicyFileError(f"output layer wo has shape {self.wo.shape}, expected ({h},)")

    @property
    def n_features(self) -> int:
        return int(self.wc.shape[0])

    @property
    def n_globals(self) -> int:
        return int(self.wg.shape[0])

    @property
    def hidden(self) -> list[int]:
        return [int(self.b0.shape[0])] + [int(b.shape[0]) for _, b in self.layers]

    def _buffers(self, k: int) -> tuple[np.ndarray, list[np.ndarray], np.ndarray]:
        b = self._bufs.get(k)
        if b is None:
            hs = self.hidden
            b = (np.empty((k, hs[0]), np.float32),
                 [np.empty((k, h), np.float32) for h in hs[1:]],
                 np.empty(k, np.float32))
            self._bufs[k] = b
        return b

    def scores(self, cand: np.ndarray, glob: np.ndarray, mask: np.ndarray | None = None) -> np.ndarray:
        """Scores of the ``K`` candidates (``cand`` (K, F), ``glob`` (G,)); invalid candidates
        (``mask`` False) get the lowest float. The result is a reused buffer: copy to keep it."""
        h0, hs, out = self._buffers(cand.shape[0])
        g = self._g
        np.dot(glob, self.wg, out=g)
        g += self.b0
        np.dot(cand, self.wc, out=h0)
        h0 += g
        np.maximum(h0, 0.0, out=h0)
        h = h0
        for (w, b), nxt in zip(self.layers, hs):
            np.dot(h, w, out=nxt)
            nxt += b
            np.maximum(nxt, 0.0, out=nxt)
            h = nxt
        np.dot(h, self.wo, out=out)
        out += self.bo
        if mask is not None:
            np.putmask(out, ~mask, _NEG)
        return out

    def choose(self, cand: np.ndarray, glob: np.ndarray, mask: np.ndarray) -> int:
        """Index of the best valid candidate (the first one on ties)."""
        return int(self.scores(cand, glob, mask).argmax())

    def choose_first(self, cand: np.ndarray, glob: np.ndarray, n: int) -> int:
        """Index of the best of the first ``n`` candidates (the valid rows of an observation
        from :func:`policies.features.observe` are exactly its first ``len(keys)`` rows): the
        forward pass runs on those rows only and needs no masking."""
        h0, hs, out = self._buffers(cand.shape[0])
        g = self._g
        np.dot(glob, self.wg, out=g)
        g += self.b0
        h = h0[:n]
        np.dot(cand[:n], self.wc, out=h)
        h += g
        np.maximum(h, 0.0, out=h)
        for (w, b), nxt in zip(self.layers, hs):
            o = nxt[:n]
            np.dot(h, w, out=o)
            o += b
            np.maximum(o, 0.0, out=o)
            h = o
        s = out[:n]
        np.dot(h, self.wo, out=s)
        return int(s.argmax())

    def native(self) -> Any:
        """The C forward pass (``policies._mlp.Scorer`` over these weights, built once), or
        ``None`` where it does not apply (the extension is not built, or more than two hidden
        layers: the NumPy forward pass serves those)."""
        if self._native is False:
            nat = None
            if _mlp is not None and len(self.layers) <= 1:
                w1, b1 = self.layers[0] if self.layers else (np.zeros((0, 0), np.float32),
                                                             np.zeros(0, np.float32))
                nat = _mlp.Scorer(self.wc, self.wg, self.b0, w1, b1, self.wo, self.bo)
            self._native = nat
        return self._native

    def choose_compiled(self, cand: np.ndarray, glob: np.ndarray, n: int) -> int:
        """:meth:`choose_first` through the C forward pass (falls back to NumPy where
        :meth:`native` is ``None``)."""
        nat = self.native()
        if nat is None:
            return self.choose_first(cand, glob, n)
        x = np.zeros((cand.shape[0] + 1, cand.shape[1]), np.float32)
        x[:-1] = cand
        x[-1, :glob.shape[0]] = glob
        return int(nat.best(x, n))

    def batch_scores(self, cand: np.ndarray, glob: np.ndarray) -> np.ndarray:
        """Unmasked scores for a batch: ``cand`` (B, K, F), ``glob`` (B, G) -> (B, K)."""
        h = np.maximum(cand @ self.wc + (glob @ self.wg + self.b0)[:, None, :], 0.0)
        for w, b in self.layers:
            h = np.maximum(h @ w + b, 0.0)
        return (h @ self.wo + self.bo).astype(np.float32)


# the C forward pass (policies/_mlp.c; None without it, and where CACHEGYM_PURE_PYTHON is set:
# the NumPy forward pass serves, choosing the same candidates up to float32 summation order)
_mlp: Any = load_accelerator("policies._mlp")


@functools.cache
def _c_decisions() -> bool:
    """Whether ``Scorer.decide`` (features + forward pass in one C call) is available: the C
    extension ``policies._mlp``, set up for this features module on the first call."""
    return _mlp is not None and _features.c_features() is not None




# ---------------------------------------------------------------------- the file
def weights_checksum(arrays: Mapping[str, np.ndarray]) -> str:
    """SHA-256 over every array's name, dtype, shape and bytes, in name order."""
    h = hashlib.sha256()
    for name in sorted(arrays):
        a = np.ascontiguousarray(arrays[name])
        h.update(f"{name}|{a.dtype.str}|{a.shape}|".encode())
        h.update(a.tobytes())
    return h.hexdigest()


def save_policy_file(path: str | os.PathLike[str], arrays: Mapping[str, np.ndarray],
                     header: Mapping[str, Any]) -> str:
    """Write ``arrays`` (network weights) and ``header`` as one policy file; returns the path.
    ``format``, ``format_version`` and ``weights_sha256`` are filled in here."""
    p = os.fspath(path)
    if not p.endswith(".npz"):
        p += ".npz"
    arrs = {k: np.ascontiguousarray(v, np.float32) for k, v in arrays.items()}
    hdr = dict(header)
    hdr.update(format=FORMAT, format_version=FORMAT_VERSION, weights_sha256=weights_checksum(arrs))
    blob = np.frombuffer(json.dumps(hdr, sort_keys=True).encode(), np.uint8)
    d = os.path.dirname(p)
    if d:
        os.makedirs(d, exist_ok=True)
    tmp = p + ".tmp.npz"
    np.savez(tmp, header=blob, **{f"w/{k}": v for k, v in arrs.items()})  # type: ignore[arg-type]
    os.replace(tmp, p)
    return p


def read_policy_file(path: str | os.PathLike[str]) -> tuple[dict[str, Any], dict[str, np.ndarray]]:
    """Read and verify a policy file: ``(header, weight arrays)``. Checks that it is complete,
    uncorrupted (zip CRCs and the weights' checksum) and of a known format version; the feature
    specification is checked by :meth:`LearnedPolicy.load`."""
    p = os.fspath(path)
    if not os.path.isfile(p):
        raise PolicyFileError(f"policy file {p}: no such file (export one with scripts/export.py)")
    if not_a_zip_archive(p):
        onnx = " (an ONNX model is for serving outside cachegym)" if p.lower().endswith(".onnx") else ""
        raise PolicyFileError(f"policy file {p} is not a cachegym policy file (the .npz zip archive "
                              f"that scripts/export.py or training writes){onnx}; give that file")
    try:
        with np.load(p, allow_pickle=False) as z:
            data = {k: z[k] for k in z.files}
    except (zipfile.BadZipFile, ValueError, OSError, EOFError, KeyError) as e:
        raise PolicyFileError(
            f"policy file {p} is truncated or corrupt ({type(e).__name__}: {e}); export it again"
        ) from None
    if "header" not in data:
        raise PolicyFileError(f"policy file {p} has no header: not a cachegym policy file")
    try:
        header = json.loads(data.pop("header").tobytes().decode())
        if not isinstance(header, dict):
            raise ValueError("the header is not a JSON object")
    except (ValueError, UnicodeDecodeError) as e:
        raise PolicyFileError(f"policy file {p}: corrupt header ({e})") from None
    if header.get("format") != FORMAT:
        raise PolicyFileError(f"policy file {p}: format is {header.get('format')!r}, not {FORMAT!r}")
    if header.get("format_version") != FORMAT_VERSION:
        raise PolicyFileError(
            f"policy file {p}: format version {header.get('format_version')!r}, this code reads "
            f"version {FORMAT_VERSION}; export the policy again with this version")
    arrays = {k[2:]: v for k, v in data.items() if k.startswith("w/")}
    got = weights_checksum(arrays)
    if got != header.get("weights_sha256"):
        raise PolicyFileError(
            f"policy file {p}: weights checksum mismatch (header {header.get('weights_sha256')}, "
            f"arrays {got}): the file is corrupt; export it again")
    return header, arrays


def diff_feature_spec(file_spec: Mapping[str, Any], code_spec: Mapping[str, Any]) -> list[str]:
    """Human-readable differences between two feature specifications (empty when equal)."""
    out: list[str] = []
    for key in sorted(set(file_spec) | set(code_spec)):
        a, b = file_spec.get(key), code_spec.get(key)
        if a == b:
            continue
        if isinstance(a, list) and isinstance(b, list):
            missing = [x for x in b if x not in a]
            extra = [x for x in a if x not in b]
            if missing or extra:
                out.append(f"{key}: the file lacks {missing} and has extra {extra}")
            elif len(a) == len(b):
                i = next(i for i, (x, y) in enumerate(zip(a, b)) if x != y)
                out.append(f"{key}: differ at position {i}: file {a[i]!r}, code {b[i]!r}")
            else:
                out.append(f"{key}: file has {len(a)} entries, code {len(b)}")
        elif isinstance(a, dict) and isinstance(b, dict):
            out += [f"{key}.{d}" for d in diff_feature_spec(a, b)]
        else:
            out.append(f"{key}: file {a!r}, code {b!r}")
    return out


# ---------------------------------------------------------------------- the guard
class _NotTold(ShadowPolicy):
    """A shadow model that is not told whom the pool evicts, so that its hits stay its own: an
    eviction only takes the object off the pool's side (a victim of the model's own choosing
    is the pool catching up with it)."""

    def on_evict(self, view: PoolView, key: int) -> None:
        self._in_pool.discard(key)
        self._pending.pop(key, None)
        if key == self._outside:
            self._outside = None


class _ModelS3FIFO(_NotTold, S3FIFO):
    """S3-FIFO as the guard's model: it sees every request but not the evictions other
    policies choose, so its hits are S3-FIFO's own whoever decides; its :meth:`victim` is
    :class:`~policies.shadow.ShadowPolicy`'s (a resident object the model no longer holds
    first), so a pool it decides for converges to the model's content and then evicts as
    S3-FIFO does."""

    def on_free(self, view: PoolView, key: int) -> None:
        super().on_free(view, key)  # on_evict above, and the object's ghost (S3FIFO.on_free)
        self._remove(key)  # the object is gone: the model forgets it too


class _ModelGDSF(_NotTold, GDSF):
    """GDSF as the :class:`ShadowGuard`'s model, as :class:`_ModelS3FIFO` is S3-FIFO: its hits
    are GDSF's own whoever decides, and a pool it decides for converges to its content."""

    def on_free(self, view: PoolView, key: int) -> None:
        _NotTold.on_evict(self, view, key)
        if key in self._rec:  # the object is gone: the model forgets it (no eviction: the
            self._forget(key)  # clock stays, as in GDSF.on_free)


class _ModelLFU(_NotTold):
    """LFU as the :class:`ShadowGuard`'s model: a byte-capacity LFU cache (the least frequently
    used object goes first, the one that reached that count first among equals, as
    :class:`~policies.classic.LFU`), its hits its own whoever decides, and a pool it decides for
    converges to its content. Invariant: ``_freq`` holds the model's objects, each in
    ``_buckets[_freq[k]]`` (insertion-ordered); ``_min`` is at most the smallest count."""

    def __init__(self) -> None:
        super().__init__()
        self.cap = -1
        self.occupied = 0
        self._freq: dict[int, int] = {}
        self._size: dict[int, int] = {}
        self._buckets: dict[int, dict[int, None]] = {}
        self._min = 1

    def _setup(self, capacity: int) -> None:
        self.cap = capacity

    def _resident(self, key: int) -> bool:
        return key in self._freq

    def _request(self, key: int, size: int) -> bool:
        f = self._freq.get(key)
        b = self._buckets
        if f is not None:
            del b[f][key]
            b.setdefault(f + 1, {})[key] = None
            self._freq[key] = f + 1
            return True
        if size > self.cap:
            return False
        while self.occupied + size > self.cap:
            while not b.get(self._min):
                self._min += 1
            k = next(iter(b[self._min]))
            self._forget(k)
            self._drop(k)
        self._freq[key] = 1
        self._size[key] = size
        self.occupied += size
        b.setdefault(1, {})[key] = None
        self._min = 1
        return False

    def _forget(self, key: int) -> None:
        del self._buckets[self._freq.pop(key)][key]
        self.occupied -= self._size.pop(key)

    def _remove(self, key: int) -> None:  # pragma: no cover - _NotTold.on_evict never asks
        if key in self._freq:
            self._forget(key)

    def _fallback(self) -> Iterable[int]:
        for f in sorted(self._buckets):
            yield from list(self._buckets[f])

    def on_free(self, view: PoolView, key: int) -> None:
        _NotTold.on_evict(self, view, key)
        if key in self._freq:  # the object is gone: the model forgets it
            self._forget(key)


class Guard:
    """Keeps a learned policy from doing worse than the heuristics for long, by trial windows
    (the default guard is :class:`ShadowGuard`, which measures the network in a shadow pool
    instead; this one is ``learned_trial:PATH`` in the registry).

    Shadow caches see the same accesses at the pool's capacity in bytes: an LRU of keys and
    sizes, and (``s3fifo``, on by default) an S3-FIFO model (:class:`_ModelS3FIFO`). Every
    ``window`` accesses the policy's hits are compared with each shadow's. A window where the
    learned policy lost to LRU's shadow by more than ``margin``, or to S3-FIFO's by more than
    ``s3fifo_margin`` (fractions of the window's accesses), hands the decisions to the better of
    the two heuristics for ``backoff`` windows (doubling on each repeated loss, up to
    ``max_backoff``; the heuristic is chosen again at the end of each of them), then the
    learned policy is tried again. A window of the learned policy is cut short, as a loss, as
    soon as it trails LRU's shadow by more than ``abort`` hits (default: four times a whole
    window's allowance, at least 16), so that a workload the policy does badly on costs a few
    dozen misses per trial rather than a window's worth. S3-FIFO needs a whole window lost by
    its wider margin: its decisions first evict what its model no longer holds, and the pool
    admits only what the model admits (:meth:`admit`), so that the pool converges to the
    model's content, which costs misses after each hand-over; and its hits come in bursts on
    loops and scans where the learned policy is ahead over a whole window.
    LRU's decisions come from the policy's tracker (the pool's LRU order).

    ``expert`` says who decides now (``None``: the learned policy); ``lru_windows`` counts the
    windows a heuristic decided, ``s3fifo_windows`` those of S3-FIFO among them.
    Invariant: ``_used`` is the sum of the sizes in ``_lru``.
    """

    __slots__ = ("window", "margin", "s3fifo_margin", "max_backoff", "abort", "_lru", "_used",
                 "_n", "_hits", "_shadow_hits", "_off", "_backoff", "lru_windows", "windows",
                 "aborts", "model", "_model_hits0", "expert", "s3fifo_windows")

    def __init__(self, window: int = 4096, margin: float = 0.003, max_backoff: int = 16,
                 abort: float | None = None, s3fifo: bool = True, s3fifo_margin: float = 0.01) -> None:
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
        self._lru: OrderedDict[int, int] = OrderedDict()
        self._used = 0
        self._n = self._hits = self._shadow_hits = 0
        self._off = 0  # windows left to a heuristic
        self._backoff = 1
        self.lru_windows = 0
        self.s3fifo_windows = 0
        self.windows = 0
        self.model: _ModelS3FIFO | None = _ModelS3FIFO() if s3fifo else None
        self._model_hits0 = 0  # the model's hits at the start of the window
        self.expert: str | None = None

    @property
    def active(self) -> bool:
        """True while a heuristic decides (``expert``)."""
        return self._off > 0

    def attach(self, policy: Any) -> None:
        """Called once by the :class:`LearnedPolicy` the guard serves."""

    def _model_hits(self) -> int:
        m = self.model
        return 0 if m is None else (m.model_requests - m.model_misses) - self._model_hits0

    def admit(self, view: PoolView, key: int, size: int) -> bool:
        """Whether the pool admits a missed object: while S3-FIFO decides, what its model took
        in (it refuses objects of at least its small queue's size, as libCacheSim's does), so
        that the pool holds what S3-FIFO would; otherwise always."""
        m = self.model
        return self.expert != "s3fifo" or m is None or m.admit(view, key, size)

    def victim(self, view: PoolView, tracker: Any) -> int | None:
        """The deciding heuristic's victim."""
        if self.expert == "s3fifo" and self.model is not None:
            k = self.model.victim(view)
            if k is not None:
                return k
        return tracker.victim(view)

    def _shadows(self, view: PoolView, key: int, hit: bool) -> None:
        """The shadow LRU and the S3-FIFO model see the access; the window counts it."""
        lru = self._lru
        if key in lru:
            lru.move_to_end(key)
            self._shadow_hits += 1
        else:
            size = view.info(key).size
            cap = view.capacity
            if size <= cap:
                while self._used + size > cap:
                    self._used -= lru.popitem(last=False)[1]
                lru[key] = size
                self._used += size
        m = self.model
        if m is not None:
            (m.on_hit if hit else m.on_miss)(view, key)
        self._hits += hit
        self._n += 1

    def access(self, view: PoolView, key: int, hit: bool) -> None:
        self._shadows(view, key, hit)
        if self._n >= self.window:
            self._end_window()
        elif self._off == 0 and self._shadow_hits - self._hits > self.abort:
            self.aborts += 1  # the trial is lost already: back to a heuristic now
            self._end_window()

    def insert(self, view: PoolView, key: int) -> None:
        if self.model is not None:
            self.model.on_insert(view, key)

    def evict(self, view: PoolView, key: int) -> None:
        if self.model is not None:
            self.model.on_evict(view, key)

    def free(self, view: PoolView, key: int) -> None:
        size = self._lru.pop(key, None)
        if size is not None:
            self._used -= size
        if self.model is not None:
            self.model.on_free(view, key)

    def _end_window(self) -> None:
        self.windows += 1
        allowance = self.margin * self._n
        model_hits = self._model_hits()
        lost_lru = self._hits < self._shadow_hits - allowance
        lost_model = self.model is not None and self._hits < model_hits - self.s3fifo_margin * self._n
        best = "s3fifo" if self.model is not None and model_hits > self._shadow_hits else "lru"
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
        self._n = self._hits = self._shadow_hits = 0
        if self.model is not None:
            self._model_hits0 = self.model.model_requests - self.model.model_misses


class LRUGuard(Guard):
    """:class:`Guard` with LRU as the only heuristic (no S3-FIFO model: less work per access)."""

    __slots__ = ()

    def __init__(self, window: int = 4096, margin: float = 0.003, max_backoff: int = 16,
                 abort: float | None = None) -> None:
        super().__init__(window, margin, max_backoff, abort, s3fifo=False)


class _Dropping:
    """``victim(view)``, and ``drop(key)`` of the key it names: a picklable wrapper."""

    __slots__ = ("victim", "drop")

    def __init__(self, victim: Any, drop: Any) -> None:
        self.victim, self.drop = victim, drop

    def __call__(self, view: PoolView) -> int | None:
        key = self.victim(view)
        if key is not None:
            self.drop(key)
        return key


class _ModelNetwork(_NotTold):
    """The network alone, in a shadow pool of the guarded pool's capacity (bytes placement,
    oversized objects bypassed): it sees every request (with its kind and whether it writes)
    but not the evictions others choose, so its hits are the network's own whoever decides.
    Its :meth:`victim` is :class:`~policies.shadow.ShadowPolicy`'s (a resident object the
    shadow no longer holds first), so a pool it decides for converges to the shadow's content;
    ``None`` when the pool holds nothing the shadow lacks (the caller then uses LRU)."""

    def __init__(self, policy: LearnedPolicy) -> None:
        super().__init__()
        self._owner = policy  # the guarded policy (its network, budget, K, record_latency)
        self.pool: Any = None
        self.policy: LearnedPolicy | None = None
        self._kind, self._write = 0, False  # of the request being served
        self._fallbacks = 0  # the shadow pool's, already added to the guarded pool's stats

    def _setup(self, capacity: int) -> None:
        from allocator.pool import Pool

        o = self._owner
        pol = LearnedPolicy(o.scorer, o.header, budget_us=o.budget_us, K=o.K, guard=False)
        pol.record_latency = o.record_latency
        # the shadow's victims are its drops: its hooks stay exactly the tracker's, so that
        # the shadow pool's C path serves them (a pool of this kind only evicts on request)
        pol.victim = _Dropping(pol.victim, self._drop)  # type: ignore[method-assign]
        self.policy = pol
        self.pool = Pool(capacity, pol, placement="bytes", oversize="bypass")

    # on_hit / on_miss: ShadowPolicy's, written out (they run on every access of the pool)
    def on_hit(self, view: PoolView, key: int) -> None:
        o = view.info(key)
        if not self._ready:
            self._ensure(view)
        self._kind, self._write = o.kind, view.writing
        self.model_requests += 1
        pool = self.pool
        if not pool.access(key, o.size, self._write, kind=o.kind):
            self.model_misses += 1
            self.divergent_hits += 1
        if pool.view.is_resident(key):  # _settle
            self._pending.pop(key, None)
        else:
            self._pending[key] = None
        if pool.stats.fallbacks != self._fallbacks:
            self._count_fallbacks(view)

    def on_miss(self, view: PoolView, key: int) -> None:
        o = view.info(key)
        if not self._ready:
            self._ensure(view)
        self._last_miss = key
        self._kind, self._write = o.kind, view.writing
        self.model_requests += 1
        pool = self.pool
        if pool.access(key, o.size, self._write, kind=o.kind):
            self.divergent_misses += 1
        else:
            self.model_misses += 1
        if pool.stats.fallbacks != self._fallbacks:
            self._count_fallbacks(view)

    def _count_fallbacks(self, view: PoolView) -> None:
        """The network's decisions happen in the shadow pool: the guarded pool's stats count
        their fallbacks to LRU (over the latency budget, failed, no candidate) too (called when
        the shadow pool's count moved)."""
        n = self.pool.stats.fallbacks
        view.stats.fallbacks += n - self._fallbacks
        self._fallbacks = n

    def _request(self, key: int, size: int) -> bool:
        return bool(self.pool.access(key, size, self._write, kind=self._kind))

    def _resident(self, key: int) -> bool:
        return bool(self.pool.view.is_resident(key))

    def _remove(self, key: int) -> None:  # pragma: no cover - _NotTold.on_evict never asks
        pass

    def _fallback(self) -> list[int]:
        return []

    def on_free(self, view: PoolView, key: int) -> None:
        self.on_evict(view, key)
        if self.pool is not None and key in self.pool:
            self.pool.free(key)


class ShadowGuard(Guard):
    """A :class:`Guard` that also runs the network alone in a shadow pool
    (:class:`_ModelNetwork`), so that all its experts -- the network, LRU, S3-FIFO, and (by
    default) GDSF and LFU -- are measured on every access whoever decides, and no window is
    spent trying the network blind. Every ``window`` accesses the pool follows the expert whose
    shadow hit most over the windows so far, each weighing ``decay`` times the next (0.5: mostly
    the last two), if it beat the one followed now by more than ``margin`` of those accesses
    (``s3fifo_margin`` to hand over to S3-FIFO, GDSF or LFU, whose content the pool must first
    converge to, and whose hits come in bursts on loops and scans for S3-FIFO); within a
    window, as soon as the network or LRU leads the followed expert by more than ``abort`` hits
    (GDSF or LFU: if it also does over the windows so far). The network and the models (S3-FIFO,
    GDSF, LFU) decide by evicting first what their shadow no longer holds (the pool converges to
    it; the models also choose what the pool admits), LRU through the policy's tracker. GDSF is
    there for variable sizes (evicting large objects first, it hits more often than the others
    on most DL traces), LFU for frequency (an LLM KV cache's shared prefixes).

    ``gdsf`` / ``lfu``: whether those two experts run (each costs throughput). Costs a second
    pool's work per access (and the network's decisions happen in the shadow pool).
    ``expert`` is ``None`` while the network is followed."""

    __slots__ = ("net", "_net_hits0", "switches", "decay", "_score", "_seen", "extra", "_extra0",
                 "_abort_x", "_told")

    def __init__(self, window: int = 2048, margin: float = 0.003, abort: float | None = None,
                 s3fifo_margin: float = 0.01, decay: float = 0.5, gdsf: bool = True,
                 lfu: bool = True) -> None:
        super().__init__(window, margin, 1, abort, True, s3fifo_margin)
        if not 0 <= decay < 1:
            raise ConfigError(f"ShadowGuard: decay must be in [0, 1), got {decay!r}")
        self.decay = float(decay)
        # the models beyond S3-FIFO (Guard.model), by expert name, and their hits at the start
        # of the window
        self.extra: dict[str, _NotTold] = {}
        if gdsf:
            self.extra["gdsf"] = _ModelGDSF()
        if lfu:
            self.extra["lfu"] = _ModelLFU()
        self._extra0 = dict.fromkeys(self.extra, 0)
        self._score: dict[str | None, float] = {None: 0.0, "lru": 0.0, "s3fifo": 0.0,
                                                **dict.fromkeys(self.extra, 0.0)}
        self._seen = 0.0
        self.net: _ModelNetwork | None = None
        self._net_hits0 = 0
        self.switches = 0
        self._abort_x = 1.0  # the abort threshold's multiplier (doubles at each forced switch)
        # the shadows told of every pool event beside Guard's: the network's (once attached),
        # then the extra models
        self._told: tuple[ShadowPolicy, ...] = tuple(self.extra.values())

    @property
    def gdsf(self) -> _NotTold | None:
        """The GDSF model (``None`` without it)."""
        return self.extra.get("gdsf")

    def attach(self, policy: Any) -> None:
        self.net = _ModelNetwork(policy)
        self._told = (self.net, *self.extra.values())

    @property
    def active(self) -> bool:
        return True  # every decision is the followed expert's (the network's in its shadow)

    def _net_hits(self) -> int:
        n = self.net
        return 0 if n is None else (n.model_requests - n.model_misses) - self._net_hits0

    def _scores(self) -> dict[str | None, int]:
        sc: dict[str | None, int] = {None: self._net_hits(), "lru": self._shadow_hits,
                                     "s3fifo": self._model_hits()}
        for name, m in self.extra.items():
            sc[name] = (m.model_requests - m.model_misses) - self._extra0[name]
        return sc

    def _follows(self) -> ShadowPolicy | None:
        """The shadow whose content the pool converges to now (``None``: LRU's tracker)."""
        e = self.expert
        return self.net if e is None else self.model if e == "s3fifo" else self.extra.get(e)

    def admit(self, view: PoolView, key: int, size: int) -> bool:
        m = self._follows()
        return True if m is None else m.admit(view, key, size)

    def victim(self, view: PoolView, tracker: Any) -> int | None:
        m = self._follows()
        k = None if m is None else m.victim(view)
        return tracker.victim(view) if k is None else k

    def access(self, view: PoolView, key: int, hit: bool) -> None:
        for m in self._told:
            (m.on_hit if hit else m.on_miss)(view, key)
        self._shadows(view, key, hit)
        if self._n >= self.window:
            self._end_window()
            return
        # another expert ahead of the followed one by ``abort`` hits in this window: the network
        # or LRU; GDSF or LFU only if it leads over the windows so far too (:meth:`_leads`)
        sc = self._scores()
        e = self.expert
        cur = sc[e]
        lead = max(sc[None], sc["lru"])
        for name in self.extra:
            h = sc[name]
            if h > lead and name != e and self._leads(name, h, cur):
                lead = h
        if lead - cur > self.abort * self._abort_x:
            self.aborts += 1
            self._end_window(force=True)

    def _leads(self, name: str, h: float, cur: float) -> bool:
        """Whether model ``name`` (``h`` hits in this window) leads the followed expert
        (``cur``) by ``abort`` hits over the windows so far, this one included, as
        :meth:`_end_window` weighs them: within a window GDSF often leads where it loses over
        the trace (measured: the pool flapped between LRU and GDSF eleven times on a recurrent
        model's trace, and between S3-FIFO and GDSF on an LLM KV cache, 3.1% behind LFU)."""
        d, score = self.decay, self._score
        return d * score[name] + h > d * score[self.expert] + cur + self.abort

    def insert(self, view: PoolView, key: int) -> None:
        super().insert(view, key)
        for m in self._told:
            m.on_insert(view, key)

    def evict(self, view: PoolView, key: int) -> None:
        super().evict(view, key)
        for m in self._told:
            m.on_evict(view, key)

    def free(self, view: PoolView, key: int) -> None:
        super().free(view, key)
        for m in self._told:
            m.on_free(view, key)

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
            cands += [n for n in self.extra if score[n] > score[cur] + self.abort]
            best = max(cands, key=lambda e: (sc[e], e is None))
            better = sc[best] > sc[cur]
        else:  # over the windows so far, the last weighing most (S3-FIFO's hits come in bursts)
            best = max(score, key=lambda e: (score[e], e is None))  # ties: the network
            need = (self.margin if best in (None, "lru") else self.s3fifo_margin) * self._seen
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
        self._n = self._hits = self._shadow_hits = 0
        if self.model is not None:
            self._model_hits0 = self.model.model_requests - self.model.model_misses
        if self.net is not None:
            self._net_hits0 = self.net.model_requests - self.net.model_misses
        for name, m in self.extra.items():
            self._extra0[name] = m.model_requests - m.model_misses

# ---------------------------------------------------------------------- the policy
class LearnedPolicy(EvictionPolicyBase):
    """An exported eviction policy. Satisfies :class:`policies.base.EvictionPolicy` (and
    :class:`~policies.base.PrefetchPolicy`, answering no prefetches for an eviction file).

    At each decision it draws up to ``K`` candidates (the rule recorded in the file), computes
    their features with :mod:`policies.features` (the code the env trains with), scores them and
    evicts the best. The scores come from the C forward pass (``policies/_mlp.c``, see
    :meth:`CandidateScorer.native`; ``compiled`` says whether it runs) or else NumPy's. A
    decision that takes longer than ``budget_us`` or fails falls back to LRU and increments
    ``view.stats.fallbacks``; so does one with no valid candidate.

    ``guard`` (default on: a :class:`ShadowGuard`; ``False`` for the network alone, or a
    :class:`ShadowGuard` / :class:`Guard` / :class:`LRUGuard` of your own): the network, LRU
    and an S3-FIFO model run in shadow caches of the pool's capacity, and the pool follows
    whichever hit most over the last window (``guard_decisions`` counts the decisions a
    heuristic made), so a workload unlike the training data costs little.

    Build with :meth:`load`.
    """

    name = "learned"

    def __init__(self, scorer: CandidateScorer, header: Mapping[str, Any], *,
                 budget_us: float | None = DEFAULT_BUDGET_US, seed: int = 0,
                 path: str | None = None, K: int | None = None,
                 guard: bool | Guard = True) -> None:
        self.scorer = scorer
        self.header = dict(header)
        self.path = path
        self.K = int(header["K"]) if K is None else int(K)
        if self.K < 1:
            raise ConfigError(f"K must be >= 1 candidates, got {self.K}")
        self.candidate_rule = str(header.get("candidate_rule", "lru"))
        if budget_us is not None and budget_us < 0:
            raise ConfigError(f"budget_us must be >= 0 microseconds or None, got {budget_us}")
        self.budget_us = budget_us
        self._budget_ns = None if budget_us is None else int(budget_us * 1000)
        self._rng = np.random.default_rng(seed)
        self.tracker = _features.FeatureTracker()
        if not isinstance(guard, (bool, Guard)):
            raise ConfigError(f"guard must be True (the default ShadowGuard), False (none) or a "
                              f"ShadowGuard / Guard / LRUGuard instance, got {guard!r}")
        self.guard = (ShadowGuard() if guard is True else guard) if guard else None
        if self.guard is not None:
            self.guard.attach(self)
        self.guard_decisions = 0
        # the tracker (which also keeps the LRU order of the fallback) sees every hook directly
        t = self.tracker
        if self.guard is None:
            self.on_hit, self.on_miss, self.on_free = t.on_hit, t.on_miss, t.on_free  # type: ignore[method-assign]
            self.on_free_untracked = None  # type: ignore[method-assign, assignment]  # nothing to tell
            self.admit = None  # type: ignore[method-assign, assignment]  # the pool admits every miss
        if self.guard is None or self.guard.model is None:
            self.on_insert, self.on_evict = t.on_insert, t.on_evict  # type: ignore[method-assign]
        self.decisions = 0
        self.fallbacks = 0
        # the C forward pass, when it is built and the network reads exactly the features this
        # code computes (``compiled`` False: the NumPy forward pass, the reference)
        self._native: Any = scorer.native() if scorer.n_features == _features.F else None
        self.compiled = self._native is not None
        self._buf = np.zeros((self.K + 1, _features.F), np.float32)  # features, globals in row K
        self._packed = _features._packed_buffer(self.K)
        self.decision_ns: list[int] = []
        self.record_latency = False


    # construction ------------------------------------------------------
    @classmethod
    def load(cls, path: str | os.PathLike[str], *, budget_us: float | None = DEFAULT_BUDGET_US,
             seed: int = 0, K: int | None = None, guard: bool | Guard = True, **_: Any) -> LearnedPolicy:
        """Load an exported policy file (NumPy only). ``K`` overrides the number of candidates
        the file was trained with (the network does not depend on it). Raises
        :class:`~allocator.errors.PolicyFileError` on a corrupt, truncated or mismatched file."""
        p = os.fspath(path)
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
        scorer = CandidateScorer(arrays)
        arch = header.get("arch", {})
        if (arch.get("n_features"), arch.get("n_globals")) != (scorer.n_features, scorer.n_globals):
            raise PolicyFileError(
                f"policy file {p}: arch says {arch.get('n_features')} features and "
                f"{arch.get('n_globals')} globals, weights have {scorer.n_features} and {scorer.n_globals}")
        if "K" not in header or int(header["K"]) < 1:
            raise PolicyFileError(f"policy file {p}: header lacks a valid K")
        return cls(scorer, header, budget_us=budget_us, seed=seed, path=p, K=K, guard=guard)

    # decisions ---------------------------------------------------------
    def observe(self, view: PoolView) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        """``(keys, cand, mask, glob)`` exactly as the env builds them for this view."""
        keys = _features.select_candidates(self.tracker, view, self.K, self.candidate_rule, self._rng)
        cand, mask, glob = _features.observe(self.tracker, view, keys, self.K)
        return keys, cand, mask, glob

    def on_hit(self, view: PoolView, key: int) -> None:
        self.tracker.on_hit(view, key)
        self.guard.access(view, key, True)  # type: ignore[union-attr]

    def on_miss(self, view: PoolView, key: int) -> None:
        self.tracker.on_miss(view, key)
        self.guard.access(view, key, False)  # type: ignore[union-attr]

    def on_free(self, view: PoolView, key: int) -> None:
        self.tracker.on_free(view, key)
        self.guard.free(view, key)  # type: ignore[union-attr]

    def on_free_untracked(self, view: PoolView, key: int) -> None:
        """A freed object the pool held in host memory only: the guard's shadow caches may
        still hold it (they are not told whom the pool evicts) and must drop it."""
        self.guard.free(view, key)  # type: ignore[union-attr]

    def admit(self, view: PoolView, key: int, size: int) -> bool:
        """The pool's admission question (``policies.base``), asked after ``on_miss``: the
        guard's answer (:meth:`Guard.admit`)."""
        return self.guard.admit(view, key, size)  # type: ignore[union-attr]

    def on_insert(self, view: PoolView, key: int) -> None:
        self.tracker.on_insert(view, key)
        self.guard.insert(view, key)  # type: ignore[union-attr]

    def on_evict(self, view: PoolView, key: int) -> None:
        self.tracker.on_evict(view, key)
        self.guard.evict(view, key)  # type: ignore[union-attr]

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
            tracker, K, v = self.tracker, self.K, self._packed
            keys, codes = _features._select(tracker, view, K, self.candidate_rule, self._rng)
            n = len(keys)
            if n:
                buf = self._buf
                cand, _, glob = _features._observe(tracker, view, keys, K, codes, v, buf)
                choice = keys[self._native.best(buf, n) if self.compiled
                              else self.scorer.choose_first(cand, glob, n)]
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
        return ()

    @property
    def network_decision_ns(self) -> list[int]:
        """The network's decision times (ns; recorded while ``record_latency`` is set, which
        must be before the first access): its own, and under a :class:`ShadowGuard` those it
        made in the guard's shadow pool, where the network decides."""
        net = getattr(self.guard, "net", None)
        shadow = net.policy if net is not None else None
        return self.decision_ns + (shadow.decision_ns if shadow is not None else [])

    def __repr__(self) -> str:
        return f"LearnedPolicy({self.path!r}, K={self.K}, budget_us={self.budget_us})"
