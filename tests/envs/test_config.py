"""Config schemas fail at compose time; every config group composes; one instantiate helper."""

from __future__ import annotations

import os
import re
from pathlib import Path

import numpy as np
import pytest
from hydra import compose, initialize_config_dir
from hydra.errors import ConfigCompositionException
from omegaconf import OmegaConf
from omegaconf.errors import ValidationError

from cachegym.allocator.errors import ConfigError, TraceError
from cachegym.allocator.pool import Pool
from cachegym.allocator.trace import Trace
from cachegym.envs.config import (
    AllocatorConfig,
    TraceConfig,
    instantiate,
    load_trace,
    load_traces,
    register_configs,
)
from cachegym.policies.lru import LRU

CONF = str(Path(__file__).resolve().parents[2] / "conf")


def _compose(overrides: list[str], *, hydra_cfg: bool = False):  # type: ignore[no-untyped-def]
    register_configs()
    with initialize_config_dir(config_dir=CONF, version_base="1.3"):
        return compose("evaluate", overrides=overrides, return_hydra_config=hydra_cfg)


@pytest.mark.parametrize("trace", sorted(p.stem for p in Path(CONF, "trace").glob("*.yaml")))
@pytest.mark.parametrize("allocator", sorted(p.stem for p in Path(CONF, "allocator").glob("*.yaml")))
def test_every_group_option_composes(trace: str, allocator: str) -> None:
    extra = ["trace.path=x.npz"] if trace == "file" else []
    cfg = _compose([f"trace={trace}", f"allocator={allocator}", *extra])
    assert cfg.allocator.placement == allocator
    assert OmegaConf.is_missing(cfg.trace, "path") is False
    assert cfg.trace._target_ == "cachegym.envs.config.load_traces"


def test_sweeps_default_to_joblib_and_local_launcher_composes() -> None:
    cfg = _compose([], hydra_cfg=True)
    assert "joblib" in cfg.hydra.launcher._target_.lower()
    cfg = _compose(["hydra/launcher=local"], hydra_cfg=True)
    assert "joblib" in cfg.hydra.launcher._target_.lower() and cfg.hydra.launcher.n_jobs == -1


@pytest.mark.parametrize("override, key", [
    ("allocator.placement=banana", "allocator.placement"),
    ("allocator.write_policy=sometimes", "allocator.write_policy"),
    ("trace.format=parquet", "trace.format"),
    ("eval.mode=pages", "eval.mode"),
    ("eval.plots=maybe", "eval.plots"),
    ("trace.seed=abc", "trace.seed"),
    ("eval.polices=[lru]", "polices"),  # a misspelt key
])
def test_bad_values_fail_at_compose_time(override: str, key: str) -> None:
    with pytest.raises((ConfigCompositionException, ValidationError)) as err:
        _compose([override])
    msg = str(err.value) + str(err.value.__cause__ or "")
    assert key in msg


def test_enumerations_list_allowed_values() -> None:
    with pytest.raises((ConfigCompositionException, ValidationError)) as err:
        _compose(["trace.format=parquet"])
    msg = str(err.value) + str(err.value.__cause__ or "")
    for allowed in ("npz", "oracleGeneral", "csv", "txt"):
        assert allowed in msg


def test_instantiate_builds_pool_with_plain_strings() -> None:
    node = OmegaConf.structured(AllocatorConfig)
    node.write_policy = "write-through"
    pool = instantiate(node, capacity=4096, policy=LRU())
    assert isinstance(pool, Pool)
    assert pool.placement == "bytes" and type(pool.placement) is str
    assert pool.write_through and pool.capacity == 4096


