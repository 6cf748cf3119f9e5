"""What survives an interrupted sweep: a journal of completed runs, and files replaced whole.

:class:`RunJournal` appends each completed run to ``runs.jsonl`` in the output directory as it
finishes (one JSON line, flushed and synced), so SIGINT, SIGTERM or a crash loses at most the
run in progress; a sweep started with ``resume=True`` takes the runs already there whose key
matches instead of running them again. :func:`replace_atomically` writes a final file through a
temporary file in the same directory and ``os.replace``, so a reader sees the old file or the
new one, never half of one.

Invariant: every complete line of ``runs.jsonl`` is ``{"key": str, "row": object}`` for one
finished run (or, ``{"bound_rows": [row, ...]}`` as its row, one trace and capacity's offline
bounds); a line cut short by a kill is its last line, and is ignored (and dropped).
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
from typing import IO, Any

import numpy as np

from cachegym.allocator.files import replace_atomically

__all__ = ["RunJournal", "digest", "JOURNAL"]

log = logging.getLogger(__name__)

JOURNAL = "runs.jsonl"


def digest(obj: Any) -> str:
    """SHA-256 of ``obj``'s canonical JSON (NumPy values as Python's)."""
    return hashlib.sha256(json.dumps(obj, sort_keys=True, default=_plain).encode()).hexdigest()


def _plain(v: Any) -> Any:
    if isinstance(v, np.generic):
        return v.item()
    return str(v)


class RunJournal:
    """The completed runs of one sweep, in ``out_dir/runs.jsonl``.

    ``resume=False`` starts afresh (an earlier journal is discarded); ``resume=True`` keeps it
    and :meth:`get` answers the rows of the runs it holds. Use as a context manager.
    """

    def __init__(self, out_dir: str, *, resume: bool) -> None:
        self.path = os.path.join(out_dir, JOURNAL)
        self._done: dict[str, dict[str, Any]] = {}
        if resume:
            if not os.path.exists(self.path):  # (a new time-stamped folder, without out_dir)
                log.warning("eval.resume=true, but %s holds no runs.jsonl to resume: every run "
                            "runs (give the out_dir of the interrupted sweep to resume it)", out_dir)
            self._done = self._read()
        elif os.path.exists(self.path):
            log.info("%s: starting afresh (eval.resume=false); the runs it held are discarded", self.path)
        self._f: IO[str] = open(self.path, "a" if resume else "w", encoding="utf-8")  # noqa: SIM115

    def _read(self) -> dict[str, dict[str, Any]]:
        done: dict[str, dict[str, Any]] = {}
        if not os.path.exists(self.path):
            return done
        with open(self.path, "rb") as f:
            lines = f.read().split(b"\n")
        good: list[str] = []
        for i, raw in enumerate(lines):
            if not raw.strip():
                continue
            try:
                line = raw.decode("utf-8")
                rec = json.loads(line)
                done[str(rec["key"])] = dict(rec["row"])
                good.append(line)
            except (ValueError, KeyError, TypeError, RecursionError):  # (UnicodeDecodeError too)
                log.warning("%s: line %d is not a complete record (a run cut short?); ignored",
                            self.path, i + 1)
        # rewrite without a cut line, so that the next record starts on a line of its own
        replace_atomically(self.path, lambda f: f.write("".join(g + "\n" for g in good)))
        return done

    def __len__(self) -> int:
        return len(self._done)

    def get(self, key: str) -> dict[str, Any] | None:
        """The row of the completed run ``key`` (``None``: not run yet)."""
        row = self._done.get(key)
        return None if row is None else dict(row)

    def add(self, key: str, row: dict[str, Any]) -> None:
        """Record a completed run: one line, flushed and synced before this returns."""
        self._f.write(json.dumps({"key": key, "row": row}, default=_plain) + "\n")
        self._f.flush()
        os.fsync(self._f.fileno())
        self._done[key] = dict(row)

    def close(self) -> None:
        self._f.close()

    def __enter__(self) -> RunJournal:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
