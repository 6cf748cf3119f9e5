"""The prefetch head of an exported policy: trained with env=joint, exported in the same file as
the eviction scorer, loaded by LearnedPolicy, deciding in a pool exactly as the network's argmax
decided in the env; old files (no head) load and prefetch nothing; a mismatched head is refused
by name; the evaluator takes it as eval.prefetchers=[learned:PATH]."""

from __future__ import annotations

import json
import os

import numpy as np
import pytest

th = pytest.importorskip("torch")  # the train extra

from test_learned import log_victims  # noqa: E402  (same folder)

from cachegym.allocator.errors import ConfigError, PolicyFileError  # noqa: E402
from cachegym.allocator.pool import Pool  # noqa: E402
from cachegym.envs.prefetch import PrefetchEnv  # noqa: E402
from cachegym.envs.workloads.registry import generate  # noqa: E402
from cachegym.policies.features import Observed  # noqa: E402
from cachegym.policies.learned import LearnedPolicy, read_policy_file  # noqa: E402
from cachegym.policies.learned.policy import DEFAULT_PREFETCH_DEPTH  # noqa: E402
from cachegym.policies.learned.policy_file import file_checksum, weights_checksum  # noqa: E402
from cachegym.policies.lru import LRU  # noqa: E402
from cachegym.policies.successors import SuccessorPredictor  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
OLD_FILE = os.path.join(ROOT, "tests", "golden", "policy.npz")  # written before prefetch heads


@pytest.fixture(scope="module")
def joint_run(tmp_path_factory) -> dict:
    """A tiny joint policy, trained by train(cfg) with env=joint (imitation of the stall
    reference's halves) under a timing preset, validated and exported."""
    from hydra import compose, initialize_config_dir

    from cachegym.policies.training.config import register_train_configs
    from cachegym.policies.training.train import train

    register_train_configs()
    out = tmp_path_factory.mktemp("joint")
    with initialize_config_dir(config_dir=os.path.join(ROOT, "conf"), version_base="1.3"):
        cfg = compose("train", overrides=[
            "experiment=quick", "progress=false", "tensorboard=false", "env=joint",
            "env.window=2000", "env.reward=stall", "env.cost=h100_pcie5", "validation.capacities=[0.3]",
            "agent.dagger.rounds=2", "agent.dagger.steps_per_round=600", "agent.dagger.epochs=2",
            # (the soonest-used candidate's label: on these small traces the no-harm teacher
            # waits nearly always, and a head that never prefetches tests no round trip)
            "agent.dagger.prefetch_no_harm=false", f"out_dir={out}"])
    return train(cfg)


@pytest.fixture(scope="module")
def joint_file(joint_run) -> str:
    return str(joint_run["policy"])


def _trace():
    return generate("dl_training", seed=5, n_layers=4, hidden=64, batch_tokens=128, steps=3)


def test_the_file_carries_both_heads(joint_run, joint_file):
    """...and validation replays both heads under the env's preset, beside LRU + lookahead."""
    val = joint_run["validation"]
    assert val["stall_learned"] > 0 and val["stall_lru_lookahead"] > 0
    assert val["stall_ratio"] > 0 and np.isfinite(val["traffic_learned"])
    assert val["prefetches_learned"] > 0  # (0 warns: a head that never prefetches)
    assert os.path.isfile(os.path.join(os.path.dirname(joint_file), "checkpoints", "step_0.npz"))
    header, arrays = read_policy_file(joint_file)
    pf = header["prefetch"]
    assert pf["opportunity"] == "miss" and pf["K"] == 16
    assert pf["predictor"] == SuccessorPredictor().params()  # (conf/env/joint.yaml's: the table)
    assert {"wc", "p/wc", "p/noop"} <= set(arrays)
    p = LearnedPolicy.load(joint_file, guard="none")
    assert p.prefetch_head is not None and p.prefetch_head.K == 16


def test_round_trip_prefetches_equal_the_networks_argmax_in_the_env(joint_file):
    """The env driven by the torch network's argmax (K candidates and the no-op) and a pool whose
    prefetcher is the exported file make the same prefetches, at the same moments, with the
    same statistics (LRU evicts in both)."""
    header, arrays = read_policy_file(joint_file)
    net = _torch_prefetch_head(header, arrays)
    trace = _trace()
    env = PrefetchEnv(trace, K=16, window=None, capacity=0.3, capacity_of="peak_live",
                      cost="h100_pcie5", reward="stall", predictor=header["prefetch"]["predictor"])
    obs, info = env.reset(seed=0)
    env_choices: list[int | None] = []
    done = False
    while not done:
        cand = th.as_tensor(np.asarray(obs["candidates"], np.float32).reshape(1, 16, -1))
        glob = th.as_tensor(np.asarray(obs["globals"], np.float32)[None])
        mask = th.as_tensor(np.asarray(obs["mask"], np.float32)[None])
        with th.no_grad():
            a = int(net(cand, glob, mask).argmax(dim=1)[0])
        keys = info["keys"]
        env_choices.append(None if a == 16 else int(keys[a]))
        obs, _, done, _, info = env.step(a)
    assert sum(c is not None for c in env_choices) > 10

    learned = LearnedPolicy.load(joint_file, guard="none", prefetch_depth=1, prefetch_min_accuracy=0,
                                 prefetch_budget_bytes=None)  # as trained (never pausing, no budget)
    pool_choices: list[int | None] = []

    class Recorder:  # records each answer of the file's prefetch head
        def prefetch(self, view, key):
            before = learned.prefetch_head.decisions
            out = learned.prefetch(view, key)
            if learned.prefetch_head.decisions != before:
                pool_choices.append(out[0] if out else None)
            return out

    pool = Pool(env.pool.capacity, Observed(LRU(), learned.tracker), prefetcher=Recorder(),
                cost="h100_pcie5", oversize="bypass", placement="bytes")
    st = pool.replay(trace)
    assert pool_choices == env_choices
    want = info["stats"]
    for f in ("misses", "prefetches", "prefetch_hits", "late_prefetches", "useless_prefetches",
              "stall_ns", "traffic_bytes"):
        assert getattr(st, f) == want[f], f


