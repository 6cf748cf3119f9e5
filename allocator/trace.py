"""The trace structure shared by everything: columnar arrays, one row per event.

Columns (names and dtypes are the on-disk ``.npz`` format):

=============  =======  ===============================================================
``key``        int64    object id
``size``       int64    bytes, in 1 .. :data:`MAX_SIZE` (2**48)
``op``         uint8    0 read, 1 write, 2 free (see :class:`Op`)
``compute_ns`` int64    time the consumer computes after the access, >= 0 (default 0; a free row's is not run)
``kind``       uint8    optional, see :class:`Kind` (default 0, other)
``step``       int64    optional iteration or op index (default: row index)
``meta``       str      optional JSON object (how the trace was made, units, ...)
=============  =======  ===============================================================

Semantics: the first access to a key creates the object (a first write allocates it on the
device without a copy; a first read is a compulsory miss of an object that starts in host
memory); a write to an existing non-resident object fetches it first and leaves it dirty; a
free drops the object everywhere, and a later access to the same key is a new object.

Ranges: every size is at most :data:`MAX_SIZE` and the sizes of all rows, as the compute times
of all rows, sum to at most :data:`MAX_TOTAL` (2**60), so no byte count, working set or clock
of any replay path can overflow int64; a trace outside them is refused with a
:class:`~allocator.errors.TraceError` naming the column and the record.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, field
from enum import IntEnum
from typing import Any

import numpy as np

from cachegym.allocator.errors import ConfigError, TraceError
from cachegym.allocator.files import file_to_write, replace_atomically

__all__ = ["Op", "Kind", "Trace", "INF", "MAX_SIZE", "MAX_TOTAL", "ZIP_MAGIC", "not_a_zip_archive",
           "too_short_for_zip", "existing_trace_file"]

INF = np.iinfo(np.int64).max
"""Next-use distance of an object that is never used again."""

MAX_SIZE = 1 << 48
"""Largest object size a trace may hold (256 TiB)."""

MAX_TOTAL = 1 << 60
"""Largest sum of a trace's sizes (over all rows), and of its compute times: with these, byte
counts and clocks stay far from int64's limit on every replay path."""


class Op(IntEnum):
    READ = 0
    WRITE = 1
    FREE = 2


class Kind(IntEnum):
    OTHER = 0
    PARAMETER = 1
    GRADIENT = 2
    OPTIMIZER_STATE = 3
    ACTIVATION = 4
    KV_BLOCK = 5
    EMBEDDING_ROW = 6


_REQUIRED = ("key", "size", "op")
_COLUMNS = ("key", "size", "op", "compute_ns", "kind", "step")
_DTYPES = {
    "key": np.int64,
    "size": np.int64,
    "op": np.uint8,
    "compute_ns": np.int64,
    "kind": np.uint8,
    "step": np.int64,
}


ZIP_MAGIC = b"PK\x03\x04"
"""The first bytes of a zip archive, which every ``.npz`` is."""


def existing_trace_file(path: str | os.PathLike[str]) -> str:
    """``path`` as a string if it is a regular file; else a :class:`TraceError` that says what
    it is: a directory, a pipe (``<(zcat ...)``: a reader would wait on it for ever) or nothing."""
    p = os.fspath(path)
    if os.path.isdir(p):
        raise TraceError("is a directory, not a trace file", path=p, hint="give the trace file in it")
    if os.path.exists(p) and not os.path.isfile(p):
        raise TraceError("is not a regular file (a pipe?)", path=p,
                         hint="save it to a file first and give that file")
    if not os.path.isfile(p):
        raise TraceError("no such file", path=p, hint="check the path")
    return p


def not_a_zip_archive(path: str | os.PathLike[str]) -> bool:
    """True when the file at ``path`` holds 4 bytes or more and does not begin as a zip archive
    (what every ``.npz`` is): another kind of file, not a damaged ``.npz``."""
    with open(path, "rb") as f:
        magic = f.read(len(ZIP_MAGIC))
    return len(magic) == len(ZIP_MAGIC) and magic != ZIP_MAGIC


def too_short_for_zip(path: str | os.PathLike[str]) -> int | None:
    """The size of the file at ``path`` when it is shorter than the smallest zip archive (an
    empty one: 22 bytes), else ``None``: such a file is empty or truncated, whatever NumPy
    would guess of it (it calls a 2-byte file pickled data)."""
    n = os.path.getsize(path)
    return n if n < 22 else None


@dataclass(frozen=True, eq=False)
class Trace:
    """A validated, immutable trace. Build with :meth:`from_arrays` or :meth:`load`."""

    key: np.ndarray
    size: np.ndarray
    op: np.ndarray
    compute_ns: np.ndarray
    kind: np.ndarray
    step: np.ndarray
    meta: dict[str, Any] = field(default_factory=dict)
    name: str = "trace"

    # ------------------------------------------------------------------ construction
    @classmethod
    def from_arrays(
        cls,
        key: Any,
        size: Any,
        op: Any = None,
        compute_ns: Any = None,
        kind: Any = None,
        step: Any = None,
        meta: dict[str, Any] | None = None,
        name: str = "trace",
        path: str | None = None,
    ) -> Trace:
        """Validate and build a trace. ``op`` defaults to all reads, ``size`` may be a scalar."""
        key_a = _as_int_column("key", key, path)
        n = len(key_a)
        cols: dict[str, np.ndarray] = {"key": key_a}
        size_a = np.full(n, size, dtype=np.int64) if np.isscalar(size) else size
        cols["size"] = _as_int_column("size", size_a, path)
        cols["op"] = _as_int_column("op", np.zeros(n, np.uint8) if op is None else op, path)
        cols["compute_ns"] = _as_int_column(
            "compute_ns", np.zeros(n, np.int64) if compute_ns is None else compute_ns, path
        )
        cols["kind"] = _as_int_column("kind", np.zeros(n, np.uint8) if kind is None else kind, path)
        cols["step"] = _as_int_column("step", np.arange(n) if step is None else step, path)
        _validate(cols, path)
        for c in _COLUMNS:
            cols[c] = np.ascontiguousarray(cols[c], dtype=_DTYPES[c])
            cols[c].setflags(write=False)
        return cls(**cols, meta=dict(meta or {}), name=name)

    @classmethod
    def load(cls, path: str | os.PathLike[str]) -> Trace:
        """Load a ``.npz`` trace, validating every column (errors name column and row)."""
        p = existing_trace_file(path)
        if not_a_zip_archive(p):
            raise TraceError("not an .npz trace (an .npz is a zip archive; this file is not one)", path=p,
                             hint="a trace of another format (docs/TRACES.md): name it, as in "
                                  "`cachegym sim PATH oracleGeneral ...`, trace.format= in the "
                                  "configs, or read_trace(path, format=...) in Python")
        short = too_short_for_zip(p)
        if short is not None:
            raise TraceError(f"the file has only {short} bytes: empty or truncated, not an .npz trace",
                             path=p, hint="write it again (Trace.save)")
        try:
            with np.load(p, allow_pickle=False) as z:
                data = {k: z[k] for k in z.files}
        except Exception as e:  # zipfile/pickle/format errors
            raise TraceError(
                f"not a readable .npz trace, truncated or corrupt or of another format "
                f"({type(e).__name__}: {e})",
                path=p,
                hint="write it again (Trace.save); a file of a libCacheSim format is read by "
                     "naming it: cachegym sim FILE oracleGeneral ..., trace.format=oracleGeneral, "
                     "or read_trace(path, format='oracleGeneral') (also lcs, vscsi, csv, txt)",
            ) from None
        missing = [c for c in _REQUIRED if c not in data]
        if missing:
            raise TraceError(
                f"missing required column(s) {missing}; found {sorted(data)}",
                path=p,
                hint="a trace .npz needs at least key, size and op",
            )
        unknown = sorted(set(data) - set(_COLUMNS) - {"meta"})
        if unknown:
            raise TraceError(f"unknown column(s) {unknown}; allowed: {list(_COLUMNS) + ['meta']}", path=p)
        meta: dict[str, Any] = {}
        if "meta" in data:
            try:
                meta = json.loads(str(data["meta"]))
                if not isinstance(meta, dict):
                    raise ValueError("not a JSON object")
            except (ValueError, RecursionError) as e:  # (nested past the parser's depth: Recursion)
                raise TraceError(f"meta is not a JSON object string ({type(e).__name__}: {e})",
                                 path=p, column="meta") from None
        if np.ndim(data["key"]) == 1 and len(data["key"]) == 0:  # as every other reader
            raise TraceError("no records", path=p, hint="the trace is empty: nothing to replay")
        name = os.path.splitext(os.path.basename(p))[0]
        try:
            return cls.from_arrays(
                data["key"],
                data["size"],
                data["op"],
                data.get("compute_ns"),
                data.get("kind"),
                data.get("step"),
                meta=meta,
                name=name,
                path=p,
            )
        except MemoryError:  # (its checks take a few bytes a row beside the columns)
            raise TraceError(f"its {np.size(data['key']):,} rows need more memory than this "
                             "machine has", path=p, hint="replay a window of it (trace.max_requests=)"
                             " or use a machine with more memory") from None

    def save(self, path: str | os.PathLike[str]) -> None:
        """Save as compressed ``.npz`` with exactly the documented column names (``.npz`` is
        appended to a name without it, as :func:`numpy.savez_compressed` does). The file
        appears whole or not at all: it is written beside its final name and then renamed, so
        a reader -- another run sharing a cache of recorded traces -- never sees it half
        written, and a failed save leaves a file already there as it was."""
        final = file_to_write(path, ".npz")
        replace_atomically(final, lambda f: np.savez_compressed(
            f,
            key=self.key,
            size=self.size,
            op=self.op,
            compute_ns=self.compute_ns,
            kind=self.kind,
            step=self.step,
            meta=np.array(json.dumps(self.meta)),
        ), binary=True)

    # ------------------------------------------------------------------ views
    def __len__(self) -> int:
        return len(self.key)

    def window(self, start: int, stop: int) -> Trace:
        """Rows ``[start, stop)`` as a new trace (frees of objects created before ``start``
        are dropped, since they name no object in the window); ``stop`` past the end is the
        end. Negative rows (not counted from the end) and ``start > stop`` are refused."""
        if not (isinstance(start, (int, np.integer)) and isinstance(stop, (int, np.integer))
                and not isinstance(start, bool) and not isinstance(stop, bool)
                and 0 <= start <= stop):
            raise ConfigError(f"window: rows {start!r}..{stop!r} of trace {self.name!r} are not a "
                              f"range; pass 0 <= start <= stop (rows past {len(self)}, its length, "
                              "are the end)")
        sl = slice(int(start), int(stop))
        key, op = self.key[sl], self.op[sl]
        keep = np.ones(len(key), bool)
        if (op == Op.FREE).any():
            keep = _frees_of_known_objects(key, op)
        idx = np.flatnonzero(keep)
        return Trace.from_arrays(
            key[idx], self.size[sl][idx], op[idx], self.compute_ns[sl][idx],
            self.kind[sl][idx], self.step[sl][idx], meta=self.meta,
            name=f"{self.name}[{start}:{stop}]",
        )

    def with_sizes(self, size: int) -> Trace:
        """The same trace with every size replaced (``1`` gives libCacheSim's object mode)."""
        return Trace.from_arrays(
            self.key, size, self.op, self.compute_ns, self.kind, self.step, self.meta, self.name
        )

    # ------------------------------------------------------------------ derived arrays
    def object_ids(self) -> np.ndarray:
        """Dense id per row of the object it touches: a key reused after a free is a new object.
        (Read-only: computed once per trace, as :meth:`next_use`.)"""
        return self._objects_next()[0]

    def next_use(self) -> np.ndarray:
        """For each row, the row index of the next read/write of the same object, or :data:`INF`.

        Free rows get INF. This is what Belady's oracle and libCacheSim's oracleGeneral
        ``next access`` field read. (Read-only: computed once per trace.)
        """
        return self._objects_next()[1]

    def free_row(self) -> np.ndarray:
        """For each row, the row of the free that ends its object's life (the next free of the
        same key), or :data:`INF` when the object is never freed in the trace. An object used
        no more before its free costs nothing while it stays, and a write-back for nothing
        if a dirty one is evicted (the traffic teacher reads this). (Read-only: computed once
        per trace.)"""
        def make() -> np.ndarray:
            obj = self.object_ids()
            free_rows = np.flatnonzero(self.op == Op.FREE)
            of_obj = np.full(int(obj.max()) + 1 if len(obj) else 0, INF, np.int64)
            of_obj[obj[free_rows]] = free_rows  # (an object has at most one free: its last row)
            got = of_obj[obj]
            got.setflags(write=False)
            return got

        return self._kept("_free_row", make)  # type: ignore[no-any-return]

    def _objects_next(self) -> tuple[np.ndarray, np.ndarray]:
        """``(object_ids, next_use)``, computed on first use and kept (an environment's reset
        asks for both of its window)."""
        def make() -> tuple[np.ndarray, np.ndarray]:
            got = _objects_and_next_use(self.key, self.op)
            for a in got:
                a.setflags(write=False)
            return got

        return self._kept("_derived", make)  # type: ignore[no-any-return]

    def _kept(self, name: str, make: Any) -> Any:
        """``make()``, computed on first use and kept as ``name`` (the trace is immutable)."""
        got = self.__dict__.get(name)
        if got is None:
            got = make()
            object.__setattr__(self, name, got)
        return got

    def working_set_bytes(self) -> int:
        """Sum of the sizes of distinct objects (first size seen for each). (Computed once per
        trace: the evaluator reads it per capacity.)"""
        return self._kept(  # type: ignore[no-any-return]
            "_working_set", lambda: int(self.size[self._first_rows()].sum()))

    def _first_rows(self) -> np.ndarray:
        """The row of each object's first access, by object id (kept: the working set and the
        peak of live bytes both read it)."""
        return self._kept(  # type: ignore[no-any-return]
            "_first", lambda: np.unique(self.object_ids(), return_index=True)[1])

    def peak_live_bytes(self) -> int:
        """Peak of bytes of objects created and not yet freed (an object is live from its first
        access to its free). (Computed once per trace: the evaluator reads it per capacity.)"""
        return self._kept("_peak_live", self._peak_live)  # type: ignore[no-any-return]

    def _peak_live(self) -> int:
        obj = self.object_ids()
        first = self._first_rows()
        delta = np.zeros(len(self) + 1, np.int64)
        delta[first] += self.size[first]
        free_rows = np.flatnonzero(self.op == Op.FREE)
        if len(free_rows):
            # size of the freed object = size at its creation
            first_of = np.empty(obj.max() + 1 if len(obj) else 0, np.int64)
            first_of[obj[first]] = self.size[first]
            delta[free_rows + 1] -= first_of[obj[free_rows]]
        return int(np.cumsum(delta).max()) if len(self) else 0


