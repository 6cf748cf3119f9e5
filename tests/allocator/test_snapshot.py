"""The pool's memory snapshot in PyTorch's format (``Pool.record_memory_history``,
``memory_snapshot``, ``dump_snapshot``), rendered by PyTorch's own viewer code."""

from __future__ import annotations

import base64
import json
import os
import pickle
import re

import numpy as np
import pytest
from pool_faults import FaultyBackend
from test_pool import pool_full_of_pinned, random_trace

from cachegym.allocator.errors import BackendError, ConfigError, PoolExhausted
from cachegym.allocator.pool import Pool
from cachegym.allocator.snapshot import MemoryRecorder, read_snapshot
from cachegym.allocator.trace import Kind, Trace
from cachegym.policies.lru import LRU
from cachegym.policies.prefetch import MarkovPrefetcher

B = 1 << 16


def _trace() -> Trace:
    """Reads, writes (dirty victims: write-backs hold their blocks) and frees of objects of
    mixed kinds and sizes (not multiples of 512: rounding)."""
    return random_trace(3, 600, 30, frees=0.05, alpha=1.3, unit=B, kinds=True)


def _replayed(max_entries: int = 100_000, stop: int | None = None) -> tuple[Pool, Trace]:
    t = _trace()
    p = Pool(10 * B, LRU(), prefetcher=MarkovPrefetcher(), cost="a100_pcie4",
             placement="arena")
    p.record_memory_history(max_entries=max_entries)
    p.replay(t, stop=stop)
    return p, t


def _live(trace: list[dict]) -> tuple[dict[int, int], dict[int, int]]:
    """Replay the trace entries from an empty pool: ``(allocated, awaiting)`` blocks by
    address (size)."""
    allocated: dict[int, int] = {}
    awaiting: dict[int, int] = {}
    for e in trace:
        a = e["action"]
        if a == "alloc":
            assert e["addr"] not in allocated and e["addr"] not in awaiting, e
            allocated[e["addr"]] = e["size"]
        elif a == "free_requested":
            awaiting[e["addr"]] = allocated.pop(e["addr"])
        elif a == "free_completed":
            assert awaiting.pop(e["addr"]) == e["size"], e
    return allocated, awaiting


@pytest.mark.parametrize("stop", [150, 400, None])
def test_the_snapshot_agrees_with_memory_stats_and_its_own_trace(stop: int | None) -> None:
    """At several points of a replay (write-backs in flight, prefetches, frees): the blocks
    tile the arena; the segment's figures are memory_stats'; replaying the recorded events
    from an empty pool gives exactly the blocks of the snapshot."""
    p, t = _replayed(stop=stop)
    p._check()
    s, m = p.memory_snapshot(), p.memory_stats()
    (seg,) = s["segments"]
    blocks = seg["blocks"]
    pos = 0
    for b in blocks:  # in address order, tiling [0, total_size)
        assert b["address"] == pos and b["size"] > 0
        pos += b["size"]
    assert pos == seg["total_size"] == m["reserved_bytes.all.current"]
    by_state: dict[str, list[dict]] = {}
    for b in blocks:
        by_state.setdefault(b["state"], []).append(b)
    held, pending = by_state.get("active_allocated", []), by_state.get("active_pending_free", [])
    assert seg["allocated_size"] == m["allocated_bytes.all.current"] == sum(b["size"] for b in held)
    assert seg["active_size"] == m["active_bytes.all.current"] == p.snapshot().device_bytes
    assert seg["requested_size"] == m["requested_bytes.all.current"]
    assert (len(held), len(held) + len(pending)) == (m["allocation.all.current"],
                                                     m["active.all.current"])
    assert sum(b["size"] for b in by_state.get("inactive", [])) == (
        m["inactive_split_bytes.all.current"] if held or pending else seg["total_size"])
    allocated, awaiting = _live(s["device_traces"][0])
    assert allocated == {b["address"]: b["size"] for b in held}
    assert awaiting == {b["address"]: b["size"] for b in pending}
    # every allocation names its object, its kind and the request (the trace's row) it served
    for e in s["device_traces"][0]:
        if e["action"] == "alloc":
            (f,) = e["frames"]
            got = re.fullmatch(r"key (\d+) (\w+) \((miss|prefetch)\)", f["name"])
            assert got is not None, f
            row = f["line"]
            if got.group(3) == "miss":
                assert int(t.key[row]) == int(got.group(1))
                assert Kind(int(t.kind[row])).name.lower() == got.group(2)
    actions = {e["action"] for e in s["device_traces"][0]}
    assert {"alloc", "free_requested", "free_completed"} <= actions


def _agrees(p: Pool) -> None:
    """The recorded events rebuild the snapshot's blocks."""
    p._check()
    s = p.memory_snapshot()
    allocated, awaiting = _live(s["device_traces"][0])
    blocks = s["segments"][0]["blocks"]
    assert allocated == {b["address"]: b["size"] for b in blocks
                         if b["state"] == "active_allocated"}
    assert awaiting == {b["address"]: b["size"] for b in blocks
                        if b["state"] == "active_pending_free"}


