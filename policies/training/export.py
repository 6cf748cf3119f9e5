"""Export a trained scorer to a policy file that :class:`policies.learned.LearnedPolicy` loads."""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Mapping
from typing import Any

import numpy as np

from cachegym.allocator import __version__
from cachegym.allocator.errors import ConfigError, PolicyFileError
from cachegym.policies import features
from cachegym.policies.learned import save_policy_file
from cachegym.policies.training.nets import (
    CandidateScorerNet,
    JointScorerNet,
    export_arrays,
    export_joint_arrays,
)

__all__ = ["export_policy", "prefetch_section", "export_file", "export_onnx", "config_hash", "scorer_of"]


def config_hash(config: Any) -> str:
    """SHA-256 of a config's canonical JSON (an OmegaConf config, a mapping or ``None``)."""
    if config is None:
        return ""
    try:
        from omegaconf import DictConfig, OmegaConf

        if isinstance(config, DictConfig):
            config = OmegaConf.to_container(config, resolve=True)
    except ImportError:  # pragma: no cover - hydra is a core dependency
        pass
    blob = json.dumps(config, sort_keys=True, default=str).encode()
    return hashlib.sha256(blob).hexdigest()


def scorer_of(model: Any) -> CandidateScorerNet:
    """The :class:`CandidateScorerNet` inside a net, an SB3 policy or an SB3 model."""
    if isinstance(model, CandidateScorerNet):
        return model
    policy = getattr(model, "policy", model)
    net = getattr(policy, "scorer", None)
    if not isinstance(net, CandidateScorerNet):
        raise ConfigError(f"{type(model).__name__} carries no CandidateScorerNet; train it with the "
                          "policies in cachegym.policies.training.nets")
    return net


def export_policy(model: Any, path: str | os.PathLike[str], *, K: int, candidate_rule: str = "lru",
                  config: Any = None, meta: Mapping[str, Any] | None = None,
                  prefetch: Mapping[str, Any] | None = None) -> str:
    """Write ``model``'s scorer as one self-describing policy file; returns its path.

    A :class:`JointScorerNet` writes both heads: ``prefetch`` then gives the prefetch head's
    ``K``, ``opportunity`` and ``predictor`` (the env's: :func:`prefetch_section`)."""
    joint = isinstance(model, JointScorerNet)
    net = model.evict if joint else scorer_of(model)
    if (net.n_features, net.n_globals) != (features.F, features.G):
        raise ConfigError(f"the network reads {net.n_features} features and {net.n_globals} globals, "
                          f"cachegym.policies.features computes {features.F} and {features.G}")
    header: dict[str, Any] = {
        "task": "evict",
        "arch": _arch(net),
        "feature_spec": features.feature_spec(),
        "K": int(K),
        "candidate_rule": candidate_rule,
        "library_version": __version__,
        "config_sha256": config_hash(config),
        "meta": dict(meta or {}),
    }
    if not joint:
        return save_policy_file(path, export_arrays(net), header)
    if prefetch is None:
        raise ConfigError("export_policy: a JointScorerNet needs prefetch={K, opportunity, predictor} "
                          "(prefetch_section(env) of the env it was trained in)")
    header["prefetch"] = {"arch": _arch(model.prefetch), **prefetch}
    return save_policy_file(path, export_joint_arrays(model), header)


def _arch(net: CandidateScorerNet) -> dict[str, Any]:
    return {"type": "candidate_mlp", "n_features": net.n_features, "n_globals": net.n_globals,
            "hidden": list(net.hidden), "activation": "relu"}


def prefetch_section(env: Any) -> dict[str, Any] | None:
    """The policy file's ``prefetch`` section (but its ``arch``) for a network trained in
    ``env``: its ``K``, ``opportunity`` and predictor parameters; ``None`` for an env without
    prefetch decisions. An opportunity a deployed pool cannot tell (``"step"``: the trace's step
    marks) is refused."""
    from cachegym.policies.learned.policy_file import PREFETCH_OPPORTUNITIES

    if "phase" not in getattr(env.observation_space, "spaces", {}):
        return None
    opp = env.opportunity
    if not (opp in PREFETCH_OPPORTUNITIES or (isinstance(opp, int) and not isinstance(opp, bool))):
        raise ConfigError(f"env.opportunity={opp!r}: a deployed prefetch head is asked "
                          f"{' or '.join(PREFETCH_OPPORTUNITIES)} or every N accesses; a pool serving "
                          "real work has no trace steps: train with one of those")
    return {"K": int(env.K), "opportunity": opp, "predictor": env.predictor.params()}