# ---------------------------------------------------------------------- helpers
def _as_int_column(name: str, values: Any, path: str | None) -> np.ndarray:
    a = np.asarray(values)
    if a.ndim != 1:
        raise TraceError(f"must be one-dimensional, got shape {a.shape}", path=path, column=name)
    if a.dtype.kind == "f":
        bad = ~np.isfinite(a) | (a != np.round(a))
        if bad.any():
            raise TraceError(
                f"non-integer value {a[np.argmax(bad)]!r}", path=path, column=name, row=int(np.argmax(bad))
            )
    elif a.dtype.kind not in "iub":
        raise TraceError(f"must be integers, got dtype {a.dtype}", path=path, column=name)
    return a


def _validate(cols: dict[str, np.ndarray], path: str | None) -> None:
    n = len(cols["key"])
    for c in _COLUMNS:
        if len(cols[c]) != n:
            raise TraceError(f"has {len(cols[c])} rows but key has {n}", path=path, column=c)

    def first_bad(c: str, bad: np.ndarray, what: str) -> None:
        if bad.any():
            r = int(np.argmax(bad))
            raise TraceError(f"{what} (got {cols[c][r]})", path=path, column=c, row=r)

    # checked before the cast to the on-disk dtypes, so that e.g. op -1 cannot wrap to 255 and
    # a float size of 2**63 cannot become INT64_MIN
    for c in ("key", "step"):
        first_bad(c, _outside_int64(cols[c]), f"{c} does not fit in int64")
    first_bad("size", cols["size"] <= 0, "size must be > 0 bytes")
    first_bad("size", cols["size"] > MAX_SIZE, f"size must be at most 2**48 = {MAX_SIZE} bytes")
    first_bad("op", (cols["op"] < 0) | (cols["op"] > 2), "op must be 0 (read), 1 (write) or 2 (free)")
    first_bad("compute_ns", cols["compute_ns"] < 0, "compute_ns must be >= 0")
    first_bad("compute_ns", cols["compute_ns"] > MAX_TOTAL,
              f"compute_ns must be at most 2**60 = {MAX_TOTAL} ns")
    first_bad("kind", (cols["kind"] < 0) | (cols["kind"] > max(Kind)), f"kind must be in 0..{int(max(Kind))}")
    for c, what in (("size", "sizes"), ("compute_ns", "compute times")):
        _check_total(cols[c], c, what, path)
    if n and (np.asarray(cols["op"]) == Op.FREE).any():
        ok = _frees_of_known_objects(np.asarray(cols["key"], np.int64), np.asarray(cols["op"]))
        bad = ~ok
        if bad.any():
            r = int(np.argmax(bad))
            raise TraceError(
                f"free of key {cols['key'][r]} that names no live object (never accessed, or freed already)",
                path=path,
                column="op",
                row=r,
            )


