"""Readers and writers for trace files: ``.npz`` and libCacheSim's ``oracleGeneral``, ``csv``, ``txt``.

Every reader is vectorised (no Python loop per record) and returns a validated
:class:`~allocator.trace.Trace`. Malformed input raises :class:`~allocator.errors.TraceError`
naming the file, the record and the problem; with ``skip_bad=True`` bad records are dropped
instead, and their count is logged as a warning and stored in ``trace.meta["skipped"]``.

Conventions for libCacheSim formats (which have no op, kind or compute columns):

- every request is a read; ``compute_ns`` and ``kind`` are 0;
- the request's clock time goes into the ``step`` column (row index when there is no time);
- object ids are unsigned 64-bit in every format (csv and txt also take negative ids down to
  -2**63); ids of 2**63 and above are reinterpreted bit for bit as int64 keys (they become
  negative keys), so write -> read -> write is exact;
- a record whose number does not parse, or is out of range (a size above 2**48, a time or id
  int64 cannot hold), is that record's error: the others are read as they are;
- a file with no records is an error in every format (``.npz`` included).
"""

from __future__ import annotations

import bz2
import gzip
import inspect
import logging
import lzma
import os
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any, Literal

import numpy as np

from cachegym.allocator.errors import ConfigError, TraceError
from cachegym.allocator.files import replace_atomically
from cachegym.allocator.trace import MAX_SIZE, ZIP_MAGIC, Op, Trace, existing_trace_file

__all__ = [
    "ORACLE_GENERAL_DTYPE",
    "FORMATS",
    "format_name",
    "read_trace",
    "write_trace",
    "read_npz",
    "read_oracle_general",
    "write_oracle_general",
    "read_lcs",
    "lcs_dtype",
    "read_vscsi",
    "read_csv",
    "write_csv",
    "read_txt",
    "write_txt",
    "parse_trace_params",
    "add_trace_params_option",
    "COMPRESSIONS",
    "HEADER_NAMES",
]

SKIP_BAD = ("pass skip_bad=True (read_trace), -t skip-bad=true (cachegym sim / stats / parity) or "
            "'++trace.options={skip_bad: true}' (a Hydra config)")
"""How a bad record is dropped, as the traces' errors say it: in each place a user reads one."""

log = logging.getLogger(__name__)

PathLike = str | os.PathLike[str]

ORACLE_GENERAL_DTYPE = np.dtype(
    [("time", "<u4"), ("obj_id", "<u8"), ("obj_size", "<u4"), ("next_access", "<i8")]
)
"""One packed, little-endian oracleGeneral record (24 bytes); ``next_access`` is -1 for never."""

_SNIFF_BYTES = 1 << 16


# ---------------------------------------------------------------------- npz
def read_npz(path: PathLike) -> Trace:
    """Read cachegym's native ``.npz`` trace (see :mod:`allocator.trace`); free rows that
    carry compute time are warned of (the pool runs a row's ``compute_ns`` after an access, not
    after a free)."""
    t = Trace.load(path)
    lost = t.compute_ns[t.op == Op.FREE]
    if lost.any():
        log.warning("%s: %d free rows carry %d ns of compute_ns, which the pool does not run (it "
                    "runs a row's compute after an access); move it to the access before each "
                    "free", os.fspath(path), int(np.count_nonzero(lost)), int(lost.sum()))
    return t


# ---------------------------------------------------------------------- oracleGeneral
def read_oracle_general(path: PathLike, *, skip_bad: bool = False) -> Trace:
    """Read a libCacheSim ``oracleGeneral`` binary trace (24-byte packed records)."""
    p = existing_trace_file(path)
    _reject_non_binary(p)
    with open(p, "rb") as f:  # an lcs file's header starts with its magic (as read_lcs checks)
        head = f.read(8)
    if len(head) == 8 and int.from_bytes(head, "little") == LCS_MAGIC:
        raise TraceError("this is a libCacheSim lcs trace (its header's magic number), not an "
                         "oracleGeneral one", path=p, hint="read it with the format lcs")
    data, skipped = _records(p, ORACLE_GENERAL_DTYPE, 0, skip_bad)
    return _binary_trace(p, data, data["time"], skipped, {"format": "oracleGeneral", "path": p})


def _binary_trace(p: str, data: np.ndarray, step: np.ndarray, skipped: int, source: dict[str, Any],
                  op: np.ndarray | None = None, **meta: Any) -> Trace:
    """The trace of a binary reader's records (:func:`_records`): their ``obj_id`` (bit for bit
    as int64 keys) and ``obj_size``, with ``step`` and ``op`` as the format gives them."""
    key = data["obj_id"].view(np.int64)
    size = data["obj_size"].astype(np.int64)
    return _finish(p, {"source": source, **meta}, skipped, key=key, size=size, op=op,
                   step=step.astype(np.int64))


def _records(p: str, dtype: np.dtype, offset: int, skip_bad: bool) -> tuple[np.ndarray, int]:
    """The packed records of ``dtype`` from byte ``offset`` of ``p`` (fields ``obj_id`` and
    ``obj_size`` at least): those of size 0 dropped, with a warning, as libCacheSim's readers
    drop them (their default ``ignore_size_zero_req``); those of a size beyond 2**48 refused
    (``skip_bad``: dropped and counted); and how many were dropped as malformed. A
    ``next_access`` field is not read (the pool computes next uses itself)."""
    nbytes = os.path.getsize(p) - offset
    rec = dtype.itemsize
    skipped = 0
    if nbytes % rec:
        n_full = nbytes // rec
        problem = (
            f"truncated record: the file has {nbytes} bytes of records, not a multiple of the "
            f"{rec}-byte record; the last record has only {nbytes % rec} bytes"
        )
        if not skip_bad:
            raise TraceError(problem, path=p, row=n_full, hint=f"{SKIP_BAD} to drop it")
        skipped = 1
    data = np.fromfile(p, dtype=dtype, count=nbytes // rec, offset=offset)
    size = data["obj_size"]
    bad = (size < 0) | (size > MAX_SIZE)  # (before size-0 records are dropped: a record's
    if bad.any():  # number is the file's)
        if not skip_bad:
            r = int(np.argmax(bad))
            problem = f"object size is {size[r]} (id {data['obj_id'][r]}; sizes are 1 .. 2**48)"
            raise TraceError(problem, path=p, row=r, hint=f"{SKIP_BAD} to drop such records")
        skipped += int(bad.sum())
        data = data[~bad]
    return _drop_size_zero(p, data, data["obj_size"]), skipped


def _unquoted(field: np.ndarray) -> np.ndarray:
    """A csv column's fields without the double quotes around a field (``"a"`` is ``a``, as
    libCacheSim's csv parser and RFC 4180 read it; a quoted field holding the delimiter is
    refused earlier, by its column count)."""
    if not (np.char.find(field, '"') >= 0).any():
        return field
    s = np.char.strip(field)
    quoted = (np.char.str_len(s) >= 2) & np.char.startswith(s, '"') & np.char.endswith(s, '"')
    out = field.copy()
    inner = np.array([x[1:-1] for x in s[quoted].tolist()], dtype=field.dtype)
    out[quoted] = np.char.replace(inner, '""', '"') if len(inner) else inner
    return out


def _drop_size_zero(p: str, data: Any, size: np.ndarray) -> Any:
    """``data`` without its requests of size 0, which libCacheSim's readers drop (their default
    ``ignore_size_zero_req``: a request that moves no bytes), with a warning that counts them."""
    zero = size == 0
    if not zero.any():
        return data
    _said_size_zero(p, int(zero.sum()))
    return data[~zero]


def _said_size_zero(p: str, n: int) -> None:
    log.warning("%s: dropped %d request(s) of size 0, as libCacheSim's readers do "
                "(ignore_size_zero_req)", p, n)


# ---------------------------------------------------------------------- vscsi
# libCacheSim's vscsi.h records (C structs, naturally aligned): version 1 (32 bytes) and 2 (40);
# the version is the high byte of ``ver``, checked on the first two records as libCacheSim does
VSCSI_DTYPES = {
    1: np.dtype({"names": ["sn", "obj_size", "nSG", "cmd", "ver", "obj_id", "ts"],
                 "formats": ["<u4", "<u4", "<u4", "<u2", "<u2", "<u8", "<u8"],
                 "offsets": [0, 4, 8, 12, 14, 16, 24], "itemsize": 32}),
    2: np.dtype({"names": ["cmd", "ver", "sn", "obj_size", "nSG", "obj_id", "ts", "rt"],
                 "formats": ["<u2", "<u2", "<u4", "<u4", "<u4", "<u8", "<u8", "<u8"],
                 "offsets": [0, 2, 4, 8, 12, 16, 24, 32], "itemsize": 40}),
}


def read_vscsi(path: PathLike, *, skip_bad: bool = False) -> Trace:
    """Read a VMware vscsi block trace as libCacheSim does (``cloudPhysicsIO.vscsi``): each
    record's logical block number is the object, its length the size, its time (us) in seconds
    the step; every request a read (libCacheSim reads the command as read or write; an
    eviction policy's outcomes do not depend on it); requests of size 0 are dropped with a
    warning (libCacheSim keeps them)."""
    p = existing_trace_file(path)
    version = None
    for v in (2, 1):
        dt = VSCSI_DTYPES[v]
        n = min(2, os.path.getsize(p) // dt.itemsize)  # (a one-record file has one to check)
        if n:
            head = np.fromfile(p, dtype=dt, count=n)
            if ((head["ver"] >> 8) == v).all():
                version = v
                break
    if version is None:
        raise TraceError("not a vscsi trace (its first records carry no version 1 or 2)",
                         path=p, hint="check the format")
    data, skipped = _records(p, VSCSI_DTYPES[version], 0, skip_bad)
    return _binary_trace(p, data, data["ts"] // 1_000_000, skipped,
                         {"format": "vscsi", "path": p, "version": version})


# ---------------------------------------------------------------------- lcs
LCS_MAGIC = 0x123456789ABCDEF0
LCS_HEADER_BYTES = 8192
_LCS_FEATURES = {3: 0, 4: 1, 5: 2, 6: 4, 7: 8, 8: 16}  # version -> feature fields (v3 and up)
# libCacheSim's req_op_e: set, add, cas, replace, append, prepend, incr, decr, write, update
_LCS_WRITES = (3, 4, 5, 6, 7, 8, 10, 11, 13, 14)
_LCS_DELETE = 9


def lcs_dtype(version: int) -> np.dtype:
    """The packed request record of libCacheSim's ``lcs`` trace format, version 1..8 (v1 is
    oracleGeneral's; v2 adds an op and tenant word; v3 a 64-bit size and a TTL; v4..v8 1..16
    feature words)."""
    if version == 1:
        return ORACLE_GENERAL_DTYPE
    head = [("time", "<u4"), ("obj_id", "<u8")]
    if version == 2:
        return np.dtype([*head, ("obj_size", "<u4"), ("op_tenant", "<u4"), ("next_access", "<i8")])
    n = _LCS_FEATURES[version]
    fields: list[Any] = [*head, ("obj_size", "<i8"), ("op_tenant", "<u4"), ("ttl", "<u4"),
                         ("next_access", "<i8")]
    if n:
        fields.append(("features", "<u4", (n,)))
    return np.dtype(fields)


def read_lcs(path: PathLike, *, ops: bool = False, skip_bad: bool = False) -> Trace:
    """Read a libCacheSim ``lcs`` trace (``.lcs``, ``.lcs.zst``): an 8 KiB header (start and
    end magic, version, statistics), then packed requests of the header's version (1..8).

    Every request is a read, as libCacheSim's simulator serves them (``ops=False``); with
    ``ops=True`` a write-like op (set, add, cas, replace, append, prepend, incr, decr, write,
    update) is a write, and a delete is dropped (counted in ``meta["deletes"]``: the pool's
    frees are of objects it holds, not of keys a cache may never have seen)."""
    p = existing_trace_file(path)
    if os.path.getsize(p) < LCS_HEADER_BYTES:
        raise TraceError(f"shorter than the {LCS_HEADER_BYTES}-byte lcs header", path=p,
                         hint="check the format: an oracleGeneral file has no header")
    head = np.fromfile(p, dtype="<u8", count=LCS_HEADER_BYTES // 8)
    if int(head[0]) != LCS_MAGIC or int(head[-1]) != LCS_MAGIC:
        raise TraceError(f"no lcs header (magic {int(head[0]):#x} / {int(head[-1]):#x}, expected "
                         f"{LCS_MAGIC:#x})", path=p, hint="check the format (oracleGeneral?)")
    version = int(head[1])
    if not 1 <= version <= 8:
        raise TraceError(f"lcs version {version} is not one this reader knows (1..8)", path=p)
    data, skipped = _records(p, lcs_dtype(version), LCS_HEADER_BYTES, skip_bad)
    n_req = int(head[3].view(np.int64))  # stat.n_req
    held = (os.path.getsize(p) - LCS_HEADER_BYTES) // lcs_dtype(version).itemsize  # (size 0 too)
    if n_req > 0 and n_req != held:
        log.warning("%s: the lcs header counts %d requests, the file holds %d", p, n_req, held)
    deletes = 0
    op = None
    if ops and version >= 2:
        code = data["op_tenant"] & 0xFF
        keep = code != _LCS_DELETE
        deletes = int((~keep).sum())
        if deletes:
            data, code = data[keep], code[keep]
        op = np.where(np.isin(code, _LCS_WRITES), int(Op.WRITE), int(Op.READ)).astype(np.uint8)
    return _binary_trace(p, data, data["time"], skipped,
                         {"format": "lcs", "path": p, "version": version, "ops": ops}, op,
                         deletes=deletes)


def write_oracle_general(
    trace: Trace, path: PathLike, *, ids: Literal["auto", "key", "object"] = "auto"
) -> None:
    """Write ``trace`` as libCacheSim ``oracleGeneral`` (next access from :meth:`Trace.next_use`).

    The format has no op column: frees are dropped, reads and writes become requests. ``ids``
    chooses the object id: ``"key"`` writes the key (reinterpreted as uint64), ``"object"``
    writes :meth:`Trace.object_ids` (so a key reused after a free is a new object), and
    ``"auto"`` picks ``"key"`` unless the trace has frees. The ``step`` column is written as
    the time field and must fit in uint32, as must every size.
    """
    keep = trace.op != Op.FREE
    if ids == "auto":
        ids = "key" if keep.all() else "object"
    if ids not in ("key", "object"):
        raise ConfigError(f"ids must be 'auto', 'key' or 'object', got {ids!r}")
    obj = trace.key if ids == "key" else trace.object_ids()
    sub = Trace.from_arrays(obj[keep], trace.size[keep], step=trace.step[keep])
    p = os.fspath(path)
    _check_fits(sub.size, "size", p, np.iinfo(np.uint32).max, "split objects above 4 GiB")
    _check_fits(sub.step, "step", p, np.iinfo(np.uint32).max, "the step column is the time field")
    out = np.empty(len(sub), dtype=ORACLE_GENERAL_DTYPE)
    out["time"] = sub.step
    out["obj_id"] = sub.key.view(np.uint64)
    out["obj_size"] = sub.size
    nxt = sub.next_use()
    out["next_access"] = np.where(nxt == np.iinfo(np.int64).max, -1, nxt)
    replace_atomically(p, out.tofile, binary=True)  # (an older file stays whole on a failure)


# ---------------------------------------------------------------------- csv / txt
def read_csv(
    path: PathLike,
    *,
    time_col: int | None = None,
    obj_id_col: int = 1,
    obj_size_col: int | None = None,
    delimiter: str = ",",
    has_header: bool | None = None,
    obj_id_is_num: bool = True,
    skip_bad: bool = False,
) -> Trace:
    """Read a csv trace; column numbers are 1-based, as libCacheSim's ``obj-id-col=2`` options.

    ``obj_size_col=None`` gives every object size 1 (libCacheSim's object mode); ``time_col``
    fills ``step``. ``has_header=None`` detects a header: the first line is one if a numeric
    field named by the options does not parse there (and does on the next line), or if it holds
    no number and names a column (:data:`HEADER_NAMES`: ``time,key`` over string ids); a
    detected header is logged, naming its line. With ``obj_id_is_num=False`` ids are strings,
    numbered densely in order of first appearance. Blank lines are ignored; a leading UTF-8 BOM
    is dropped; lines end with ``\n``, ``\r\n`` or a lone ``\r``.
    """
    return _read_delimited(path, time_col, obj_id_col, obj_size_col, delimiter, has_header,
                           obj_id_is_num, skip_bad, names_only=False)


def _read_delimited(path: PathLike, time_col: int | None, obj_id_col: int,
                    obj_size_col: int | None, delimiter: str, has_header: bool | None,
                    obj_id_is_num: bool, skip_bad: bool, *, names_only: bool) -> Trace:
    """:func:`read_csv` (and :func:`read_txt`, whose first line is a header only where it is a
    column name, ``names_only``)."""
    p = existing_trace_file(path)
    cols = {"time": time_col, "obj_id": obj_id_col, "obj_size": obj_size_col}
    for name, c in cols.items():
        if c is not None and (not isinstance(c, int) or isinstance(c, bool) or c < 1):
            raise ConfigError(f"{name}_col must be a 1-based column number (1 is the first "
                              f"column; -t {name.replace('_', '-')}-col=1 on the command line), "
                              f"got {c!r}")
    if not isinstance(delimiter, str) or len(delimiter) != 1 or not delimiter.isascii():
        raise ConfigError(f"delimiter must be one ASCII character, a byte of the file as in "
                          f"libCacheSim (delimiter=';' in Python, -t 'delimiter=;' on the command "
                          f"line), got {delimiter!r}")
    table = _Table(p, delimiter, cols, has_header, obj_id_is_num, skip_bad, names_only)
    header = table.header
    if header is not None:
        _check_header_names(p, header, obj_id_col, obj_size_col)
    elif table.ncols > 1 and obj_id_col == 1 and obj_size_col is None:
        log.warning("%s: %d columns and no header; object ids are read from column 1 and every "
                    "size is 1 (the defaults): if the ids or sizes are other columns, name them "
                    "(obj_id_col=, obj_size_col=; cachegym sim --trace-params "
                    "'obj-id-col=2,obj-size-col=3')", p, table.ncols)
    _check_op_column(p, header, table.first_record, cols)
    # each piece of the file parsed on its own (memory bounded by a piece's table, not the
    # file's): its columns' values, and which of its rows are kept
    pieces: dict[str, list[np.ndarray]] = {n: [] for n, c in cols.items() if c is not None}
    kept: list[np.ndarray] = []
    skipped = 0
    zeros = 0
    ids = _DenseIds()
    times_are_floats = False  # (a time of one piece was not a whole number: all are floats)
    for piece, lines, row0 in table:
        bad = np.zeros(len(lines), bool)
        zero = np.zeros(len(lines), bool)  # (requests of size 0)
        for name, c in cols.items():
            if c is None:
                continue
            field = _unquoted(piece[c])
            if name == "obj_id" and not obj_id_is_num:
                pieces[name].append(ids(np.char.strip(field)))  # (' a' is 'a', as libCacheSim)
                continue
            values, problem = _parse_ints(field)
            # whole times stay exact (nanosecond stamps); others, and times past 2**63, are
            # floats (which refuse those), floored to whole steps
            if name == "time" and ((problem != _OK).any() or _wrapped(values, field).any()):
                values, problem = _parse_floats(field)
                values = np.floor(values).astype(np.int64)
                times_are_floats = True
            if name == "obj_size":
                problem[(problem == _OK) & (_wrapped(values, field) | (values > MAX_SIZE))] = _TOO_LARGE
                problem[(problem == _OK) & (values < 0)] = _NOT_POSITIVE
                zero = (problem == _OK) & (values == 0)
            pieces[name].append(values)
            bad_rows = problem != _OK
            bad |= bad_rows
            if bad_rows.any() and not skip_bad:
                r = int(np.argmax(bad_rows))
                raise TraceError(
                    f"line {lines[r] + 1}, column {c} ({name}): {_PROBLEMS[name][problem[r]]} "
                    f"(got {str(field[r])!r})",
                    path=p,
                    row=row0 + r,
                    hint=_bad_field_hint(name, problem[r], lines[r] + 1,
                                         first=row0 + r == 0 and header is None),
                )
        skipped += int(bad.sum())
        good = ~bad
        zeros += int((zero & good).sum())
        kept.append(good & ~zero)
    skipped += table.skipped
    if zeros:  # (as libCacheSim's readers: ignore_size_zero_req)
        _said_size_zero(p, zeros)
    good = np.concatenate(kept) if kept else np.zeros(0, bool)
    parsed = {n: np.concatenate(v) if v else np.zeros(0, np.int64) for n, v in pieces.items()}
    if times_are_floats and "time" in parsed:
        # every time as floats, as the whole column is read in one piece (a piece's whole times
        # read exactly beside another piece's floats could go back in time)
        parsed["time"] = np.floor(parsed["time"].astype(np.float64)).astype(np.int64)
    key = parsed["obj_id"][good].astype(np.int64)
    head = key[:1_000_000]  # (a bounded look: np.unique sorts)
    if len(head) >= 1000 and len(np.unique(head)) == len(head):
        log.warning("%s: %s %d requests are to distinct objects (column %d), so no policy can "
                    "hit there; if that column is not the object id (a timestamp, a counter), "
                    "pass obj_id_col=", p, "all" if len(head) == len(key) else "the first",
                    len(head), obj_id_col)
    size = parsed["obj_size"][good] if "obj_size" in parsed else 1
    step = parsed["time"][good] if "time" in parsed else None
    options = {"time_col": time_col, "obj_id_col": obj_id_col, "obj_size_col": obj_size_col,
               "delimiter": delimiter, "obj_id_is_num": obj_id_is_num}
    meta = {"source": {"format": "csv", "path": p, **options}}
    return _finish(p, meta, skipped, key=key, size=size, step=step, size_zero=zeros)


def _bad_field_hint(name: str, problem: int, line: int, first: bool) -> str:
    """How to mend a field that does not parse (on ``line``; ``first``: the file's first line,
    read as a record)."""
    hint = f"fix the record or {SKIP_BAD} to drop bad records"
    if name == "obj_id" and problem == _NOT_A_NUMBER:
        hint = ("ids that are not numbers: pass obj_id_is_num=False (-t obj-id-is-num=false), "
                f"or {hint}")
    if first and problem == _NOT_A_NUMBER:
        hint = (f"if line {line} is a header, pass has_header=True (-t has-header=true); "
                f"else {hint}")
    return hint


def read_txt(path: PathLike, *, has_header: bool | None = None, obj_id_is_num: bool = True,
             skip_bad: bool = False) -> Trace:
    """Read a plain-text trace: one object id per line, every size 1.

    ``has_header=None`` reads a first line that is a column name (``key``, ``obj_id``, ...:
    :data:`HEADER_NAMES`) as a header, with a log message; ``True``/``False`` say whether the
    first line is one."""
    p = existing_trace_file(path)
    t = _read_delimited(p, None, 1, None, ",", has_header, obj_id_is_num, skip_bad,
                        names_only=True)
    meta = dict(t.meta, source={"format": "txt", "path": p, "obj_id_is_num": obj_id_is_num})
    return Trace.from_arrays(t.key, t.size, step=t.step, meta=meta, name=t.name)


_PARAMS = {"time-col": "time_col", "obj-id-col": "obj_id_col", "obj-size-col": "obj_size_col",
           "delimiter": "delimiter", "has-header": "has_header", "obj-id-is-num": "obj_id_is_num",
           "skip-bad": "skip_bad", "ops": "ops",
           # libCacheSim's other spellings of the same (cli_reader_utils.c)
           "time-field": "time_col", "obj-id-field": "obj_id_col", "obj-size-field": "obj_size_col",
           "size-col": "obj_size_col", "size-field": "obj_size_col", "header": "has_header"}
_IGNORED = ("next-access-col", "next-access-field")
"""libCacheSim's parameters this reader takes and does not need (the pool computes next uses)."""
_DELIMITERS = {"": ",", "\\t": "\t", "tab": "\t", "space": " ", "comma": ",", "\\": ","}
_TRUE, _FALSE = ("true", "1", "yes"), ("false", "0", "no")


def add_trace_params_option(parser: Any) -> None:
    """The ``-t/--trace-params`` option of ``cachegym sim``, ``stats`` and ``parity`` (an
    ``argparse`` parser's; read with :func:`parse_trace_params`)."""
    parser.add_argument("-t", "--trace-params", default="", metavar="PARAMS",
                        help="the reader's options in libCacheSim's -t syntax, e.g. 'time-col=1,"
                        "obj-id-col=2,obj-size-col=3,delimiter=,,has-header=false,"
                        "obj-id-is-num=false' for a csv (without them: ids from column 1, every "
                        "size 1), 'ops=true' for an lcs trace's writes, 'skip-bad=true'")


def parse_trace_params(text: str) -> dict[str, Any]:
    """libCacheSim's ``-t`` trace parameters as the readers' options (:func:`read_csv`'s, and
    ``ops`` / ``skip_bad`` of the binary readers):
    ``"time-col=1, obj-id-col=2, obj-size-col=3, delimiter=,, has-header=true"`` ->
    ``{"time_col": 1, "obj_id_col": 2, "obj_size_col": 3, "delimiter": ",", "has_header": True}``.

    Names take ``-`` or ``_``; ``delimiter=,`` (a comma), ``\\t`` or ``tab``, ``space``, or any
    other character; booleans
    ``true``/``false`` (``1``/``0``, ``yes``/``no``). A :class:`~allocator.errors.ConfigError`
    names an unknown parameter or a value that does not parse."""
    out: dict[str, Any] = {}
    tokens = text.split(",")
    i = 0
    while i < len(tokens):
        tok = tokens[i].lstrip()  # (the right side kept: "delimiter= " is a space)
        i += 1
        if not tok.strip():
            continue
        name, eq, value = tok.partition("=")
        name = name.strip().lower().replace("_", "-")
        if eq and name in _IGNORED:
            continue
        if not eq or name not in _PARAMS:
            raise ConfigError(f"trace parameter {tok.strip()!r}: expected NAME=VALUE with NAME one of "
                              f"{', '.join(_PARAMS)} (e.g. 'obj-id-col=2,obj-size-col=3')")
        key = _PARAMS[name]
        raw, value = value, value.strip()
        if key == "delimiter" and raw and not value:  # "delimiter= " (a space, or a tab): that
            out[key] = raw[0]  # character (it was read as "delimiter=," and became a comma)
        elif key == "delimiter":
            if value in ("", "\\") and i < len(tokens) and tokens[i].strip() == "":
                i += 1  # "delimiter=," (or libCacheSim's "delimiter=\,") left the comma's other side
            out[key] = _DELIMITERS.get(value.lower(), value)
        elif key.endswith("_col"):
            try:
                out[key] = int(value)
            except ValueError:
                raise ConfigError(f"trace parameter {name}: {value!r} is not a column number "
                                  "(1-based)") from None
            if out[key] < 1:
                raise ConfigError(f"trace parameter {name}: {value!r} is not a column number "
                                  f"(1-based: the first column is {name}=1)")
        elif value.lower() in _TRUE + _FALSE:
            out[key] = value.lower() in _TRUE
        else:
            raise ConfigError(f"trace parameter {name}: {value!r} is not true or false")
    return out


def write_csv(trace: Trace, path: PathLike, *, header: bool = True) -> None:
    """Write ``time,obj_id,obj_size`` rows (time = ``step``); read back with
    ``read_csv(path, time_col=1, obj_id_col=2, obj_size_col=3)``. Frees are dropped."""
    keep = trace.op != Op.FREE
    rows = np.column_stack([trace.step[keep], trace.key[keep], trace.size[keep]])
    replace_atomically(path, lambda f: np.savetxt(f, rows, fmt="%d", delimiter=",",
                       header="time,obj_id,obj_size" if header else "", comments=""))


def write_txt(trace: Trace, path: PathLike) -> None:
    """Write one key per line (sizes are lost: libCacheSim's txt format has none)."""
    keep = trace.op != Op.FREE
    replace_atomically(path, lambda f: np.savetxt(f, trace.key[keep], fmt="%d"))


# ---------------------------------------------------------------------- front door
FORMATS = ("npz", "oracleGeneral", "lcs", "vscsi", "csv", "txt")

_ALIASES = {"npz": "npz", "oraclegeneral": "oracleGeneral", "oracle_general": "oracleGeneral",
            "oraclegeneralbin": "oracleGeneral", "lcs": "lcs", "vscsi": "vscsi", "csv": "csv",
            "txt": "txt", "plain": "txt"}


def format_name(name: str) -> str:
    """A format's name as :data:`FORMATS` spells it (``oraclegeneral`` -> ``oracleGeneral``:
    :func:`read_trace` takes any case); ``name`` itself where it names none."""
    return _ALIASES.get(name.lower(), name)


COMPRESSIONS = {".zst": "zstd", ".zstd": "zstd", ".gz": "gzip", ".xz": "xz", ".bz2": "bz2"}
"""File name suffixes read as compressed (public libCacheSim traces come as ``.oracleGeneral.zst``)."""


def read_trace(path: PathLike, format: str | None = None, **options: Any) -> Trace:
    """Read a trace file in any supported format and return a :class:`Trace`.

    ``format`` is one of :data:`FORMATS` (case-insensitive); ``None`` infers it from the file
    name (``.npz``, ``.oracleGeneral``/``.bin``, ``.csv``, ``.txt``). ``options`` go to the
    format's reader (e.g. ``obj_id_col=2, skip_bad=True`` for csv). A name ending in one of
    :data:`COMPRESSIONS` (``x.oracleGeneral.zst``, ``x.csv.gz``) is decompressed first (into a
    temporary file; zstd needs the ``zstandard`` package) and its format inferred from the rest.
    """
    try:
        return _read_trace(path, format, options)
    except OSError as e:  # (a file that cannot be read: permissions, an I/O error)
        raise TraceError(f"cannot be read ({e.strerror or e})", path=os.fspath(path),
                         hint="check its permissions and its file system") from e


def _read_trace(path: PathLike, format: str | None, options: dict[str, Any]) -> Trace:
    suffix = os.path.splitext(os.fspath(path))[1].lower()
    if suffix in COMPRESSIONS:
        return _read_compressed(path, COMPRESSIONS[suffix], len(suffix), format, options)
    if os.path.exists(path):  # a directory or a pipe is refused as what it is, whatever its name
        existing_trace_file(path)
    fmt = _resolve_format(path, format)
    readers = {"npz": read_npz, "oracleGeneral": read_oracle_general, "lcs": read_lcs,
               "vscsi": read_vscsi, "csv": read_csv, "txt": read_txt}
    reader = readers[fmt]
    takes = [k for k in inspect.signature(reader).parameters if k != "path"]
    unknown = sorted(k for k in options if k not in takes)
    if unknown:
        raise ConfigError(f"format {fmt!r} does not take the option(s) {unknown}; it takes {takes}")
    for k, v in options.items():
        if k in _FLAGS and not (isinstance(v, (bool, np.bool_)) or (v is None and k == "has_header")):
            raise ConfigError(f"format {fmt!r}: option {k} must be true or false"
                              f"{' (or None: detect)' if k == 'has_header' else ''}, got {v!r}"
                              f"{' (a string: write true or false unquoted)' if isinstance(v, str) else ''}")
    return reader(path, **{k: bool(v) if k in _FLAGS and v is not None else v  # type: ignore[operator]
                           for k, v in options.items()})


_FLAGS = ("has_header", "obj_id_is_num", "skip_bad", "ops")
"""The readers' true/false options: :func:`read_trace` refuses any other value for them."""


class _NamedAs(logging.Filter):
    """Rewrites ``path`` as ``shown`` in this module's log records (a compressed trace's
    temporary file, named as the user's)."""

    def __init__(self, path: str, shown: str) -> None:
        super().__init__()
        self.path, self.shown = path, shown

    def filter(self, record: logging.LogRecord) -> bool:
        if isinstance(record.args, tuple):
            record.args = tuple(self.shown if a == self.path else a for a in record.args)
        return True


def _read_compressed(path: PathLike, compression: str, cut: int, format: str | None,
                     options: dict[str, Any]) -> Trace:
    """:func:`read_trace` of a compressed file: decompressed into a temporary file named as the
    file without its suffix (whose name gives the format and the trace's name)."""
    p = existing_trace_file(path)
    inner = os.path.basename(p)[:-cut] or "trace"
    if format is None and _infer_format(inner) is None:
        raise ConfigError(f"cannot infer the format of the trace compressed in {p!r} from its name "
                          f"({inner!r}); give it as one of {FORMATS} (format= in Python, "
                          "trace.format= to the Hydra scripts, the format argument of cachegym sim)")
    fmt = _resolve_format(inner, format)
    with tempfile.TemporaryDirectory(prefix="cachegym-trace-") as d:
        tmp = os.path.join(d, inner)
        try:
            with open(tmp, "wb") as dst:
                _decompress(p, compression, dst)
        except ConfigError:
            raise
        except Exception as e:  # a truncated or corrupt stream: each library its own error type
            raise TraceError(f"cannot decompress it as {compression} ({type(e).__name__}: {e})",
                             path=p, hint="check that the file is complete, or decompress it "
                             "yourself and give the result") from None
        said = _NamedAs(tmp, f"{p} (decompressed)")  # warnings name it too
        log.addFilter(said)
        try:
            t = read_trace(tmp, fmt, **options)
        except TraceError as e:  # name the user's file, not the temporary one
            e.path = p
            e.args = (str(e).replace(tmp, f"{p} (decompressed)"),)
            raise
        finally:
            log.removeFilter(said)
    source = t.meta.get("source")  # (an .npz's meta is the file's: any JSON object)
    t.meta["source"] = dict(source if isinstance(source, dict) else {}, path=p,
                            compression=compression)
    return t


def _decompress_streams(path: str, factory: Any, dst: Any, padding: bool = False) -> None:
    """Every stream of an xz or bz2 file, one after the other, into ``dst``; anything after a
    complete stream must be another complete stream (or, with ``padding``, the NUL bytes the xz
    format allows between streams). (Python's ``lzma.open`` and ``bz2.open`` end the file at
    data after a stream that does not start like one: a corrupt second stream, and its
    records, were dropped without a word.) Output comes in pieces of 16 MiB at most."""
    d = None
    with open(path, "rb") as f:
        while True:
            if d is None or d.eof:
                data = (d.unused_data if d is not None else b"") or f.read(1 << 20)
                while padding and data and not data.strip(b"\0"):
                    data = f.read(1 << 20)
                if padding:
                    data = data.lstrip(b"\0")
                if not data:
                    return  # (an empty file, or every stream complete)
                d = factory()
            elif d.needs_input:
                data = f.read(1 << 20)
                if not data:
                    raise EOFError("the compressed stream ends before its end-of-stream marker")
            else:
                data = b""
            dst.write(d.decompress(data, 1 << 24))


def _decompress(path: str, compression: str, dst: Any) -> None:
    """Write the decompressed bytes of ``path`` to ``dst``; a stream cut short raises (gzip, xz
    and bz2 say so themselves; a zstd frame is checked for its end here)."""
    if compression == "gzip":
        with gzip.open(path, "rb") as src:
            shutil.copyfileobj(src, dst, 1 << 20)
        return
    if compression in ("xz", "bz2"):
        _decompress_streams(path, lzma.LZMADecompressor if compression == "xz"
                            else bz2.BZ2Decompressor, dst, padding=compression == "xz")
        return
    try:
        import zstandard
    except ImportError:
        raise ConfigError(f"{path}: reading a .zst trace needs the zstandard package: pip install "
                          "zstandard (or decompress it with zstd -d and give the result)") from None
    dctx = zstandard.ZstdDecompressor()
    with open(path, "rb") as src:
        d = dctx.decompressobj()
        pending = b""
        read_any = False  # (an empty file holds no frame, cut short or not: no records)
        while True:
            chunk = pending or src.read(1 << 20)
            pending = b""
            if not chunk:
                break
            read_any = True
            dst.write(d.decompress(chunk))
            if d.eof:  # a frame ended: what follows is the next frame's
                pending = d.unused_data
                d = dctx.decompressobj()
                if not pending:
                    pending = src.read(1 << 20)
                    if not pending:
                        return
        if read_any and not d.eof:
            raise EOFError("the last zstd frame is cut short")


def write_trace(trace: Trace, path: PathLike, format: str | None = None, **options: Any) -> None:
    """Write ``trace`` in any supported format (``None`` infers it from the file name)."""
    fmt = _resolve_format(path, format)
    if fmt == "npz":
        trace.save(path)
    elif fmt == "oracleGeneral":
        write_oracle_general(trace, path, **options)
    elif fmt == "csv":
        write_csv(trace, path, **options)
    elif fmt == "txt":
        write_txt(trace, path)
    else:
        raise ConfigError(f"writing {fmt!r} traces is not supported; write oracleGeneral (which "
                          "libCacheSim reads) or npz")


def _infer_format(path: PathLike) -> str | None:
    """The format a file's name says (``None``: it says none); its folders say nothing."""
    name = os.path.basename(os.fspath(path)).lower()
    for ext, fmt in ((".npz", "npz"), (".csv", "csv"), (".txt", "txt"), (".lcs", "lcs"),
                     (".vscsi", "vscsi"), (".oraclegeneral", "oracleGeneral"),
                     (".bin", "oracleGeneral")):
        if name.endswith(ext) or (fmt == "oracleGeneral" and ext in name):
            return fmt
    return None


def _resolve_format(path: PathLike, format: str | None) -> str:
    if format is None:
        fmt = _infer_format(path)
        if fmt is not None:
            return fmt
        raise ConfigError(f"cannot infer the trace format of {os.fspath(path)!r} from its name; "
                          f"give it as one of {FORMATS} (the FORMAT argument of cachegym sim, "
                          "format= in Python, trace.format= to the Hydra scripts, --format to "
                          "trace_stats.py and parity.py: cachegym stats and parity)")
    fmt_key = _ALIASES.get(format.lower())
    if fmt_key is None:
        raise ConfigError(f"unknown trace format {format!r}; choose one of {FORMATS} (the "
                          "FORMAT argument of cachegym sim, --format of cachegym stats and "
                          "parity, trace.format=, read_trace's format=)")
    return fmt_key


# ---------------------------------------------------------------------- helpers
def _finish(path: str, meta: dict[str, Any], skipped: int, size_zero: int = 0,
            **cols: Any) -> Trace:
    """The trace of a reader's columns, or a :class:`TraceError` saying why there is none
    (``size_zero``: the requests of size 0 the reader dropped)."""
    meta["skipped"] = skipped
    if skipped:
        log.warning("%s: skipped %d malformed record(s)", path, skipped)
    if len(cols["key"]) == 0:  # nothing to replay: say why rather than report zeros later
        if skipped:
            hint = "check the file's format and columns"
        elif meta.get("source", {}).get("format") == "csv" and not size_zero:
            hint = ("the file is empty, or its only line was read as a header: pass has_header=False "
                    "(-t has-header=false) if it is a record")
        elif os.path.exists(path) and os.path.getsize(path) == 0:
            hint = "the file is empty"
        else:
            hint = ("the file holds no request this reader keeps: requests of size 0 (and, with "
                    "ops, deletes) are dropped, as libCacheSim's readers drop them")
        raise TraceError("no records" + (f": all {skipped} were malformed and skipped" if skipped else ""),
                         path=path, hint=hint)
    return Trace.from_arrays(**cols, meta=meta, name=Path(path).stem, path=path)


def _check_fits(values: np.ndarray, column: str, path: str, limit: int, hint: str) -> None:
    bad = values > limit
    if bad.any():
        r = int(np.argmax(bad))
        raise TraceError(f"{column} {values[r]} does not fit the format's field (max {limit})",
                         path=path, column=column, row=r, hint=hint)


def _reject_non_binary(path: str) -> None:
    """oracleGeneral files are binary: refuse zip (``.npz``) and plain-text files."""
    with open(path, "rb") as f:
        head = f.read(_SNIFF_BYTES)
    if head.startswith(ZIP_MAGIC):
        raise TraceError("this is a zip/.npz file, not an oracleGeneral trace", path=path,
                         hint=_use_format("npz"))
    if head and _looks_like_text(head):
        raise TraceError("this is a text file, not an oracleGeneral binary trace", path=path,
                         hint=_use_format("csv", "txt"))


def _use_format(*fmts: str) -> str:
    """How to give the format ``fmts[0]`` (or the others), in every interface."""
    f = fmts[0]
    return (f"give the format {' or '.join(fmts)}: cachegym sim TRACE {f} ..., --format {f} "
            f"(cachegym stats, parity), trace.format={f} (a Hydra config) or "
            f"read_trace(path, format={f!r})")


def _looks_like_text(head: bytes) -> bool:
    b = np.frombuffer(head.removeprefix(_BOM), np.uint8)
    printable = ((b >= 32) & (b < 127)) | (b == 9) | (b == 10) | (b == 13)
    return bool(printable.all())


_PIECE_BYTES = 1 << 23
"""Bytes of a text trace parsed at a time (whole lines: a piece ends at a line's end): the
parser's memory is a piece's table, whatever the file's size."""


def _pieces(path: str, size: int | None = None) -> Iterator[np.ndarray]:
    """The file's bytes in pieces of about ``size`` bytes, each ending where a line ends (after
    a ``\n``, or a ``\r`` that no ``\n`` follows) or at the end of the file; a leading UTF-8
    BOM dropped (Windows tools write one; it is no part of a field). ``size``:
    :data:`_PIECE_BYTES` by default."""
    size = size or _PIECE_BYTES
    with open(path, "rb") as f:
        carry = f.read(max(size, len(_BOM)))
        if carry.startswith(_BOM):
            carry = carry[len(_BOM):]
        while True:
            data = f.read(size)
            if not data:
                if carry:
                    yield np.frombuffer(carry, np.uint8)
                return
            block = carry + data
            cut = block.rfind(b"\n", 0, len(carry) + 1) + 1  # a line's end within carry
            if cut == 0:
                cr = block.rfind(b"\r", 0, len(carry))  # a lone CR (one that no LF follows)
                cut = cr + 1 if cr >= 0 and block[cr + 1:cr + 2] != b"\n" else 0
            if cut == 0:  # no line ends in it: one long line, read on
                carry = block
                continue
            yield np.frombuffer(block, np.uint8, count=cut)
            carry = block[cut:]


class _Table:
    """A text trace's columns, piece by piece of the file (:func:`_pieces`), read lazily:
    iterating yields each piece's fields of the columns the options name (``{column: string
    array}``, one string per record), its records' 0-based line numbers and its first record's
    number among all records.

    Made from the file's first piece: ``header`` (the header's fields; ``None`` without one)
    and ``ncols`` (the first record's column count, which every record must have). ``skipped``
    counts the rows dropped for a wrong column count or bytes that are not UTF-8 (only with
    ``skip_bad``) so far. ``has_header=None`` detects a header (:func:`_header_reason`;
    ``names_only``: only a line of column names is one) and logs it, naming the line.
    """

    def __init__(self, path: str, delimiter: str, cols: dict[str, int | None],
                 has_header: bool | None, obj_id_is_num: bool, skip_bad: bool,
                 names_only: bool = False) -> None:
        self.path, self.delimiter, self.skip_bad = path, delimiter, skip_bad
        self.skipped = 0
        self._it = _pieces(path)
        buf = next(self._it, np.zeros(0, np.uint8))
        nul = np.flatnonzero(buf[:_SNIFF_BYTES] == 0)
        # binary: a zip, or NULs in more than 1% of the first bytes (a stray one is named later)
        sniff = min(len(buf), _SNIFF_BYTES)
        if buf[:_SNIFF_BYTES].tobytes().startswith(ZIP_MAGIC) or len(nul) > max(2, sniff // 100):
            raise TraceError("binary data in a text trace (this looks like an .npz or "
                             "oracleGeneral file)", path=path,
                             hint="give the right format (format= in Python, trace.format= to "
                                  "the Hydra scripts, the format argument of cachegym sim)")
        while True:  # the first piece holds the first two records (where the file has two)
            starts, ends = _line_bounds(buf)
            records = np.flatnonzero(ends > starts)
            if len(records) >= 2:
                break
            more = next(self._it, None)
            if more is None:
                break
            buf = np.concatenate([buf, more])
        if len(records) == 0:
            raise TraceError("the file has no records", path=path)
        r0 = records[0]
        first_text = buf[starts[r0]:ends[r0]].tobytes().decode("utf-8", "replace")
        first = first_text.split(delimiter)
        first_line = int(r0) + 1
        reason = None
        if has_header is None:
            r1 = records[1] if len(records) > 1 else None
            second = (buf[starts[r1]:ends[r1]].tobytes().decode("utf-8", "replace").split(delimiter)
                      if r1 is not None else None)
            reason = _header_reason(first, second, cols, obj_id_is_num, names_only,
                                    int(r1) + 1 if r1 is not None else None)
            has_header = reason is not None
        self.ncols = expected = len(first)
        need = max(c for c in cols.values() if c is not None)
        self._as_header = f"line {first_line} ({_clip(first_text)!r}, read as a header)"
        if expected < need:
            if has_header:
                raise TraceError(
                    f"{self._as_header} has {expected} column(s) but the options name column {need}",
                    path=path,
                    hint=("if it is a record, pass has_header=False (-t has-header=false); if it "
                          "is a comment, delete it (comment lines are not supported); else check "
                          "the delimiter and the column options (1-based: delimiter=, obj_id_col=, "
                          "... in Python; -t delimiter=...,obj-id-col=... on the command line)"))
            raise TraceError(f"line {first_line} has {expected} column(s) but the options name "
                             f"column {need}", path=path, row=0,
                             hint="check the delimiter and the column options (1-based: "
                                  "delimiter=, obj_id_col=, ... in Python; -t "
                                  "delimiter=...,obj-id-col=... on the command line)")
        self._has_header = bool(has_header)
        self.header = first if has_header else None
        # the first record's fields (after a header): read for what no option names
        if not has_header:
            self.first_record: list[str] | None = first
        elif len(records) > 1:
            r1 = records[1]
            self.first_record = buf[starts[r1]:ends[r1]].tobytes().decode(
                "utf-8", "replace").split(delimiter)
        else:
            self.first_record = None
        self._reason, self._first_line, self._first_text = reason, first_line, first_text
        self._first = (buf, starts, ends)
        self._wanted = sorted({c for c in cols.values() if c is not None})

    def __iter__(self) -> Iterator[tuple[dict[int, np.ndarray], np.ndarray, int]]:
        buf, starts, ends = self._first
        del self._first
        lines = 0  # lines before this piece
        offset = 0  # bytes before this piece (after a BOM)
        row0 = 0  # records before this piece (after the header)
        header = self._has_header
        while True:
            line_no = lines + np.arange(len(starts))
            keep = ends > starts  # (blank lines are ignored)
            if header:  # the first record is the header
                keep[np.argmax(keep)] = False
                header = False
            table, kept_lines = self._piece(buf, starts[keep], ends[keep], line_no[keep], row0,
                                            lines, offset)
            if len(kept_lines):
                yield table, kept_lines, row0
            row0 += int(keep.sum())
            lines += len(starts)
            offset += len(buf)
            more = next(self._it, None)
            if more is None:
                return
            buf = more
            starts, ends = _line_bounds(buf)

    def _piece(self, buf: np.ndarray, starts: np.ndarray, ends: np.ndarray, line_no: np.ndarray,
               row0: int, line0: int, offset: int) -> tuple[dict[int, np.ndarray], np.ndarray]:
        """One piece's table (its records ``starts:ends`` of ``buf``, on lines ``line_no``;
        ``row0`` records, ``line0`` lines and ``offset`` bytes before it) and its rows' line
        numbers."""
        path, delimiter = self.path, self.delimiter
        nul = np.flatnonzero(buf == 0)  # (anywhere: the parser would drop one silently)
        if len(nul):
            line = line0 + int(np.count_nonzero(buf[:nul[0]] == 10)) + 1
            raise TraceError(f"a NUL byte at byte {offset + int(nul[0]):,} (line {line}): binary "
                             "data in a text trace",
                             path=path, hint="the file is damaged or not a text trace")
        at = np.flatnonzero(buf == ord(delimiter))  # (the delimiters' positions)
        ncols = _count_fields(at, starts, ends)
        bad = ncols != self.ncols
        if bad.any() and not self.skip_bad:
            r = int(np.argmax(bad))
            raise TraceError(f"line {line_no[r] + 1}: expected {self.ncols} columns, got {ncols[r]}"
                             + (f" (as many as {self._as_header} has)" if self._has_header else ""),
                             path=path, row=row0 + r, hint=f"fix the record or {SKIP_BAD}")
        if self._reason is not None:  # detected: say so, loudly unless it names the columns
            first = self._first_text.split(delimiter)
            known = any(_is_header_name(f) for f in first)
            log.log(logging.INFO if known else logging.WARNING,
                    "%s: line %d (%r) is read as a header: %s; if it is a record, pass "
                    "has_header=False (-t has-header=false)%s", path, self._first_line,
                    _clip(self._first_text), self._reason, "" if known else "; if it is a "
                    "header, has_header=True (-t has-header=true) says so and silences this")
            self._reason = None
        self.skipped += int(bad.sum())
        empty: dict[int, np.ndarray] = {}
        if bad.any():
            starts, ends, line_no = starts[~bad], ends[~bad], line_no[~bad]
        if len(starts) == 0:
            return empty, line_no
        _refuse_outsized_line(path, starts, ends, line_no, self.ncols)
        if buf.max(initial=0) >= 0x80 and not _is_utf8(buf):  # then find the lines that are not
            ok = np.array([_is_utf8(buf[s:e]) for s, e in zip(starts, ends)], bool)
            if not ok.all():
                r = int(np.argmin(ok))
                if not self.skip_bad:
                    raise TraceError(f"line {int(line_no[r]) + 1}: bytes that are not UTF-8 text "
                                     f"({_clip(bytes(buf[starts[r]:ends[r]]).decode('utf-8', 'replace'))})",
                                     path=path, row=row0 + r,
                                     hint=f"convert the file to UTF-8 (iconv -f latin1 -t utf8), "
                                          f"or {SKIP_BAD} to drop such lines")
                self.skipped += int((~ok).sum())
                starts, ends, line_no = starts[ok], ends[ok], line_no[ok]
                if len(starts) == 0:
                    return empty, line_no
        ascii_only = buf.max(initial=0) < 0x80
        return {c: _field(buf, starts, ends, at, c, self.ncols, ascii_only)
                for c in self._wanted}, line_no


def _field(buf: np.ndarray, starts: np.ndarray, ends: np.ndarray, at: np.ndarray, c: int,
           ncols: int, ascii_only: bool) -> np.ndarray:
    """Field ``c`` (1-based) of the lines ``starts:ends`` of ``buf``, each of ``ncols`` fields
    split at the delimiter's positions ``at``: a string array (vectorised: the fields' bytes
    gathered into a fixed-width array, no loop over lines)."""
    before = np.searchsorted(at, starts)  # the delimiters before each line
    s = starts if c == 1 else at[before + c - 2] + 1
    e = ends if c == ncols else at[before + c - 1]
    width = max(1, int((e - s).max(initial=0)))
    pos = s[:, None] + np.arange(width)
    chars = np.where(pos < e[:, None], buf[np.minimum(pos, len(buf) - 1)], 0).astype(np.uint8)
    raw = chars.view(f"S{width}").ravel()
    return raw.astype(f"U{width}") if ascii_only else np.char.decode(raw, "utf-8")


_BOM = b"\xef\xbb\xbf"

_TABLE_BUDGET = 1 << 30
"""Bytes of the parsed table above which a text trace whose longest line dwarfs its typical one
is refused (:func:`_refuse_outsized_line`)."""


def _refuse_outsized_line(path: str, starts: np.ndarray, ends: np.ndarray, line_no: np.ndarray,
                          ncols: int) -> None:
    """The parser's table is a fixed-width string array: every field as wide as the longest,
    so one line of 100,000 characters among 20,000 short ones asks for gigabytes (a helper's
    fuzzing: 7.5 GiB for a 140 KB file). Refused where the longest line is more than 64 times
    the median one and the table would exceed :data:`_TABLE_BUDGET` (a long trace of ordinary
    lines is not), naming the line."""
    lengths = ends - starts
    longest = int(lengths.max())
    need = len(lengths) * max(1, ncols) * longest * 4
    if need <= _TABLE_BUDGET:
        return
    typical = float(np.median(lengths))
    if longest > 64 * max(1.0, typical):
        r = int(np.argmax(lengths))
        raise TraceError(f"line {int(line_no[r]) + 1} is {longest:,} characters long, the typical "
                         f"line {int(typical)}: parsing {len(lengths):,} lines as wide "
                         f"as it would take {need / 2**30:.1f} GiB", path=path, row=r,
                         hint="a field that long is no object id or size: fix or delete that line")


def _clip(text: str, n: int = 60) -> str:
    return text if len(text) <= n else text[:n] + "..."


_ID_NAMES = {"obj_id", "objid", "object_id", "obj", "object", "id", "key", "block", "block_id", "lba"}
_SIZE_NAMES = {"obj_size", "objsize", "object_size", "size", "bytes", "nbytes", "len", "length"}
_TIME_NAMES = {"time", "timestamp", "ts", "clock", "clock_time", "real_time", "step"}
_OP_NAMES = {"op", "operation", "op_type", "optype", "opcode", "command", "cmd", "rw"}
_OP_VALUES = {"get", "gets", "set", "add", "replace", "cas", "append", "prepend", "delete",
              "incr", "decr", "read", "write", "put", "del", "update", "insert"}
HEADER_NAMES = frozenset(_ID_NAMES | _SIZE_NAMES | _TIME_NAMES)
"""Column names that make a first line a header where no number decides it (string ids, txt)."""


def _is_header_name(field: str) -> bool:
    return field.strip().strip('"').strip().lower() in HEADER_NAMES


def _check_header_names(path: str, header: list[str], obj_id_col: int,
                        obj_size_col: int | None) -> None:
    """Warn when the header names another column as the object ids (or sizes) than the options
    read: ``time,obj_id,obj_size`` read with the default ``obj_id_col=1`` counts timestamps."""
    names = [h.strip().strip('"').lower() for h in header]
    ids = [i + 1 for i, h in enumerate(names) if h in _ID_NAMES]
    sizes = [i + 1 for i, h in enumerate(names) if h in _SIZE_NAMES]
    if ids and obj_id_col not in ids and names[obj_id_col - 1] not in _ID_NAMES:
        log.warning("%s: object ids are read from column %d (%r), but the header names column %d "
                    "%r; pass obj_id_col=%d (-t obj-id-col=%d on the command line, "
                    "'++trace.options={obj_id_col: %d}' to the Hydra scripts) if that is the "
                    "object id", path, obj_id_col, header[obj_id_col - 1], ids[0],
                    header[ids[0] - 1], ids[0], ids[0], ids[0])
    if sizes and obj_size_col is None:
        log.warning("%s: every object has size 1 (no obj_size_col), but the header names column "
                    "%d %r; pass obj_size_col=%d (-t obj-size-col=%d) for sizes in bytes", path,
                    sizes[0], header[sizes[0] - 1], sizes[0], sizes[0])


def _check_op_column(path: str, header: list[str] | None, record: list[str] | None,
                     cols: dict[str, int | None]) -> None:
    """Warn where a column no option reads holds operations (a header naming it ``operation``,
    or the first record's field ``get``, ``set``, ``delete``...): a Twitter trace's sets and
    deletes were replayed as reads with no word."""
    read = {c for c in cols.values() if c is not None}
    col = None
    if header is not None:
        col = next((i + 1 for i, h in enumerate(header) if i + 1 not in read
                    and h.strip().strip('"').lower() in _OP_NAMES), None)
    if col is None and record is not None:
        col = next((i + 1 for i, f in enumerate(record) if i + 1 not in read
                    and f.strip().strip('"').lower() in _OP_VALUES), None)
    if col is not None:
        fields = header if header is not None else record
        assert fields is not None  # (col was found in one of them)
        log.warning("%s: column %d holds operations (%r), which this reader does not read: "
                    "every request is a read, as in libCacheSim's csv reader without "
                    "op-type-col; to replay writes and deletes, build a cachegym .npz with its op "
                    "column (Trace.from_arrays(key, size, op): 0 read, 1 write, 2 free)",
                    path, col, fields[col - 1])


def _line_bounds(buf: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Start and end (exclusive, without ``\\r\\n``) byte offsets of every line; a line ends
    with ``\\n``, ``\\r\\n`` or a lone ``\\r`` (old Mac files), as Python's universal newlines.
    A line of only spaces and tabs is blank: its end is its start."""
    lf = buf == ord("\n")
    cr = buf == ord("\r")
    if cr.any():
        lone_cr = cr
        lone_cr[:-1] &= ~lf[1:]
        nl = np.flatnonzero(lf | lone_cr)
    else:
        nl = np.flatnonzero(lf)
    starts = np.concatenate([[0], nl + 1])
    ends = np.concatenate([nl, [len(buf)]])
    if starts[-1] == len(buf):  # file ends with a newline: no last partial line
        starts, ends = starts[:-1], ends[:-1]
    if len(starts):
        crlf = (ends > starts) & (buf[np.maximum(ends - 1, 0)] == ord("\r"))
        ends = ends - crlf
        # lines of only spaces/tabs are blank too: a line is, where it starts with one and holds
        # nothing else (lines starting with a space are few; where they are many, every byte
        # is looked at)
        ws = np.array([ord(" "), ord("\t")], np.uint8)
        lead = np.flatnonzero((ends > starts) & np.isin(buf[np.minimum(starts, len(buf) - 1)], ws))
        if len(lead) > len(starts) // 8:
            non_ws = np.concatenate([[0], np.cumsum(~np.isin(buf, ws), dtype=np.int64)])
            ends = np.where(non_ws[ends] - non_ws[starts] == 0, starts, ends)
        else:
            for i in lead.tolist():
                if not bytes(buf[starts[i]:ends[i]]).strip(b" \t"):
                    ends[i] = starts[i]
    return starts.astype(np.int64), ends.astype(np.int64)


def _count_fields(at: np.ndarray, starts: np.ndarray, ends: np.ndarray) -> np.ndarray:
    """The number of fields of each line ``starts:ends``, given the delimiter's positions."""
    return np.searchsorted(at, ends) - np.searchsorted(at, starts) + 1


def _is_utf8(line: np.ndarray) -> bool:
    try:
        line.tobytes().decode("utf-8")
    except UnicodeDecodeError:
        return False
    return True


def _header_reason(first: list[str], second: list[str] | None, cols: dict[str, int | None],
                   obj_id_is_num: bool, names_only: bool, second_line: int | None) -> str | None:
    """Why the first line is a header (``None``: it is a record). It is one where a numeric field
    the options name does not parse there and does on the second line (where there is one: a
    column that parses on neither holds something else, e.g. string ids, and its first record
    is no header); or where no field of it is a number and one is a column name
    (:data:`HEADER_NAMES`; not repeated on the second line): string ids, a txt file. With
    ``names_only`` only the latter."""
    if not names_only:
        numeric = [c for n, c in cols.items() if c is not None and (n != "obj_id" or obj_id_is_num)]
        for c in numeric:
            if (c <= len(first) and not _is_number(first[c - 1])
                    and (second is None or (c <= len(second) and _is_number(second[c - 1])))):
                return (f"its column {c} ({_clip(first[c - 1].strip())!r}) is not a number"
                        + (f" (on line {second_line} it is)" if second is not None else ""))
    names = [f.strip() for f in first if _is_header_name(f)]
    if names and not any(_is_number(f) for f in first):
        norm = [f.strip().lower() for f in first]
        if second is None or [f.strip().lower() for f in second] != norm:
            return f"it names the columns ({', '.join(repr(n) for n in names)})"
    return None


def _is_number(s: str) -> bool:
    try:
        float(s)
    except ValueError:
        return False
    return True


# why a numeric field is refused (codes of the per-row problem arrays)
_OK, _NOT_A_NUMBER, _OUT_OF_RANGE, _NOT_POSITIVE, _TOO_LARGE = range(5)
_PROBLEMS = {
    "obj_id": {_NOT_A_NUMBER: "not an integer",
               _OUT_OF_RANGE: "object id out of range (ids are -2**63 .. 2**64 - 1)"},
    "obj_size": {_NOT_A_NUMBER: "not an integer", _OUT_OF_RANGE: "size out of range (max 2**48)",
                 _NOT_POSITIVE: "size must not be negative", _TOO_LARGE: f"size must be at most 2**48 = {MAX_SIZE}"},
    "time": {_NOT_A_NUMBER: "not a finite number", _OUT_OF_RANGE: "time out of range (int64)"},
}
_U64_MAX = str(2**64 - 1)
_NEG_MAX = str(2**63)
_DIGITS = "0123456789"


def _parse_ints(field: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Parse a string column of integers: ``(values, problem)``. Values of 2**63 .. 2**64 - 1
    are reinterpreted bit for bit as int64 (as oracleGeneral's unsigned ids); ``problem`` is
    ``_OK``, ``_NOT_A_NUMBER`` or ``_OUT_OF_RANGE`` per row (value 0 there). Each row is judged
    on its own: one bad record never changes how the others parse. Syntax: an optional sign and
    ASCII digits."""
    stripped = np.char.strip(field)
    values = _digit_strings(stripped)
    if values is not None:
        return values, np.zeros(len(field), np.int8)
    if _plain_ascii(stripped):  # NumPy's parse then takes exactly this syntax: the fast path
        try:
            return stripped.astype(np.int64), np.zeros(len(field), np.int8)
        except (ValueError, OverflowError):
            pass
    body = np.char.lstrip(stripped, "+-")
    signs = np.char.str_len(stripped) - np.char.str_len(body)
    neg = np.char.startswith(stripped, "-")
    ok = (signs <= 1) & _all_digits(body)
    digits = np.char.lstrip(body, "0")
    n = np.char.str_len(digits)
    too_big = np.where(neg, (n > 19) | ((n == 19) & (digits > _NEG_MAX)),
                       (n > 20) | ((n == 20) & (digits > _U64_MAX)))
    problem = np.where(ok, np.where(too_big, _OUT_OF_RANGE, _OK), _NOT_A_NUMBER).astype(np.int8)
    good = problem == _OK
    mag = np.zeros(len(field), np.uint64)
    mag[good] = np.where(n[good] > 0, digits[good], "0").astype(np.uint64)
    mag[neg] = np.uint64(0) - mag[neg]  # two's complement: -2**63 .. -1
    return mag.view(np.int64), problem


def _digit_strings(a: np.ndarray) -> np.ndarray | None:
    """The values of a string array whose every string is 1 to 18 ASCII digits (the common
    column: NumPy's own string-to-integer conversion takes ~0.6 us a string, this ~0.05);
    ``None`` where one is not."""
    width = a.dtype.itemsize // 4
    if a.dtype.kind != "U" or not 1 <= width <= 18 or not len(a):
        return None
    codes = np.ascontiguousarray(a).view(np.uint32).reshape(len(a), width)
    digit = codes - 48  # (uint32: the padding NULs and other characters become large)
    is_digit = digit < 10
    length = np.count_nonzero(codes, axis=1)
    # digits, then the padding (a string holds no NUL: it is the padding)
    if not (is_digit.sum(axis=1) == length).all() or not (length > 0).all():
        return None
    values = np.zeros(len(a), np.int64)
    for j in range(width):
        inside = j < length
        values = np.where(inside, values * 10 + digit[:, j].astype(np.int64), values)
    return values


def _wrapped(values: np.ndarray, field: np.ndarray) -> np.ndarray:
    """Where :func:`_parse_ints` read a value of 2**63 or more (negative there, without a "-")."""
    wrapped = values < 0
    if wrapped.any():
        wrapped &= ~np.char.startswith(np.char.strip(field), "-")
    return wrapped


def _parse_floats(field: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Parse a string column of (finite) real numbers, as :func:`_parse_ints` (syntax: an
    optional sign, digits with at most one ``.``, an optional exponent); a value whose floor
    int64 cannot hold is ``_OUT_OF_RANGE``."""
    stripped = np.char.strip(field)
    try:
        if not _plain_ascii(stripped):
            raise ValueError("not plain ASCII")
        values = stripped.astype(np.float64)  # (inf and nan are not finite: refused below)
        ok = np.ones(len(field), bool)
    except ValueError:
        body = np.char.lstrip(np.char.lower(stripped), "+-")
        signs = np.char.str_len(stripped) - np.char.str_len(body)
        parts = np.char.partition(body, "e")
        exp = np.char.lstrip(parts[..., 2], "+-")
        exp_signs = np.char.str_len(parts[..., 2]) - np.char.str_len(exp)
        has_exp = np.char.str_len(parts[..., 1]) > 0
        ok = ((signs <= 1) & _all_digits(np.char.replace(parts[..., 0], ".", "", count=1))
              & (~has_exp | ((exp_signs <= 1) & _all_digits(exp))))
        values = np.zeros(len(field), np.float64)
        values[ok] = stripped[ok].astype(np.float64)
    problem = np.where(ok & np.isfinite(values), _OK, _NOT_A_NUMBER).astype(np.int8)
    fl = np.floor(np.where(problem == _OK, values, 0.0))
    problem[(problem == _OK) & ((fl < -(2.0**63)) | (fl >= 2.0**63))] = _OUT_OF_RANGE
    values[problem != _OK] = 0.0
    return values, problem


def _plain_ascii(a: np.ndarray) -> bool:
    """Whether every string is ASCII without ``_``: NumPy's own parse of such strings takes
    exactly the syntax of the slow path (it also takes ``1_000`` and other scripts' digits)."""
    codes = np.ascontiguousarray(a).view(np.uint32)
    return not bool(((codes > 127) | (codes == ord("_"))).any())


def _all_digits(a: np.ndarray) -> np.ndarray:
    """True where the string is one or more ASCII digits (not ``_``, not other scripts' digits,
    which Python's int() and NumPy would take)."""
    return (np.char.str_len(a) > 0) & (np.char.str_len(np.char.strip(a, _DIGITS)) == 0)


class _DenseIds:
    """Strings -> 0, 1, 2, ... in order of first appearance (deterministic on any machine),
    over the pieces of a file given one after the other (each call numbers a piece's column,
    new strings after those of earlier pieces)."""

    def __init__(self) -> None:
        self._ids: dict[str, int] = {}

    def __call__(self, field: np.ndarray) -> np.ndarray:
        uniq, first, inverse = np.unique(field, return_index=True, return_inverse=True)
        ids = self._ids
        number = np.empty(len(uniq), np.int64)
        for i in np.argsort(first, kind="stable").tolist():  # (in order of first appearance)
            number[i] = ids.setdefault(str(uniq[i]), len(ids))
        return number[inverse.ravel()]
