"""Every env refuses a bad ``cost``, ``window`` or ``traces`` with a ConfigError naming the value
(not an AttributeError or TypeError from deep inside the pool or a generator), and reads a
relative trace path as the CLI does."""

from __future__ import annotations

import os

import gymnasium as gym
import numpy as np
import pytest

import cachegym.envs  # noqa: F401  (registers the ids)
from cachegym.allocator.cost import PRESETS, save_preset
from cachegym.allocator.errors import ConfigError
from cachegym.envs.common import Episodes, as_traces, check_cost
from cachegym.envs.registration import ENV_IDS

SMALL = {"generator": "zipf", "n_requests": 400, "n_objects": 60}


@pytest.mark.parametrize("env_id", ENV_IDS)
@pytest.mark.parametrize("cost", [3, {"name": "x"}, 1.5, ["h100_pcie5"]])
def test_a_cost_that_is_no_preset_is_a_config_error(env_id, cost):
    with pytest.raises(ConfigError, match=r"cost=.*give a timing preset's name \(one of .*h100_pcie5"):
        gym.make(env_id, traces=SMALL, cost=cost)


@pytest.mark.parametrize("env_id", ENV_IDS)
def test_an_unknown_preset_name_is_refused_when_the_env_is_made(env_id):
    with pytest.raises(ConfigError, match="unknown cost preset 'nope'"):
        gym.make(env_id, traces=SMALL, cost="nope")


@pytest.mark.parametrize("env_id", ENV_IDS)
@pytest.mark.parametrize("capacity", [0, -5, 2**61])
def test_a_capacity_no_pool_takes_is_refused_when_the_env_is_made(env_id, capacity):
    """(2**61 bytes was taken, and refused by the pool at the first reset: a helper's audit.)"""
    with pytest.raises(ConfigError, match=f"capacity must be > 0 bytes and at most 2\\*\\*60, got {capacity}"):
        gym.make(env_id, traces=SMALL, capacity=capacity)


@pytest.mark.parametrize("env_id", ENV_IDS)
def test_a_preset_name_a_preset_file_and_a_preset_object_are_taken(env_id, tmp_path):
    path = str(tmp_path / "p.json")
    save_preset(PRESETS["h100_pcie5"], path)
    for cost in ("h100_pcie5", path, PRESETS["a100_pcie4"], None):
        env = gym.make(env_id, traces=SMALL, window=300, capacity=0.2, cost=cost)
        env.reset(seed=0)
        env.close()
    assert check_cost(tmp_path / "p.json") == path  # (a path object is taken as its string)


@pytest.mark.parametrize("env_id", ENV_IDS)
@pytest.mark.parametrize("window", ["big", 1.5, True, 0, -3])
def test_a_window_that_is_no_positive_int_is_a_config_error(env_id, window):
    with pytest.raises(ConfigError, match=r"window must be an int >= 1 .* or None .*got " + repr(window)[:3]):
        gym.make(env_id, traces=SMALL, window=window)


def test_episodes_take_numpy_ints_and_none():
    traces = as_traces(SMALL)
    assert Episodes(traces, np.int64(50)).length == 50
    assert Episodes(traces, None).length is None


@pytest.mark.parametrize("env_id", ENV_IDS)
@pytest.mark.parametrize("traces, match", [
    (3, r"traces=3 \(int\): give a Trace"),
    (b"x", r"traces=b'x' \(bytes\): give a Trace"),
    ([b"x"], r"traces\[0\]: expected a Trace, a path or a generator spec, got b'x' \(bytes\)"),
    ({"generator": "zipf", "n_requests": "x"},
     r"traces\[0\]: n_requests of generator 'zipf' must be an int, got 'x'"),
    ({"generator": "zipf", "n_requests": 2.5},
     r"traces\[0\]: n_requests of generator 'zipf' must be an int, got 2.5"),
    ({"generator": "zipf", "n_requests": True},
     r"traces\[0\]: n_requests of generator 'zipf' must be an int, got True"),
    ({"generator": "zipf", "alpha": "high"}, r"alpha of generator 'zipf' must be a number, got 'high'"),
    ({"generator": "zipf", "seed": "a"}, r"seed of generator 'zipf' must be an int, got 'a'"),
    ({"generator": "zipf", "n_objects": -5}, r"traces\[0\]: generator 'zipf' refused"),
    ({"generator": 3}, r"traces\[0\]: unknown generator 3"),
])
def test_bad_traces_are_config_errors_naming_the_value(env_id, traces, match):
    with pytest.raises(ConfigError, match=match):
        gym.make(env_id, traces=traces)


