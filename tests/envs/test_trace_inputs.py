"""Trace inputs that were read wrong or refused unclearly: a BOM, a header of string ids or of a
txt file, CR-only line ends, a capacity past a float, '~', a directory or a pipe as the trace,
a bare bundled name, the line a header error names, the format a folder's name seemed to say,
and errors that name the command line's spelling beside Python's."""

from __future__ import annotations

import logging
import os
import re
from pathlib import Path

import pytest

from cachegym.allocator.errors import ConfigError, TraceError
from cachegym.allocator.sizes import parse_capacity, parse_size
from cachegym.allocator.trace import MAX_TOTAL, Trace
from cachegym.envs.config import load_traces
from cachegym.envs.paths import data_path, resolve_data_path
from cachegym.envs.workloads import parse_trace_params, read_csv, read_trace, read_txt
from cachegym.envs.workloads.formats import _infer_format

COLS = {"time_col": 1, "obj_id_col": 2, "obj_size_col": 3}
LOGGER = "cachegym.envs.workloads.formats"


# ---------------------------------------------------------------------- 1. a UTF-8 BOM
def test_a_bom_does_not_turn_the_first_record_into_a_header(tmp_path: Path) -> None:
    p = tmp_path / "b.csv"
    p.write_bytes(b"\xef\xbb\xbf1,1,100\n2,2,100\n3,1,100\n")
    t = read_csv(p, **COLS)
    assert t.key.tolist() == [1, 2, 1] and t.step.tolist() == [1, 2, 3]  # was [2, 1]: line 1 dropped
    p.write_bytes(b"\xef\xbb\xbftime,obj_id,obj_size\n1,1,100\n2,2,100\n")
    assert read_csv(p, **COLS).key.tolist() == [1, 2]
    txt = tmp_path / "b.txt"
    txt.write_bytes(b"\xef\xbb\xbf7\n8\n7\n")
    assert read_txt(txt).key.tolist() == [7, 8, 7]


def test_a_text_file_with_a_bom_read_as_binary_is_called_text(tmp_path: Path) -> None:
    p = tmp_path / "b.csv"
    p.write_bytes(b"\xef\xbb\xbf1,1,100\n2,2,100\n3,1,100\n")
    with pytest.raises(TraceError, match="this is a text file"):
        read_trace(p, "oracleGeneral")


def test_a_detected_header_is_logged_naming_its_line(tmp_path: Path,
                                                     caplog: pytest.LogCaptureFixture) -> None:
    """A first line read as a header without a column name in it warns, naming the line and
    how to read it as a record; one of column names (``time,obj_id,obj_size``) is no warning."""
    p = tmp_path / "g.csv"
    p.write_text("\n#x,y,z\n1,1,100\n2,2,100\n")
    with caplog.at_level(logging.WARNING, logger=LOGGER):
        assert len(read_csv(p, **COLS)) == 2
    text = " ".join(r.getMessage() for r in caplog.records)
    assert "line 2 ('#x,y,z') is read as a header" in text and "-t has-header=false" in text
    p.write_text("time,obj_id,obj_size\n1,1,100\n")
    caplog.clear()
    with caplog.at_level(logging.INFO, logger=LOGGER):
        assert len(read_csv(p, **COLS)) == 1
    assert [r.levelno for r in caplog.records] == [logging.INFO]
    assert "line 1 ('time,obj_id,obj_size') is read as a header" in caplog.records[0].getMessage()


# ---------------------------------------------------------------------- 2. headers of string ids, txt
def test_a_header_over_string_ids_is_no_request(tmp_path: Path) -> None:
    p = tmp_path / "s.csv"
    p.write_text("time,key\n1,a\n2,b\n3,a\n")
    t = read_trace(p, **parse_trace_params("obj-id-col=2,obj-id-is-num=false"))
    assert t.key.tolist() == [0, 1, 0]  # was 4 requests: 'key' an object
    p.write_text("1,a\n2,b\n3,a\n")  # no header: the first record stays
    assert read_trace(p, obj_id_col=2, obj_id_is_num=False).key.tolist() == [0, 1, 0]
    p.write_text("key\nkey\nb\n")  # the name repeated below it: a string id, not a header
    assert read_trace(p, obj_id_is_num=False).key.tolist() == [0, 0, 1]


def test_a_txt_header_is_read_as_one(tmp_path: Path) -> None:
    p = tmp_path / "k.txt"
    p.write_text("key\n1\n2\n1\n")
    assert read_trace(p).key.tolist() == [1, 2, 1]  # was: "not an integer (got 'key')"
    assert read_trace(p, obj_id_is_num=False).key.tolist() == [0, 1, 0]  # was: 'key' an object
    with pytest.raises(TraceError, match="not an integer"):
        read_trace(p, has_header=False)