def export_file(source: str | os.PathLike[str], out: str | os.PathLike[str], *, K: int | None = None,
                candidate_rule: str | None = None, algo: str | None = None,
                trust_pickle: bool = False) -> str:
    """Export ``source`` to a policy file at ``out``; returns its path.

    ``source`` is a training checkpoint or policy file (``.npz``: verified, then rewritten with
    ``K``/``candidate_rule`` changed where given) or a stable-baselines3 model saved with
    ``model.save()`` (``.zip``; ``algo`` one of ``ppo``, ``maskable_ppo``, ``dqn``, whose policy
    carries the candidate scorer).

    An SB3 zip is read without running any of its code: only the tensors of its ``policy.pth``
    (``torch.load(..., weights_only=True)``) and plain JSON fields of its ``data`` entry. SB3's
    own ``load`` unpickles entries of the zip, which runs whatever code a crafted file holds;
    ``trust_pickle=True`` (``--trust-pickle``) uses it, for a file you made yourself only.
    """
    from cachegym.policies.learned import LearnedPolicy, read_policy_file

    src = os.fspath(source)
    if src.endswith((".npz", ".zip")) and not os.path.isfile(src):
        raise PolicyFileError(f"{src}: no such file (a checkpoint under outputs/train/<run>/checkpoints/, "
                              "a policy .npz, or an SB3 model .zip)")
    if src.endswith(".npz"):
        LearnedPolicy.load(src)  # refuses a corrupt, truncated or mismatched file
        header, arrays = read_policy_file(src)
        if K is not None:
            header["K"] = int(K)
        if candidate_rule is not None:
            if candidate_rule not in features.RULES:
                raise ConfigError(f"candidate_rule must be one of {list(features.RULES)}, got {candidate_rule!r}")
            header["candidate_rule"] = candidate_rule
        for k in ("format", "format_version", "weights_sha256", "sha256"):
            header.pop(k, None)
        return save_policy_file(out, arrays, header)
    if src.endswith(".zip"):
        algos = {"ppo": ("stable_baselines3", "PPO"), "dqn": ("stable_baselines3", "DQN"),
                 "maskable_ppo": ("sb3_contrib", "MaskablePPO")}
        if algo not in algos:
            raise ConfigError(f"an SB3 model needs --algo, one of {sorted(algos)} (got {algo!r})")
        model: Any
        if trust_pickle:
            import importlib

            mod, cls = algos[algo]
            model = getattr(importlib.import_module(mod), cls).load(src, device="cpu")
            n_cand = K if K is not None else int(model.observation_space["mask"].n)
        else:
            model, n_cand_read = sb3_scorer(src)
            n_cand = K if K is not None else n_cand_read
        return export_policy(model, out, K=n_cand, candidate_rule=candidate_rule or "lru",
                             meta={"source": os.path.basename(src), "algo": algo})
    raise ConfigError(f"cannot export {src!r}: give a checkpoint/policy .npz or an SB3 model .zip")


def sb3_scorer(path: str) -> tuple[CandidateScorerNet, int]:
    """The :class:`CandidateScorerNet` of an SB3 model zip and its ``K`` (the action space's
    ``n``), read without unpickling anything: the policy's tensors through
    ``torch.load(weights_only=True)``, ``K`` from the ``data`` entry's plain JSON fields."""
    import io
    import zipfile

    import torch as th

    try:
        with zipfile.ZipFile(path) as z:
            names = set(z.namelist())
            if "policy.pth" not in names:
                raise PolicyFileError(f"{path}: no policy.pth entry: not an SB3 model saved with "
                                      "model.save()")
            blob = z.read("policy.pth")
            data = z.read("data") if "data" in names else b"{}"
    except (zipfile.BadZipFile, OSError, EOFError) as e:
        raise PolicyFileError(f"{path}: not a readable SB3 model zip ({type(e).__name__}: {e})") from None
    try:
        state = th.load(io.BytesIO(blob), map_location="cpu", weights_only=True)
    except Exception as e:  # torch's restricted unpickler refuses anything but tensors
        raise PolicyFileError(
            f"{path}: its policy.pth holds more than tensors, and is not unpickled ({type(e).__name__}: "
            f"{str(e).splitlines()[0] if str(e) else ''}); pass --trust-pickle (trust_pickle=True) "
            "only if you made the file yourself") from None
    if not isinstance(state, Mapping):
        raise PolicyFileError(f"{path}: policy.pth is not a state dict")
    heads = sorted((k[:-len("cand_in.weight")] for k in state if str(k).endswith("scorer.cand_in.weight")),
                   key=lambda h: ("target" in h, len(h), h))
    if not heads:
        raise ConfigError(f"{path}: the policy carries no CandidateScorerNet; train it with the "
                          "policies in cachegym.policies.training.nets")
    head = heads[0]
    sub = {k[len(head):]: v for k, v in state.items() if k.startswith(head)}
    try:
        n_layers = sum(1 for k in sub if k.startswith("layers.") and k.endswith(".weight"))
        hidden = [int(sub["cand_in.weight"].shape[0])] + [int(sub[f"layers.{i}.weight"].shape[0])
                                                         for i in range(n_layers)]
        net = CandidateScorerNet(int(sub["cand_in.weight"].shape[1]), int(sub["glob_in.weight"].shape[1]),
                                 hidden)
        net.load_state_dict(sub, strict=True)
    except (KeyError, RuntimeError, ValueError, IndexError) as e:
        raise PolicyFileError(f"{path}: the scorer's tensors do not form a CandidateScorerNet "
                              f"({type(e).__name__}: {e})") from None
    try:
        space = json.loads(data).get("action_space", {})
        n = int(space["n"]) if isinstance(space, dict) and "n" in space else None
    except (ValueError, TypeError, AttributeError, RecursionError):
        n = None
    if n is None or n < 1:
        raise ConfigError(f"{path}: the number of candidates cannot be read without unpickling; "
                          "give it with --K (K=)")
    return net, n


