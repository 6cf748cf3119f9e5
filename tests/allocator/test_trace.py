"""Trace: construction, validation (errors name column and row), npz round trip, derived arrays."""

from __future__ import annotations

import json
import os
import re

import numpy as np
import pytest

from cachegym.allocator.errors import ConfigError, TraceError
from cachegym.allocator.trace import INF, Kind, Op, Trace

R, W, F = int(Op.READ), int(Op.WRITE), int(Op.FREE)


def _trace() -> Trace:
    return Trace.from_arrays(
        key=[1, 2, 1, 3, 2, 1, 1],
        size=[100, 200, 100, 300, 200, 100, 150],
        op=[W, R, R, W, F, F, W],
        compute_ns=[5, 0, 7, 0, 0, 0, 1],
        kind=[int(Kind.PARAMETER), 0, 1, int(Kind.ACTIVATION), 0, 1, 2],
        meta={"source": "unit test", "units": "bytes"},
        name="t",
    )


def test_from_arrays_defaults_and_dtypes() -> None:
    t = Trace.from_arrays([5, 6, 5], 64)
    assert len(t) == 3
    assert t.size.tolist() == [64, 64, 64]
    assert t.op.tolist() == [R, R, R]
    assert t.compute_ns.tolist() == [0, 0, 0] and t.kind.tolist() == [0, 0, 0]
    assert t.step.tolist() == [0, 1, 2]
    for col, dt in (("key", np.int64), ("size", np.int64), ("op", np.uint8),
                    ("compute_ns", np.int64), ("kind", np.uint8), ("step", np.int64)):
        a = getattr(t, col)
        assert a.dtype == dt and not a.flags.writeable


def test_empty_trace() -> None:
    t = Trace.from_arrays(np.zeros(0, np.int64), np.zeros(0, np.int64))
    assert len(t) == 0
    assert t.next_use().tolist() == [] and t.object_ids().tolist() == []
    assert t.peak_live_bytes() == 0


def test_save_load_round_trip(tmp_path) -> None:
    t = _trace()
    p = tmp_path / "small.npz"
    t.save(p)
    with np.load(p) as z:  # exactly the documented column names on disk
        assert sorted(z.files) == sorted(["key", "size", "op", "compute_ns", "kind", "step", "meta"])
        assert json.loads(str(z["meta"])) == t.meta
    u = Trace.load(p)
    for col in ("key", "size", "op", "compute_ns", "kind", "step"):
        np.testing.assert_array_equal(getattr(u, col), getattr(t, col))
        assert getattr(u, col).dtype == getattr(t, col).dtype
    assert u.meta == t.meta
    assert u.name == "small"


def test_save_appends_npz_and_fails_without_a_half_written_file(tmp_path, monkeypatch) -> None:
    """A name without ``.npz`` gets it, as numpy's does; a save that fails midway (a full disk,
    an interrupt) leaves the file already there intact and no temporary file behind, so a reader
    sharing the folder (a cache of recorded traces) never sees a half-written trace."""
    t = _trace()
    t.save(tmp_path / "plain")
    assert sorted(os.listdir(tmp_path)) == ["plain.npz"]
    before = (tmp_path / "plain.npz").read_bytes()

    def fail(file, **arrays):  # writes part of a file, then fails
        file.write(b"PK\x03\x04 half")
        raise OSError("No space left on device")

    monkeypatch.setattr(np, "savez_compressed", fail)
    with pytest.raises(OSError, match="No space"):
        Trace.from_arrays([9], [1]).save(tmp_path / "plain.npz")
    assert sorted(os.listdir(tmp_path)) == ["plain.npz"]
    assert (tmp_path / "plain.npz").read_bytes() == before
    np.testing.assert_array_equal(Trace.load(tmp_path / "plain.npz").key, t.key)


def test_save_into_a_directory_or_a_missing_folder_is_an_output_error(tmp_path) -> None:
    """``save(DIR)`` wrote a sibling ``DIR.npz``; ``save("nodir/x.npz")`` raised a
    FileNotFoundError naming the temporary file. Both name the path given, as OutputErrors."""
    from cachegym.allocator.errors import OutputError

    (tmp_path / "d").mkdir()
    with pytest.raises(OutputError, match=r"cannot write '.*/d': it is a directory") as e:
        _trace().save(tmp_path / "d")
    assert e.value.filename == str(tmp_path / "d") and isinstance(e.value, OSError)
    with pytest.raises(OutputError, match=r"cannot write '.*nodir/x.npz': no folder .*nodir; give a path in a "
                                          r"writable directory"):
        _trace().save(tmp_path / "nodir" / "x.npz")
    assert sorted(os.listdir(tmp_path)) == ["d"]