def test_a_txt_first_line_that_is_no_number_names_a_header_in_its_hint(tmp_path: Path) -> None:
    p = tmp_path / "n.txt"
    p.write_text("name\n1\n2\n")
    with pytest.raises(TraceError, match=r"if line 1 is a header, pass has_header=True "
                                         r"\(-t has-header=true\)"):
        read_trace(p)
    assert read_trace(p, **parse_trace_params("has-header=true")).key.tolist() == [1, 2]
    p.write_text("1\nname\n")  # not the first line: no header hint
    with pytest.raises(TraceError, match="line 2") as e:
        read_trace(p)
    assert "header" not in str(e.value)


# ---------------------------------------------------------------------- 3. capacities past a float
@pytest.mark.parametrize("value", ["1e309", "1e400MiB", "1" + "0" * 400, float("inf"), 2**70,
                                   "2e18", 10**400],
                         ids=["1e309", "1e400MiB", "400-digits", "inf", "2**70", "2e18", "10**400"])
def test_a_capacity_past_a_float_or_2_60_is_too_large(value: object) -> None:
    for parse in (parse_size, parse_capacity):
        with pytest.raises(ConfigError, match=r"capacities: .* is too large: it is more than "
                                              r"2\*\*60 bytes"):
            parse(value, "capacities")


def test_a_share_in_scientific_notation_is_the_share_it_spells() -> None:
    """'5e-7' was refused as 'not a whole number of bytes' while '0.0000005' is a share."""
    assert parse_capacity("5e-7") == 5e-7 and parse_capacity("1e-1") == parse_capacity("0.1")
    assert parse_capacity("1e3") == 1000 and parse_capacity("2.5e9") == 2_500_000_000
    with pytest.raises(ConfigError, match="neither a whole number of bytes nor a fraction"):
        parse_capacity("15e-1")


def test_a_negative_size_is_called_negative() -> None:
    """``ActivationOffload("-1MiB")`` said "'-1MiB' is not a size" where ``cachegym sim``
    said "is negative"."""
    for value in ("-1MiB", "-5", "-1.5GiB"):
        with pytest.raises(ConfigError, match=f"capacity: '{re.escape(value)}' is negative"):
            parse_size(value)
    with pytest.raises(ConfigError, match="'-x' is not a size"):
        parse_size("-x")


def test_the_largest_capacity_is_2_60() -> None:
    assert parse_size(MAX_TOTAL) == MAX_TOTAL == parse_size("1048576TiB")
    with pytest.raises(ConfigError, match="must be > 0"):
        parse_size("1e-400")


def test_cachegym_sim_says_a_capacity_past_a_float_is_too_large(
        capsys: pytest.CaptureFixture[str]) -> None:
    from cachegym import cli

    assert cli.main(["sim", data_path("traces", "gpt.npz"), "npz", "lru", "1e309"]) == 2
    assert "'1e309' is too large" in capsys.readouterr().err  # was: an OverflowError traceback


# ---------------------------------------------------------------------- 4. '~' in stats and parity
@pytest.fixture
def home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    h = tmp_path / "home"
    h.mkdir()
    monkeypatch.setenv("HOME", str(h))
    monkeypatch.chdir(tmp_path)
    Trace.from_arrays([1, 2, 1, 3, 1] * 20, 8).save(str(h / "t.npz"))
    return h


def test_stats_expands_the_home_folder(home: Path, capsys: pytest.CaptureFixture[str]) -> None:
    pytest.importorskip("matplotlib")
    from cachegym.scripts import trace_stats

    assert trace_stats.main(["~/t.npz", "--out", str(home / "out")]) == 0, capsys.readouterr().err
    assert (home / "out" / "mrc.csv").is_file()


def test_parity_expands_the_home_folder(home: Path, capsys: pytest.CaptureFixture[str]) -> None:
    pytest.importorskip("libcachesim")
    from cachegym.scripts import parity

    assert parity.main(["~/t.npz", "--policies", "lru", "--capacities", "16"]) == 0, \
        capsys.readouterr().err
    assert "100 requests" in capsys.readouterr().out


# ---------------------------------------------------------------------- 5. directories, pipes, bare names
def test_a_directory_as_the_trace_is_called_one(tmp_path: Path) -> None:
    (tmp_path / "d.npz").mkdir()
    with pytest.raises(ConfigError, match=r"'.*d.npz' is a directory, not a trace file"):
        load_traces(path=str(tmp_path / "d.npz"))


