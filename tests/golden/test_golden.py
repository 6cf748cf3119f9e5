"""Results equal the goldens recorded at 80edfc6 (before the one-core refactor), exactly.

Every case of ``golden_cases.py`` is recomputed the way ``record.py`` computed it (through
``golden_run.py``) and compared with its record in ``tests/golden/<group>.json.gz``: integers
and strings equal, floats equal bit for bit (no tolerance anywhere). Replays are checked in
every way they run (the row-by-row loop with a victim recorder, the loop with the bare policy,
``Pool.replay``). A mismatch names the case, the way it ran, the field, and the first row (step,
victim, call) that differs, with the expected and the actual value. Run it with the compiled
extensions and with ``CACHEGYM_PURE_PYTHON=1``: both must pass. To regenerate (only for a
deliberate change of results): ``python -m tests.golden.record``.
"""

from __future__ import annotations

import functools
from collections.abc import Iterable

import golden_cases as gc
import golden_run as gr
import pytest

_MAX_LINES = 40


@functools.cache
def golden(group: str) -> dict[str, gr.Record]:
    return gr.load(gc.golden_path(group))


def _fail_on(lines: list[str]) -> None:
    if lines:
        more = f"\n... and {len(lines) - _MAX_LINES} more" if len(lines) > _MAX_LINES else ""
        pytest.fail("\n".join(lines[:_MAX_LINES]) + more, pytrace=False)


def _check_replays(group: str, cases: Iterable[gc.ReplayCase]) -> None:
    lines: list[str] = []
    for case in cases:
        if case.id not in golden(group):
            lines.append(f"{case.id}: no golden record in {group}.json.gz (run record.py)")
            continue
        lines += gr.variant_diffs(golden(group)[case.id], gr.replay_variants(case), case.id)
    _fail_on(lines)


# ---------------------------------------------------------------------- the cases themselves
def test_cases_cover_what_is_registered() -> None:
    """Every classic policy recorded is registered (a policy registered since, a newcomer's
    short name, has no golden: tests/policies/test_invariants.py checks it), every
    learned-policy guard, timing preset and environment id is covered, and every golden file
    holds exactly the records of its cases."""
    from cachegym.allocator.cost import PRESETS
    from cachegym.envs.registration import ENV_IDS
    from cachegym.policies.learned import GUARD_NAMES
    from cachegym.policies.registry import EVICTION_NAMES

    assert set(gc.CLASSIC_POLICIES) <= set(EVICTION_NAMES)
    assert set(GUARD_NAMES) == set(gc.LEARNED_GUARDS.values())
    assert set(PRESETS) == set(gc.PRESET_NAMES) - {None}
    assert set(ENV_IDS) == {c.env_id for c in gc.ENV_CONFIGS}
    want = {
        "classic": {c.id for c in gc.classic_cases()},
        "pool": {c.id for c in gc.pool_cases()} | {c.id for c in gc.SCRIPT_CASES},
        "envs": {f"{c.id}/{ch}" for c, ch in gc.env_cases()},
        "learned": {c.id for c in gc.learned_cases()},
        "quality": {"quality"},
    }
    assert set(want) == set(gc.GROUPS)
    for group, ids in want.items():
        have = set(golden(group))
        assert have == ids, (f"{group}: cases without a record {sorted(ids - have)[:5]}, "
                             f"records without a case {sorted(have - ids)[:5]}")


# ---------------------------------------------------------------------- a. classic policies
@pytest.mark.parametrize("policy", gc.CLASSIC_POLICIES)
def test_classic_policy(policy: str) -> None:
    """test_fastreplay's cases x seeds 0-2: per-request outcomes, evictions per row, victim
    decisions in order, final statistics."""
    _check_replays("classic", (c for c in gc.classic_cases() if c.policy == policy))


# ---------------------------------------------------------------------- b. pool configurations
@pytest.mark.parametrize("section", ["matrix", pytest.param("prefetch", marks=pytest.mark.slow)])
def test_pool_configurations(section: str) -> None:
    """Placement x timing preset x write policy; the prefetchers."""
    _check_replays("pool", (c for c in gc.pool_cases() if c.id.startswith(section + "/")))


@pytest.mark.slow
def test_pool_bundled_traces() -> None:
    _check_replays("pool", (c for c in gc.pool_cases() if c.id.startswith("bundled/")))


@pytest.mark.parametrize("case", gc.SCRIPT_CASES, ids=lambda c: c.id)
def test_pool_scripted_calls(case: gc.ScriptCase) -> None:
    """access, free, prefetch, pin, unpin, flush in a seeded order, errors included."""
    _fail_on(gr.diff(golden("pool")[case.id], gr.script_record(case), case.id))


# ---------------------------------------------------------------------- c. environments
@pytest.mark.parametrize("case", gc.ENV_CONFIGS, ids=lambda c: c.id)
def test_env_rollout(case: gc.EnvCase) -> None:
    lines: list[str] = []
    for chooser in gc.CHOOSERS:
        cid = f"{case.id}/{chooser}"
        lines += gr.diff(golden("envs")[cid], gr.env_record(case, chooser), cid, "step")
    _fail_on(lines)


# ---------------------------------------------------------------------- d./e. the learned policy
@pytest.mark.slow
@pytest.mark.parametrize("trace", gc.BUNDLED_ALL)
def test_learned_policy(trace: str) -> None:
    """The exported policy under each guard and bare: outcomes, victims, statistics."""
    _check_replays("learned", (c for c in gc.learned_cases() if c.trace == ("bundled", trace)))


@pytest.mark.slow
def test_quality_benchmark() -> None:
    # the benchmark lives in cachegym.policies.training, whose package imports torch and SB3 (the
    # `train` extra, which `make install` and CI install; an install of `.[dev]` alone has not)
    pytest.importorskip("torch", reason="cachegym.policies.training needs torch (pip install '.[train]')")
    got = gr.quality_record(gc.POLICY_FILE, gc.QUALITY_CAPACITIES, gc.QUALITY_MAX_REQUESTS)
    _fail_on(gr.diff(golden("quality")["quality"], got, "quality"))
