"""Record the tensor-level access trace of a real PyTorch program (on CPU).

A ``TorchDispatchMode`` sees every aten op below autograd, forward and backward alike:

- the storages of an op's tensor inputs are reads, the storages of its outputs (and of
  arguments its schema marks as mutated) are writes; view ops touch no memory and are skipped,
  as are ops that return views of their inputs without the schema saying so (``_unsafe_view``:
  every output shares an input's storage and nothing is mutated);
- a view maps to its base storage (``tensor.untyped_storage()`` is the base's);
- a storage gets a key when first seen; a ``weakref.finalize`` on the storage records a free
  (op 2) when its memory is released, and a later storage, even at the same address, gets a
  new key;
- ``compute_ns`` is the op's measured wall time, put on the op's last read (on its first write
  when it reads nothing): the consumer reads, computes, then writes;
- ``kind`` is decided per key after each step: storages of ``model.parameters()`` are
  parameters, of ``p.grad`` gradients, of tensors in ``optimizer.state`` optimizer state;
  storages first seen as an input (batch data) are "other"; everything else is an activation;
- ``step`` is the iteration.

Keys are numbered in order of first appearance, so recording is deterministic given the seed
(the model, batches and op order are) except for the measured durations.

torch is imported here only; ``import envs.workloads`` does not import this module.
"""

from __future__ import annotations

import logging
import time
import weakref
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
import torch
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_leaves

from cachegym.allocator.errors import ConfigError
from cachegym.allocator.trace import Kind, Op, Trace

__all__ = ["record", "TraceRecorder"]

log = logging.getLogger(__name__)

MakeBatch = Callable[[int], Any]
LossFn = Callable[[torch.nn.Module, Any], torch.Tensor]


class TraceRecorder(TorchDispatchMode):
    """Dispatch mode that appends one event per storage an aten op touches.

    Invariant: ``_live`` maps the ``_cdata`` of every storage seen and not yet freed to its key;
    a storage's finalizer removes it (and records the free) exactly once.
    """

    def __init__(self) -> None:
        super().__init__()
        self.step = 0
        self.closed = False
        self._live: dict[int, int] = {}
        self._size: dict[int, int] = {}  # key -> bytes
        self._finalizers: list[weakref.finalize] = []
        self._freed: set[int] = set()  # keys whose free is recorded
        self._next_key = 0
        self.kind_of: dict[int, Kind] = {}
        self.first_op: dict[int, int] = {}  # key -> op of its first event
        self.key: list[int] = []
        self.op: list[int] = []
        self.ns: list[int] = []
        self.steps: list[int] = []

    # ------------------------------------------------------------------ dispatch
    def __torch_dispatch__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
        kwargs = kwargs or {}
        if func.is_view:
            return func(*args, **kwargs)
        tensors = [t for t in tree_leaves((args, kwargs)) if isinstance(t, torch.Tensor)]
        inputs = [self._key_of(t) for t in tensors]
        t0 = time.perf_counter_ns()
        out = func(*args, **kwargs)
        dt = time.perf_counter_ns() - t0
        outputs = [t for t in tree_leaves(out) if isinstance(t, torch.Tensor)]
        mutated = _mutated_args(func, args, kwargs)
        if not mutated and outputs and _all_alias(outputs, tensors):
            return out  # a view in all but name (aten._unsafe_view): no memory is touched
        written = [self._key_of(t) for t in [*outputs, *mutated]]
        reads = _unique(inputs)
        writes = _unique(written)
        for i, k in enumerate(reads):
            self._emit(k, Op.READ, dt if i == len(reads) - 1 else 0)
        for i, k in enumerate(writes):
            self._emit(k, Op.WRITE, dt if (not reads and i == 0) else 0)
        return out

    # ------------------------------------------------------------------ storages
    def storage_key(self, t: torch.Tensor) -> int | None:
        """The current key of ``t``'s storage, or ``None`` if it was never accessed."""
        return self._live.get(t.untyped_storage()._cdata)

    def _key_of(self, t: torch.Tensor) -> int | None:
        if t.layout != torch.strided or t.device.type == "meta":
            return None  # sparse/nested tensors have no single storage; meta has no memory
        st = t.untyped_storage()
        if st.nbytes() == 0:
            return None
        cdata = st._cdata
        key = self._live.get(cdata)
        nbytes = int(st.nbytes())
        if key is not None and nbytes != self._size[key]:
            # grown in place (resize_, set_): a new allocation of the new size, the old one freed
            old = key
            key = None
            self._on_free(cdata, old)
            if old in self.kind_of:
                self.kind_of[self._next_key] = self.kind_of[old]
        if key is None:
            key = self._next_key
            self._next_key += 1
            self._live[cdata] = key
            self._size[key] = nbytes
            self._finalizers.append(weakref.finalize(st, self._on_free, cdata, key))
        return key

    def _on_free(self, cdata: int, key: int) -> None:
        if self._live.get(cdata) == key:
            del self._live[cdata]
        if not self.closed and key in self.first_op and key not in self._freed:
            self._freed.add(key)
            self._emit(key, Op.FREE, 0)

    def _emit(self, key: int, op: Op, ns: int) -> None:
        self.first_op.setdefault(key, int(op))
        self.key.append(key)
        self.op.append(int(op))
        self.ns.append(int(ns))
        self.steps.append(self.step)

    # ------------------------------------------------------------------ kinds and result
    def label(self, tensors: Any, kind: Kind) -> None:
        """Mark the storages of ``tensors`` (any pytree) as ``kind`` (first label wins)."""
        for t in tree_leaves(tensors):
            if isinstance(t, torch.Tensor):
                k = self.storage_key(t)
                if k is not None:
                    self.kind_of.setdefault(k, kind)

    def close(self) -> None:
        """Stop recording frees and detach every finalizer."""
        self.closed = True
        for f in self._finalizers:
            f.detach()
        self._finalizers.clear()

    def to_trace(self, meta: dict[str, Any], name: str) -> Trace:
        key = np.array(self.key, np.int64)
        kinds = np.zeros(self._next_key, np.uint8)
        for k in range(self._next_key):
            default = Kind.OTHER if self.first_op.get(k) == Op.READ else Kind.ACTIVATION
            kinds[k] = self.kind_of.get(k, default)
        size = np.array([self._size[k] for k in range(self._next_key)], np.int64)
        return Trace.from_arrays(key, size[key], np.array(self.op, np.uint8),
                                 np.array(self.ns, np.int64), kinds[key],
                                 np.array(self.steps, np.int64), meta=meta, name=name)