def test_instantiate_errors_are_one_line_naming_key_and_target() -> None:
    cfg = OmegaConf.create({"thing": {"_target_": "cachegym.allocator.pool.NoSuchPool"}})
    with pytest.raises(ConfigError) as err:
        instantiate(cfg.thing)
    assert "thing" in str(err.value) and "cachegym.allocator.pool.NoSuchPool" in str(err.value)
    assert "\n" not in str(err.value)
    cfg = OmegaConf.create({"a": {"_target_": "cachegym.allocator.pool.Pool", "bogus": 1}})
    with pytest.raises(ConfigError, match=r"^a: cannot instantiate cachegym\.allocator\.pool\.Pool: .*bogus"):
        instantiate(cfg.a, capacity=10)
    with pytest.raises(ConfigError, match="no _target_"):
        instantiate(OmegaConf.create({"x": 1}))


def test_instantiate_lets_cachegym_errors_through() -> None:
    node = OmegaConf.structured(AllocatorConfig)
    with pytest.raises(ConfigError, match="capacity must be a positive"):
        instantiate(node, capacity=-5, policy=LRU())
    tnode = OmegaConf.structured(TraceConfig)
    tnode.path = "/no/such/trace.npz"
    with pytest.raises(ConfigError, match="trace.path: no such file"):
        instantiate(tnode)
    tnode.path = None  # (a file of trace.paths was called trace.path: a helper's audit)
    tnode.paths = ["/no/such/trace.npz"]
    with pytest.raises(ConfigError, match=r"trace.paths\[0\]: no such file"):
        instantiate(tnode)


