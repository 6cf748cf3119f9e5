"""How much a deployed policy holds: the sizes of its structures, and the process's memory.

A policy serving a pool for days must hold memory bounded by the objects it tracks, whatever the
number of requests. :func:`structure_sizes` walks everything a pool and its policy reach (the
attributes of cachegym's own objects: the pool, the policy, a guard, its experts and their shadow
pools) and reports the length of every container on the way, by the path that reaches it, so that
a test can check each one against the number of objects; :func:`rss_bytes` is the process's
resident memory, what ``scripts/bench.py guardmem`` samples over millions of requests.
"""

from __future__ import annotations

import array
import os
import types
from collections import deque
from collections.abc import Iterator
from typing import Any

import numpy as np

__all__ = ["structure_sizes", "rss_bytes"]

_OURS = ("cachegym.",)
_CONTAINERS = (dict, list, set, frozenset, tuple, deque, array.array)
_ATOMS = (int, float, bool, str, bytes, type(None), np.generic, memoryview)
_DESCRIPTORS = (types.MemberDescriptorType, types.GetSetDescriptorType)
_attr_names: dict[type, tuple[str, ...]] = {}


# Cython's utility types in a compiled module of ours (typed memoryviews, cython.view.array):
# views of NumPy arrays counted already, whose properties (``.T``) make new objects on each read
_CYTHON_UTILITY = ("memoryview", "_memoryviewslice", "array", "Enum")


def _ours(obj: Any) -> bool:
    t = type(obj)
    return t.__module__.startswith(_OURS) and t.__name__ not in _CYTHON_UTILITY


def _names(cls: type) -> tuple[str, ...]:
    """The data attributes a class declares (slots; a compiled class's public fields)."""
    names = _attr_names.get(cls)
    if names is None:
        seen: dict[str, None] = {}
        for c in cls.__mro__:
            for n, v in vars(c).items():
                if isinstance(v, _DESCRIPTORS) and n not in ("__dict__", "__weakref__"):
                    seen[n] = None
        names = _attr_names[cls] = tuple(seen)
    return names


def _attributes(obj: Any) -> Iterator[tuple[str, Any]]:
    d = getattr(obj, "__dict__", None)
    if isinstance(d, dict):
        yield from d.items()
    for n in _names(type(obj)):
        try:
            yield n, getattr(obj, n)
        except AttributeError:  # an empty slot
            continue


def structure_sizes(root: Any, name: str = "root") -> dict[str, int]:
    """The length of every container reachable from ``root`` through the attributes of
    cachegym's objects (and through the containers themselves), by path (``root.guard._named
    [*].pool._objs``; the elements of a container are ``[*]``; each container counts once, under
    its shortest path, and the largest of the containers a path names counts). A NumPy array counts its rows (a view is not counted: its base is); a
    bound method leads to its object."""
    out: dict[str, int] = {}
    seen: set[int] = set()
    stack: deque[tuple[str, Any]] = deque([(name, root)])  # breadth first: the shortest paths
    while stack:
        path, obj = stack.popleft()
        if isinstance(obj, _ATOMS) or id(obj) in seen:
            continue
        seen.add(id(obj))
        if isinstance(obj, types.MethodType):
            stack.append((path, obj.__self__))
        elif isinstance(obj, np.ndarray):
            if obj.base is None:  # (a view is counted as the array it views)
                out[path] = max(out.get(path, 0), obj.shape[0] if obj.ndim else 1)
        elif isinstance(obj, _CONTAINERS):
            out[path] = max(out.get(path, 0), len(obj))
            items = obj.values() if isinstance(obj, dict) else obj
            if isinstance(obj, array.array):
                continue
            for v in items:
                if not isinstance(v, _ATOMS):
                    stack.append((path + "[*]", v))
        elif _ours(obj):
            for n, v in _attributes(obj):
                if not isinstance(v, _ATOMS):
                    stack.append((f"{path}.{n}", v))
    return out


def rss_bytes() -> int:
    """The process's resident memory now (Linux: ``/proc/self/statm``); elsewhere its peak
    (``resource.getrusage``)."""
    try:
        with open("/proc/self/statm") as f:
            return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    except (OSError, ValueError, IndexError):
        import resource
        import sys

        peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
        return int(peak if sys.platform == "darwin" else peak * 1024)