def _torch_prefetch_head(header, arrays):
    """A torch module computing the exported prefetch head's K + 1 logits from raw features
    (the file folds the normalisation into the first layer)."""
    w = {k[2:]: th.as_tensor(v) for k, v in arrays.items() if k.startswith("p/")}
    n_more = len(header["prefetch"]["arch"]["hidden"]) - 1

    def forward(cand, glob, mask):
        h = th.relu(cand @ w["wc"] + (glob @ w["wg"]).unsqueeze(1) + w["b0"])
        for i in range(1, n_more + 1):
            h = th.relu(h @ w[f"w{i}"] + w[f"b{i}"])
        s = (h @ w["wo"] + w["bo"]).masked_fill(mask < 0.5, -3.0e38)
        return th.cat([s, w["noop"].expand(s.shape[0], 1)], dim=1)

    return forward


def test_a_file_without_a_prefetch_head_loads_and_prefetches_nothing():
    header, arrays = read_policy_file(OLD_FILE)
    assert "prefetch" not in header and not any(k.startswith("p/") for k in arrays)
    p = LearnedPolicy.load(OLD_FILE, guard="none")
    assert p.prefetch_head is None
    st = Pool(int(0.3 * _trace().size.sum() / 4), p, prefetcher=p).replay(_trace())
    assert st.prefetches == 0 and st.misses > 0


def _eager(h, a):
    """A head that looks 64 accesses ahead and prefetches its best candidate at every access
    (its no-op never best): an edit for :func:`_rewrite`."""
    h["prefetch"]["predictor"].update(horizon=64, memory=1 << 18)
    a["p/noop"] = np.full_like(a["p/noop"], -1e30)


def _rewrite(src: str, dst: str, edit) -> str:
    """``src`` with ``edit(header, arrays)`` applied and its checksums made valid again (what a
    tool that writes a wrong head would produce)."""
    header, arrays = read_policy_file(src)
    edit(header, arrays)
    for k in ("weights_sha256", "sha256"):
        header.pop(k, None)
    header["weights_sha256"] = weights_checksum(arrays)
    header["sha256"] = file_checksum(header, arrays)
    blob = np.frombuffer(json.dumps(header, sort_keys=True).encode(), np.uint8)
    np.savez(dst, header=blob, **{f"w/{k}": v for k, v in arrays.items()})
    return dst


def test_a_mismatched_prefetch_head_is_refused_by_name(joint_file, tmp_path):
    def narrower(h, a):  # the header declares a layer the weights do not have
        h["prefetch"]["arch"]["hidden"] = h["prefetch"]["arch"]["hidden"] + [4]

    def no_section(h, a):
        del h["prefetch"]

    def bad_shape(h, a):
        a["p/b0"] = a["p/b0"][:-1]

    def bad_opportunity(h, a):
        h["prefetch"]["opportunity"] = "step"

    def bad_horizon(h, a):  # a history longer than the predictor's memory can hold
        h["prefetch"]["predictor"].update(horizon=64, memory=64)

    def unknown_predictor_key(h, a):
        h["prefetch"]["predictor"]["lookahead"] = 3

    for name, edit, match in (
            ("narrower", narrower, r"prefetch head's weights do not match prefetch\.arch.*missing \['p/b"),
            ("no_section", no_section, "holds weights of a prefetch head but no 'prefetch' header"),
            ("bad_shape", bad_shape, "weight array 'p/b0' has shape"),
            ("bad_opportunity", bad_opportunity, "'prefetch.opportunity'"),
            ("bad_horizon", bad_horizon, "'prefetch.predictor'.*memory >= 2 \\* horizon"),
            ("unknown_predictor_key", unknown_predictor_key, "'prefetch.predictor'")):
        path = _rewrite(joint_file, str(tmp_path / f"{name}.npz"), edit)
        with pytest.raises(PolicyFileError, match=match):
            LearnedPolicy.load(path)
    # the aligned history's parameters, well formed, load into the head's predictor
    path = _rewrite(joint_file, str(tmp_path / "history.npz"),
                    lambda h, a: h["prefetch"]["predictor"].update(horizon=64, memory=1 << 18))
    head = LearnedPolicy.load(path).prefetch_head
    assert head is not None and head.predictor.params()["horizon"] == 64


def test_prefetch_budget_bytes_caps_the_bytes_in_flight(joint_file):
    trace = _trace()
    cap = int(0.3 * trace.size.sum() / 4)
    free = LearnedPolicy.load(joint_file, guard="none")
    st = Pool(cap, Observed(LRU(), free.tracker), prefetcher=free, cost="h100_pcie5").replay(trace)
    none = LearnedPolicy.load(joint_file, guard="none", prefetch_budget_bytes=0)
    st0 = Pool(cap, Observed(LRU(), none.tracker), prefetcher=none, cost="h100_pcie5").replay(trace)
    # (the default budget, half the pool, binds rarely: 2 of 26 here, since copies that wait
    # for a dirty victim's write-back stay in flight longer than when compute waited for them)
    assert st.prefetches == free.prefetch_head.issued > 0
    assert free.prefetch_head.over_budget <= 0.1 * free.prefetch_head.issued
    assert st0.prefetches == none.prefetch_head.issued == 0 and none.prefetch_head.over_budget > 0


