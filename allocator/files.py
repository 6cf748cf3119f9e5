"""Files written whole: :func:`replace_atomically` writes through a temporary file beside the
target and ``os.replace`` puts it in place, so a reader (or a later run) sees the old file or
the new one, never half of one, and a write that fails (a full disk, an interrupt) leaves the
old file as it was. Every writer of a file a user keeps (results, policies, traces, snapshots,
ONNX exports) goes through it."""

from __future__ import annotations

import errno
import os
import tempfile
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import IO, Any

from cachegym.allocator.errors import OutputError

__all__ = ["replace_atomically", "file_to_write"]


def file_to_write(path: str | os.PathLike[str], suffix: str = "") -> str:
    """``path`` as the name of a file to write, ``suffix`` appended where the name lacks it
    (``x`` -> ``x.npz``); an existing directory at ``path`` is refused (:class:`OutputError`
    naming it), where a sibling ``path + suffix`` used to be written."""
    p = os.fspath(path)
    if os.path.isdir(p):
        raise OutputError(errno.EISDIR, "it is a directory: give the name of a file (in it, say)", p)
    return p if not suffix or p.endswith(suffix) else p + suffix


def replace_atomically(path: str | os.PathLike[str], write: Callable[[IO[Any]], Any], *,
                       binary: bool = False) -> str:
    """Write ``path`` through ``write(f)`` on a temporary file beside it (text, UTF-8, or
    ``binary``), then ``os.replace`` it into place (the old file stays whole until then; on an
    error the temporary file is removed and the error raised); returns ``path``. A symlink is
    written through (its target replaced); a file replaced keeps its mode. An error of the
    file system (a directory at ``path``, a missing folder, a full disk) is an
    :class:`OutputError` naming ``path`` (``filename``), not the temporary file."""
    p = file_to_write(path)
    try:
        with _temporary_beside(os.path.realpath(p), binary) as f:  # (through a symlink: its target)
            write(f)
    except OutputError:
        raise
    except OSError as e:
        folder = os.path.dirname(os.path.abspath(p))
        why = (e.strerror or str(e) if os.path.isdir(folder) else
               f"{folder} is not a folder" if os.path.exists(folder) else f"no folder {folder}")
        raise OutputError(e.errno, f"{why}; give a path in a writable directory", p) from e
    return p


def _umask() -> int:
    """The process's umask (read by setting it, then put back)."""
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


@contextmanager
def _temporary_beside(path: str, binary: bool) -> Iterator[IO[Any]]:
    d = os.path.dirname(os.path.abspath(path))
    # (a name the file system takes whatever the target's length: 255 bytes at most)
    fd, tmp = tempfile.mkstemp(prefix="." + os.path.basename(path)[:64] + ".", suffix=".tmp", dir=d)
    try:
        try:  # the mode of the file it replaces (a private 0600 file stays private), else open()'s
            mode = os.stat(path).st_mode & 0o7777
        except OSError:
            mode = 0o666 & ~_umask()
        os.fchmod(fd, mode)  # (mkstemp makes it 0600)
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