def _outside_int64(a: np.ndarray) -> np.ndarray:
    """Mask of the values int64 cannot hold (a float of 2**63 or more, a uint64 above 2**63 - 1)."""
    if a.dtype.kind == "f":
        return (a < -(2.0**63)) | (a >= 2.0**63)
    if a.dtype.kind == "u":
        return a > np.iinfo(np.int64).max
    return np.zeros(len(a), bool)


def _check_total(values: np.ndarray, column: str, what: str, path: str | None) -> None:
    """Refuse a column whose running sum passes :data:`MAX_TOTAL`, naming the record where it
    does. Every value is already in 0 .. 2**60, so the int64 running sum passes MAX_TOTAL
    before it could wrap: the first crossing it reports is exact."""
    if not len(values):
        return
    total = np.cumsum(values.astype(np.int64, copy=False), dtype=np.int64)
    over = total > MAX_TOTAL
    if over.any():
        r = int(np.argmax(over))
        raise TraceError(
            f"the {what} of the records up to this one sum past 2**60 = {MAX_TOTAL}, more than "
            "any replay can count", path=path, column=column, row=r,
            hint="split the trace into windows (Trace.window) or scale the column down")


def _frees_of_known_objects(key: np.ndarray, op: np.ndarray) -> np.ndarray:
    """Boolean mask: False exactly at free rows whose object has no earlier access."""
    n = len(key)
    order = np.argsort(key, kind="stable")
    ks, fs = key[order], op[order] == Op.FREE
    prev_same = np.zeros(n, bool)
    prev_same[1:] = ks[1:] == ks[:-1]
    prev_free = np.zeros(n, bool)
    prev_free[1:] = fs[:-1]
    bad_sorted = fs & (~prev_same | prev_free)
    ok = np.ones(n, bool)
    ok[order[bad_sorted]] = False
    return ok