def test_failed_copies_are_recorded_as_the_blocks_go_back() -> None:
    """A failed write-back (its victim takes its block back) and a failed prefetch (its block
    is free at once) leave a trace that still rebuilds the blocks."""
    be = FaultyBackend()
    p = Pool(3 * 512, cost="a100_pcie4", backend=be)
    p.record_memory_history()
    p.put(1, np.ones(512, np.uint8))
    p.access(2, 1024)
    be.arm("d2h", key=1)
    p.access(3, 1024, write=True)  # evicts 1 (dirty) and 2; 1's write-back fails
    _agrees(p)
    with pytest.raises(BackendError):
        p.get(1)  # finds the failure: 1 takes its block back
    _agrees(p)
    actions = [e["action"] for e in p.memory_snapshot()["device_traces"][0]]
    assert actions[-2:] == ["free_completed", "alloc"]
    p.flush()
    for k in (4, 5, 6, 7):  # 1 is evicted (clean)
        p.access(k, 512)
    assert p.state(1) == "host"
    be.arm("h2d", key=1)
    assert p.prefetch(1)
    with pytest.raises(BackendError):
        p.access(1, 512)
    assert p.state(1) == "host"
    _agrees(p)
    p.close()


def _payload(html: str) -> bytes:
    """The snapshot the viewer's HTML embeds (base64 of a pickle), as bytes: searched, never
    unpickled."""
    files = json.loads(re.search(r"const local_files = (\[.*?\])\n", html).group(1))  # type: ignore[union-attr]
    return base64.b64decode(files[0]["base64"])


def test_pytorchs_viewer_renders_the_snapshot() -> None:
    viz = pytest.importorskip("torch.cuda._memory_viz", reason="PyTorch renders the snapshot")
    p, t = _replayed(stop=300)
    s = p.memory_snapshot()
    text = viz.trace(s)  # one line per event: an allocation as its offset and size
    # (torch's text names the segment only below its allocated_size, MEM beyond it)
    allocs = [e for e in s["device_traces"][0] if e["action"] == "alloc"]
    lines = re.findall(r"^\w+ = (?:seg_0|MEM)\[(\d+):", text, re.M)
    assert [int(a) for a in lines] == [e["addr"] for e in allocs] and allocs
    summary = viz.segsum(s)  # checks allocated + free == reserved, or raises
    assert "segments: 1" in summary
    for plot in (viz.trace_plot(s), viz.segment_plot(s)):
        data = _payload(plot)
        assert data.startswith(pickle.dumps(s)[:2])  # the snapshot itself
        for e in s["device_traces"][0][-20:]:
            if e["frames"]:
                assert e["frames"][0]["name"].encode() in data
        for b in s["segments"][0]["blocks"]:
            if b["state"] == "active_allocated":
                assert b["frames"][0]["name"].encode() in data


def test_recording_keeps_the_last_max_entries() -> None:
    full, _ = _replayed()
    short, _ = _replayed(max_entries=25)
    entries = full.memory_snapshot()["device_traces"][0]
    assert len(entries) > 25
    assert short.memory_snapshot()["device_traces"][0] == entries[-25:]
    assert short.memory_snapshot()["segments"] == full.memory_snapshot()["segments"]


def test_out_of_memory_is_recorded() -> None:
    p = pool_full_of_pinned(B, placement="arena")
    p.record_memory_history()
    with pytest.raises(PoolExhausted):
        p.access(3, B)
    oom = p.memory_snapshot()["device_traces"][0][-1]
    assert (oom["action"], oom["size"], oom["device_free"]) == ("oom", B, 0)
    assert p.memory_stats()["num_ooms"] == 1


def test_recording_keeps_the_hook_and_stops() -> None:
    seen: list[dict] = []
    p = Pool(4 * B, LRU(), placement="arena", hook=seen.append)
    p.record_memory_history(max_entries=10)
    assert isinstance(p.hook, MemoryRecorder) and p.hook.forward == seen.append
    p.access(1, B)
    p.record_memory_history(max_entries=5)  # again: a new recorder, the same hook behind it
    assert p.hook.forward == seen.append  # type: ignore[union-attr]
    p.access(2, B)
    p.record_memory_history(False)
    assert p.hook == seen.append
    p.access(3, B)
    assert [e["key"] for e in seen if e["event"] == "miss"] == [1, 2, 3]
    s = p.memory_snapshot()  # no recorder: the blocks still, named by their objects
    assert s["device_traces"] == [[]]
    names = [b["frames"][0]["name"] for b in s["segments"][0]["blocks"]
             if b["state"] == "active_allocated"]
    assert names == ["key 1 other (resident)", "key 2 other (resident)", "key 3 other (resident)"]