def _mutated_args(func: Any, args: Any, kwargs: Any) -> list[torch.Tensor]:
    """Tensor arguments the op's schema marks as written (``Tensor(a!)``)."""
    out: list[torch.Tensor] = []
    schema = func._schema
    for i, arg in enumerate(schema.arguments):
        if arg.alias_info is None or not arg.alias_info.is_write:
            continue
        value = args[i] if i < len(args) else kwargs.get(arg.name)
        out.extend(t for t in tree_leaves(value) if isinstance(t, torch.Tensor))
    return out


def _all_alias(outputs: list[torch.Tensor], inputs: list[torch.Tensor]) -> bool:
    """Every output shares the storage of an input: the op returned a view of its input without
    the schema calling it one (``aten._unsafe_view``, what ``reshape`` of a fresh result runs)."""
    seen = {t.untyped_storage()._cdata for t in inputs if t.layout == torch.strided}
    return all(t.layout == torch.strided and t.untyped_storage()._cdata in seen for t in outputs)


def _unique(keys: list[int | None]) -> list[int]:
    """Keys in first-seen order, without repeats or ``None`` (storages that hold no bytes)."""
    return [k for k in dict.fromkeys(keys) if k is not None]


# ---------------------------------------------------------------------- front door
def record(
    model: torch.nn.Module,
    optimizer: torch.optim.Optimizer | Sequence[torch.optim.Optimizer] | None,
    make_batch: MakeBatch,
    loss_fn: LossFn,
    steps: int = 2,
    seed: int = 0,
    *,
    name: str = "recorded",
    meta: dict[str, Any] | None = None,
) -> Trace:
    """Record ``steps`` iterations of a training (or, with ``optimizer=None``, inference) loop.

    Each iteration: ``batch = make_batch(step)`` (outside the recorder, as a data loader would),
    then, recorded: ``optimizer.zero_grad(set_to_none=True)``, ``loss = loss_fn(model, batch)``
    (a scalar tensor), ``loss.backward()``, ``optimizer.step()``; several optimizers (a list: a
    GAN's generator and discriminator over one ``model`` holding both) are zeroed and stepped in
    order, and their state is labelled as optimizer state. Gradient accumulation: call
    ``backward()`` on the earlier micro-batches inside ``loss_fn``. With ``optimizer=None`` only
    the forward pass runs, under ``torch.no_grad()``. The loop trains ``model`` and the
    optimizers in place, and ``torch.manual_seed(seed)`` is called first (the global random
    stream is left seeded so). Parameters, their gradients and the optimizers' state are
    labelled by kind; the model's buffers (BatchNorm's running statistics) are ``OTHER``.
    Sparse gradients (``nn.Embedding(sparse=True)``) are not supported.
    """
    optimizers = _checked_args(model, optimizer, make_batch, loss_fn, steps)
    torch.manual_seed(seed)
    rec = TraceRecorder()
    try:
        for s in range(steps):
            batch = make_batch(s)
            rec.step = s
            with rec:
                _one_step(model, optimizers, batch, loss_fn)
            _label_step(rec, model, optimizers)
            del batch
    finally:
        rec.close()
    info = {"generator": "recorder", "params": {"steps": steps, "seed": seed,
            "model": type(model).__name__,
            "optimizer": ",".join(type(o).__name__ for o in optimizers) or None},
            "torch": torch.__version__, **(meta or {})}
    trace = rec.to_trace(info, name)
    if not len(trace):
        raise ConfigError("record: no tensor access was recorded (a model on the meta device, or "
                          "a loss_fn that touches no tensor?): record a program that computes on "
                          "cpu or cuda tensors")
    return trace