def test_evaluator_row_for_a_learned_prefetcher(joint_file, tmp_path):
    from hydra import compose, initialize_config_dir

    from cachegym.envs.config import register_configs
    from cachegym.envs.evaluation import evaluate

    register_configs()
    trace = tmp_path / "t.npz"
    _trace().save(str(trace))
    with initialize_config_dir(config_dir=os.path.join(ROOT, "conf"), version_base="1.3"):
        cfg = compose("evaluate", overrides=[
            "trace=file", f"trace.path={trace}", "eval.capacity_of=peak_live", "eval.capacities=[0.3]",
            "eval.policies=[lru]", f"eval.prefetchers=[none,learned:{joint_file}]",
            "eval.presets=[h100_pcie5]", "eval.bounds=[]", "eval.plots=false", "eval.progress=false",
            f"out_dir={tmp_path / 'out'}"])
        rows = evaluate(cfg)["rows"]
        pol = {r["prefetch"]: r for r in rows if r["row_kind"] == "policy"}
        assert set(pol) == {"none", f"learned:{joint_file}"}
        got, base = pol[f"learned:{joint_file}"], pol["none"]
        assert got["prefetches"] > 0 and base["prefetches"] == 0
        assert got["prefetch_hits"] + got["late_prefetches"] + got["useless_prefetches"] <= got["prefetches"]
        bad = compose("evaluate", overrides=[f"eval.prefetchers=[learned:{tmp_path / 'nope.npz'}]",
                                             f"out_dir={tmp_path / 'out2'}"])
    from cachegym.allocator.errors import ConfigError

    with pytest.raises(ConfigError, match="eval.prefetchers.*does not exist"):
        evaluate(bad)


def test_a_head_whose_prefetches_go_unused_pauses(joint_file):
    """Accuracy feedback: where fewer than ``prefetch_min_accuracy`` of the head's resolved
    prefetches were used (the pool's prefetch hits and late prefetches against its useless
    ones), it pauses and issues fewer; at 0 it never pauses; a share outside 0..1 is refused."""
    from cachegym.allocator.errors import ConfigError

    trace = generate("dl_training", seed=5, n_layers=4, hidden=64, batch_tokens=128, steps=12)
    cap = int(0.2 * trace.peak_live_bytes())  # most of the head's prefetches go unused here

    def run(share: float):
        p = LearnedPolicy.load(joint_file, guard="none", prefetch_min_accuracy=share)
        st = Pool(cap, Observed(LRU(), p.tracker), prefetcher=p, cost="h100_pcie5",
                  oversize="bypass").replay(trace)
        return p.prefetch_head, st

    never, st0 = run(0.0)
    strict, st1 = run(1.0)  # any unused prefetch in an interval pauses
    assert never.pauses == 0 and st0.useless_prefetches > st0.prefetch_hits + st0.late_prefetches
    # (a prefetch the pool has no room for is dropped: it copies at most what the head issued)
    assert strict.pauses > 0 and strict.issued < never.issued / 2 and st1.prefetches <= strict.issued
    assert st1.stall_ns < st0.stall_ns  # (the wasted copies had cost stall)
    for bad in (-0.1, 1.5, True, "0.3"):
        with pytest.raises(ConfigError, match="prefetch_min_accuracy"):
            LearnedPolicy.load(joint_file, prefetch_min_accuracy=bad)


def test_prefetch_depth_issues_the_best_candidates_that_beat_the_noop(joint_file):
    """``prefetch_depth=d``: at most ``d`` prefetches per opportunity, the first being the
    depth-1 choice (the env's action); a bad depth is refused."""
    from cachegym.allocator.errors import ConfigError
    from cachegym.policies.learned.prefetch_head import pick

    s = np.array([0.5, 2.0, 1.0, 2.0, -1.0], np.float32)
    assert pick(s, 5, 0.0) == [1] and pick(s, 5, 0.0, 3) == [1, 3, 2] and pick(s, 5, 0.7, 9) == [1, 3, 2]
    assert pick(s, 5, 3.0) == [] == pick(s, 5, 3.0, 4) and pick(s, 1, 0.5) == [0]
    trace = _trace()
    cap = int(0.3 * trace.size.sum() / 4)
    per_call: list[int] = []
    deep = LearnedPolicy.load(joint_file, guard="none", prefetch_depth=3)

    class Count:
        def prefetch(self, view, key):
            out = deep.prefetch(view, key)
            per_call.append(len(out))
            return out

    Pool(cap, Observed(LRU(), deep.tracker), prefetcher=Count(), cost="h100_pcie5").replay(trace)
    assert max(per_call) <= 3 and any(n > 1 for n in per_call)
    with pytest.raises(ConfigError, match="prefetch_depth"):
        LearnedPolicy.load(joint_file, prefetch_depth=0)


def test_a_second_prefetch_per_access_misses_and_stalls_less(joint_file, tmp_path):
    """Where the compute between accesses is shorter than a copy (``gpt_infer``), one prefetch
    per access cannot start every object that is due; the default depth (2: the head's choice as
    trained, then the next candidate that beats the no-op, both due by the predictor's timing)
    prefetches more of them: fewer misses, less stall. Each opportunity
    returns at most ``depth``, counted in ``early`` past the first. ``prefetch_timed`` (the
    head's former filter of late objects) is refused by name."""
    from cachegym.allocator.errors import ConfigError
    from cachegym.envs.paths import data_path
    from cachegym.envs.workloads import read_trace

    def every_access(h, a):  # asked after every access, as the main job's head
        h["prefetch"]["opportunity"] = "access"

    path = _rewrite(joint_file, str(tmp_path / "access.npz"), every_access)
    trace = read_trace(data_path("traces", "gpt_infer.npz"))  # short compute: prefetches arrive late
    cap = int(0.25 * trace.peak_live_bytes())
    runs = {}
    for depth in (1, DEFAULT_PREFETCH_DEPTH):
        policy = LearnedPolicy.load(path, guard="none", prefetch_depth=depth)
        extras = []

        class Count:
            def prefetch(self, view, key, policy=policy, extras=extras):
                out = policy.prefetch(view, key)
                extras.append(max(len(out) - 1, 0))
                assert len(out) <= policy.prefetch_head.depth
                return out

        pool = Pool(cap, Observed(LRU(), policy.tracker), prefetcher=Count(), cost="h100_pcie5")
        runs[depth] = pool.replay(trace)
        assert policy.prefetch_head.early == sum(extras)
        assert (sum(extras) > 0) == (depth > 1)
    one, two = runs[1], runs[DEFAULT_PREFETCH_DEPTH]
    assert two.misses < one.misses and two.stall_ns < one.stall_ns
    with pytest.raises(ConfigError, match="prefetch_timed"):
        LearnedPolicy.load(joint_file, prefetch_timed=True)