def test_bad_arguments_are_clear_errors(tmp_path) -> None:
    p = Pool(4 * B, LRU(), placement="arena")
    for bad in (0, -1, 2.5, True):
        with pytest.raises(ConfigError, match="max_entries must be a positive"):
            p.record_memory_history(max_entries=bad)  # type: ignore[arg-type]
    q = Pool(4 * B, LRU(), placement="bytes")
    with pytest.raises(ConfigError, match="placement='arena'"):
        q.record_memory_history()
    with pytest.raises(ConfigError, match="placement='arena'"):
        q.memory_snapshot()
    with pytest.raises(ConfigError, match=r"\.json name"):
        p.dump_snapshot(tmp_path / "snap.txt")
    (tmp_path / "x.json").write_text("[1, 2]")
    with pytest.raises(ConfigError, match="not a memory snapshot"):
        read_snapshot(tmp_path / "x.json")
    (tmp_path / "y.json").write_text("{")
    with pytest.raises(ConfigError, match="not a readable JSON snapshot"):
        read_snapshot(tmp_path / "y.json")
    # nested past the parser's depth (a RecursionError), a pipe (waited on for ever): a
    # helper's audit
    (tmp_path / "z.json").write_text("[" * 100_000 + "]" * 100_000)
    with pytest.raises(ConfigError, match="not a readable JSON snapshot"):
        read_snapshot(tmp_path / "z.json")
    if hasattr(os, "mkfifo"):
        os.mkfifo(tmp_path / "p.json")
        with pytest.raises(ConfigError, match=r"not a regular file \(a directory or a pipe\?\)"):
            read_snapshot(tmp_path / "p.json")


def test_dump_writes_json_to_read_back_and_a_pickle_only_for_pytorch(tmp_path) -> None:
    p, _ = _replayed(stop=200)
    s = p.memory_snapshot()
    p.dump_snapshot(tmp_path / "snap.json")
    assert read_snapshot(tmp_path / "snap.json") == s
    p.dump_snapshot(tmp_path / "snap.pickle")  # what torch.cuda.memory._dump_snapshot writes
    assert (tmp_path / "snap.pickle").read_bytes() == pickle.dumps(s)
    with pytest.raises(ConfigError, match="never reads"):
        read_snapshot(tmp_path / "snap.pickle")


def test_repr_says_what_the_pool_is() -> None:
    p = Pool("512MiB", LRU(), prefetcher=MarkovPrefetcher(), placement="arena")
    r = repr(p)
    assert r.startswith("Pool(capacity='512MiB', policy=LRU(), prefetcher=MarkovPrefetcher(")
    assert "placement='arena'" in r and "used='0B'" in r
    assert "capacity='~1.5GiB'" in repr(Pool(3 << 29, placement="bytes"))


def test_a_block_awaiting_its_copy_out_is_pending_free() -> None:
    """A freed object whose write-through copy is still in flight: PyTorch's block freed while
    another stream still uses it (``active_pending_free``), until the copy completes."""
    p = Pool(2 * 512, LRU(), cost="a100_pcie4", write_policy="write-through", placement="arena")
    p.record_memory_history()
    p.access(1, 512, write=True, kind=int(Kind.ACTIVATION))
    p.access(2, 512, write=True)
    p.free(1)
    s = p.memory_snapshot()
    b = s["segments"][0]["blocks"][0]
    assert (b["state"], b["frames"][0]["name"]) == ("active_pending_free", "key 1 activation (miss)")
    assert s["device_traces"][0][-1]["action"] == "free_requested"
    _agrees(p)
    p.access(3, 512)  # waits for the copy: the block is free, then 3's
    assert [e["action"] for e in p.memory_snapshot()["device_traces"][0][-2:]] == [
        "free_completed", "alloc"]
    _agrees(p)


@pytest.mark.parametrize("seed", range(6))
def test_the_snapshot_and_the_stats_agree_on_blocks_whose_write_back_finished(seed: int) -> None:
    """A block whose copy-out had finished by the pool's clock (free: memory_stats) was still
    active_pending_free in memory_snapshot, and reset_peak_stats restarted the peak above the
    current value with it (from a data-plane audit)."""
    import random

    from cachegym.allocator.backends import NumpyBackend
    from cachegym.allocator.errors import PoolExhausted, UnknownKey
    from cachegym.policies.lru import LRU

    rng = random.Random(seed)
    cap = rng.choice([2048, 4096, 8192])
    pool = Pool(cap, LRU(), backend=NumpyBackend(threads=False), cost="h100_pcie5", placement="arena")
    for _ in range(200):
        key, op = rng.randrange(10), rng.random()
        try:
            if op < 0.5:
                pool.put(key, np.frombuffer(rng.randbytes(rng.randrange(1, cap // 2)), np.uint8))
            elif op < 0.85:
                pool.get(key)
            elif op < 0.95:
                pool.free(key)
            else:
                pool.flush()
        except (UnknownKey, PoolExhausted):
            pass
        ms, seg = pool.memory_stats(), pool.memory_snapshot()["segments"][0]
        assert ms["active_bytes.all.current"] == seg["active_size"]
        assert sum(b["size"] for b in seg["blocks"]) == cap
        if rng.random() < 0.1:
            pool.cost.compute(rng.randrange(1, 20000))
        if rng.random() < 0.05:
            pool.reset_peak_stats()
            ms = pool.memory_stats()
            assert ms["active_bytes.all.peak"] == ms["active_bytes.all.current"]
            assert pool.snapshot().peak_device_bytes == pool.snapshot().device_bytes
    pool.close()