def _label_step(rec: TraceRecorder, model: torch.nn.Module,
                optimizers: list[torch.optim.Optimizer]) -> None:
    """Label the step's parameters, gradients and optimizer state. It holds no reference past
    its return: a list of the gradients kept alive by the loop lived through the next step's
    ``zero_grad(set_to_none=True)``, so that every gradient was recorded as freed only after the
    next backward had written its successor (the gpt trace's peak live bytes +17%)."""
    params = list(model.parameters())
    grads = [p.grad for p in params if p.grad is not None]
    if any(g.layout != torch.strided for g in grads):
        raise ConfigError("record: a sparse gradient (nn.Embedding(sparse=True), or another "
                          "sparse layout): the recorder follows strided storages only; record "
                          "with sparse=False")
    rec.label(params, Kind.PARAMETER)
    rec.label(grads, Kind.GRADIENT)
    for opt in optimizers:
        rec.label(list(opt.state.values()), Kind.OPTIMIZER_STATE)


def _checked_args(model: Any, optimizer: Any, make_batch: Any, loss_fn: Any, steps: Any
                  ) -> list[torch.optim.Optimizer]:
    """The optimizers ``record`` steps, its arguments checked before anything runs (they
    failed inside the loop, as AttributeErrors after a forward and backward, or not at all)."""
    if isinstance(steps, bool) or not isinstance(steps, int) or steps < 1:
        raise ConfigError(f"steps must be an int >= 1, got {steps!r}")
    if not isinstance(model, torch.nn.Module):
        raise ConfigError(f"record: model must be a torch.nn.Module, got {type(model).__name__}")
    for what, fn in (("make_batch", make_batch), ("loss_fn", loss_fn)):
        if not callable(fn):
            raise ConfigError(f"record: {what} must be a function ({what}(step) -> batch; "
                              f"loss_fn(model, batch) -> loss), got {type(fn).__name__}")
    optimizers = ([] if optimizer is None else list(optimizer)
                  if isinstance(optimizer, (list, tuple)) else [optimizer])
    mine = {id(p) for p in model.parameters()}
    for opt in optimizers:
        if not isinstance(opt, torch.optim.Optimizer):
            raise ConfigError(f"record: optimizer must be a torch.optim.Optimizer (or a list of "
                              f"them, or None for inference), got {type(opt).__name__}")
        theirs = [p for g in opt.param_groups for p in g["params"]]
        if theirs and not any(id(p) in mine for p in theirs):
            raise ConfigError(f"record: the optimizer {type(opt).__name__} holds none of the "
                              "model's parameters (built over another model?): the model would "
                              "never be updated and its gradients never zeroed")
    if optimizers and not torch.is_grad_enabled():
        raise ConfigError("record: gradients are off here (torch.no_grad or inference_mode): a "
                          "training loop records with them on; optimizer=None records inference")
    return optimizers


def _one_step(model: torch.nn.Module, optimizers: list[torch.optim.Optimizer], batch: Any,
              loss_fn: LossFn) -> None:
    if not optimizers:
        with torch.no_grad():
            out = loss_fn(model, batch)
        del out
        return
    for opt in optimizers:
        opt.zero_grad(set_to_none=True)
    loss = loss_fn(model, batch)
    if not isinstance(loss, torch.Tensor) or not loss.requires_grad:
        raise ConfigError(f"record: loss_fn(model, batch) returned {type(loss).__name__}"
                          f"{'' if not isinstance(loss, torch.Tensor) else ' without a graph'}: "
                          "it must return the loss tensor of the model's forward pass (backward() "
                          "runs on it)")
    loss.backward()
    del loss
    for opt in optimizers:
        opt.step()