def _joint_cfg(tmp_path, *extra: str):
    from hydra import compose, initialize_config_dir

    from cachegym.policies.training.config import register_train_configs

    register_train_configs()
    with initialize_config_dir(config_dir=os.path.join(ROOT, "conf"), version_base="1.3"):
        return compose("train", overrides=[
            "experiment=quick", "progress=false", "tensorboard=false", "env=joint",
            "env.window=2000", "env.reward=stall", "env.cost=h100_pcie5", "validation.traces=[]",
            f"out_dir={tmp_path}", *extra])


def test_imitation_then_rl_finetunes_both_heads(tmp_path):
    """agent=imitation_ppo with env=joint: MaskablePPO on the env's K + 1 actions starts from
    the imitation weights (both heads and the no-op) and the file carries both heads."""
    from cachegym.policies.training.train import train

    cfg = _joint_cfg(tmp_path, "agent=imitation_ppo", "agent.dagger.rounds=1",
                     "agent.dagger.steps_per_round=400", "agent.finetune.total_timesteps=256",
                     "agent.finetune.kwargs.n_steps=128", "agent.finetune.kwargs.batch_size=64",
                     "agent.finetune.kwargs.learning_rate=0.01")
    header, arrays = read_policy_file(train(cfg)["policy"])
    assert "prefetch" in header and "p/noop" in arrays
    imitation = tmp_path / "checkpoints" / "step_0.npz"  # (the imitation round's checkpoint)
    _, before = read_policy_file(str(imitation))
    assert set(before) == set(arrays)
    assert any(not np.array_equal(before[k], arrays[k]) for k in arrays if k.startswith("p/"))
    assert any(not np.array_equal(before[k], arrays[k]) for k in arrays if not k.startswith("p/"))


def test_dqn_refuses_the_joint_env_by_name(tmp_path):
    from cachegym.allocator.errors import ConfigError
    from cachegym.policies.training.train import train

    with pytest.raises(ConfigError, match="agent=dqn.*env=joint"):
        train(_joint_cfg(tmp_path, "agent=dqn", "agent.total_timesteps=64"))


def test_prefetch_horizon_teaches_no_prefetch_for_far_uses():
    """agent.dagger.prefetch_horizon=H: the prefetch teacher's label is the candidate used
    soonest if that use is at most H ticks ahead, else the no-op; without it, any candidate
    used again (the env's oracle). Eviction labels do not change."""
    from cachegym.allocator.errors import ConfigError
    from cachegym.envs.joint import JointEnv
    from cachegym.policies.training.imitation import ImitationConfig
    from cachegym.policies.training.train import Collector

    class Factory:
        capacities = [0.3]

        def __call__(self, i):
            env = JointEnv(_trace(), window=None, capacity=0.3, capacity_of="peak_live")
            env.reset(seed=i)
            return env

    runs = {h: Collector(Factory(), prefetch_horizon=h, prefetch_no_harm=False)(
        None, 1.0, 400, np.random.default_rng(0)) for h in (None, 8)}
    K = 16
    for h, samples in runs.items():
        pf = [s for s in samples if s.phase == 1]
        assert pf and all(s.action == -1 for s in samples if s.phase == 0)
        for s in pf:
            d = np.where(s.mask, s.dist, np.inf)
            soonest = int(np.argmin(d)) if np.isfinite(d).any() else K
            want = soonest if soonest < K and (h is None or d[soonest] <= h) else K
            assert s.action == want
    assert sum(s.action == K for s in runs[8]) > sum(s.action == K for s in runs[None])
    with pytest.raises(ConfigError, match="prefetch_horizon"):
        ImitationConfig(prefetch_horizon=0)
    # the no-harm teacher (the default): the soonest-used candidate or the no-op, more no-ops
    harmless = Collector(Factory())(None, 1.0, 400, np.random.default_rng(0))
    for s in (s for s in harmless if s.phase == 1):
        d = np.where(s.mask, s.dist, np.inf)
        assert s.action in (int(np.argmin(d)), K)
    assert sum(s.action == K for s in harmless) > sum(s.action == K for s in runs[None])


def test_one_file_with_one_files_eviction_scorer_and_anothers_prefetch_head(joint_file, tmp_path):
    """export_file(EVICT, prefetch_from=JOINT) (the main job's policy file): it loads, prefetches
    exactly as the joint file's head does, and evicts exactly as the eviction file alone."""
    from cachegym.policies.training.export import export_file

    both = export_file(OLD_FILE, tmp_path / "both.npz", prefetch_from=joint_file)
    h_ev, a_ev = read_policy_file(OLD_FILE)
    h_j, a_j = read_policy_file(joint_file)
    h, a = read_policy_file(both)
    assert (h["K"], h["candidate_rule"], h["arch"]) == (h_ev["K"], h_ev["candidate_rule"], h_ev["arch"])
    assert h["prefetch"] == h_j["prefetch"]
    assert h["meta"]["prefetch_from"]["file"] == os.path.basename(joint_file)
    assert sorted(a) == sorted([*a_ev, *(k for k in a_j if k.startswith("p/"))])
    trace = _trace()
    cap = int(0.3 * trace.size.sum() / 4)

    def prefetching(path):
        p = LearnedPolicy.load(path, guard="none")
        return p, Pool(cap, Observed(LRU(), p.tracker), prefetcher=p, cost="h100_pcie5").replay(trace)

    (pb, sb), (pj, sj) = prefetching(both), prefetching(joint_file)
    assert sb.prefetches > 0 and pb.prefetch_head.issued == pj.prefetch_head.issued
    assert sb == sj
    zipf = generate("zipf", seed=2, n_requests=2000, n_objects=100, size=4096)
    for guard in ("none", "shadow"):  # the network alone, and the deployed guard
        ev, comb = LearnedPolicy.load(OLD_FILE, guard=guard), LearnedPolicy.load(both, guard=guard)
        logs = log_victims(ev), log_victims(comb)
        st = [Pool(20 * 4096, pol).replay(zipf) for pol in (ev, comb)]
        assert len(logs[0]) > 50 and logs[0] == logs[1] and st[0] == st[1]


