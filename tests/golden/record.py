"""Regenerate every golden file of ``tests/golden`` (deterministic and seeded).

    PYTHONPATH=. python -m tests.golden.record             # every group
    PYTHONPATH=. python tests/golden/record.py envs pool   # some groups

The goldens were recorded at commit 80edfc6, before the one-core refactor (one compiled source
for the pool's access loop, its C fast paths and the numba replay kernels), so that the refactor
can prove it changed no result: ``tests/golden/test_golden.py`` recomputes them and compares
exactly. Re-recorded on 2026-12-02 for issue 23's streamed accesses (an access whose object is
not admitted copies its bytes): against the 80edfc6 files only ``bytes_h2d``, ``bytes_d2h``,
``stall_ns`` and ``total_ns`` changed, and only in runs with streamed accesses; ``bypasses``
became ``streamed`` with equal counts; every outcome and victim is unchanged. Re-recorded for
issue 25 (prefetch in time): every file gains the ``late_stall_ns`` statistic; otherwise only
the ``pool`` group's ``prefetch/lookahead*`` runs under a cost preset changed (the lookahead
oracle now issues a copy when it is due: e.g. ``prefetch/lookahead/arena-a100_pcie4`` stalls
6.1 ms instead of 40.6 ms, with 0 useless prefetches instead of 8898); runs without a preset are
unchanged. Re-recorded for issue 24's guard (the ShadowGuard follows the expert of least
whole-trace cost, with a hysteresis and a measured hand-over charge): only the ``learned``
group's shadow-guarded runs and the ``quality`` table changed. Re-recorded when ARC and SLRU
joined the ShadowGuard's experts (traffic and misses) and SLRU the quality benchmark's
heuristics (2026-12-03): 6 of the 48 ``learned`` runs changed (``learned`` under the shadow guard
on gpt 25%/50%, gpt_infer 50%, gpt_wide 25%/50%, resnet_deep 50%), every other run of that group
is unchanged, and the ``quality`` table gained SLRU's columns. Re-recorded when the
prefetchers' proposals learnt to do no harm (2026-12-04: an object is prefetched only while it
fits in the pool beside the objects used before it): only ``pool``'s ``prefetch/lookahead/
arena-None`` and ``bytes-None`` changed (the untimed oracle in a pool smaller than its window:
bytes copied in 31.1 -> 24.8 and 29.5 -> 19.8 MB, prefetches evicted unused 8902 -> 6738 and
8343 -> 4946, misses 1001 -> 890 and 872 -> 853); every other record is unchanged. Again when a
prefetch also stops where the policy's next victims (its ``eviction_order``: LRU here) are
used before the prefetched object: only ``pool``'s eight ``prefetch/lookahead*`` runs under
``bytes`` or ``arena`` without a preset and ``bytes`` under ``a100_pcie4`` and ``gh200_c2c``
changed; the two above: bytes copied in 24.8 -> 10.4 and 19.8 -> 6.6 MB, misses 890 -> 598 and
853 -> 374; the timed ones by a miss or less (375 -> 374); ``lookahead,depth=2,window=6/arena-
None`` is the one worse, 515 -> 525 misses (free bytes in an arena are not one block, so its
victims are counted short). Re-recorded (``classic`` only, 2026-12-05) when the reported
``device_bytes`` stopped counting blocks whose write-back had finished by the snapshot (released
at the pool's next allocation): two values changed, ``s3fifo/bytes-20000-a100_pcie4-write-back/
s1`` 19583 -> 18989 and ``slru/.../s0`` 18322 -> 17877; nothing else. Re-recorded (``pool`` and
``envs``, 2026-12-06) when the room a prefetch makes from a dirty victim stopped stalling compute
(its copy in waits for the write-back on the copy engines instead): 24 of ``pool``'s prefetch
runs under a preset (stall down 6-46%, e.g. ``prefetch/lookahead/bytes-a100_pcie4`` 5.53 ->
3.12 ms; the same hits and bytes but for the timed lookahead's arena runs, by under 0.2%; some
prefetches hit late where compute had waited for them before), three scripted runs, and the
prefetch and joint environments' rollouts under presets; nothing else. Re-recorded (``pool``
and ``envs``, 2026-12-06) when the hit fast path (a pool without a prefetcher or hook) began
completing the copies whose time had come, as every other access does (``_begin``): a pool
driven by ``prefetch()`` calls kept a landed object in flight until its next miss, so that an
object its policy had given up was evicted one access later than in a pool with a prefetcher
(``script/gdsf-bytes-h100``: call 211 onwards), and the prefetch and joint environments'
observations after a hit showed landed copies in flight (``prefetch/access-a100``,
``joint/access-a100``); nothing else. Re-recorded (``pool``, 2026-12-07) when the copies that
land while a miss waits for its own became resident before the prefetcher is asked (the
do-no-harm walk had passed over such an object as in flight, and its policy then evicted it
for a prefetch of an object used later): ``prefetch/stride,degree=4,confirm=0/s3fifo-h100``
(misses 848 -> 846, prefetches evicted unused 874 -> 868, stall 7.74 -> 7.71 ms),
``prefetch/markov,depth=3,width=2/s3fifo-h100`` (one victim, the same statistics) and two
scripted runs (``script/gdsf-bytes-h100``: a landed prefetch evicted one call sooner;
``script/lru-arena-h200-markov``: one prefetch more evicted unused); nothing else. Re-recorded
(``pool``, 2026-12-07, forty-sixth session) when the do-no-harm walk under an arena began to
place each prefetch in a copy of the pool's arena (``VictimWalk.fits``: a block, not free bytes;
bytes alone counted two victims that are not adjacent as a prefetch's room, and the pool then
evicted a third, used before it): the four ``prefetch/lookahead*/arena-*`` runs, now with the
misses of their ``bytes`` twins (374): ``lookahead/arena-None`` misses 598 -> 374, bytes copied
in 10.39 -> 6.79 MB, prefetches evicted unused 1564 -> 282; ``lookahead,depth=2,window=6/
arena-None`` 525 -> 374 (the run named above as the one worse); under ``a100_pcie4`` 378 -> 374
misses, stall 3.45 -> 3.43 ms (depth 2) and 3.26 -> 3.31 ms (4 more late prefetches);
nothing else. Re-recorded (``pool``, ``learned``, ``quality``, 2026-12-07, forty-eighth session)
when the three bundled GPT traces lost the read and write the recorder had made of each
``aten._unsafe_view`` (a view in all but name): only runs on gpt, gpt_infer and gpt_wide changed;
the classic policies' outcomes on gpt (``pool``'s 11 ``bundled/gpt/*`` runs) lost those hits
(LRU at 25%: 22,772 -> 21,900 accesses, misses, bytes copied and write-backs unchanged), the
learned policy's 24 runs on the GPT traces decided on features that no longer count them, and
the quality table's GPT cells moved; ``classic`` and ``envs`` are unchanged. Record with the
compiled extensions built, then check that ``CACHEGYM_PURE_PYTHON=1``
gives the same files (the test does, in both modes). Regenerate only for a deliberate change of
results, and say why in the commit.

Groups (one ``<group>.json.gz`` each; the cases are in ``golden_cases.py``, how each is run in
``golden_run.py``): ``classic`` (every classic policy x test_fastreplay's cases x seeds 0-2:
outcomes, victims, statistics), ``pool`` (placements x timing presets x write policies,
prefetchers, scripted pin/unpin/free/prefetch calls, bundled traces), ``envs`` (seeded rollouts
of every environment id), ``learned`` (the exported policy ``policy.npz`` under each guard on
the bundled traces), ``quality`` (the quality benchmark's table for ``policy.npz``).
"""

