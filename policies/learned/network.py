"""The network of an exported policy: its forward pass in NumPy (:class:`CandidateScorer`) and,
where the extension is built, in C (``policies/_mlp.c``).

The network scores every candidate with the same small MLP over ``[candidate features,
global features]``; the victim is the valid candidate with the highest score. Permuting the
candidates permutes the scores, and nothing depends on ``K`` but the candidate selection.
"""

from __future__ import annotations

import functools
from collections.abc import Mapping
from typing import Any

import numpy as np

from allocator.errors import PolicyFileError
from allocator.pool import load_accelerator
from policies import features as _features

__all__ = ["CandidateScorer"]

_NEG = np.float32(-3.0e38)


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