def test_load_without_optional_columns(tmp_path) -> None:
    p = tmp_path / "min.npz"
    np.savez(p, key=np.array([1, 2]), size=np.array([8, 8]), op=np.array([0, 1]))
    t = Trace.load(p)
    assert t.step.tolist() == [0, 1] and t.compute_ns.tolist() == [0, 0] and t.meta == {}


@pytest.mark.parametrize(
    ("kwargs", "column", "row"),
    [
        ({"key": [1, 2, 3], "size": [8, 0, 8]}, "size", 1),
        ({"key": [1, 2, 3], "size": [8, 8, -4]}, "size", 2),
        ({"key": [1, 2, 3], "size": 8, "op": [0, 3, 0]}, "op", 1),
        ({"key": [1, 2, 3], "size": 8, "op": [0, 0, -1]}, "op", 2),
        ({"key": [1, 2, 3], "size": 8, "compute_ns": [0, 0, -5]}, "compute_ns", 2),
        ({"key": [1, 2, 3], "size": 8, "kind": [0, 99, 0]}, "kind", 1),
        ({"key": [1.0, 2.5, 3.0], "size": 8}, "key", 1),
        ({"key": [1, 2, 3], "size": [8.0, 8.0, np.nan]}, "size", 2),
        ({"key": [1, 2, 1], "size": 8, "op": [0, F, 0]}, "op", 1),  # free of a never-seen key
        ({"key": [1, 1, 1], "size": 8, "op": [0, F, F]}, "op", 2),  # double free
    ],
)
def test_validation_errors_name_column_and_row(kwargs, column, row) -> None:
    with pytest.raises(TraceError) as ei:
        Trace.from_arrays(**kwargs)
    e = ei.value
    assert e.column == column and e.row == row
    assert repr(column) in str(e) and f"record {row}" in str(e)


@pytest.mark.parametrize(
    ("kwargs", "column"),
    [
        ({"key": [1, 2], "size": [8, 8, 8]}, "size"),
        ({"key": [[1, 2]], "size": 8}, "key"),
        ({"key": ["a", "b"], "size": 8}, "key"),
        ({"key": [1, 2], "size": 8, "step": [0]}, "step"),
    ],
)
def test_shape_and_dtype_errors_name_the_column(kwargs, column) -> None:
    with pytest.raises(TraceError) as ei:
        Trace.from_arrays(**kwargs)
    assert ei.value.column == column and repr(column) in str(ei.value)


def test_load_errors_name_the_file(tmp_path) -> None:
    with pytest.raises(TraceError, match="no such file"):
        Trace.load(tmp_path / "absent.npz")
    junk = tmp_path / "junk.npz"
    junk.write_bytes(b"not a zip")
    with pytest.raises(TraceError, match=r"junk.npz: not an .npz trace \(an .npz is a zip archive"):
        Trace.load(junk)
    cut = tmp_path / "cut.npz"  # a zip archive cut short: unreadable
    np.savez(cut, key=np.array([1]), size=np.array([1]), op=np.array([0]))
    cut.write_bytes(cut.read_bytes()[:30])
    with pytest.raises(TraceError, match="cut.npz: not a readable .npz trace"):
        Trace.load(cut)
    p = tmp_path / "nosize.npz"
    np.savez(p, key=np.array([1]), op=np.array([0]))
    with pytest.raises(TraceError, match="size"):
        Trace.load(p)
    p = tmp_path / "extra.npz"
    np.savez(p, key=np.array([1]), size=np.array([1]), op=np.array([0]), bogus=np.array([0]))
    with pytest.raises(TraceError, match="bogus"):
        Trace.load(p)
    p = tmp_path / "badrow.npz"
    np.savez(p, key=np.array([1, 2]), size=np.array([4, 0]), op=np.array([0, 0]))
    with pytest.raises(TraceError) as ei:
        Trace.load(p)
    assert ei.value.path == str(p) and ei.value.column == "size" and ei.value.row == 1


def test_next_use_and_object_ids_with_frees() -> None:
    #        row: 0  1  2  3  4  5  6
    t = _trace()  # key 1 W, 2 R, 1 R, 3 W, 2 F, 1 F, 1 W (new object)
    obj = t.object_ids().tolist()
    assert obj[0] == obj[2] == obj[5]  # key 1 until its free
    assert obj[6] != obj[0]  # key 1 reused after free: a new object
    assert obj[1] == obj[4] and obj[3] not in (obj[0], obj[1], obj[6])
    assert len(set(obj)) == 4
    nu = t.next_use().tolist()
    assert nu == [2, INF, INF, INF, INF, INF, INF]