from __future__ import annotations

import os
import sys
import time

_HERE = os.path.dirname(os.path.abspath(__file__))
for _p in (_HERE, os.path.dirname(os.path.dirname(_HERE))):
    if _p not in sys.path:
        sys.path.insert(0, _p)

import golden_cases as gc  # noqa: E402
import golden_run as gr  # noqa: E402


def _replays(cases: list[gc.ReplayCase]) -> dict[str, gr.Record]:
    out = {}
    for c in cases:
        golden = gr.replay_record(c)
        bad = gr.variant_diffs(golden, gr.replay_variants(c), c.id)
        if bad:  # the loop, the bare loop and Pool.replay must agree before anything is written
            raise SystemExit("variants disagree:\n" + "\n".join(bad))
        out[c.id] = golden
    return out


def record_group(group: str) -> dict[str, gr.Record]:
    if group == "classic":
        return _replays(gc.classic_cases())
    if group == "pool":
        out = _replays(gc.pool_cases())
        out.update({c.id: gr.script_record(c) for c in gc.SCRIPT_CASES})
        return out
    if group == "envs":
        return {f"{c.id}/{ch}": gr.env_record(c, ch) for c, ch in gc.env_cases()}
    if group == "learned":
        return _replays(gc.learned_cases())
    if group == "quality":
        return {"quality": gr.quality_record(gc.POLICY_FILE, gc.QUALITY_CAPACITIES,
                                             gc.QUALITY_MAX_REQUESTS)}
    raise SystemExit(f"unknown group {group!r}; groups: {', '.join(gc.GROUPS)}")


def main(argv: list[str]) -> None:
    mode = "pure Python" if os.environ.get("CACHEGYM_PURE_PYTHON", "") not in ("", "0") else "compiled"
    for group in argv or gc.GROUPS:
        t0 = time.perf_counter()
        data = record_group(group)
        path = gc.golden_path(group)
        gr.save(path, data)
        print(f"{path}: {len(data)} records, {os.path.getsize(path):,} bytes, "
              f"{time.perf_counter() - t0:.1f} s ({mode})")


if __name__ == "__main__":
    main(sys.argv[1:])
