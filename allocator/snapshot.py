"""A memory snapshot of the pool in PyTorch's format, for PyTorch's memory viewer.

:meth:`Pool.memory_snapshot` returns the dictionary ``torch.cuda.memory._snapshot()`` returns
and ``torch.cuda._memory_viz`` renders (``trace_plot``, ``segment_plot``, ``segsum``,
``trace``; https://pytorch.org/memory_viz):

* ``segments``: one segment, the device arena (address 0, ``total_size`` the arena's bytes),
  whose ``blocks`` tile it by address: ``active_allocated`` (an object's block: ``size`` its
  512-byte footprint, ``requested_size`` the object's size), ``active_pending_free`` (a dirty
  victim's block, held until its write-back completes: PyTorch's block freed but awaiting its
  stream) and ``inactive`` (free);
* ``device_traces``: one list (device 0) of the events :class:`MemoryRecorder` saw, as
  PyTorch's ``TraceEntry``: ``alloc`` (a miss placed its object, a prefetch started),
  ``free_requested`` (an eviction or a free), ``free_completed`` (the block is free again: at
  once, or once its write-back completed; a failed prefetch gives its block up with both) and
  (a failed write-back, whose victim takes its block back: ``free_completed`` then ``alloc``)
  ``oom`` (a :class:`PoolExhausted`), each with ``addr`` (the arena offset), ``size``,
  ``stream`` 0, ``time_us`` (the pool's simulated clock) and ``frames``.

Frames name what PyTorch's would (the code that allocated): the object, its kind and the pool
request (``tick``: a trace's row when a fresh pool replays it) as
``{"filename": "request", "line": tick, "name": "key 7 activation (miss)"}``, which the viewer
shows as ``request:12:key 7 activation (miss)``.

Files: :func:`write_snapshot` writes JSON (``.json``), which :func:`read_snapshot` reads, or a
pickle (``.pickle``), as ``torch.cuda.memory._dump_snapshot`` writes it, for PyTorch's viewer
alone: cachegym never reads a pickle (a file from a user never runs code).
"""

from __future__ import annotations

import json
import os
import pickle
from collections import deque
from pathlib import Path
from typing import Any

from cachegym.allocator.errors import ConfigError
from cachegym.allocator.files import replace_atomically
from cachegym.allocator.stats import PoolHook
from cachegym.allocator.trace import Kind

__all__ = ["MemoryRecorder", "build_snapshot", "read_snapshot", "write_snapshot"]

_ALLOCS = frozenset(("miss", "prefetch", "restore"))  # the event gives the object a block
_FREES = frozenset(("evict", "free"))  # the object gives its block up (free_requested)


def _kind_name(kind: int) -> str:
    return Kind(kind).name.lower() if 0 <= kind <= max(Kind) else "freed"


def _frames(key: Any, kind: int, what: str, tick: int | None) -> list[dict[str, Any]]:
    return [{"filename": "request" if tick is not None else "pool",
             "line": -1 if tick is None else int(tick),
             "name": f"key {key} {_kind_name(kind)} ({what})"}]