def test_next_use_reference() -> None:
    rng = np.random.default_rng(3)
    n = 400
    key = rng.integers(0, 12, n)
    op = rng.integers(0, 2, n)
    live: set[int] = set()
    for i in range(n):  # sprinkle valid frees
        k = int(key[i])
        if k in live and rng.random() < 0.15:
            op[i] = F
            live.discard(k)
        else:
            live.add(k)
    t = Trace.from_arrays(key, 16, op)
    # reference: scan forward within the same object generation
    gen: dict[int, int] = {}
    ids: dict[tuple[int, int], int] = {}
    ref_obj = []
    for i in range(n):
        k = int(key[i])
        g = gen.get(k, 0)
        ref_obj.append(ids.setdefault((k, g), len(ids)))
        if op[i] == F:
            gen[k] = g + 1
    ref_next = []
    for i in range(n):
        nxt = INF
        if op[i] != F:
            for j in range(i + 1, n):
                if ref_obj[j] == ref_obj[i]:
                    nxt = INF if op[j] == F else j
                    break
        ref_next.append(nxt)
    assert t.next_use().tolist() == ref_next
    # free_row: the row of the free that ends each row's object (INF: never freed)
    ref_free = [next((j for j in range(n) if ref_obj[j] == ref_obj[i] and op[j] == F), INF)
                for i in range(n)]
    assert t.free_row().tolist() == ref_free and (t.free_row() != INF).any()
    # ids are dense; the same partition as the reference
    obj = t.object_ids().tolist()
    assert sorted(set(obj)) == list(range(len(ids)))
    pairs = set(zip(obj, ref_obj))  # a bijection between the two numberings
    assert len(pairs) == len(ids) == len(set(obj))


def test_working_set_and_peak_live_bytes() -> None:
    t = _trace()
    # objects: key1 (100), key2 (200), key3 (300), key1 again (150, first size seen)
    assert t.working_set_bytes() == 100 + 200 + 300 + 150
    # live after each row: 100, 300, 300, 600, 400, 300, 450
    assert t.peak_live_bytes() == 600
    t2 = Trace.from_arrays([1, 1, 2, 2, 3], [10, 10, 20, 20, 30], [W, F, W, F, W])
    assert t2.peak_live_bytes() == 30 and t2.working_set_bytes() == 60


def test_window_drops_frees_of_objects_created_before() -> None:
    t = _trace()
    w = t.window(3, 7)
    # rows 3..6: 3 W, 2 F (2 created before the window: dropped), 1 F (dropped), 1 W
    assert w.key.tolist() == [3, 1] and w.op.tolist() == [W, W]
    assert w.step.tolist() == [3, 6]


def test_a_window_that_is_no_range_is_refused() -> None:
    """``window(0, -1)`` cut the last row as a slice does (``validation.max_requests=-1``),
    ``window(5, 2)`` returned an empty trace."""
    t = _trace()
    for start, stop in ((0, -1), (-2, 3), (5, 2), (0.5, 3), (True, 3)):
        with pytest.raises(ConfigError, match="are not a range"):
            t.window(start, stop)  # type: ignore[arg-type]
    assert len(t.window(0, 10**9)) == len(t) and len(t.window(3, 3)) == 0


def test_with_sizes() -> None:
    t = _trace().with_sizes(1)
    assert set(t.size.tolist()) == {1} and t.key.tolist() == _trace().key.tolist()


# ---------------------------------------------------------------------- ranges (issue #27, item 3)
@pytest.mark.parametrize(("column", "values", "row", "says"), [
    ("size", [8.0, 2.0**63], 1, "at most 2**48"),          # was INT64_MIN after the > 0 check
    ("size", [8, 2**62], 1, "at most 2**48"),               # working set wrapped negative
    ("size", [2**48] * 5000, 4096, "sum past 2**60"),       # each fits, their sum does not
    ("compute_ns", [0, 2**62], 1, "at most 2**60"),         # clocks of the two replays disagreed
    ("compute_ns", [2**59, 2**59, 1], 2, "sum past 2**60"),
    ("key", [1.0, 1e19], 1, "does not fit in int64"),
    ("step", [0.0, -1e30], 1, "does not fit in int64"),
])
def test_out_of_range_columns_are_refused_naming_column_and_record(
        column: str, values: list[float], row: int, says: str) -> None:
    cols: dict[str, object] = {"key": list(range(len(values))), "size": 8}
    cols[column] = np.asarray(values)
    with pytest.raises(TraceError, match=re.escape(says)) as e:
        Trace.from_arrays(**cols)  # type: ignore[arg-type]
    assert (e.value.column, e.value.row) == (column, row)


def test_largest_allowed_values_are_kept_exactly() -> None:
    t = Trace.from_arrays([1, 2], [2**48, 1], compute_ns=[2**60 - 1, 1])
    assert t.size.tolist() == [2**48, 1] and t.compute_ns.tolist() == [2**60 - 1, 1]
    assert t.working_set_bytes() == 2**48 + 1