@pytest.mark.parametrize("env_id", ENV_IDS)
def test_a_relative_trace_path_is_read_as_the_cli_reads_it(env_id, tmp_path, monkeypatch):
    """``data/traces/gpt.npz`` (as the configs name the bundled traces) from any working
    directory: envs.paths.resolve_data_path, as the CLI does."""
    monkeypatch.chdir(tmp_path)
    assert not os.path.exists("data/traces/gpt.npz")
    env = gym.make(env_id, traces="data/traces/gpt.npz", window=300)
    env.reset(seed=0)
    assert env.unwrapped._episodes.traces[0].name
    env.close()


@pytest.mark.parametrize("env_id", ENV_IDS)
@pytest.mark.parametrize("kw, match", [({"placement": "foo"}, "placement must be"),
                                       ({"write_policy": "foo"}, "write_policy must be")])
def test_placement_and_write_policy_are_checked_when_the_env_is_made(env_id, kw, match):
    """(They were checked by the pool at the first reset().)"""
    with pytest.raises(ConfigError, match=match):
        gym.make(env_id, traces=SMALL, **kw)


@pytest.mark.parametrize("weights, match", [
    ({"useless": float("-inf")}, "must be a finite number"), ({"timely": float("nan")}, "finite"),
    ({"late": "1"}, "finite number, got '1'"), ({"late": True}, "finite number, got True")])
def test_pythia_weights_are_finite_numbers(weights, match):
    """A -inf or NaN weight made every reward NaN; a string failed at the first no-op step."""
    with pytest.raises(ConfigError, match=match):
        gym.make("cachegym/Prefetch-v0", traces=SMALL, pythia_weights=weights)


def test_pythia_weights_with_another_reward_are_refused():
    with pytest.raises(ConfigError, match="pythia_weights weigh the 'pythia' reward"):
        gym.make("cachegym/Prefetch-v0", traces=SMALL, reward="misses", pythia_weights={"late": 1.0})
    env = gym.make("cachegym/Prefetch-v0", traces=SMALL, pythia_weights={"late": np.float32(-0.5)})
    assert env.unwrapped.weights["late"] == -0.5
    env.close()


@pytest.mark.parametrize("env_id", ["cachegym/Prefetch-v0", "cachegym/Joint-v0"])
def test_a_numpy_int_opportunity_is_taken(env_id):
    env = gym.make(env_id, traces=SMALL, opportunity=np.int64(2))
    assert env.unwrapped.opportunity == 2 and type(env.unwrapped.opportunity) is int
    env.close()


@pytest.mark.parametrize("env_id", ENV_IDS)
def test_close_mid_episode_leaves_no_valid_action(env_id):
    """action_masks() after close() reported the abandoned decision's candidates as valid."""
    env = gym.make(env_id, traces=SMALL, window=300, capacity=0.2)
    env.reset(seed=0)
    assert env.unwrapped.action_masks().any()
    env.close()
    assert not env.unwrapped.action_masks().any()
    env.close()


def test_the_evict_envs_window_before_reset_is_a_missing_attribute():
    """It raised InvalidActionError, so hasattr() and a vector env's get_attr raised too."""
    env = gym.make("cachegym/Evict-v0", traces=SMALL, window=300, capacity=0.2)
    assert not hasattr(env.unwrapped, "window")
    env.reset(seed=0)
    assert len(env.unwrapped.window) == 300
    env.close()


def test_the_joint_env_counts_dropped_prefetches_in_its_info():
    env = gym.make("cachegym/Joint-v0", traces=SMALL, window=300, capacity=0.2)
    _, info = env.reset(seed=0)
    assert info["dropped_prefetches"] == 0
    env.close()


def test_no_prefetch_opportunity_advises_only_what_was_not_tried():
    """With opportunity='access' and capacity_of='peak_live' already, the advice named both."""
    env = gym.make("cachegym/Prefetch-v0", traces=SMALL, window=300, capacity=1.0,
                   opportunity="access", capacity_of="peak_live")
    with pytest.raises(ConfigError, match="no prefetch opportunity") as ei:
        env.reset(seed=0)
    msg = str(ei.value)
    assert "opportunity='access'" not in msg.split("try ")[1] and "capacity_of='peak_live' on" not in msg
    assert "a smaller capacity" in msg and "predictor" in msg


@pytest.mark.parametrize("env_id", ["cachegym/Evict-v0", "cachegym/Joint-v0"])
def test_no_decision_advises_peak_live_only_where_it_is_not_taken(env_id):
    for of, advised in (("working_set", True), ("peak_live", False)):
        env = gym.make(env_id, traces=SMALL, window=300, capacity=1.0, capacity_of=of)
        with pytest.raises(ConfigError, match="held all it was asked for") as ei:
            env.reset(seed=0)
        assert ("capacity_of='peak_live'" in str(ei.value)) == advised
        env.close()