class MemoryRecorder:
    """A pool hook (:class:`allocator.stats.PoolHook`) that keeps the last ``max_entries``
    block events as PyTorch's trace entries (see the module's docstring); ``forward``, a hook
    set before it, receives every event after it. :meth:`Pool.record_memory_history` attaches
    one; :meth:`Pool.memory_snapshot` reads it."""

    def __init__(self, max_entries: int = 100_000, *, forward: PoolHook | None = None) -> None:
        if (not isinstance(max_entries, int) or isinstance(max_entries, bool)
                or max_entries <= 0):
            raise ConfigError(f"max_entries must be a positive number of trace entries, got "
                              f"{max_entries!r} (PyTorch's default is 100000)")
        self.max_entries = max_entries
        self.forward = forward
        self.entries: deque[dict[str, Any]] = deque(maxlen=max_entries)
        self._alloc_frames: dict[int, list[dict[str, Any]]] = {}  # addr -> frames of its alloc
        self._requested: set[int] = set()  # addresses with a free_requested, not yet completed

    def _entry(self, action: str, event: dict[str, Any], addr: int, size: int,
               frames: list[dict[str, Any]]) -> None:
        self.entries.append({"action": action, "addr": addr, "size": size, "stream": 0,
                             "time_us": event["now_ns"] // 1000, "frames": frames})

    def __call__(self, event: dict[str, Any]) -> None:
        ev, addr = event["event"], event["offset"]
        if ev in _ALLOCS and addr >= 0:
            frames = _frames(event["key"], event["kind"], ev, event["tick"])
            if addr in self._requested:  # a failed write-back: its victim takes the block back
                self._requested.discard(addr)
                self._entry("free_completed", event, addr, event["nbytes"],
                            self._alloc_frames.get(addr) or frames)
            self._alloc_frames[addr] = frames
            self._entry("alloc", event, addr, event["nbytes"], frames)
        elif ev in _FREES and addr >= 0:
            self._requested.add(addr)
            self._entry("free_requested", event, addr, event["nbytes"],
                        _frames(event["key"], event["kind"], ev, event["tick"]))
        elif ev == "release":
            frames = self._alloc_frames.pop(addr, [])  # (those of its allocation, if seen)
            if not frames:
                frames = _frames(event["key"], event["kind"], "release", event["tick"])
            if addr not in self._requested:  # (a failed prefetch gives its block up at once)
                self._entry("free_requested", event, addr, event["nbytes"], frames)
            self._requested.discard(addr)
            self._entry("free_completed", event, addr, event["nbytes"], frames)
        elif ev == "oom":
            self.entries.append({"action": "oom", "size": event["size"], "stream": 0,
                                 "device_free": event["free_bytes"],
                                 "time_us": event["now_ns"] // 1000, "frames": []})
        if self.forward is not None:
            self.forward(event)

    def frames_at(self, addr: int) -> list[dict[str, Any]] | None:
        """The frames of the recorded allocation of the block at ``addr`` still held."""
        return self._alloc_frames.get(addr)

    def __repr__(self) -> str:
        return (f"MemoryRecorder(max_entries={self.max_entries}, entries={len(self.entries)}, "
                f"forward={self.forward!r})")


def build_snapshot(capacity: int, held: list[tuple[int, int, int, Any, int]],
                   awaiting: list[tuple[int, int, Any, int]], free: list[tuple[int, int]],
                   recorder: MemoryRecorder | None) -> dict[str, Any]:
    """The snapshot of an arena of ``capacity`` bytes whose blocks are ``held`` ``(offset,
    nbytes, size, key, kind)`` by objects, ``awaiting`` ``(offset, nbytes, key, kind)`` a copy
    out (``kind`` -1: the object was freed since) and ``free`` ``(offset, nbytes)``;
    ``device_traces`` from ``recorder`` (empty without)."""
    blocks: list[dict[str, Any]] = []
    for off, nb, size, key, kind in held:
        frames = (recorder.frames_at(off) if recorder is not None else None) or _frames(
            key, kind, "resident", None)
        blocks.append({"address": off, "size": nb, "requested_size": size,
                       "state": "active_allocated", "frames": [dict(f) for f in frames]})
    for off, nb, key, kind in awaiting:
        frames = (recorder.frames_at(off) if recorder is not None else None) or _frames(
            key, kind, "write-back", None)
        blocks.append({"address": off, "size": nb, "requested_size": nb,
                       "state": "active_pending_free", "frames": [dict(f) for f in frames]})
    for off, nb in free:
        blocks.append({"address": off, "size": nb, "requested_size": 0, "state": "inactive",
                       "frames": []})
    blocks.sort(key=lambda b: b["address"])
    allocated = sum(b["size"] for b in blocks if b["state"] == "active_allocated")
    pending = sum(b["size"] for b in blocks if b["state"] == "active_pending_free")
    segment = {"device": 0, "address": 0, "total_size": capacity, "stream": 0,
               "segment_type": "large", "segment_pool_id": [0, 0], "is_expandable": False,
               "allocated_size": allocated, "active_size": allocated + pending,
               "requested_size": sum(b["requested_size"] for b in blocks
                                     if b["state"] == "active_allocated"),
               "frames": [], "blocks": blocks}
    trace = [] if recorder is None else [
        {**e, "frames": [dict(f) for f in e["frames"]]} for e in recorder.entries]
    return {"segments": [segment], "device_traces": [trace]}


_PICKLE_SUFFIXES = (".pickle", ".pkl")


def write_snapshot(snapshot: dict[str, Any], path: str | os.PathLike[str]) -> None:
    """Write ``snapshot`` to ``path``: JSON for a ``.json`` name; a pickle for a ``.pickle``
    or ``.pkl`` name (the format of ``torch.cuda.memory._dump_snapshot``, for PyTorch's viewer
    only: :func:`read_snapshot` refuses it)."""
    p = Path(path)
    suffix = p.suffix.lower()
    # (written whole: a failed write, e.g. a full disk, leaves an older file as it was)
    if suffix == ".json":
        text = json.dumps(snapshot)
        replace_atomically(p, lambda f: f.write(text))
    elif suffix in _PICKLE_SUFFIXES:
        replace_atomically(p, lambda f: pickle.dump(snapshot, f), binary=True)
    else:
        raise ConfigError(f"dump_snapshot: {str(p)!r} has neither a .json name (JSON, which "
                          "cachegym reads back) nor a .pickle name (PyTorch's format, for "
                          "https://pytorch.org/memory_viz): name the file so")


def read_snapshot(path: str | os.PathLike[str]) -> dict[str, Any]:
    """Read a snapshot :func:`write_snapshot` wrote as JSON (a pickle is refused: reading one
    could run code; write ``.json`` instead). The result renders with
    ``torch.cuda._memory_viz.trace_plot`` as PyTorch's own snapshot does."""
    p = Path(path)
    if p.suffix.lower() in _PICKLE_SUFFIXES:
        raise ConfigError(f"read_snapshot: {str(p)!r} is a pickle, which cachegym never reads "
                          "(loading one can run code); dump the snapshot to a .json file")
    if p.exists() and not p.is_file():  # (reading would wait on a pipe for ever)
        raise ConfigError(f"read_snapshot: {str(p)!r} is not a regular file (a directory or a "
                          "pipe?); give the .json file Pool.dump_snapshot wrote")
    try:
        data = json.loads(p.read_text())
    except (OSError, UnicodeDecodeError, json.JSONDecodeError, RecursionError) as e:
        raise ConfigError(f"read_snapshot: {str(p)!r} is not a readable JSON snapshot ({e}); "
                          "write one with Pool.dump_snapshot('NAME.json')") from e
    if (not isinstance(data, dict) or not isinstance(data.get("segments"), list)
            or not isinstance(data.get("device_traces"), list)):
        raise ConfigError(f"read_snapshot: {str(p)!r} is JSON but not a memory snapshot (it "
                          "needs the lists 'segments' and 'device_traces'); write one with "
                          "Pool.dump_snapshot('NAME.json')")
    return data