def test_a_prefetch_head_from_a_mismatched_file_is_refused_by_name(joint_file, tmp_path):
    from cachegym.allocator.errors import ConfigError
    from cachegym.policies.training.export import export_file

    with pytest.raises(PolicyFileError, match="has no prefetch head"):
        export_file(joint_file, tmp_path / "x.npz", prefetch_from=OLD_FILE)

    def other_version(h, a):
        h["library_version"] = "0.0.1"

    old = _rewrite(joint_file, str(tmp_path / "old.npz"), other_version)
    with pytest.raises(PolicyFileError, match=r"library_version is '0\.0\.1', the eviction policy's is"):
        export_file(OLD_FILE, tmp_path / "x.npz", prefetch_from=old)

    def other_features(h, a):  # checked against the running code's, as LearnedPolicy.load does
        h["feature_spec"]["features"] = list(reversed(h["feature_spec"]["features"]))

    with pytest.raises(PolicyFileError, match="another feature specification"):
        export_file(OLD_FILE, tmp_path / "x.npz",
                    prefetch_from=_rewrite(joint_file, str(tmp_path / "f.npz"), other_features))
    (tmp_path / "model.zip").write_bytes(b"not read: refused before")
    with pytest.raises(ConfigError, match="is not a policy .npz"):
        export_file(str(tmp_path / "model.zip"), tmp_path / "x.npz", algo="ppo", prefetch_from=joint_file)
    assert not (tmp_path / "x.npz").exists()