ONNX_OPSET = 17


def export_onnx(policy: str | os.PathLike[str], out: str | os.PathLike[str]) -> str:
    """Write the network of the policy file ``policy`` as an ONNX model at ``out``; returns its
    path. Needs the ``onnx`` package (``pip install -e '.[onnx]'``), not torch.

    The model computes :meth:`policies.learned.CandidateScorer.scores` without the mask: inputs
    ``candidates`` (N, K, F) and ``globals`` (N, G), float32, the features of
    :mod:`policies.features` in its order (the normalisation is folded into the weights); output
    ``scores`` (N, K), the best candidate the highest (mask padded slots before taking it).
    ``K`` and ``N`` are free. The policy file's header (feature specification, K, candidate rule,
    library version, config hash) is in the model's metadata as JSON under ``cachegym_header``.
    """
    from cachegym.policies.learned import CandidateScorer, LearnedPolicy, read_policy_file

    try:
        import onnx
        from onnx import TensorProto, helper, numpy_helper
    except ImportError:
        raise ConfigError("ONNX export needs the onnx package: pip install -e '.[onnx]' (or pip "
                          "install onnx)") from None
    src = os.fspath(policy)
    LearnedPolicy.load(src)  # refuses a corrupt, truncated or mismatched file
    header, arrays = read_policy_file(src)
    sc = CandidateScorer(arrays)
    inits = [numpy_helper.from_array(np.asarray(a, np.float32), name) for name, a in (
        ("wc", sc.wc), ("wg", sc.wg), ("b0", sc.b0), ("wo", sc.wo.reshape(-1, 1)),
        ("bo", np.asarray(sc.bo, np.float32).reshape(1)))]
    inits += [numpy_helper.from_array(np.asarray(v, np.int64), n)
              for n, v in (("axis1", [1]), ("axis2", [2]))]
    nodes = [
        helper.make_node("MatMul", ["globals", "wg"], ["g0"]),
        helper.make_node("Add", ["g0", "b0"], ["g1"]),
        helper.make_node("Unsqueeze", ["g1", "axis1"], ["g"]),  # (N, 1, H0): the same for every candidate
        helper.make_node("MatMul", ["candidates", "wc"], ["c0"]),
        helper.make_node("Add", ["c0", "g"], ["c1"]),
        helper.make_node("Relu", ["c1"], ["h0"]),
    ]
    h = "h0"
    for i, (w, b) in enumerate(sc.layers, 1):
        inits += [numpy_helper.from_array(np.asarray(w, np.float32), f"w{i}"),
                  numpy_helper.from_array(np.asarray(b, np.float32), f"b{i}")]
        nodes += [helper.make_node("MatMul", [h, f"w{i}"], [f"m{i}"]),
                  helper.make_node("Add", [f"m{i}", f"b{i}"], [f"a{i}"]),
                  helper.make_node("Relu", [f"a{i}"], [f"h{i}"])]
        h = f"h{i}"
    nodes += [helper.make_node("MatMul", [h, "wo"], ["s0"]),
              helper.make_node("Squeeze", ["s0", "axis2"], ["s1"]),
              helper.make_node("Add", ["s1", "bo"], ["scores"])]
    F, G = sc.n_features, sc.n_globals
    graph = helper.make_graph(
        nodes, "cachegym_candidate_scorer",
        [helper.make_tensor_value_info("candidates", TensorProto.FLOAT, ["N", "K", F]),
         helper.make_tensor_value_info("globals", TensorProto.FLOAT, ["N", G])],
        [helper.make_tensor_value_info("scores", TensorProto.FLOAT, ["N", "K"])], inits)
    model = helper.make_model(graph, producer_name="cachegym", producer_version=__version__,
                              opset_imports=[helper.make_opsetid("", ONNX_OPSET)])
    model.ir_version = 8  # what opset 17 needs: loads in onnxruntime >= 1.13
    model.doc_string = ("cachegym learned eviction policy: scores of K candidates (higher: evict "
                        "first); features in the order of metadata cachegym_header.feature_spec")
    helper.set_model_props(model, {"cachegym_header": json.dumps(header, sort_keys=True)})
    onnx.checker.check_model(model)
    dst = os.fspath(out)
    d = os.path.dirname(dst)
    if d:
        os.makedirs(d, exist_ok=True)
    onnx.save(model, dst)
    return dst
