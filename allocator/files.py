"""Files written whole: :func:`replace_atomically` writes through a temporary file beside the
target and ``os.replace`` puts it in place, so a reader (or a later run) sees the old file or
the new one, never half of one, and a write that fails (a full disk, an interrupt) leaves the
old file as it was. Every writer of a file a user keeps (results, policies, traces, snapshots,
ONNX exports) goes through it."""

from __future__ import annotations

import os
import tempfile
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import IO, Any

__all__ = ["replace_atomically"]


def replace_atomically(path: str | os.PathLike[str], write: Callable[[IO[Any]], Any], *,
                       binary: bool = False) -> str:
    """Write ``path`` through ``write(f)`` on a temporary file beside it (text, UTF-8, or
    ``binary``), then ``os.replace`` it into place (the old file stays whole until then; on an
    error the temporary file is removed and the error raised); returns ``path``."""
    p = os.fspath(path)
    with _temporary_beside(p, binary) as f:
        write(f)
    return p


def _umask() -> int:
    """The process's umask (read by setting it, then put back)."""
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


@contextmanager
def _temporary_beside(path: str, binary: bool) -> Iterator[IO[Any]]:
    d = os.path.dirname(os.path.abspath(path))
    fd, tmp = tempfile.mkstemp(prefix="." + os.path.basename(path) + ".", suffix=".tmp", dir=d)
    try:
        os.fchmod(fd, 0o666 & ~_umask())  # (mkstemp makes it 0600: the file's own mode, as open())
        f: IO[Any] = (os.fdopen(fd, "wb") if binary
                      else os.fdopen(fd, "w", newline="", encoding="utf-8"))
        with f:
            yield f
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise
