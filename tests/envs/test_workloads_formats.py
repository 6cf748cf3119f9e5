"""Readers and writers: round trips, hand-written files, malformed input, libCacheSim cross-check."""

from __future__ import annotations

import importlib.util
import logging
import re
import struct
import time
from pathlib import Path

import numpy as np
import pytest

from cachegym.allocator.errors import ConfigError, TraceError
from cachegym.allocator.trace import INF, Op, Trace
from cachegym.envs.workloads import (
    ORACLE_GENERAL_DTYPE,
    generate,
    lcs_dtype,
    parse_trace_params,
    read_csv,
    read_oracle_general,
    read_trace,
    read_txt,
    write_oracle_general,
    write_trace,
)


def _og_record(time_: int, obj: int, size: int, nxt: int) -> bytes:
    return struct.pack("<IQIq", time_, obj, size, nxt)


@pytest.fixture
def trace() -> Trace:
    t = generate("zipf", seed=3, n_requests=500, n_objects=60, size=100, size_sigma=1.0)
    return Trace.from_arrays(t.key, t.size, step=np.arange(len(t)) * 7)


# ---------------------------------------------------------------------- round trips
def test_record_layout_is_packed_24_bytes() -> None:
    assert ORACLE_GENERAL_DTYPE.itemsize == 24


@pytest.mark.parametrize("fmt,ext", [("npz", ".npz"), ("oracleGeneral", ".oracleGeneral"), ("csv", ".csv")])
def test_round_trip(tmp_path: Path, trace: Trace, fmt: str, ext: str) -> None:
    p = tmp_path / f"t{ext}"
    write_trace(trace, p, fmt)
    opts = {"time_col": 1, "obj_id_col": 2, "obj_size_col": 3} if fmt == "csv" else {}
    back = read_trace(p, fmt, **opts)
    for c in ("key", "size", "op", "step"):
        np.testing.assert_array_equal(getattr(back, c), getattr(trace, c), err_msg=c)


def test_round_trip_txt_keeps_ids(tmp_path: Path, trace: Trace) -> None:
    write_trace(trace, tmp_path / "t.txt")
    back = read_trace(tmp_path / "t.txt")
    np.testing.assert_array_equal(back.key, trace.key)
    assert (back.size == 1).all()


def test_oracle_general_ids_above_int64_round_trip(tmp_path: Path) -> None:
    p = tmp_path / "big.oracleGeneral"
    p.write_bytes(_og_record(0, 2**64 - 1, 8, -1) + _og_record(1, 5, 8, -1))
    t = read_oracle_general(p)
    assert t.key[0] == -1  # bit-for-bit reinterpretation
    write_oracle_general(t, tmp_path / "again.oracleGeneral")
    assert (tmp_path / "again.oracleGeneral").read_bytes() == p.read_bytes()


def test_oracle_general_next_access_from_next_use(tmp_path: Path) -> None:
    t = Trace.from_arrays([1, 2, 1, 3, 2, 1], 10)
    write_oracle_general(t, tmp_path / "t.bin")
    raw = np.fromfile(tmp_path / "t.bin", ORACLE_GENERAL_DTYPE)
    np.testing.assert_array_equal(raw["next_access"], [2, 4, 5, -1, -1, -1])
    nu = t.next_use()
    np.testing.assert_array_equal(raw["next_access"], np.where(nu == INF, -1, nu))


def test_oracle_general_writer_drops_frees_and_renames_reused_keys(tmp_path: Path) -> None:
    t = Trace.from_arrays([1, 1, 1, 1], 10, op=[Op.WRITE, Op.READ, Op.FREE, Op.WRITE])
    write_oracle_general(t, tmp_path / "t.bin")
    raw = np.fromfile(tmp_path / "t.bin", ORACLE_GENERAL_DTYPE)
    assert len(raw) == 3
    assert raw["obj_id"][0] == raw["obj_id"][1] != raw["obj_id"][2]
    np.testing.assert_array_equal(raw["next_access"], [1, -1, -1])


def test_libcachesim_reads_our_oracle_general(tmp_path: Path, trace: Trace) -> None:
    lcs = pytest.importorskip("libcachesim")
    p = tmp_path / "t.oracleGeneral"
    write_oracle_general(trace, p)
    reqs = list(lcs.TraceReader(str(p), lcs.TraceType.ORACLE_GENERAL_TRACE))
    assert [r.obj_id for r in reqs] == trace.key.tolist()
    assert [r.obj_size for r in reqs] == trace.size.tolist()
    nu = trace.next_use()
    assert [r.next_access_vtime for r in reqs] == nu.tolist()  # libCacheSim maps -1 to INT64_MAX


# ---------------------------------------------------------------------- hand-written files
def test_hand_written_oracle_general(tmp_path: Path) -> None:
    p = tmp_path / "h.oracleGeneral"
    p.write_bytes(_og_record(100, 7, 4096, 2) + _og_record(101, 8, 512, -1) + _og_record(102, 7, 4096, -1))
    t = read_trace(p)
    assert t.key.tolist() == [7, 8, 7] and t.size.tolist() == [4096, 512, 4096]
    assert t.step.tolist() == [100, 101, 102] and (t.op == Op.READ).all()
    assert t.meta["source"]["format"] == "oracleGeneral" and t.meta["skipped"] == 0


def test_hand_written_csv_with_header(tmp_path: Path) -> None:
    p = tmp_path / "h.csv"
    p.write_text("ts,op,key,bytes\n5,get,42,100\n6,set,43,200\r\n\n7,get,42,100\n")
    t = read_csv(p, time_col=1, obj_id_col=3, obj_size_col=4)
    assert t.key.tolist() == [42, 43, 42] and t.size.tolist() == [100, 200, 100]
    assert t.step.tolist() == [5, 6, 7]


def test_csv_header_naming_other_columns_warns(tmp_path: Path, trace: Trace,
                                               caplog: pytest.LogCaptureFixture) -> None:
    """Our own ``time,obj_id,obj_size`` file read with the default options (ids from column 1)
    warns, naming the columns the header names and the options to pass; read as the header
    says, it warns about nothing and gives the trace back."""
    from cachegym.envs.workloads.formats import write_csv

    p = tmp_path / "t.csv"
    write_csv(trace, p)
    with caplog.at_level(logging.WARNING, logger="cachegym.envs.workloads.formats"):
        read_csv(p)
    text = " ".join(r.getMessage() for r in caplog.records)
    assert "column 1 ('time')" in text and "pass obj_id_col=2" in text and "obj_size_col=3" in text
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="cachegym.envs.workloads.formats"):
        t = read_csv(p, time_col=1, obj_id_col=2, obj_size_col=3)
    assert not caplog.records
    assert t.key.tolist() == trace.key.tolist() and t.size.tolist() == trace.size.tolist()


@pytest.mark.parametrize("header", [True, False])
def test_an_operation_column_left_unread_warns(tmp_path: Path, header: bool,
                                              caplog: pytest.LogCaptureFixture) -> None:
    """A Twitter-cluster csv's sets and deletes were replayed as reads with no word (a
    helper's audit): a column of operations, named by the header or holding get/set/delete,
    is named; reading the ids and sizes alone warns about nothing else."""
    p = tmp_path / "tw.csv"
    rows = ["0,ka,10,100,1,get,0", "1,kb,10,200,1,set,0", "2,ka,10,100,1,delete,0"]
    p.write_text(("timestamp,key,key size,value size,client,operation,ttl\n" if header else "")
                 + "\n".join(rows) + "\n")
    with caplog.at_level(logging.WARNING, logger="cachegym.envs.workloads.formats"):
        t = read_csv(p, obj_id_col=2, obj_size_col=4, obj_id_is_num=False,
                     has_header=header)
    text = " ".join(r.getMessage() for r in caplog.records)
    assert "column 6 holds operations" in text and "every request is a read" in text
    assert len(t) == 3 and (t.op == 0).all()
    caplog.clear()
    q = tmp_path / "plain.csv"
    q.write_text("0,1,100\n1,2,200\n")
    with caplog.at_level(logging.WARNING, logger="cachegym.envs.workloads.formats"):
        read_csv(q, time_col=1, obj_id_col=2, obj_size_col=3)
    assert not caplog.records


def test_hand_written_csv_no_header_libcachesim_columns(tmp_path: Path) -> None:
    p = tmp_path / "h.csv"
    p.write_text("1.5\t9\t64\n2.0\t9\t64\n3.25\t10\t32")  # no final newline
    t = read_trace(p, "csv", time_col=1, obj_id_col=2, obj_size_col=3, delimiter="\t")
    assert t.key.tolist() == [9, 9, 10] and t.size.tolist() == [64, 64, 32]
    assert t.step.tolist() == [1, 2, 3]



@pytest.mark.parametrize("delimiter", ["\u00a7", ";;", ""])
def test_a_delimiter_that_is_not_one_byte_is_refused(tmp_path: Path, delimiter: str) -> None:
    """libCacheSim splits on a byte: a non-ASCII character (two bytes in UTF-8) was compared as
    one, and its fields were miscounted."""
    p = tmp_path / "s.csv"
    p.write_text("1\u00a79\u00a764\n2\u00a79\u00a764\n", encoding="utf-8")
    with pytest.raises(ConfigError, match="one ASCII character"):
        read_trace(p, "csv", time_col=1, obj_id_col=2, obj_size_col=3, delimiter=delimiter)


@pytest.mark.parametrize("text,options", [
    ("time-col=1, obj-id-col=2, obj-size-col=3, delimiter=,",
     {"time_col": 1, "obj_id_col": 2, "obj_size_col": 3, "delimiter": ","}),
    ("obj-id-col=2,delimiter=,,has-header=false", {"obj_id_col": 2, "delimiter": ",", "has_header": False}),
    ("obj_id_col=3,delimiter=\\t,obj-id-is-num=false,skip-bad=yes",
     {"obj_id_col": 3, "delimiter": "\t", "obj_id_is_num": False, "skip_bad": True}),
    ("delimiter=;, obj-size-col=4", {"delimiter": ";", "obj_size_col": 4}),
    ("ops=true,skip-bad=false", {"ops": True, "skip_bad": False}),
    ("", {}),
    # libCacheSim's other spellings (cli_reader_utils.c), its escaped comma, a field not needed here
    ("time-field=1, obj-id-field=2, size-col=3, header=true, delimiter=\\,, next-access-col=4",
     {"time_col": 1, "obj_id_col": 2, "obj_size_col": 3, "has_header": True, "delimiter": ","}),
    ("obj-size-field=5,size-field=6", {"obj_size_col": 6}),
    # a space or a tab typed as itself (both became a comma)
    ("obj-id-col=2,delimiter= ", {"obj_id_col": 2, "delimiter": " "}),
    ("delimiter=\t,has-header=true", {"delimiter": "\t", "has_header": True}),
])
def test_libcachesim_trace_params_parse_to_reader_options(text: str, options: dict[str, object]) -> None:
    assert parse_trace_params(text) == options


@pytest.mark.parametrize("text,says", [
    ("obj-col=2", "NAME one of time-col, obj-id-col"),
    ("obj-id-col", "expected NAME=VALUE"),
    ("obj-id-col=two", "'two' is not a column number"),
    ("has-header=maybe", "'maybe' is not true or false"),
])
def test_bad_trace_params_say_which_and_why(text: str, says: str) -> None:
    with pytest.raises(ConfigError, match=re.escape(says)):
        parse_trace_params(text)


def test_csv_read_with_the_defaults_warns_where_they_look_wrong(tmp_path: Path,
                                                               caplog: pytest.LogCaptureFixture) -> None:
    """A headerless file of several columns read with the defaults (ids from column 1, sizes
    1), and a column of ids that never repeat (a timestamp read as the id): each warned of."""
    p = tmp_path / "tw.csv"
    keys = np.random.default_rng(0).integers(0, 50, 2000)
    p.write_text("".join(f"{i},k{k},{(k % 7 + 1) * 100}\n" for i, k in enumerate(keys)))
    with caplog.at_level(logging.WARNING, logger="cachegym.envs.workloads.formats"):
        t = read_csv(p)
    text = caplog.text
    assert "3 columns and no header" in text and "all 2000 requests are to distinct objects" in text
    assert len(np.unique(t.key)) == 2000
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="cachegym.envs.workloads.formats"):
        t = read_trace(p, "csv", **parse_trace_params("obj-id-col=2,obj-size-col=3,obj-id-is-num=false"))
    assert not caplog.records
    assert len(np.unique(t.key)) == len(np.unique(keys)) and set(t.size.tolist()) <= {100 * i for i in range(1, 8)}


def test_string_ids_read_as_numbers_fail_at_the_first_record_saying_how_to_read_them(tmp_path: Path) -> None:
    """A first record whose id does not parse is no header when the second's does not either:
    the error names line 1 and the option for string ids (it named line 2, the first record taken
    for a header)."""
    p = tmp_path / "s.csv"
    p.write_text("0,key_1,200\n1,key_6,700\n2,key_1,200\n")
    with pytest.raises(TraceError, match=r"line 1, column 2 \(obj_id\): not an integer.*obj_id_is_num=False"):
        read_csv(p, obj_id_col=2, obj_size_col=3)
    t = read_csv(p, obj_id_col=2, obj_size_col=3, obj_id_is_num=False)
    assert t.key.tolist() == [0, 1, 0] and t.size.tolist() == [200, 700, 200]
    h = tmp_path / "h.csv"  # a header above string ids: still a header (its time does not parse)
    h.write_text("time,key,size\n1,a,5\n2,b,6\n3,a,5\n")
    t = read_csv(h, time_col=1, obj_id_col=2, obj_size_col=3, obj_id_is_num=False)
    assert t.key.tolist() == [0, 1, 0] and t.size.tolist() == [5, 6, 5]


@pytest.mark.parametrize("suffix", [".xz", ".bz2"])
def test_every_stream_of_an_xz_or_bz2_file_is_read_or_refused(tmp_path: Path, trace: Trace,
                                                             suffix: str) -> None:
    """Concatenated streams all read (xz's NUL padding between them too); a damaged second
    stream, or data after the last that is no stream, is a TraceError: Python's readers ended
    the file there, and a helper's fuzzing saw its records dropped without a word."""
    import bz2
    import lzma

    compress = {".xz": lzma.compress, ".bz2": bz2.compress}[suffix]
    plain = tmp_path / "t.oracleGeneral"
    write_oracle_general(trace, plain)
    raw = plain.read_bytes()
    want = read_trace(plain)
    pad = b"\0" * 8 if suffix == ".xz" else b""
    two = tmp_path / f"two.oracleGeneral{suffix}"
    two.write_bytes(compress(raw[:240]) + pad + compress(raw[240:]) + pad)
    assert np.array_equal(read_trace(two).key, want.key)
    second = bytearray(compress(raw[240:]))
    second[len(second) // 2] ^= 0xFF
    for name, data in (("bad", compress(raw[:240]) + bytes(second)),
                       ("junk", compress(raw) + b"not a stream")):
        p = tmp_path / f"{name}.oracleGeneral{suffix}"
        p.write_bytes(data)
        with pytest.raises(TraceError, match="cannot decompress"):
            read_trace(p)


def test_text_traces_refuse_a_late_nul_byte_and_a_line_that_dwarfs_the_rest(tmp_path: Path) -> None:
    """Only the first 64 KiB were checked for binary data, and the parser dropped a NUL after
    them (``7\\0`` read as 7); a line of 100,000 characters among 20,000 short ones asked the
    parser for 7.5 GiB (its table is as wide as the longest field): each is a TraceError naming
    where. A deeply nested ``meta`` of an .npz is one too (it was a RecursionError)."""
    nul = tmp_path / "nul.csv"
    nul.write_bytes(b"1\n" * 40000 + b"7\x00\n")
    with pytest.raises(TraceError, match=r"a NUL byte at byte 80,001 \(line 40001\)"):
        read_trace(nul)
    early = tmp_path / "early.csv"  # (a stray one early on was "binary data", with no line)
    early.write_bytes(b"1,5,100\n2,6\x00,10\n")
    with pytest.raises(TraceError, match=r"a NUL byte at byte 11 \(line 2\)"):
        read_trace(early)
    binary = tmp_path / "og.csv"  # an oracleGeneral file named .csv is still binary data
    binary.write_bytes(b"".join(_og_record(1, i, 100, -1) for i in range(100)))
    with pytest.raises(TraceError, match=r"binary data in a text trace \(this looks like an \.npz"):
        read_trace(binary)
    long = tmp_path / "long.csv"
    long.write_bytes(b"1\n" * 20000 + b"9" * 100000 + b"\n")
    with pytest.raises(TraceError, match="line 20001 is 100,000 characters long"):
        read_trace(long)
    ok = tmp_path / "ok.csv"  # long lines alike are a trace like any other
    ok.write_bytes(b"".join(b"%d,%s\n" % (i % 7, b"x" * 300) for i in range(3000)))
    assert len(read_csv(ok, obj_id_col=1)) == 3000
    deep = tmp_path / "deep.npz"
    np.savez(deep, key=np.array([1]), size=np.array([1]), op=np.uint8([0]),
             meta=np.array('{"a":' + "[" * 100000 + "]" * 100000 + "}"))
    with pytest.raises(TraceError, match="meta is not a JSON object string"):
        read_trace(deep)


@pytest.mark.parametrize("suffix", [".zst", ".gz", ".xz", ".bz2"])
def test_a_compressed_trace_reads_as_the_file_it_holds(tmp_path: Path, trace: Trace, suffix: str) -> None:
    """``x.oracleGeneral.zst`` (as public libCacheSim traces come) and ``x.csv.gz`` read as the
    decompressed file: its format from the name without the suffix, its name the trace's, and a
    stream cut short is a TraceError naming the user's file."""
    import bz2
    import gzip
    import lzma

    import zstandard

    compress = {".zst": zstandard.ZstdCompressor().compress, ".gz": gzip.compress,
                ".xz": lzma.compress, ".bz2": bz2.compress}[suffix]
    plain = tmp_path / "t.oracleGeneral"
    write_oracle_general(trace, plain)
    packed = tmp_path / f"t.oracleGeneral{suffix}"
    raw = plain.read_bytes()
    data = compress(raw)
    if suffix == ".zst":  # two frames, as a concatenation of zstd files is: read as one stream
        data = compress(raw[:240]) + compress(raw[240:])
    packed.write_bytes(data)
    t = read_trace(packed)
    want = read_trace(plain)
    assert t.name == "t" and np.array_equal(t.key, want.key) and np.array_equal(t.size, want.size)
    assert t.meta["source"]["compression"] and t.meta["source"]["path"] == str(packed)
    cut = tmp_path / f"cut.oracleGeneral{suffix}"
    cut.write_bytes(data[:len(data) // 2])
    with pytest.raises(TraceError, match=re.escape(str(cut))) as e:
        read_trace(cut)
    assert "cachegym-trace-" not in str(e.value)  # the temporary file is not named
    bare = tmp_path / f"t{suffix}"  # no format in the name left: it must be given
    bare.write_bytes(data)
    with pytest.raises(ConfigError, match="cannot infer the format of the trace compressed in"):
        read_trace(bare)
    assert len(read_trace(bare, "oracleGeneral")) == len(want)
    csv_gz = tmp_path / "t.csv.gz"
    csv_gz.write_bytes(gzip.compress(b"1,5,100\n2,6,200\n3,5,100\n"))
    t = read_trace(csv_gz, **parse_trace_params("time-col=1,obj-id-col=2,obj-size-col=3"))
    assert t.key.tolist() == [5, 6, 5] and t.size.tolist() == [100, 200, 100]


def _lcs_file(path: Path, version: int, rows: list[tuple[int, int, int, int]],
              magic: int = 0x123456789ABCDEF0) -> None:
    """An lcs trace as libCacheSim writes it: the 8 KiB header (start magic, version, stat with
    n_req, end magic) and ``(time, obj_id, obj_size, op)`` requests of ``version``."""
    head = np.zeros(1024, "<u8")
    head[0], head[1], head[2], head[3], head[-1] = magic, version, 1, len(rows), magic
    rec = np.zeros(len(rows), lcs_dtype(min(version, 8)))
    for i, (t, k, sz, op) in enumerate(rows):
        rec["time"][i], rec["obj_id"][i], rec["obj_size"][i] = t, k, sz
        if version >= 2:
            rec["op_tenant"][i] = op | (7 << 8)  # tenant 7 in the upper 24 bits
        rec["next_access"][i] = -1
    path.write_bytes(head.tobytes() + rec.tobytes())


@pytest.mark.parametrize("version,size", [(1, 24), (2, 28), (3, 36), (4, 40), (6, 52), (8, 100)])
def test_lcs_traces_of_every_record_version_read(tmp_path: Path, version: int, size: int) -> None:
    """libCacheSim's lcs format (lcs.h): every request a read by default; with ops=True, writes
    as writes and deletes dropped (counted)."""
    assert lcs_dtype(version).itemsize == size  # the record sizes lcs.h asserts
    rows = [(10, 5, 100, 1), (11, 6, 200, 3), (12, 5, 100, 9), (13, 5, 100, 13)]
    p = tmp_path / "t.lcs"
    _lcs_file(p, version, rows)
    t = read_trace(p)
    assert t.name == "t" and t.key.tolist() == [5, 6, 5, 5] and t.size.tolist() == [100, 200, 100, 100]
    assert t.step.tolist() == [10, 11, 12, 13] and (t.op == Op.READ).all()
    if version >= 2:
        t = read_trace(p, **parse_trace_params("ops=true"))
        assert t.key.tolist() == [5, 6, 5] and t.meta["deletes"] == 1
        assert t.op.tolist() == [Op.READ, Op.WRITE, Op.WRITE]


def test_a_bad_size_after_size_zero_records_names_its_record_in_the_file(tmp_path: Path) -> None:
    """Sizes 0, 0, -5, 4: the error named record 0 (its number among the records left after the
    size-0 ones were dropped); it is record 2."""
    p = tmp_path / "t.lcs"
    _lcs_file(p, 3, [(1, 1, 0, 0), (2, 2, 0, 0), (3, 3, -5, 0), (4, 4, 4, 0)])
    with pytest.raises(TraceError, match=r"record 2: object size is -5 \(id 3"):
        read_trace(p)


@pytest.mark.parametrize("version", [1, 2, 3, 5, 8])
def test_libcachesim_reads_the_lcs_files_as_we_do(tmp_path: Path, version: int) -> None:
    """The layout written by the tests' helper is libCacheSim's own (its LCS_TRACE reader reads
    the same times, ids, sizes and ops), so the reader is checked against libCacheSim's."""
    lcs = pytest.importorskip("libcachesim")
    rows = [(10, 5, 100, 1), (11, 2**40, 200, 3), (12, 5, 100, 9), (13, 7, 3, 13)]
    p = tmp_path / "t.lcs"
    _lcs_file(p, version, rows)
    theirs = list(lcs.TraceReader(str(p), lcs.TraceType.LCS_TRACE))
    ours = read_trace(p)
    assert [(r.clock_time, r.obj_id, r.obj_size) for r in theirs] == list(
        zip(ours.step.tolist(), ours.key.tolist(), ours.size.tolist(), strict=True))
    if version >= 2:
        assert [int(r.op) for r in theirs] == [op for *_, op in rows]


@pytest.mark.parametrize("version", [1, 2])
def test_vscsi_traces_read_as_libcachesim_reads_them(tmp_path: Path, version: int) -> None:
    """vscsi (VMware block traces, libCacheSim's ``cloudPhysicsIO.vscsi``): block number as the
    object, length as the size, microseconds to seconds; checked against libCacheSim's reader
    where it is installed; a file of neither version is refused."""
    from cachegym.envs.workloads.formats import VSCSI_DTYPES

    a = np.zeros(5, VSCSI_DTYPES[version])
    a["ver"] = version << 8
    a["obj_id"] = [5, 9, 5, 2**40, 9]
    a["obj_size"] = [4096, 512, 4096, 8192, 512]
    a["ts"] = np.arange(5) * 1_500_000
    p = tmp_path / "t.vscsi"
    a.tofile(p)
    t = read_trace(p)
    assert t.key.tolist() == [5, 9, 5, 2**40, 9] and t.size.tolist() == [4096, 512, 4096, 8192, 512]
    assert t.step.tolist() == [0, 1, 3, 4, 6] and t.meta["source"]["version"] == version
    bad = tmp_path / "bad.vscsi"
    a["ver"] = 7 << 8
    a.tofile(bad)
    with pytest.raises(TraceError, match="not a vscsi trace"):
        read_trace(bad)
    a["ver"] = version << 8  # one record: its own version checked (it was refused)
    one = tmp_path / "one.vscsi"
    a[:1].tofile(one)
    assert read_trace(one).key.tolist() == [5]
    try:
        import libcachesim as lcs
    except ImportError:  # the cross-check needs libCacheSim; the layout checks above do not
        return
    theirs = [(r.clock_time, r.obj_id, r.obj_size) for r in lcs.TraceReader(str(p), lcs.TraceType.VSCSI_TRACE)]
    assert theirs == list(zip(t.step.tolist(), t.key.tolist(), t.size.tolist(), strict=True))


def test_bad_lcs_files_say_what_is_wrong(tmp_path: Path) -> None:
    p = tmp_path / "bad.lcs"
    _lcs_file(p, 2, [(1, 5, 100, 1)], magic=0xDEAD)
    with pytest.raises(TraceError, match="no lcs header"):
        read_trace(p)
    _lcs_file(p, 9, [(1, 5, 100, 1)])
    with pytest.raises(TraceError, match="lcs version 9 is not one this reader knows"):
        read_trace(p)
    _lcs_file(p, 3, [(1, 5, 100, 1), (2, 6, 0, 1)])  # size 0: dropped, as libCacheSim's reader does
    assert len(read_trace(p)) == 1 and len(read_trace(p, skip_bad=True)) == 1
    p.write_bytes(p.read_bytes()[:-5])
    with pytest.raises(TraceError, match="truncated record"):
        read_trace(p)
    p.write_bytes(b"\0" * 100)
    with pytest.raises(TraceError, match="shorter than the 8192-byte lcs header"):
        read_trace(p)


def test_csv_without_size_column_is_object_mode(tmp_path: Path) -> None:
    p = tmp_path / "h.csv"
    p.write_text("a,1\nb,2\na,3\n")
    t = read_csv(p, obj_id_col=1, obj_id_is_num=False)
    assert t.key.tolist() == [0, 1, 0] and (t.size == 1).all()


def test_hand_written_txt(tmp_path: Path) -> None:
    p = tmp_path / "h.txt"
    p.write_text("3\n1\n3\n2\n")
    t = read_txt(p)
    assert t.key.tolist() == [3, 1, 3, 2] and (t.size == 1).all()


def test_csv_matches_libcachesim_reader(tmp_path: Path) -> None:
    lcs = pytest.importorskip("libcachesim")
    p = tmp_path / "h.csv"
    p.write_text("time,id,size\n1,10,100\n2,20,200\n3,10,100\n")
    params = lcs.ReaderInitParam(has_header=True, has_header_set=True, delimiter=",")
    params.time_field, params.obj_id_field, params.obj_size_field = 1, 2, 3
    reqs = list(lcs.TraceReader(str(p), lcs.TraceType.CSV_TRACE, params))
    t = read_csv(p, time_col=1, obj_id_col=2, obj_size_col=3)
    assert [r.obj_id for r in reqs] == t.key.tolist()
    assert [r.obj_size for r in reqs] == t.size.tolist()


# ---------------------------------------------------------------------- malformed input
def test_truncated_oracle_general_record(tmp_path: Path) -> None:
    p = tmp_path / "t.oracleGeneral"
    p.write_bytes(_og_record(0, 1, 8, -1) + _og_record(1, 2, 8, -1)[:10])
    with pytest.raises(TraceError, match="truncated") as e:
        read_oracle_general(p)
    assert e.value.row == 1 and e.value.path == str(p)


def test_truncated_record_skipped_on_request(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    p = tmp_path / "t.oracleGeneral"
    p.write_bytes(_og_record(0, 1, 8, -1) + b"\x01\x02")
    with caplog.at_level(logging.WARNING):
        t = read_oracle_general(p, skip_bad=True)
    assert len(t) == 1 and t.meta["skipped"] == 1 and "skipped 1" in caplog.text


def test_oracle_general_size_zero_and_next_access_as_libcachesim(
        tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    """libCacheSim's readers drop requests of size 0 (ignore_size_zero_req) and pass any
    next-access value through; this reader refused the whole trace for either."""
    p = tmp_path / "t.oracleGeneral"
    p.write_bytes(_og_record(0, 1, 8, -1) + _og_record(1, 2, 0, -1) + _og_record(2, 1, 8, -5)
                  + _og_record(3, 3, 0, 7) + _og_record(4, 1, 8, -1))
    with caplog.at_level(logging.WARNING):
        t = read_oracle_general(p)
    assert t.key.tolist() == [1, 1, 1] and t.meta["skipped"] == 0
    assert "dropped 2 request(s) of size 0, as libCacheSim's readers do" in caplog.text


@pytest.mark.parametrize("content,match,row", [
    ("1,10,100\n2,20\n", "expected 3 columns, got 2", 1),
    ("1,10,100\n2,20,100,5\n", "expected 3 columns, got 4", 1),
    ("1,10,100\n2,abc,100\n", "not an integer", 1),
    ("1,10,100\n2,20,1.5\n", "not an integer", 1),
    ("1,10,100\n2,20,-4\n3,30,5\n", "size must not be negative", 1),
])
def test_malformed_csv(tmp_path: Path, content: str, match: str, row: int) -> None:
    p = tmp_path / "bad.csv"
    p.write_text(content)
    opts = {"time_col": 1, "obj_id_col": 2, "obj_size_col": 3, "has_header": False}
    with pytest.raises(TraceError, match=match) as e:
        read_csv(p, **opts)
    assert e.value.row == row and "bad.csv" in str(e.value)
    t = read_csv(p, **opts, skip_bad=True)
    assert t.meta["skipped"] == 1 and len(t) == content.count("\n") - 1


def test_malformed_txt(tmp_path: Path) -> None:
    p = tmp_path / "bad.txt"
    p.write_text("1\n2\nthree\n")
    with pytest.raises(TraceError, match="line 3"):
        read_txt(p)


@pytest.mark.parametrize("writer,reader,match", [
    ("csv", "oracleGeneral", "text file"),
    ("npz", "oracleGeneral", "npz"),
    ("oracleGeneral", "csv", "binary data"),
    ("npz", "txt", "binary data"),
    ("oracleGeneral", "npz", r"not an .npz trace \(an .npz is a zip archive; this file is not one\)"),
])
def test_wrong_format(tmp_path: Path, trace: Trace, writer: str, reader: str, match: str) -> None:
    p = tmp_path / "file"
    if writer == "npz":
        trace.save(p.with_suffix(".npz"))
        p = p.with_suffix(".npz")
    else:
        write_trace(trace, p, writer)
    with pytest.raises(TraceError, match=match):
        read_trace(p, reader)


def test_missing_file_and_bad_options(tmp_path: Path) -> None:
    with pytest.raises(TraceError, match="no such file"):
        read_trace(tmp_path / "nope.csv")
    with pytest.raises(ConfigError, match="unknown trace format"):
        read_trace(tmp_path / "x", "parquet")
    with pytest.raises(ConfigError, match=r"cannot infer .* --format to trace_stats.py and parity.py"):
        read_trace(tmp_path / "x.dat")
    (tmp_path / "a.csv").write_text("1,2\n")
    with pytest.raises(ConfigError, match="1-based"):
        read_csv(tmp_path / "a.csv", obj_id_col=0)
    with pytest.raises(TraceError, match="options name column 5"):
        read_csv(tmp_path / "a.csv", obj_id_col=5)
    with pytest.raises(ConfigError, match=r"format 'txt' does not take the option\(s\) \['obj_size_col'\]; "
                                          r"it takes \[.+\]"):
        read_trace(tmp_path / "a.csv", "txt", obj_size_col=2)
    with pytest.raises(ConfigError, match=r"format 'csv' does not take the option\(s\) \['bogus'\]; "
                                          r"it takes \['time_col', 'obj_id_col', 'obj_size_col'"):
        read_trace(tmp_path / "a.csv", "csv", bogus=1)


@pytest.mark.parametrize("option, value", [("has_header", "false"), ("has_header", "no"),
                                           ("skip_bad", "false"), ("obj_id_is_num", 1)])
def test_a_flag_given_as_a_string_is_refused_not_read_as_true(tmp_path: Path, option: str,
                                                               value: object) -> None:
    """``has_header='false'`` (a Hydra ``has_header: "false"``) was true: the first record was
    dropped as a header without a word."""
    p = tmp_path / "t.csv"
    p.write_text("1,10,100\n2,11,100\n3,10,100\n")
    with pytest.raises(ConfigError, match=f"option {option} must be true or false.*got {value!r}"):
        read_trace(p, "csv", obj_id_col=2, obj_size_col=3, **{option: value})
    assert len(read_trace(p, "csv", obj_id_col=2, obj_size_col=3, has_header=np.bool_(False)).key) == 3


# ---------------------------------------------------------------------- speed
def test_oracle_general_read_is_vectorised(tmp_path: Path) -> None:
    n = 1_000_000
    a = np.zeros(n, ORACLE_GENERAL_DTYPE)
    a["obj_id"] = np.arange(n) % 1000
    a["obj_size"] = 1
    a["next_access"] = -1
    a.tofile(tmp_path / "m.oracleGeneral")
    t0 = time.perf_counter()
    t = read_oracle_general(tmp_path / "m.oracleGeneral")
    assert len(t) == n
    assert time.perf_counter() - t0 < 5.0  # ~0.1 s; a per-record loop takes far longer


def test_a_file_without_records_is_refused_saying_why(tmp_path: Path) -> None:
    """An empty file, a csv whose one line reads as a header, or one whose every record is
    malformed (with skip_bad) would replay as an empty trace: each is refused, naming why."""
    empty = tmp_path / "empty.oracleGeneral"
    empty.write_bytes(b"")
    header_only = tmp_path / "header.csv"
    header_only.write_text("garbage\n")
    all_bad = tmp_path / "bad.csv"
    all_bad.write_text("1,2\nx,y\n")
    with pytest.raises(TraceError, match=r"no records \(the file is empty\)"):
        read_trace(empty)
    for z in ("gz", "xz", "zst"):  # (an empty .zst said "the last zstd frame is cut short")
        if z == "zst" and importlib.util.find_spec("zstandard") is None:
            continue
        (tmp_path / f"e.oracleGeneral.{z}").write_bytes(b"")
        with pytest.raises(TraceError, match=r"no records \(the file is empty\)"):
            read_trace(tmp_path / f"e.oracleGeneral.{z}")
    with pytest.raises(TraceError, match="only line was read as a header: pass has_header=False"):
        read_trace(header_only)
    assert len(read_trace(header_only, has_header=False, obj_id_is_num=False)) == 1
    with pytest.raises(TraceError, match="no records: all 1 were malformed and skipped"):
        read_trace(all_bad, obj_id_col=2, skip_bad=True, has_header=True)
    sizes_zero = tmp_path / "zero.csv"  # (was told its only line may be a header)
    sizes_zero.write_text("1,0\n2,0\n")
    with pytest.raises(TraceError, match=r"no records \(the file holds no request this reader "
                                          r"keeps: requests of size 0"):
        read_trace(sizes_zero, obj_id_col=1, obj_size_col=2, has_header=False)


# ---------------------------------------------------------------------- every reader agrees (issue #27, item 4)
def test_one_bad_row_leaves_the_valid_ids_above_18_digits_alone(tmp_path: Path) -> None:
    rows = [f"{i},{10**19 + i},8" for i in range(1000)]
    p = tmp_path / "t.csv"
    p.write_text("\n".join(rows[:500] + ["500,xx,8"] + rows[500:]) + "\n")
    t = read_csv(p, time_col=1, obj_id_col=2, obj_size_col=3, skip_bad=True)
    assert t.meta["skipped"] == 1 and len(t) == 1000  # was: skipped 1001, no records
    np.testing.assert_array_equal(t.key.view(np.uint64), np.arange(1000, dtype=np.uint64) + 10**19)
    with pytest.raises(TraceError, match="line 501, column 2 .obj_id.: not an integer .got 'xx'") as ei:
        read_csv(p, time_col=1, obj_id_col=2, obj_size_col=3)  # was: a valid record named
    assert ei.value.row == 500


@pytest.mark.parametrize(("record", "says"), [
    ("1,5,9223372036854775808", "size must be at most 2**48"),  # was: "size must be > 0"
    ("1,5,281474976710657", "size must be at most 2**48"),
    ("1,5,-1", "size must not be negative"),
    ("1,18446744073709551616,8", "object id out of range"),
    ("1e30,5,8", "time out of range"),  # was: INT64_MIN with a RuntimeWarning
    ("nan,5,8", "time): not a finite number"),
])
def test_csv_range_errors_say_what_is_wrong(tmp_path: Path, record: str, says: str) -> None:
    p = tmp_path / "t.csv"
    p.write_text(f"0,1,8\n{record}\n")
    with pytest.raises(TraceError, match=re.escape(says)) as ei:
        read_csv(p, time_col=1, obj_id_col=2, obj_size_col=3)
    assert ei.value.row == 1


def test_largest_unsigned_id_reads_in_every_format(tmp_path: Path) -> None:
    want = np.array([2**64 - 1, 5], np.uint64).view(np.int64)
    (tmp_path / "t.txt").write_text("18446744073709551615\n5\n")
    (tmp_path / "t.csv").write_text("1,18446744073709551615,8\n2,-5,8\n")
    p = tmp_path / "t.oracleGeneral"
    p.write_bytes(_og_record(0, 2**64 - 1, 8, -1) + _og_record(1, 5, 8, -1))
    np.testing.assert_array_equal(read_txt(tmp_path / "t.txt").key, want)
    np.testing.assert_array_equal(read_oracle_general(p).key, want)
    assert read_csv(tmp_path / "t.csv", obj_id_col=2).key.tolist() == [-1, -5]


@pytest.mark.parametrize("fmt", ["npz", "oracleGeneral", "csv", "txt"])
def test_a_directory_is_not_called_missing(tmp_path: Path, fmt: str) -> None:
    d = tmp_path / f"dir.{fmt}"
    d.mkdir()
    with pytest.raises(TraceError, match="is a directory"):
        read_trace(d, fmt)


@pytest.mark.parametrize("fmt", ["npz", "oracleGeneral", "csv", "txt"])
def test_an_empty_trace_is_an_error_in_every_format(tmp_path: Path, fmt: str) -> None:
    p = tmp_path / f"empty.{fmt}"
    if fmt == "npz":
        Trace.from_arrays(np.zeros(0, np.int64), 1).save(p)  # was: loaded, NaN rows in results
    else:
        p.write_bytes(b"")
    with pytest.raises(TraceError, match="no records"):
        read_trace(p, fmt)


@pytest.mark.parametrize("content", [b"", b"PK", b"\x80\x02"])
def test_a_tiny_npz_is_called_truncated_not_pickled(tmp_path: Path, content: bytes) -> None:
    p = tmp_path / "tiny.npz"
    p.write_bytes(content)
    with pytest.raises(TraceError, match=f"only {len(content)} bytes: empty or truncated"):
        read_trace(p)


def test_numbers_parse_the_same_whatever_else_is_in_the_column(tmp_path: Path) -> None:
    """NumPy alone takes ``1_000`` and other scripts' digits; a column parses by one syntax
    whether or not another record is malformed, so a bad row changes nothing else."""
    for extra in ("", "9,x,8\n"):
        p = tmp_path / "t.csv"
        p.write_text("1,1_000,8\n2,\u0663,8\n3,7,8\n" + extra)
        t = read_csv(p, time_col=1, obj_id_col=2, obj_size_col=3, skip_bad=True)
        assert t.key.tolist() == [7] and t.meta["skipped"] == 2 + bool(extra)


def test_binary_data_read_as_text_names_the_format_argument_of_each_interface(tmp_path: Path) -> None:
    """An .npz read as csv: the hint says where to give the format in Python, to the Hydra
    scripts and to ``cachegym sim`` (it named ``read_trace``'s ``format=`` only)."""
    p = tmp_path / "t.csv"
    Trace.from_arrays([1, 2, 1], 512).save(str(tmp_path / "t.npz"))
    p.write_bytes((tmp_path / "t.npz").read_bytes())
    with pytest.raises(TraceError, match=r"binary data in a text trace.*format= in Python, "
                                         r"trace.format= to the Hydra scripts, the format argument"):
        read_trace(p, "csv")


def test_a_csv_time_column_of_whole_numbers_stays_exact(tmp_path: Path) -> None:
    """Nanosecond timestamps (1.7e18) lost their last digits as float64 (a helper's fuzzing:
    ...789 read as ...768) and int64's largest was refused; whole times are parsed as integers
    now, fractional ones as before (floored), and past int64 still refused."""
    p = tmp_path / "t.csv"
    p.write_text("1700000000123456789,5,100\n9223372036854775807,6,100\n")
    assert read_csv(p, time_col=1, obj_id_col=2, obj_size_col=3).step.tolist() == [
        1700000000123456789, 9223372036854775807]
    p.write_text("1.5,5,100\n2.7,6,100\n")
    assert read_csv(p, time_col=1, obj_id_col=2, obj_size_col=3).step.tolist() == [1, 2]
    p.write_text("18446744073709551615,5,100\n")
    with pytest.raises(TraceError, match=r"time out of range \(int64\)"):
        read_csv(p, time_col=1, obj_id_col=2, obj_size_col=3)


def test_csv_quoted_fields_and_spaced_string_ids_read_as_libcachesim_reads_them(tmp_path: Path) -> None:
    """libCacheSim's csv parser strips the quotes around a field and the spaces around an id:
    '"a"', 'a' and ' a ' are one object (they were three here, silently)."""
    p = tmp_path / "q.csv"
    p.write_text('"a",10\na,10\n"a",10\n b ,10\n"10",5\n')
    t = read_csv(p, obj_id_col=1, obj_size_col=2, obj_id_is_num=False, has_header=False)
    assert t.key.tolist() == [0, 0, 0, 1, 2] and t.size.tolist() == [10, 10, 10, 10, 5]
    p.write_text('"1","10"\n2,"20"\n')
    t = read_csv(p, obj_id_col=1, obj_size_col=2, has_header=False)
    assert t.key.tolist() == [1, 2] and t.size.tolist() == [10, 20]
    lcs = pytest.importorskip("libcachesim")
    p.write_text('"a",10\na,10\n"a",10\n b ,10\n')
    params = lcs.ReaderInitParam(has_header=False, has_header_set=True, delimiter=",")
    params.obj_id_field, params.obj_size_field, params.obj_id_is_num = 1, 2, False
    reqs = list(lcs.TraceReader(str(p), lcs.TraceType.CSV_TRACE, params))
    ours = read_csv(p, obj_id_col=1, obj_size_col=2, obj_id_is_num=False, has_header=False).key.tolist()
    assert [len({r.obj_id for r in reqs[:i + 1]}) for i in range(len(reqs))] == [
        len(set(ours[:i + 1])) for i in range(len(ours))]  # the same objects, in the same order


def test_an_lcs_file_named_as_oracle_general_is_refused_as_what_it_is(tmp_path: Path) -> None:
    """Its header and records were read as oracleGeneral records: a garbage trace (keys of
    -2**32, sizes of 2**32-1) with a warning about size-0 requests."""
    p = tmp_path / "lcs4.oracleGeneral"
    _lcs_file(p, 2, [(i, i, 10, 0) for i in range(4)])
    with pytest.raises(TraceError, match=r"this is a libCacheSim lcs trace .*not an oracleGeneral "
                                         r"one \(read it with the format lcs\)"):
        read_trace(p)
    assert len(read_trace(p, "lcs")) == 4


def test_readers_warnings_and_errors_say_what_the_file_holds(tmp_path: Path,
                                                              caplog: pytest.LogCaptureFixture) -> None:
    """A compressed trace's warnings named its deleted temporary file; an lcs header's count
    was compared after size-0 requests were dropped (a false warning); a file of size-0 requests
    only was "empty"."""
    import gzip

    data = _og_record(1, 1, 0, -1) + _og_record(1, 2, 5, -1)
    (tmp_path / "z.oracleGeneral.gz").write_bytes(gzip.compress(data))
    with caplog.at_level(logging.WARNING):
        read_trace(tmp_path / "z.oracleGeneral.gz")
    assert f"{tmp_path / 'z.oracleGeneral.gz'} (decompressed): dropped 1 request(s) of size 0" in caplog.text
    assert "cachegym-trace-" not in caplog.text
    caplog.clear()
    _lcs_file(tmp_path / "l3.lcs", 2, [(1, 1, 10, 0), (2, 2, 0, 0), (3, 3, 10, 0)])
    with caplog.at_level(logging.WARNING):
        assert len(read_trace(tmp_path / "l3.lcs")) == 2
    assert "dropped 1 request(s) of size 0" in caplog.text and "the lcs header counts" not in caplog.text
    (tmp_path / "zero.oracleGeneral").write_bytes(_og_record(1, 1, 0, -1))
    with pytest.raises(TraceError, match=r"no records \(the file holds no request this reader keeps: "
                                         r"requests of size 0"):
        read_trace(tmp_path / "zero.oracleGeneral")
    (tmp_path / "empty.oracleGeneral").write_bytes(b"")
    with pytest.raises(TraceError, match=r"the file is empty"):
        read_trace(tmp_path / "empty.oracleGeneral")


def test_a_line_that_is_not_utf8_is_named_or_skipped(tmp_path: Path) -> None:
    """The whole file was refused as 'cannot parse ... position 5', with no line, and skip_bad
    did not drop the line."""
    p = tmp_path / "bad.csv"
    p.write_bytes(b"1,5,100\n2,\xff\xfe,10\n3,7,10\n")
    with pytest.raises(TraceError, match=r"line 2: bytes that are not UTF-8 text .*skip_bad=True"):
        read_csv(p, obj_id_col=2, obj_size_col=3)
    t = read_csv(p, obj_id_col=2, obj_size_col=3, skip_bad=True)
    assert t.key.tolist() == [5, 7] and t.meta["skipped"] == 1
    utf8 = tmp_path / "ok.csv"  # non-ASCII UTF-8 ids read as they are
    utf8.write_bytes("1,café,100\n2,abc,10\n3,café,100\n".encode())
    t = read_csv(utf8, obj_id_col=2, obj_size_col=3, obj_id_is_num=False)
    assert len(t) == 3 and t.key[0] == t.key[2] != t.key[1]


# ---------------------------------------------------------------------- text read piece by piece
# A text trace is parsed in pieces of whole lines (formats._PIECE_BYTES each), so that its memory
# is a piece's, not the file's: whatever the piece size, the trace read is that of reading the
# file in one piece, and so is the error of a file with one defect (with several, the first
# piece that holds one reports its first: column counts, then UTF-8, then fields by column).
_PIECED = {
    "header, LF": b"time,obj_id,obj_size\n" + b"".join(
        b"%d,%d,%d\n" % (i, (i * 7) % 13, 100 + i % 5) for i in range(40)),
    "CRLF, blank and space-only lines, BOM": b"\xef\xbb\xbf" + b"".join(
        (b"%d,%d,%d\r\n" % (i, i % 9, 10 + i) + (b"\r\n" if i % 7 == 0 else b"")
         + (b" \t \r\n" if i % 11 == 0 else b"")) for i in range(40)),
    "lone CR": b"".join(b"%d,%d,%d\r" % (i, i % 5, 1 + i) for i in range(30)),
    "no newline at the end": b"".join(b"%d, %d ,%d\n" % (i, i % 4, 8) for i in range(20)) + b"5,6,7",
    "string ids": b"time,key,size\n" + b"".join(
        b"%d,k%s,%d\n" % (i, str((i * 5) % 17).encode(), 3 + i % 2) for i in range(50)),
    "quoted, utf-8": "".join(f'{i},"é{i % 6}",{i + 1}\n' for i in range(25)).encode(),
    # one time that is not whole makes every time a float (the review: a piece's whole times
    # beside another's floats went back in time)
    "a fractional time": b"".join(b"%d,%d,7\n" % (1234567890123456789 + i, i % 3) for i in range(30))
    + b"1234567890123456789.5,7,7\n",
}


def _read_pieced(monkeypatch: pytest.MonkeyPatch, path: Path, piece: int, **options: object) -> Trace | str:
    from cachegym.envs.workloads import formats

    monkeypatch.setattr(formats, "_PIECE_BYTES", piece)
    try:
        return read_csv(path, **options)  # type: ignore[arg-type]
    except TraceError as e:
        return f"{type(e).__name__}: {e} (row {e.row})"


@pytest.mark.parametrize("name", list(_PIECED))
def test_text_trace_is_the_same_in_any_piece_size(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                  name: str) -> None:
    path = tmp_path / "t.csv"
    path.write_bytes(_PIECED[name])
    ids_are_text = name in ("string ids", "quoted, utf-8")
    options = dict(time_col=1, obj_id_col=2, obj_size_col=3, obj_id_is_num=not ids_are_text)
    whole = _read_pieced(monkeypatch, path, 1 << 30, **options)
    assert isinstance(whole, Trace), whole
    assert len(whole) == _PIECED[name].replace(b"\r\n", b"\n").replace(b"\r", b"\n").count(b",") // 2 - (
        1 if name in ("header, LF", "string ids") else 0)
    for piece in (1, 2, 3, 5, 8, 13, 64):
        got = _read_pieced(monkeypatch, path, piece, **options)
        assert isinstance(got, Trace), (piece, got)
        for col in ("key", "size", "step"):
            np.testing.assert_array_equal(getattr(got, col), getattr(whole, col), err_msg=f"{col} {piece}")
    if ids_are_text:  # numbered in order of first appearance, across pieces
        assert whole.key[0] == 0 and np.all(np.diff(np.maximum.accumulate(whole.key)) <= 1)


@pytest.mark.parametrize("bad, expected", [
    (b"7,x,3\n", "line 12, column 2 (obj_id): not an integer (got 'x')"),
    (b"7,8\n", "line 12: expected 3 columns, got 2 (as many as line 1 ('t,k,s', read as a header) has)"),
    (b"7,8,-1\n", "line 12, column 3 (obj_size): size must not be negative (got '-1')"),
    (b"7,\xff,3\n", "line 12: bytes that are not UTF-8 text (7,\ufffd,3)"),
    (b"7,8\x00,3\n", "a NUL byte at byte"),
])
def test_text_trace_errors_name_the_line_in_any_piece(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                      bad: bytes, expected: str) -> None:
    good = b"".join(b"%d,%d,%d\n" % (i, i % 3, 5) for i in range(10))
    path = tmp_path / "t.csv"
    path.write_bytes(b"t,k,s\n" + good + bad + good)
    options = dict(time_col=1, obj_id_col=2, obj_size_col=3)
    whole = _read_pieced(monkeypatch, path, 1 << 30, **options)
    assert isinstance(whole, str) and expected in whole, whole
    assert expected.startswith("a NUL") or whole.endswith("(row 10)")
    for piece in (1, 4, 9, 30):
        assert _read_pieced(monkeypatch, path, piece, **options) == whole
    skipped = _read_pieced(monkeypatch, path, 9, skip_bad=True, **options)
    if expected.startswith("a NUL"):
        assert isinstance(skipped, str)  # binary data is never skipped
    else:
        assert isinstance(skipped, Trace) and len(skipped) == 20 and skipped.meta["skipped"] == 1