@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="no named pipes here")
def test_a_pipe_as_the_trace_is_called_one(tmp_path: Path) -> None:
    os.mkfifo(tmp_path / "p.csv")
    with pytest.raises(ConfigError, match=r"is not a regular file \(a pipe\?\): save it to a file "
                                          r"first"):
        load_traces(path=str(tmp_path / "p.csv"))
    with pytest.raises(TraceError, match=r"is not a regular file \(a pipe\?\)"):
        read_trace(tmp_path / "p.csv")
    os.mkfifo(tmp_path / "p.npz")  # (Trace.load waited on it for ever: a helper's audit)
    with pytest.raises(TraceError, match=r"is not a regular file \(a pipe\?\)"):
        Trace.load(tmp_path / "p.npz")


def test_a_trace_larger_than_memory_is_a_trace_error(tmp_path: Path,
                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    """A 2 MB .npz of 100M rows of zeros ended in an untyped MemoryError from the columns'
    checks (a helper's audit, under a memory limit)."""
    Trace.from_arrays([1, 2, 1], 10).save(tmp_path / "t.npz")

    def no_memory(*a: object, **k: object) -> Trace:
        raise MemoryError

    monkeypatch.setattr(Trace, "from_arrays", no_memory)
    with pytest.raises(TraceError, match=r"its 3 rows need more memory than this machine has"):
        Trace.load(tmp_path / "t.npz")


def test_a_bare_name_finds_the_bundled_trace_from_any_directory(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    assert resolve_data_path("gpt.npz") == data_path("traces", "gpt.npz")
    assert len(load_traces(path="gpt.npz")[0]) == len(read_trace(data_path("traces", "gpt.npz")))
    assert resolve_data_path("traces/gpt.npz") == data_path("traces", "gpt.npz")  # (as before)
    assert resolve_data_path("nope.npz") == "nope.npz"
    Trace.from_arrays([5, 6], 8).save(str(tmp_path / "gpt.npz"))  # a file here always wins
    assert resolve_data_path("gpt.npz") == "gpt.npz"
    assert load_traces(path="gpt.npz")[0].key.tolist() == [5, 6]


# ---------------------------------------------------------------------- 6. the line a header error names
def test_a_short_first_line_read_as_a_header_is_named_as_line_1(tmp_path: Path) -> None:
    p = tmp_path / "c.csv"
    p.write_text("# comment\n1,1,100\n2,2,100\n")
    with pytest.raises(TraceError, match=r"line 1 \('# comment', read as a header\) has 1 "
                                         r"column\(s\) but the options name column 3") as e:
        read_csv(p, **COLS)
    assert "comment lines are not supported" in str(e.value)
    p.write_text("a,b\n1,1,100\n")
    with pytest.raises(TraceError, match=r"line 2: expected 2 columns, got 3 \(as many as line 1 "
                                         r"\('a,b', read as a header\) has\)"):
        read_csv(p, obj_id_col=2)


# ---------------------------------------------------------------------- 7. the format of a folder's name
def test_the_format_is_inferred_from_the_file_name_only(tmp_path: Path) -> None:
    assert _infer_format("x.bin/trace.dat") is None
    assert _infer_format("x.csv/trace.oracleGeneral") == "oracleGeneral"
    assert _infer_format("traces/t.bin") == "oracleGeneral"
    (tmp_path / "x.bin").mkdir()
    (tmp_path / "x.bin" / "trace.dat").write_text("1,1,100\n")
    with pytest.raises(ConfigError, match="cannot infer the trace format"):
        read_trace(tmp_path / "x.bin" / "trace.dat")  # was: read as oracleGeneral


# ---------------------------------------------------------------------- 8. CR-only line ends
def test_lone_carriage_returns_end_lines(tmp_path: Path) -> None:
    p = tmp_path / "cr.csv"
    p.write_bytes(b"1,1,100\r2,2,100\r3,1,100\r")
    t = read_csv(p, **COLS)
    assert t.key.tolist() == [1, 2, 1] and t.size.tolist() == [100] * 3
    p.write_bytes(b"1,1,100\r\n2,2,100\r3,1,100\n\r\n4,3,100")  # every kind of line end at once
    assert read_csv(p, **COLS).key.tolist() == [1, 2, 1, 3]
    p.write_bytes(b"1,1,100\r2,x,100\r")
    with pytest.raises(TraceError, match="line 2, column 2"):
        read_csv(p, **COLS)


# ---------------------------------------------------------------------- 9. both spellings
def test_a_column_number_below_1_names_both_spellings(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=r"obj-id-col: '0' is not a column number \(1-based: "
                                          r"the first column is obj-id-col=1\)"):
        parse_trace_params("obj-id-col=0")
    (tmp_path / "a.csv").write_text("1,2\n")
    with pytest.raises(ConfigError, match=r"obj_id_col must be a 1-based column number .*"
                                          r"-t obj-id-col=1 on the command line"):
        read_csv(tmp_path / "a.csv", obj_id_col=0)


def test_a_text_file_read_as_binary_names_the_format_in_each_interface(tmp_path: Path) -> None:
    p = tmp_path / "t.dat"
    p.write_text("1,1,100\n")
    with pytest.raises(TraceError) as e:
        read_trace(p, "oracleGeneral")
    assert "cachegym sim TRACE csv" in str(e.value) and "format='csv'" in str(e.value)
    Trace.from_arrays([1, 2], 8).save(str(tmp_path / "t.npz"))
    with pytest.raises(TraceError) as e:
        read_trace(tmp_path / "t.npz", "oracleGeneral")
    assert "cachegym sim TRACE npz" in str(e.value) and "trace.format=npz" in str(e.value)


def test_the_header_column_warning_names_the_command_line_option(
        tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    p = tmp_path / "t.csv"
    p.write_text("time,obj_id,obj_size\n1,5,8\n2,6,8\n")
    with caplog.at_level(logging.WARNING, logger=LOGGER):
        read_csv(p)
    text = caplog.text
    assert "pass obj_id_col=2 (-t obj-id-col=2" in text and "obj_size_col=3 (-t obj-size-col=3)" in text


def test_unknown_format_names_each_interface(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=r"the FORMAT argument of cachegym sim.*format="):
        read_trace(tmp_path / "x.dat")
    with pytest.raises(ConfigError, match=r"unknown trace format 'parquet'.*FORMAT argument of "
                                          r"cachegym sim"):
        read_trace(tmp_path / "x", "parquet")


def test_a_directory_is_refused_as_one_also_with_the_format_inferred(tmp_path: Path) -> None:
    """With format auto, a directory was 'cannot infer the trace format' (its name says none)."""
    with pytest.raises(TraceError, match="is a directory"):
        read_trace(tmp_path)


def test_compute_on_free_rows_is_warned_about(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    """The pool runs a row's compute after an access only: a trace file whose frees carry
    compute says so when the evaluator loads it."""
    Trace.from_arrays([1, 2, 1, 2], 100, [0, 0, 2, 0], compute_ns=[0, 5, 7, 0]).save(tmp_path / "f.npz")
    with caplog.at_level(logging.WARNING):
        load_traces(path=str(tmp_path / "f.npz"))
    assert "1 free rows carry 7 ns of compute_ns, which the pool does not run" in caplog.text
    caplog.clear()
    Trace.from_arrays([1, 2], 100, compute_ns=[3, 4]).save(tmp_path / "g.npz")  # no free
    with caplog.at_level(logging.WARNING):
        load_traces(path=str(tmp_path / "g.npz"))
    assert "free rows carry" not in caplog.text


def test_a_compressed_npz_with_any_meta_source_reads(tmp_path: Path) -> None:
    """An .npz's meta is the file's own JSON: a compressed one whose meta.source was not an
    object ended in "TypeError: 'int' object is not iterable" (a helper's audit)."""
    import gzip

    Trace.from_arrays([1, 2, 1], 10, meta={"source": 5}).save(tmp_path / "t.npz")
    (tmp_path / "t.npz.gz").write_bytes(gzip.compress((tmp_path / "t.npz").read_bytes()))
    t = read_trace(tmp_path / "t.npz.gz")
    assert len(t) == 3 and t.meta["source"]["compression"] == "gzip"


def test_an_unreadable_trace_is_a_trace_error_naming_the_file(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    """A file the reader cannot open (permissions: root's tests cannot chmod one away, so the
    reader raises as open() would) ended `cachegym stats` and `parity` in a traceback."""
    from cachegym import cli
    from cachegym.envs.workloads import formats

    path = tmp_path / "t.npz"
    Trace.from_arrays([1, 2, 1], [8, 8, 8]).save(str(path))

    def denied(p: object, **kw: object) -> Trace:
        raise PermissionError(13, "Permission denied", str(p))

    monkeypatch.setattr(formats, "read_npz", denied)
    with pytest.raises(TraceError, match=r"t.npz: cannot be read \(Permission denied\)"):
        read_trace(path)
    monkeypatch.chdir(tmp_path)
    for argv in (["stats", str(path)], ["parity", str(path)], ["sim", str(path), "npz", "lru", "50%"]):
        assert cli.main(argv) == 2, argv
        err = capsys.readouterr().err
        assert "cannot be read (Permission denied)" in err and "Traceback" not in err, (argv, err)
    assert cli.main(["stats", str(tmp_path / "missing.npz")]) == 2
    assert "no such file" in capsys.readouterr().err
    assert not (tmp_path / "outputs" / "trace_stats" / "missing_npz").exists()  # (no folder made)
