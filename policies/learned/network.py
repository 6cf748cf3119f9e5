"""The network of an exported policy: :class:`CandidateScorer`, its weights and its forward pass
(one implementation: :class:`policies.kernels.Scorer`, compiled by Cython where it is built,
interpreted elsewhere, with the same float32 scores).

The network scores every candidate with the same small MLP over ``[candidate features,
global features]``; the victim is the valid candidate with the highest score. Permuting the
candidates permutes the scores, and nothing depends on ``K`` but the candidate selection.
"""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np

from cachegym.allocator.errors import ConfigError, PolicyFileError
from cachegym.policies import kernels as _k

__all__ = ["CandidateScorer"]

_NEG = np.float32(-3.0e38)


class CandidateScorer:
    """The forward pass of :class:`policies.training.nets.CandidateScorerNet`.

    Weights: ``wc`` (F, H0), ``wg`` (G, H0), ``b0`` (H0,), then ``w{i}`` (H{i-1}, H{i}) and
    ``b{i}`` for the further hidden layers, then ``wo`` (H_last,) and ``bo`` (1,). Activation
    ReLU; float32 arithmetic (:class:`policies.kernels.Scorer`). Raises
    :class:`PolicyFileError` when an array is missing or the shapes do not fit.
    """

    def __init__(self, arrays: Mapping[str, np.ndarray]) -> None:
        try:
            n_more = sum(1 for k in arrays if k.startswith("w") and k[1:].isdigit())
            layers = [(arrays[f"w{i}"], arrays[f"b{i}"]) for i in range(1, n_more + 1)]
            self.kernel = _k.Scorer(arrays["wc"], arrays["wg"], arrays["b0"], layers,
                                    arrays["wo"], arrays["bo"])
        except KeyError as e:
            raise PolicyFileError(f"weight array {e.args[0]!r} is missing") from None
        k = self.kernel
        self.wc, self.wg, self.b0, self.wo = k._wc_arr, k._wg_arr, k._b0_arr, k._wo_arr
        self.layers: list[tuple[np.ndarray, np.ndarray]] = list(k._layers)
        self.bo = float(np.asarray(arrays["bo"], np.float32).reshape(-1)[0])
        self._x: dict[int, np.ndarray] = {}  # an observation buffer per K

    @property
    def n_features(self) -> int:
        return int(self.wc.shape[0])

    @property
    def n_globals(self) -> int:
        return int(self.wg.shape[0])

    @property
    def hidden(self) -> list[int]:
        return [int(self.b0.shape[0])] + [int(b.shape[0]) for _, b in self.layers]

    def best(self, x: np.ndarray, n: int) -> int:
        """Index of the best of the first ``n`` candidates of ``x`` (float32 ``(K + 1, F)``:
        candidates in rows ``0..K-1``, the globals in the first ``G`` values of row ``K``, as
        :func:`policies.features.fill_observation` fills it); the first of equal scores."""
        return int(self.kernel.best(x, n))

    def _buffer(self, cand: np.ndarray, glob: np.ndarray) -> np.ndarray:
        k, nf = cand.shape
        if self.n_features != nf or glob.shape != (self.n_globals,):
            raise ConfigError(f"the network reads {self.n_features} candidate and {self.n_globals} "
                              f"global features; got cand {cand.shape} and glob {glob.shape}")
        x = self._x.get(k)
        if x is None:
            x = self._x[k] = np.zeros((k + 1, nf), np.float32)
        x[:k] = cand
        x[k, :glob.shape[0]] = glob
        return x

    def scores(self, cand: np.ndarray, glob: np.ndarray, mask: np.ndarray | None = None) -> np.ndarray:
        """Scores of the ``K`` candidates (``cand`` (K, F), ``glob`` (G,)); invalid candidates
        (``mask`` False) get the lowest float."""
        x = self._buffer(cand, glob)
        out = np.empty(cand.shape[0], np.float32)
        self.kernel.scores(x, cand.shape[0], out)
        if mask is not None:
            np.putmask(out, ~mask, _NEG)
        return out

    def choose(self, cand: np.ndarray, glob: np.ndarray, mask: np.ndarray) -> int:
        """Index of the best valid candidate (the first one on ties)."""
        return int(self.scores(cand, glob, mask).argmax())

    def choose_first(self, cand: np.ndarray, glob: np.ndarray, n: int) -> int:
        """Index of the best of the first ``n`` candidates (the valid rows of an observation
        from :func:`policies.features.observe` are exactly its first ``len(keys)`` rows)."""
        return int(self.kernel.best(self._buffer(cand, glob), n))