def test_relative_trace_is_read_from_the_working_directory_then_the_bundled_traces(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A relative trace path is read from the working directory; when it is not there, the
    bundled trace of that name (the configs' ``data/traces/...``) is read, from any directory;
    a file in neither place is named with both places it was looked for."""
    from cachegym.envs.config import load_traces
    from cachegym.envs.paths import data_path

    monkeypatch.chdir(tmp_path)
    bundled = load_traces(path="data/traces/gpt.npz")[0]
    assert len(bundled) == len(load_traces(path=data_path("traces", "gpt.npz"))[0]) > 0
    mine = Trace.from_arrays(np.arange(20) % 3, 8)
    (tmp_path / "data" / "traces").mkdir(parents=True)
    mine.save(tmp_path / "data" / "traces" / "gpt.npz")  # the working directory's wins
    assert len(load_traces(path="data/traces/gpt.npz")[0]) == 20
    here = re.escape(os.getcwd())
    with pytest.raises(ConfigError, match=rf"no such file 'nope.npz'; give an existing trace file "
                                          rf"\(relative paths are read from {here}, then among "
                                          rf"the bundled traces in .*traces\)"):
        load_traces(path="nope.npz")


def test_load_traces_files_generator_and_window(tmp_path: Path) -> None:
    a = Trace.from_arrays(np.arange(50) % 7, 10)
    b = Trace.from_arrays(np.arange(30) % 5, 20)
    a.save(tmp_path / "a.npz")
    b.save(tmp_path / "b.npz")
    ts = load_traces(path=str(tmp_path / "a.npz"), paths=[str(tmp_path / "b.npz")], format="npz")
    assert [len(t) for t in ts] == [50, 30]
    ts = load_traces(paths=[str(tmp_path / "a.npz")], max_requests=20)
    assert len(ts[0]) == 20
    g1 = load_traces(generator="zipf", params={"n_requests": 500, "n_objects": 50}, seed=3)[0]
    g2 = load_traces(generator="zipf", params={"n_requests": 500, "n_objects": 50}, seed=3)[0]
    assert np.array_equal(g1.key, g2.key) and len(g1) == 500
    with pytest.raises(ConfigError, match="trace.generator: unknown generator 'nope'; allowed"):
        load_traces(generator="nope")
    with pytest.raises(ConfigError, match="trace.path=FILE"):
        load_traces()
    with pytest.raises(ConfigError, match="max_requests"):
        load_traces(generator="zipf", max_requests=0)
    (tmp_path / "bad.npz").write_bytes(b"not a zip")
    with pytest.raises(TraceError):
        load_traces(path=str(tmp_path / "bad.npz"))


def test_load_trace_from_composed_config(tmp_path: Path) -> None:
    t = Trace.from_arrays(np.arange(40) % 9, 100)
    p = os.path.join(tmp_path, "t.npz")
    t.save(p)
    cfg = _compose([f"trace.path={p}", "trace.format=npz"])
    got = load_trace(cfg.trace)
    assert np.array_equal(got.key, t.key)
    cfg = _compose([f"trace.paths=[{p},{p}]", "trace=file", f"trace.path={p}"])
    with pytest.raises(ConfigError, match="expected one trace"):
        load_trace(cfg.trace)


def test_missing_required_value_is_a_config_error() -> None:
    cfg = OmegaConf.create({"pool": {"_target_": "cachegym.allocator.pool.Pool", "capacity": "???"}})
    with pytest.raises(ConfigError, match=r"pool.capacity.*required value"):
        instantiate(cfg.pool, policy=LRU())


_PLUGINS = {"slurm": ("submitit_slurm", "hydra_plugins.hydra_submitit_launcher"),
            "ray_cluster": ("ray", "hydra_plugins.hydra_ray_launcher")}


@pytest.mark.parametrize("ours", sorted(_PLUGINS))
def test_cluster_launcher_configs_extend_the_plugin(ours: str) -> None:
    """conf/hydra/launcher/{slurm,ray_cluster}.yaml build on the plugin's own config, so a
    cluster sweep is a config choice. Without the plugin installed, a stand-in config is stored
    under the plugin's name (what the plugin registers), and removed afterwards."""
    import importlib.util

    from hydra.core.config_store import ConfigStore

    name, module = _PLUGINS[ours]
    installed = importlib.util.find_spec(module.split(".")[0]) is not None and \
        importlib.util.find_spec(module) is not None
    cs = ConfigStore.instance()
    if not installed:
        cs.store(group="hydra/launcher", name=name,
                 node={"_target_": f"stand_in.{name}", "timeout_min": 60, "ray": {}})
    try:
        cfg = _compose([f"hydra/launcher={ours}"], hydra_cfg=True)
        launcher = cfg.hydra.launcher
        if not installed:
            assert launcher._target_ == f"stand_in.{name}"
        if ours == "slurm":
            assert launcher.timeout_min == 240 and launcher.array_parallelism == 256
        else:
            assert launcher.ray.init.address == "auto"
    finally:
        if not installed:
            del cs.repo["hydra"]["launcher"][f"{name}.yaml"]


def test_a_key_added_with_plus_to_a_typed_section_is_refused_before_any_work(tmp_path) -> None:
    """Hydra refuses ``eval.capacites=[0.1]`` but suggests ``+eval.capacites=[0.1]``, which adds
    the key where nothing reads it (the run went on with the default capacities): the evaluator,
    training and the main job refuse it, naming the closest key; every config of ``conf/``
    composes without such a key."""
    from cachegym.envs.config import refuse_unknown_keys
    from cachegym.envs.evaluation import evaluate
    from cachegym.policies.training.config import register_train_configs
    from cachegym.policies.training.train import train

    register_train_configs()
    with initialize_config_dir(config_dir=CONF, version_base="1.3"):
        for job in ("evaluate", "train", "main"):
            refuse_unknown_keys(compose(job))
            refuse_unknown_keys(compose(job, return_hydra_config=True))  # (Hydra's node passes)
        for group in ("agent", "env"):
            for p in sorted(Path(CONF, group).glob("*.yaml")):
                refuse_unknown_keys(compose("train", overrides=[f"{group}={p.stem}"]))
        bad = compose("evaluate", overrides=["+eval.capacites=[0.1]", f"out_dir={tmp_path / 'e'}"])
        with pytest.raises(ConfigError, match=r"eval\.capacites: unknown key.*did you mean "
                                              r"eval\.capacities\?"):
            evaluate(bad)
        bad = compose("train", overrides=["+env.capcity=3", f"out_dir={tmp_path / 't'}"])
        with pytest.raises(ConfigError, match=r"env\.capcity: unknown key.*did you mean env\."):
            train(bad)
    assert not (tmp_path / "e").exists() and not (tmp_path / "t").exists()  # nothing written