def test_export_script_takes_prefetch_from(joint_file, tmp_path):
    import subprocess
    import sys

    out = tmp_path / "both.npz"
    r = subprocess.run([sys.executable, os.path.join(ROOT, "scripts", "export.py"), OLD_FILE,
                        "--prefetch-from", joint_file, "--out", str(out)],
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr[-2000:]
    assert r.stdout.strip().endswith(f"policy: {out}")
    assert read_policy_file(out)[0]["prefetch"] == read_policy_file(joint_file)[0]["prefetch"]
    r = subprocess.run([sys.executable, os.path.join(ROOT, "scripts", "export.py"), joint_file,
                        "--prefetch-from", OLD_FILE, "--out", str(tmp_path / "x.npz")],
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 2 and "has no prefetch head" in r.stderr


def test_a_stall_guards_shadows_model_the_learned_head_in_their_own_pools(joint_file, tmp_path):
    """Judged on stall, a guard's shadow pool runs the pool's learned head as it would decide
    there (``prefetch_for``: that pool's residency, copies in flight and late-arrival margins),
    not the prefetches it made for the expert the pool follows: following GDSF on gpt_infer (a
    loop over the weights, where LRU with the head stalls least), the LRU shadow's stall stays
    within 20% of LRU with the head alone (0.92x; it was 1.39x with the pool's own prefetches,
    5.4x with the main job's head), and the head's counters count the pool's prefetches only. The head: the
    aligned history (as the main job's), prefetching its best candidate at every access."""
    from cachegym.envs.workloads import read_trace
    from cachegym.policies.learned.guards import ShadowGuard

    joint_file = _rewrite(joint_file, str(tmp_path / "eager.npz"), _eager)
    trace = read_trace(os.path.join(ROOT, "data", "traces", "gpt_infer.npz"))
    cap = int(0.25 * trace.peak_live_bytes())

    def pool(policy, pf):
        return Pool(cap, Observed(policy, pf.tracker), prefetcher=pf, cost="h100_pcie5",
                    oversize="bypass", placement="bytes")

    head = LearnedPolicy.load(joint_file, guard="none")
    alone = pool(LRU(), head).replay(trace)
    assert alone.prefetches > 0
    guard = ShadowGuard(margin=1e9, handover=1e9, floor=None, retire=None, retire_stall=None)  # never switches (follows whom
    # it is told) and every shadow runs to the end
    guard.expert = "gdsf"
    pf = LearnedPolicy.load(joint_file, guard="none")
    st = pool(LearnedPolicy.load(joint_file, guard=guard), pf).replay(trace)
    shadow = guard.experts["lru"]
    assert shadow.pool.stats.prefetches > 0 and set(guard.decisions) == {"gdsf"}
    assert 0.8 * alone.stall_ns <= -shadow.gain <= 1.2 * alone.stall_ns, (-shadow.gain, alone.stall_ns)
    assert st.prefetches == pf.prefetch_head.issued


def test_a_followed_expert_keeps_what_its_shadow_prefetched(joint_file, tmp_path):
    """Judged on stall with a learned head, the guarded pool prefetches after an access and each
    shadow starts its own prefetches at the next request: an object the pool prefetched first
    was pending (to be evicted first) in the followed expert, and stayed so once the shadow had
    prefetched it too, so the pool kept evicting what its expert held (mlp_embedding at 50% of
    peak live bytes: 70.9 ms against the followed expert's 58.6). Invariant of
    :class:`~policies.learned.models.Expert`: nothing pending is held by the shadow."""
    from cachegym.envs.workloads import read_trace
    from cachegym.policies.learned.guards import ShadowGuard

    path = _rewrite(joint_file, str(tmp_path / "eager.npz"), _eager)
    trace = read_trace(os.path.join(ROOT, "data", "traces", "gpt_infer.npz"))
    cap = int(0.25 * trace.peak_live_bytes())
    guard = ShadowGuard(margin=1e9, handover=1e9, floor=None, retire=None, retire_stall=None)
    guard.expert = "gdsf"  # (never switches: follows whom it is told)
    pf = LearnedPolicy.load(path, guard="none", prefetch_min_accuracy=0.0)
    pool = Pool(cap, Observed(LearnedPolicy.load(joint_file, guard=guard), pf.tracker),
                prefetcher=pf, cost="h100_pcie5", oversize="bypass", placement="bytes")
    checked = 0
    for lo in range(0, len(trace), 97):
        pool.replay(trace, lo, min(lo + 97, len(trace)))
        for e in guard.experts.values():
            if e.followed and e.pool is not None:
                held = [k for k in e.pending_evictions() if e.pool.view.is_resident(k)]
                assert not held, (e.name, lo, held[:5])
                checked += 1
    assert checked and pool.stats.prefetches > 0 and guard.experts["gdsf"].pool.stats.prefetches > 0


@pytest.mark.parametrize("give_up", ["close", "setter", "drop"])
def test_a_prefetcher_is_claimed_by_one_pool_at_a_time(joint_file, give_up):
    """A prefetcher keeps the state of one pool's accesses (a history, timing margins, a head's
    pauses; a guard's mute flags): given to a second pool it prefetched from the first's (the
    head's predictor, having seen the trace, stalled 18% less there). Like an eviction policy
    it is refused while another live pool uses it; given up, a built-in one is reset and
    prefetches as a fresh one, a learned policy (no reset) is refused by name."""
    import gc

    from cachegym.allocator.errors import ConfigError
    from cachegym.policies.prefetch import HistoryPrefetcher, LookaheadPrefetcher, MarkovPrefetcher

    trace = _trace()
    cap = int(0.3 * trace.peak_live_bytes())

    def run(pf, policy=None):
        policy = LRU() if policy is None else policy
        if isinstance(pf, LearnedPolicy):
            policy = Observed(policy, pf.tracker)
        pool = Pool(cap, policy, prefetcher=pf, cost="h100_pcie5", oversize="bypass",
                    placement="bytes")
        return pool, pool.replay(trace)

    for make in (HistoryPrefetcher, MarkovPrefetcher, lambda: LookaheadPrefetcher(trace),
                 lambda: LearnedPolicy.load(joint_file, guard="none", prefetch_min_accuracy=0.0)):
        _, fresh = run(make())
        pf = make()
        a, first = run(pf)
        assert first == fresh
        learned = isinstance(pf, LearnedPolicy)
        with pytest.raises(ConfigError, match=r"already serves another live pool"
                           if learned else r"prefetcher .* already serves another live pool"):
            Pool(cap, Observed(LRU(), pf.tracker) if learned else LRU(), prefetcher=pf)
        if learned:  # its tracker, which the first pool's hooks feed, is that pool's too
            with pytest.raises(ConfigError, match=r"FeatureTracker.* already serves another live"):
                Pool(cap, Observed(LRU(), pf.tracker))
        else:
            with pytest.raises(ConfigError, match=r"prefetcher .* already serves another live pool"):
                Pool(cap, LRU()).prefetcher = pf
        if give_up == "close":
            a.close()
        elif give_up == "setter":
            a.prefetcher = None if learned else make()  # (a head needs its own tracker observed)
        else:
            del a
            gc.collect()
        if learned:  # (given up by the setter, its tracker still serves the first pool's policy)
            with pytest.raises(ConfigError, match=r"FeatureTracker.* already serves another live"
                               if give_up == "setter" else r"prefetcher .* served another pool "
                               r"before .*accesses .*new prefetcher object"):
                run(pf)
        else:
            assert run(pf)[1] == fresh, make


def test_a_stall_guard_mutes_the_learned_head_where_prefetching_costs_stall(joint_file, tmp_path):
    """Judged on stall with a learned head, each expert is also judged without the head (a twin
    shadow, ``<expert>-no-prefetch``); following such a twin, the pool mutes the head. With a
    head that prefetches its best candidate at every access, never pausing, in a pool too small
    for it (LRU with that head stalls more than without it), the guard follows a twin and
    ends below the guard without twins and within 10% of the best expert without prefetches
    (measured: 3.42 ms against 4.19 without twins, the best heuristic 3.37, at 30% of the peak
    live bytes; at 20%, where it was 4.18 against 5.95, the proposer's do-no-harm rule now
    leaves the head little to waste)."""
    from cachegym.policies.learned.guards import ShadowGuard
    from cachegym.policies.registry import make_eviction

    path = _rewrite(joint_file, str(tmp_path / "eager.npz"), _eager)
    trace = generate("dl_training", seed=5, n_layers=4, hidden=64, batch_tokens=128, steps=12)
    cap = int(0.3 * trace.peak_live_bytes())

    def run(policy, pf):
        if pf is not None:
            policy = Observed(policy, pf.tracker)
        return Pool(cap, policy, prefetcher=pf, cost="h100_pcie5", oversize="bypass",
                    placement="bytes").replay(trace)

    best = min(run(make_eviction(n), None).stall_ns for n in ("lru", "s3fifo", "gdsf", "lfu"))
    got = {}
    for twins in (True, False):
        guard = ShadowGuard(without_prefetch=twins)
        pf = LearnedPolicy.load(path, guard="none", prefetch_min_accuracy=0.0,
                                prefetch_budget_bytes=None)  # (wasting all it can)
        got[twins] = run(LearnedPolicy.load(joint_file, guard=guard), pf).stall_ns
        assert any(k.endswith("-no-prefetch") for k in guard.decisions) == twins
    assert got[True] < got[False] and got[True] <= 1.1 * best, (got, best)


def test_a_file_without_a_prefetch_head_is_refused_as_a_prefetcher(tmp_path):
    """``learned:PATH`` of a file trained with env=evict (no prefetch head) would prefetch
    nothing and give a row equal to ``none``: refused, naming the key and what to do."""
    from cachegym.allocator.errors import ConfigError
    from cachegym.envs.evaluation import learned_prefetcher

    headless = os.path.join(ROOT, "tests", "golden", "policy.npz")
    with pytest.raises(ConfigError, match=r"eval.prefetchers: .*has no prefetch head.*env=joint"):
        learned_prefetcher(f"learned:{headless}", "eval.prefetchers")


def test_a_stall_guard_follows_the_history_where_the_head_prefetches_less_well(joint_file, tmp_path):
    """Judged on stall with a learned head, each expert is also judged with the ``history``
    prefetcher's proposals from the head's own proposer (a twin, ``<expert>-history``:
    :meth:`LearnedPolicy.history_for`); following such a twin the pool prefetches those. With a
    head that never prefetches (its no-op always best), in activation offload at a quarter of a
    step's activations, the guard follows a history twin and ends below the guard without them,
    within 15% of the best heuristic with ``history`` (measured: 4.25 ms against 5.67 without
    the twins; LRU + ``history`` 3.91, LRU alone 6.26)."""
    from cachegym.policies.learned.guards import ShadowGuard
    from cachegym.policies.registry import make_eviction, make_prefetch
    from tests.allocator.test_clean_ahead import offload_steps

    def lazy(h, a):
        h["prefetch"]["predictor"].update(horizon=64, memory=1 << 18)
        a["p/noop"] = np.full_like(a["p/noop"], 1e30)

    path = _rewrite(joint_file, str(tmp_path / "lazy.npz"), lazy)
    trace = offload_steps(8, 48, compute_ns=10_000)  # activation offload: saves, reads back
    cap = 12 * 64 * 1024  # a quarter of a step's activations

    def run(policy, pf):
        if isinstance(pf, LearnedPolicy):
            policy = Observed(policy, pf.tracker)
        return Pool(cap, policy, prefetcher=pf, cost="h100_pcie5", oversize="bypass",
                    placement="bytes").replay(trace)

    best = min(run(make_eviction(n), make_prefetch("history", trace=trace)).stall_ns
               for n in ("lru", "s3fifo", "gdsf", "lfu"))
    got = {}
    for history in (True, False):
        guard = ShadowGuard(with_history=history)
        pf = LearnedPolicy.load(path, guard="none")
        st = run(LearnedPolicy.load(joint_file, guard=guard), pf)
        got[history] = st.stall_ns
        assert any(k.endswith("-history") for k in guard.decisions) == history
        assert (st.prefetches > 0) == history  # (the head alone prefetches nothing)
    assert got[True] < got[False] and got[True] <= 1.15 * best, (got, best)


def test_a_head_as_the_prefetcher_beside_another_policy_sees_the_pools_hooks(joint_file):
    """Beside LRU in ActivationOffload its tracker saw no hook (its features empty: more late
    prefetches); a Pool made so is refused with the fix; a path works as the prefetcher."""
    pytest.importorskip("torch")
    from cachegym.allocator.backends import NumpyBackend
    from cachegym.allocator.errors import ConfigError
    from cachegym.allocator.offload import ActivationOffload
    from cachegym.policies.features import Observed
    from cachegym.policies.lru import LRU

    off = ActivationOffload(1 << 20, backend=NumpyBackend(), policy=LRU(), prefetcher=joint_file)
    assert isinstance(off.pool.policy, Observed) and off.pool.policy.tracker is off.pool.prefetcher.tracker
    off.close()
    both = ActivationOffload(1 << 20, backend=NumpyBackend(), policy=joint_file, prefetcher=joint_file)
    assert both.pool.policy is both.pool.prefetcher  # one object answers both
    both.close()
    with pytest.raises(ConfigError, match=r"Observed\(policy, prefetcher.tracker\)"):
        Pool(1 << 20, LRU(), prefetcher=LearnedPolicy.load(joint_file))
    # a file without a head as the prefetcher: refused (it ran with no prefetcher at all, the
    # default ReversePackOrder silently gone)
    evict_only = os.path.join(ROOT, "tests", "golden", "policy.npz")
    for policy, pf in ((evict_only, evict_only), (LRU(), evict_only),
                       (LRU(), LearnedPolicy.load(evict_only))):
        with pytest.raises(ConfigError, match="has no prefetch head .* env=joint"):
            ActivationOffload(1 << 20, backend=NumpyBackend(), policy=policy, prefetcher=pf)


def test_the_heads_budget_holds_while_the_guard_follows_a_history_twin(joint_file):
    """Following an <expert>-history twin the pool prefetched the history proposals past the
    head's bytes-in-flight budget (2,733 prefetches at a budget of 0)."""
    from cachegym.allocator.trace import Trace

    tr = Trace.load(os.path.join(ROOT, "data", "traces", "resnet.npz")).window(0, 6000)
    cap = int(0.1 * tr.peak_live_bytes())
    for budget, some in ((0, False), (None, True)):
        p = LearnedPolicy.load(joint_file, prefetch_budget_bytes=budget)
        st = Pool(cap, p, prefetcher=p, cost="h100_pcie5", oversize="bypass").replay(tr)
        assert (st.prefetches > 0) == some, (budget, st.prefetches)


def test_load_arguments_are_checked(joint_file, caplog):
    """'1MiB' raised a bare ValueError; K='8' was taken and 2.5 cut to 2; a pool without a
    preset got no prefetches from the head, silently (it is untimed there: warned)."""
    import logging

    from cachegym.allocator.errors import ConfigError

    assert LearnedPolicy.load(joint_file, prefetch_budget_bytes="1MiB").prefetch_head.budget_bytes == 1 << 20
    for bad in ("8", 2.5):
        with pytest.raises(ConfigError, match="K must be an int"):
            LearnedPolicy.load(joint_file, K=bad)
    p = LearnedPolicy.load(joint_file)
    with caplog.at_level(logging.WARNING):
        Pool(1 << 20, p, prefetcher=p).replay(_trace())
    assert sum("in a pool without one (cost=None) copies take no time" in r.getMessage()
               for r in caplog.records) == 1


def test_offload_warns_of_a_head_whose_predictor_cannot_propose_there(joint_file, caplog):
    """A head trained with conf/env/joint.yaml's default predictor (the successor table) made
    no prefetch in ActivationOffload, whose keys are new every step, and said nothing."""
    from cachegym.allocator.offload import ActivationOffload

    with caplog.at_level("WARNING", logger="cachegym.allocator.offload"):
        off = ActivationOffload("1MiB", policy=joint_file, prefetcher=joint_file)
    assert "proposes from a successor table" in caplog.text and "horizon: 64" in caplog.text
    off.close()


def test_offload_stats_say_who_decided_and_what_the_head_issued(joint_file):
    """Under its default guard the file's head often issues nothing (the pool follows an
    expert's -history twin), and stats() did not say so: it names the guard's decision shares
    and switches, and the head's own prefetches."""
    torch = pytest.importorskip("torch")
    from cachegym.allocator.backends import NumpyBackend
    from cachegym.allocator.offload import ActivationOffload
    from cachegym.policies.lru import LRU

    torch.manual_seed(0)
    m = torch.nn.Sequential(*[torch.nn.Linear(64, 64) for _ in range(6)])
    for policy, learned in ((joint_file, True), (LRU(), False)):
        off = ActivationOffload("64KiB", backend=NumpyBackend(), policy=policy,
                                prefetcher=joint_file if learned else None)
        for _ in range(3):
            with off:
                loss = m(torch.randn(32, 64)).square().mean()
            loss.backward()
        st = off.stats()
        off.close()
        if not learned:
            assert not {"guard_decisions", "guard_switches", "prefetch_head_issued"} & set(st)
            continue
        g = off.pool.policy.guard
        assert st["guard_switches"] == g.switches and st["guard_decisions"] == g.decision_shares()
        assert st["guard_decisions"] and st["prefetch_head_issued"] == off.pool.prefetcher.prefetch_head.issued


def test_the_heads_default_budget_is_half_the_pools_capacity(joint_file):
    """A share of the pool's capacity (a float), by default half: the bytes in flight to the
    device, seen at every decision, never pass it; a small share binds (prefetches held back)."""
    from cachegym.policies.learned.policy import DEFAULT_PREFETCH_BUDGET

    assert DEFAULT_PREFETCH_BUDGET == 0.5
    trace = _trace()
    cap = int(0.3 * trace.peak_live_bytes())
    held = {}
    for budget in (None, 0.5, 0.02):
        kw = {} if budget == 0.5 else {"prefetch_budget_bytes": budget}
        pf = LearnedPolicy.load(joint_file, guard="none", prefetch_min_accuracy=0.0, **kw)
        assert pf.prefetch_head.budget_bytes == budget
        class Watch:  # the bytes in flight at each decision
            def __init__(self, pf):  # type: ignore[no-untyped-def]
                self.pf, self.seen = pf, 0

            def prefetch(self, view, key):  # type: ignore[no-untyped-def]
                self.seen = max(self.seen, view.bytes_in_flight)
                return self.pf.prefetch(view, key)

        watch = Watch(pf)
        pool = Pool(cap, Observed(LRU(), pf.tracker), prefetcher=watch, cost="h100_pcie5",
                    oversize="bypass", placement="bytes")
        pool.replay(trace)
        assert budget is None or watch.seen <= budget * pool.capacity, (budget, watch.seen)
        held[budget] = pf.prefetch_head.over_budget
    assert held[None] == 0 and held[0.02] > 0
    with pytest.raises(ConfigError, match=r"a share in \(0, 1\] of the pool's capacity"):
        LearnedPolicy.load(joint_file, prefetch_budget_bytes=1.5)


@pytest.mark.parametrize("style", ["one object", "observed"])
def test_a_shadows_prefetch_for_reads_the_features_of_the_request_it_follows(joint_file, style):
    """Under stall each shadow starts, at the next request, the prefetches the pool's learned
    head made after the previous one, scored from the pool's feature tracker: the tracker has
    seen no later access then (it had seen the next request: a look one request ahead that the
    pool's own head never had). Both ways a pool takes a learned prefetcher: one object as
    policy and prefetcher, and the evaluator's ``Observed(policy, prefetcher.tracker)``."""
    from cachegym.envs.workloads import read_trace
    from cachegym.policies.features import FeatureTracker
    from cachegym.policies.learned.guards import ShadowGuard

    events: list[tuple[str, int]] = []

    class Spy(FeatureTracker):
        def on_hit(self, view, key):
            events.append(("seen", key))
            super().on_hit(view, key)

        def on_miss(self, view, key):
            events.append(("seen", key))
            super().on_miss(view, key)

    trace = read_trace(os.path.join(ROOT, "data", "traces", "gpt_infer.npz"))
    cap = int(0.25 * trace.peak_live_bytes())
    guard = ShadowGuard(margin=1e9, handover=1e9, floor=None, retire=None, retire_stall=None)
    guard.expert = "lru"  # (follows whom it is told)
    if style == "one object":
        pol = pf = LearnedPolicy.load(joint_file, guard=guard, prefetch_min_accuracy=0.0)
        pol.tracker = Spy()
    else:
        pf = LearnedPolicy.load(joint_file, guard="none", prefetch_min_accuracy=0.0)
        pf.tracker = Spy()
        pol = Observed(LearnedPolicy.load(joint_file, guard=guard), pf.tracker)
    inner = pf.prefetch_for

    def prefetch_for(view, key):
        events.append(("asked", key))
        return inner(view, key)

    pf.prefetch_for = prefetch_for
    Pool(cap, pol, prefetcher=pf, cost="h100_pcie5", oversize="bypass",
         placement="bytes").replay(trace)
    seen, asked = None, 0
    for i, (what, key) in enumerate(events):
        if what == "seen":
            seen = key
        else:  # the latest access the tracker saw is the one the shadow prefetches after
            assert key == seen, (i, key, seen)
            asked += 1
    assert asked