def _objects_and_next_use(key: np.ndarray, op: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    n = len(key)
    if n == 0:
        return np.zeros(0, np.int64), np.zeros(0, np.int64)
    order = np.argsort(key, kind="stable")
    ks = key[order]
    fs = (op[order] == Op.FREE).astype(np.int64)
    group_start = np.ones(n, bool)
    group_start[1:] = ks[1:] != ks[:-1]
    frees_before = np.cumsum(fs) - fs
    start_idx = np.maximum.accumulate(np.where(group_start, np.arange(n), 0))
    gen = frees_before - frees_before[start_idx]
    new_obj = group_start.copy()
    new_obj[1:] |= gen[1:] != gen[:-1]
    obj_sorted = np.cumsum(new_obj) - 1
    obj = np.empty(n, np.int64)
    obj[order] = obj_sorted
    nxt_sorted = np.full(n, INF, np.int64)
    same_next = np.zeros(n, bool)
    same_next[:-1] = (obj_sorted[1:] == obj_sorted[:-1]) & (fs[1:] == 0) & (fs[:-1] == 0)
    nxt_sorted[:-1][same_next[:-1]] = order[1:][same_next[:-1]]
    nxt = np.empty(n, np.int64)
    nxt[order] = nxt_sorted
    return obj, nxt
