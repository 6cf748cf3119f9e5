"""Export a trained scorer to a policy file that :class:`policies.learned.LearnedPolicy` loads.

* :func:`export_model`: an SB3 model trained with the policies of
  :mod:`cachegym.policies.training.nets` (in your own script) to a policy file;
* :func:`export_policy`: any net or model carrying a :class:`CandidateScorerNet`, with the
  header written out (what ``scripts/train.py`` uses);
* :func:`export_file`: a checkpoint, policy file or SB3 ``.zip`` on disk (``scripts/export.py``),
  optionally with the prefetch head of another policy file (:func:`with_prefetch_head`:
  ``--prefetch-from JOINT.npz``, what the main job writes);
* :func:`read_sb3_zip`: the tensors and plain JSON fields of an SB3 ``.zip``, read without
  unpickling (exports and ``resume=``); :func:`scorer_from_file`: the network of a policy file,
  to train further (``init_from=``).
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import warnings
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from cachegym.allocator import __version__
from cachegym.allocator.errors import ConfigError, PolicyFileError
from cachegym.allocator.files import replace_atomically
from cachegym.policies import features
from cachegym.policies.learned import save_policy_file
from cachegym.policies.learned.policy_file import MAX_LAYERS, MAX_WIDTH
from cachegym.policies.training.nets import (
    CandidateScorerNet,
    JointScorerNet,
    export_arrays,
    export_joint_arrays,
    import_arrays,
)

__all__ = ["export_model", "export_policy", "prefetch_section", "export_file", "export_onnx",
           "with_prefetch_head", "config_hash", "scorer_of", "joint_of", "prefetch_fields", "read_sb3_zip", "sb3_algo", "sb3_scorer", "scorer_from_file", "zip_fields",
           "POLICY_CLASSES"]

log = logging.getLogger(__name__)

POLICY_CLASSES = {"MaskablePPO": "MaskableScorerActorCriticPolicy", "PPO": "ScorerActorCriticPolicy",
                  "A2C": "ScorerActorCriticPolicy", "DQN": "ScorerDQNPolicy"}
"""The policy class of :mod:`cachegym.policies.training.nets` to train each SB3 algorithm with."""

_SB3 = {"ppo": ("stable_baselines3", "PPO"), "dqn": ("stable_baselines3", "DQN"),
        "maskable_ppo": ("sb3_contrib", "MaskablePPO")}
"""The algorithms an SB3 zip is exported from (``--algo``): module and class of each."""


NOT_HASHED = ("out_dir", "progress", "tensorboard", "torch_threads")
"""Top-level config keys that say where and how a run reports, not what it trains: left out of
:func:`config_hash`, so that the same training written to two folders gives identical files."""


def config_hash(config: Any) -> str:
    """SHA-256 of a config's canonical JSON (an OmegaConf config, a mapping or ``None``), its
    :data:`NOT_HASHED` keys left out."""
    if config is None:
        return ""
    try:
        from omegaconf import DictConfig, OmegaConf

        if isinstance(config, DictConfig):
            config = OmegaConf.to_container(config, resolve=True)
    except ImportError:  # pragma: no cover - hydra is a core dependency
        pass
    if isinstance(config, dict):
        config = {k: v for k, v in config.items() if k not in NOT_HASHED}
    blob = json.dumps(config, sort_keys=True, default=str).encode()
    return hashlib.sha256(blob).hexdigest()


def scorer_of(model: Any) -> CandidateScorerNet:
    """The :class:`CandidateScorerNet` inside a net, an SB3 policy or an SB3 model."""
    if isinstance(model, CandidateScorerNet):
        return model
    policy = getattr(model, "policy", model)
    net = getattr(policy, "scorer", None)
    if not isinstance(net, CandidateScorerNet):
        algo = type(model).__name__
        use = POLICY_CLASSES.get(algo)
        how = (f"train it with {algo}({use}, env) (from cachegym.policies.training import {use})"
               if use else "train it with a policy class of cachegym.policies.training.nets ("
               + ", ".join(f"{v} for {k}" for k, v in POLICY_CLASSES.items()) + ")")
        what = algo if policy is model else f"{algo} with {type(policy).__name__}"
        raise ConfigError(f"{what} carries no CandidateScorerNet (SB3's "
                          f"generic policies such as 'MultiInputPolicy' score no candidates, so "
                          f"nothing can be exported); {how}")
    return net


def export_model(model: Any, path: str | os.PathLike[str], *, K: int | None = None,
                 candidate_rule: str | None = None, meta: Mapping[str, Any] | None = None) -> str:
    """Write the policy of an SB3 ``model`` trained with the policy classes of
    :mod:`cachegym.policies.training.nets` as a policy file at ``path`` (what
    :meth:`LearnedPolicy.load` reads); returns its path.

    ``K`` (candidates per decision) defaults to the length of the observation's ``mask``;
    ``candidate_rule`` to the ``candidates`` of the model's env (``lru`` or ``sample``: how the
    deployed policy draws its candidates, as in training). A model trained in
    ``cachegym/Joint-v0`` (a :class:`JointScorerNet`) writes both heads, as ``scripts/train.py
    env=joint`` does: the prefetch section is :func:`prefetch_section` of the model's env. A
    model with SB3's generic ``"MultiInputPolicy"`` is refused with a :class:`ConfigError`
    naming the class to use."""
    net: CandidateScorerNet | JointScorerNet = joint_of(model) or scorer_of(model)  # the class check first
    venv = model.get_env() if hasattr(model, "get_env") else None
    if K is None:
        K = _model_K(model)
    if candidate_rule is None:
        try:
            candidate_rule = str(venv.get_attr("candidates")[0]) if venv is not None else None
        except AttributeError:
            candidate_rule = None
        if candidate_rule not in features.RULES:
            raise ConfigError(f"export_model: the candidate rule cannot be read from the model's env "
                              f"(got {candidate_rule!r}); give candidate_rule=, one of {list(features.RULES)}")
    elif candidate_rule not in features.RULES:
        raise ConfigError(f"export_model: candidate_rule must be one of {list(features.RULES)}, "
                          f"got {candidate_rule!r}")
    prefetch = None
    if isinstance(net, JointScorerNet):
        if venv is None:
            raise ConfigError(f"export_model: {type(model).__name__} carries a JointScorerNet (eviction and "
                              "prefetch heads), whose prefetch section (K, opportunity, predictor) is read "
                              "from the model's env, and it has none; load it with its env "
                              "(MaskablePPO.load(path, env=gym.make('cachegym/Joint-v0', ...)))")
        def attr(name: str) -> Any:  # (through the wrappers, from a subprocess too)
            return venv.get_attr(name, [0])[0]

        prefetch = prefetch_fields(attr("K"), attr("opportunity"), attr("predictor"))
    info = {"algo": type(model).__name__, "policy_class": type(getattr(model, "policy", model)).__name__}
    return export_policy(net, path, K=K, candidate_rule=candidate_rule, meta={**info, **dict(meta or {})},
                         prefetch=prefetch)


def joint_of(model: Any) -> JointScorerNet | None:
    """The :class:`JointScorerNet` inside an SB3 policy or model trained in
    ``cachegym/Joint-v0`` (or the net itself); ``None`` for anything else."""
    if isinstance(model, JointScorerNet):
        return model
    net = getattr(getattr(model, "policy", model), "scorer", None)
    return net if isinstance(net, JointScorerNet) else None


def _model_K(model: Any) -> int:
    """Candidates per decision of an SB3 model: the length of its observation's ``mask``."""
    space = getattr(model, "observation_space", None)
    mask = getattr(space, "spaces", {}).get("mask") if space is not None else None
    n = getattr(mask, "n", None)
    if n is None:
        raise ConfigError(f"export_model: {type(model).__name__} has no observation 'mask' to read K "
                          "(candidates per decision) from; give K=")
    return int(np.prod(n))


def export_policy(model: Any, path: str | os.PathLike[str], *, K: int, candidate_rule: str = "lru",
                  config: Any = None, meta: Mapping[str, Any] | None = None,
                  prefetch: Mapping[str, Any] | None = None) -> str:
    """Write ``model``'s scorer as one self-describing policy file; returns its path.

    A :class:`JointScorerNet` writes both heads: ``prefetch`` then gives the prefetch head's
    ``K``, ``opportunity`` and ``predictor`` (the env's: :func:`prefetch_section`)."""
    jnet = joint_of(model)
    net = jnet.evict if jnet is not None else scorer_of(model)
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
    if jnet is None:
        return save_policy_file(path, export_arrays(net), header)
    if prefetch is None:
        raise ConfigError("export_policy: a JointScorerNet needs prefetch={K, opportunity, predictor} "
                          "(prefetch_section(env) of the env it was trained in)")
    header["prefetch"] = {"arch": _arch(jnet.prefetch), **prefetch}
    return save_policy_file(path, export_joint_arrays(jnet), header)


def _arch(net: CandidateScorerNet) -> dict[str, Any]:
    return {"type": "candidate_mlp", "n_features": net.n_features, "n_globals": net.n_globals,
            "hidden": list(net.hidden), "activation": "relu"}


def prefetch_section(env: Any) -> dict[str, Any] | None:
    """The policy file's ``prefetch`` section (but its ``arch``) for a network trained in
    ``env``: its ``K``, ``opportunity`` and predictor parameters; ``None`` for an env without
    prefetch decisions. An opportunity a deployed pool cannot tell (``"step"``: the trace's step
    marks) is refused."""
    if "phase" not in getattr(env.observation_space, "spaces", {}):
        return None
    return prefetch_fields(env.K, env.opportunity, env.predictor)


def prefetch_fields(K: int, opp: Any, predictor: Any) -> dict[str, Any]:
    """:func:`prefetch_section` of an env's ``K``, ``opportunity`` and ``predictor`` (a
    :class:`~policies.successors.SuccessorPredictor`), the opportunity checked."""
    from cachegym.policies.learned.policy_file import PREFETCH_OPPORTUNITIES

    if not (opp in PREFETCH_OPPORTUNITIES or (isinstance(opp, int) and not isinstance(opp, bool))):
        raise ConfigError(f"env.opportunity={opp!r}: a deployed prefetch head is asked "
                          f"{' or '.join(PREFETCH_OPPORTUNITIES)} or every N accesses; a pool serving "
                          "real work has no trace steps: train with one of those")
    return {"K": int(K), "opportunity": opp, "predictor": predictor.params()}


def with_prefetch_head(header: Mapping[str, Any], arrays: Mapping[str, np.ndarray],
                       prefetch_from: str | os.PathLike[str]) -> tuple[dict[str, Any], dict[str, np.ndarray]]:
    """``(header, arrays)`` of a policy file (its eviction scorer) with the prefetch head of the
    policy file ``prefetch_from`` in place of its own (its ``prefetch`` section and ``w/p/*``
    weights, copied unchanged; ``meta.prefetch_from`` records the file's name and checksum).

    ``prefetch_from`` is verified as :meth:`LearnedPolicy.load` does (as the eviction file is by
    :func:`export_file`), so both feature specifications are the running code's: the two heads
    read one feature vector. A file without a prefetch head, or one written by another library
    version than the eviction scorer's, is refused (:class:`PolicyFileError` naming the field)."""
    from cachegym.policies.learned import LearnedPolicy, read_policy_file
    from cachegym.policies.learned.policy_file import PREFETCH_PREFIX, split_heads

    src = os.fspath(prefetch_from)
    LearnedPolicy.load(src)  # refuses a corrupt, truncated or mismatched file
    pheader, parrays = read_policy_file(src)
    section = pheader.get("prefetch")
    if section is None:
        raise PolicyFileError(f"prefetch_from {src}: the file has no prefetch head (no 'prefetch' "
                              "section); give a policy trained with env=joint (scripts/train.py "
                              "env=joint ...)")
    if pheader.get("library_version") != header.get("library_version"):
        raise PolicyFileError(f"prefetch_from {src}: library_version is "
                              f"{pheader.get('library_version')!r}, the eviction policy's is "
                              f"{header.get('library_version')!r}; train both heads with the same "
                              "version of cachegym")
    evict, _ = split_heads(arrays)
    _, head = split_heads(parrays)
    out = {k: v for k, v in header.items() if k not in ("weights_sha256", "sha256")}
    out["prefetch"] = section
    with open(src, "rb") as f:
        digest = hashlib.sha256(f.read()).hexdigest()
    out["meta"] = {**dict(header.get("meta") or {}),
                   "prefetch_from": {"file": os.path.basename(src), "sha256": digest,
                                     "config_sha256": pheader.get("config_sha256", "")}}
    return out, {**evict, **{PREFETCH_PREFIX + k: v for k, v in head.items()}}


def export_file(source: str | os.PathLike[str], out: str | os.PathLike[str], *, K: int | None = None,
                candidate_rule: str | None = None, algo: str | None = None,
                trust_pickle: bool = False, prefetch_from: str | os.PathLike[str] | None = None) -> str:
    """Export ``source`` to a policy file at ``out``; returns its path.

    ``source`` is a training checkpoint or policy file (``.npz``: verified, then rewritten with
    ``K``/``candidate_rule`` changed where given, and with the prefetch head of the policy file
    ``prefetch_from`` where given: :func:`with_prefetch_head`) or a stable-baselines3 model saved with
    ``model.save()`` (``.zip``; ``algo`` one of ``ppo``, ``maskable_ppo``, ``dqn``, whose policy
    carries the candidate scorer: by default the one the zip's policy class names, else the one
    of the training run's ``config.yaml`` beside it; a contradicting ``algo`` is refused).

    An SB3 zip is read without running any of its code: only the tensors of its ``policy.pth``
    (``torch.load(..., weights_only=True)``) and plain JSON fields of its ``data`` entry. SB3's
    own ``load`` unpickles entries of the zip, which runs whatever code a crafted file holds;
    ``trust_pickle=True`` (``--trust-pickle``) uses it, for a file you made yourself only.
    """
    from cachegym.policies.learned import LearnedPolicy, read_policy_file

    if K is not None and (isinstance(K, bool) or not isinstance(K, int) or not 1 <= K <= features.MAX_K):
        raise ConfigError(f"K (--K) must be an int in 1..{features.MAX_K} (candidates per decision), "
                          f"got {K!r}")
    src = os.fspath(source)
    if src.endswith((".npz", ".zip")) and not os.path.isfile(src):
        raise PolicyFileError(f"{src}: no such file (a checkpoint under outputs/train/<run>/checkpoints/, "
                              "a policy .npz, or an SB3 model .zip)")
    if src.endswith(".npz"):
        if algo is not None:
            raise ConfigError(f"--algo applies to an SB3 model .zip; {src!r} is a policy file, "
                              "whose network is exported as it is: leave --algo out")
        LearnedPolicy.load(src)  # refuses a corrupt, truncated or mismatched file
        header, arrays = read_policy_file(src)
        if K is not None:
            header["K"] = int(K)
        if candidate_rule is not None:
            if candidate_rule not in features.RULES:
                raise ConfigError(f"candidate_rule must be one of {list(features.RULES)}, got {candidate_rule!r}")
            header["candidate_rule"] = candidate_rule
        if prefetch_from is not None:
            header, arrays = with_prefetch_head(header, arrays, prefetch_from)
        for k in ("format", "format_version", "weights_sha256", "sha256"):
            header.pop(k, None)
        return save_policy_file(out, arrays, header)
    if prefetch_from is not None:
        raise ConfigError(f"prefetch_from: {src!r} is not a policy .npz; export it first, then add "
                          "the prefetch head to that file")
    if src.endswith(".zip"):
        run_cfg, run_algo, run_rule = _run_settings(src)
        own = _zip_algo(src)  # the algorithm its policy class names (read, not unpickled)
        if own is not None:
            if algo is not None and algo != own:
                raise ConfigError(f"--algo {algo!r}, but {src} holds a {own} model (its policy "
                                  f"class is {POLICY_CLASSES[_SB3[own][1]]}): give --algo {own} or "
                                  "leave it out")
            algo = own
        elif algo is None:
            algo = run_algo
        elif run_algo is not None and algo != run_algo:
            raise ConfigError(f"--algo {algo!r}, but {run_cfg} (the config of the run that saved "
                              f"{src}) trained {run_algo!r}: give --algo {run_algo} or leave it out")
        if algo not in _SB3:
            raise ConfigError(f"an SB3 model needs --algo, one of {sorted(_SB3)} (got {algo!r}; "
                              "a training run's zip takes it from the config.yaml beside it)")
        # the rule the model chose its candidates by: the run's env.candidates, else Evict-v0's
        # default (a policy file deployed with another rule sees candidates it never saw)
        if candidate_rule is None and run_rule is None:  # (taken without a word before)
            log.warning("export: no training config.yaml beside %s: its candidates are taken to be "
                        "chosen by Evict-v0's default rule %r; give --candidate-rule (lru or "
                        "sample) if it was trained with another", src, _evict_default("candidates"))
        candidate_rule = candidate_rule or run_rule or _evict_default("candidates")
        model: Any
        pf = None  # a Joint-v0 model's prefetch section: its run's settings (_joint_prefetch)
        if trust_pickle:
            import importlib

            mod, cls = _SB3[algo]
            model = getattr(importlib.import_module(mod), cls).load(src, device="cpu")
            if joint_of(model) is not None:
                n_actions = int(model.action_space.n)
                n_cand, pf = n_actions - 1, _joint_prefetch(src, n_actions)
            else:
                n_cand = int(model.observation_space["mask"].n)
        else:
            state, _, fields = read_sb3_zip(src)  # (once: the tensors of either kind of model)
            joint = _sb3_joint(src, state, fields)
            if joint is not None:
                model, n_actions, pf = joint
                n_cand = n_actions - 1
            else:
                model, n_cand = _sb3_scorer(src, state, fields)
        return export_policy(model, out, K=K if K is not None else n_cand,
                             candidate_rule=candidate_rule, prefetch=pf,
                             meta={"source": os.path.basename(src), "algo": algo})
    raise ConfigError(f"cannot export {src!r}: give a checkpoint/policy .npz or an SB3 model .zip")


def zip_fields(zip_path: str) -> dict[str, Any]:
    """The JSON fields of the ``data`` entry of the SB3 model zip ``zip_path`` (its step count,
    spaces, policy class), without its tensors; empty where they cannot be read."""
    import zipfile

    try:
        with zipfile.ZipFile(zip_path) as z:
            data = json.loads(z.read("data"))
    except Exception:  # (anything unreadable: the caller's other sources decide)
        return {}
    return data if isinstance(data, dict) else {}


def _zip_algo(zip_path: str) -> str | None:
    """:func:`sb3_algo` of the ``data`` entry of the SB3 model zip ``zip_path`` (``None`` where
    it cannot be read)."""
    data = zip_fields(zip_path)
    return sb3_algo(data) if data else None


def sb3_algo(fields: Mapping[str, Any]) -> str | None:
    """The algorithm (of :data:`_SB3`) of an SB3 model whose policy class is its
    :data:`POLICY_CLASSES` entry, from
    its ``data`` fields (:func:`read_sb3_zip`'s third value): the class reference SB3 pickles
    there, read as pickle opcodes (``pickletools``: nothing is unpickled, no code runs);
    ``None`` where it names another or cannot be read."""
    import base64
    import pickletools

    try:
        blob = base64.b64decode(fields["policy_class"][":serialized:"])
        strings = [arg for op, arg, _ in pickletools.genops(blob) if isinstance(arg, str)]
    except Exception:  # (anything unreadable: the other sources of the algorithm decide)
        return None
    if len(strings) < 2 or strings[-2] != "cachegym.policies.training.nets":
        return None
    return next((a for a, (_, sb3) in _SB3.items() if POLICY_CLASSES[sb3] == strings[-1]), None)


def _evict_default(name: str) -> Any:
    """The default of :class:`~envs.evict.EvictEnv`'s parameter ``name`` (``gym.make``'s)."""
    import inspect

    from cachegym.envs.evict import EvictEnv

    return inspect.signature(EvictEnv).parameters[name].default


def _run_config(zip_path: str) -> tuple[str, dict[str, Any]] | None:
    """``(path, config)`` of the training run that saved ``zip_path``: the ``config.yaml`` that
    ``cachegym train`` writes beside it, read as YAML data (no code runs); ``None`` where there
    is none."""
    import yaml

    path = os.path.join(os.path.dirname(os.path.abspath(zip_path)), "config.yaml")
    try:
        with open(path, encoding="utf-8") as f:
            cfg = yaml.safe_load(f)
    except (OSError, yaml.YAMLError, UnicodeDecodeError):
        return None
    return (path, cfg) if isinstance(cfg, dict) else None


def _run_settings(zip_path: str) -> tuple[str | None, str | None, str | None]:
    """``(path, algo, candidate rule)`` of the training run that saved ``zip_path``
    (:func:`_run_config`): its SB3 algorithm (``agent.algo``, or ``agent.finetune.algo`` after
    imitation) and its ``env.candidates``; ``None`` for each where there is no such file or
    value."""
    run = _run_config(zip_path)
    if run is None:
        return None, None, None
    path, cfg = run
    agent, env = cfg.get("agent"), cfg.get("env")
    algo = agent.get("algo") if isinstance(agent, dict) else None
    if algo is None and isinstance(agent, dict) and isinstance(agent.get("finetune"), dict):
        algo = agent["finetune"].get("algo")
    rule = env.get("candidates") if isinstance(env, dict) else None
    return (path, algo if isinstance(algo, str) else None,
            rule if isinstance(rule, str) and rule in features.RULES else None)


def _pickles_objects(blob: bytes) -> bool:
    """Whether ``blob`` is a whole pickle stream that builds objects (a class or function by
    name: what torch's weights-only reader refuses, and unpickling would run), read with
    :mod:`pickletools` (which runs nothing): told apart from damaged bytes."""
    import io
    import pickletools
    import zipfile

    try:
        if blob[:4] == b"PK\x03\x04":  # torch.save's zip format: the pickle is its data.pkl
            with zipfile.ZipFile(io.BytesIO(blob)) as z:
                pkl = [n for n in z.namelist() if n.endswith("data.pkl")]
                if len(pkl) != 1 or z.getinfo(pkl[0]).file_size > MAX_SB3_BYTES:
                    return False
                blob = z.read(pkl[0])
        ops = {op.name for op, _, _ in pickletools.genops(blob)}
    except Exception:  # (not a whole pickle: damage)
        return False
    return bool(ops & {"GLOBAL", "STACK_GLOBAL", "INST", "OBJ", "REDUCE", "NEWOBJ", "NEWOBJ_EX"})


MAX_SB3_BYTES = 2**30
"""The most bytes an SB3 model zip's ``policy.pth``, ``policy.optimizer.pth`` and ``data`` may
hold once decompressed (this project's networks are a few MB; a 2.1 MB zip of 2 GiB of zeros
reached 4.5 GB before an untyped MemoryError)."""


def read_sb3_zip(path: str) -> tuple[Mapping[str, Any], Mapping[str, Any] | None, dict[str, Any]]:
    """``(policy state dict, optimizer state dict or None, data)`` of an SB3 model zip, read
    without unpickling anything: ``policy.pth`` and ``policy.optimizer.pth`` through
    ``torch.load(weights_only=True)`` (tensors and plain numbers only), ``data`` as JSON (its
    plain fields such as ``num_timesteps`` and ``action_space.n``; pickled entries stay
    strings)."""
    import io
    import pickle
    import zipfile
    import zlib

    import torch as th

    try:
        with zipfile.ZipFile(path) as z:
            names = set(z.namelist())
            if "policy.pth" not in names:
                raise PolicyFileError(f"{path}: no policy.pth entry: not an SB3 model saved with "
                                      "model.save()")
            wanted = [n for n in ("policy.pth", "policy.optimizer.pth", "data") if n in names]
            declared = sum(z.getinfo(n).file_size for n in wanted)
            if declared > MAX_SB3_BYTES:  # (refused before anything is decompressed: a zip bomb)
                raise PolicyFileError(
                    f"{path}: its entries declare {declared:,} bytes once decompressed, more than "
                    f"{MAX_SB3_BYTES:,}: not a model of this project (whose networks are a few MB)")
            blob = z.read("policy.pth")
            opt_blob = z.read("policy.optimizer.pth") if "policy.optimizer.pth" in names else None
            data = z.read("data") if "data" in names else b"{}"
    except (zipfile.BadZipFile, OSError, EOFError, zlib.error, NotImplementedError, RuntimeError,
            MemoryError) as e:  # (a damaged, encrypted or unsupported entry: zipfile's errors)
        raise PolicyFileError(f"{path}: not a readable SB3 model zip ({type(e).__name__}: {e})") from None

    def tensors(b: bytes, entry: str) -> Any:
        try:
            with warnings.catch_warnings():  # (torch's own advice is to unpickle it: not here)
                warnings.simplefilter("ignore")
                return th.load(io.BytesIO(b), map_location="cpu", weights_only=True)
        except pickle.UnpicklingError as e:  # torch's restricted unpickler refuses a non-tensor
            if "Unsupported global" not in str(e) and not _pickles_objects(b):  # (damage)
                raise PolicyFileError(f"{path}: its {entry} is damaged ({type(e).__name__}: "
                                      f"{str(e)[:200]}); save the model again") from None
            raise PolicyFileError(
                f"{path}: its {entry} holds more than tensors, and is not unpickled "
                f"({type(e).__name__}); pass --trust-pickle (trust_pickle=True) only if you made "
                "the file yourself") from None
        except Exception as e:  # a truncated, empty or garbled entry: damage, not a pickle
            raise PolicyFileError(f"{path}: its {entry} is damaged or not a torch file "
                                  f"({type(e).__name__}: {str(e)[:200]}); save the model again"
                                  ) from None

    state = tensors(blob, "policy.pth")
    if not isinstance(state, Mapping):
        raise PolicyFileError(f"{path}: policy.pth is not a state dict")
    opt = tensors(opt_blob, "policy.optimizer.pth") if opt_blob is not None else None
    try:
        fields = json.loads(data)
    except (ValueError, RecursionError):
        fields = {}
    return state, opt if isinstance(opt, Mapping) else None, fields if isinstance(fields, dict) else {}


_JOINT_ADVICE = ("export it in Python, export_model({cls}.load(path, env=env), 'policy.npz') "
                 "with env = gym.make('cachegym/Joint-v0', ...) as it was trained (trusted files "
                 "only: SB3's load unpickles)")
"""How to export a Joint-v0 model whose prefetch settings cannot be read (``cls``: its SB3
algorithm's class)."""


def _joint_advice(path: str) -> str:
    return _JOINT_ADVICE.format(cls=_SB3.get(_zip_algo(path) or "maskable_ppo", _SB3["maskable_ppo"])[1])


def _head(state: Mapping[str, Any], name: str) -> str | None:
    """The prefix of the SB3 policy's scorer tensors whose names end in ``name`` (the actor's
    before a target network's), ``None`` where there is none."""
    heads = sorted((k[:-len(name)] for k in state if str(k).endswith(name)),
                   key=lambda h: ("target" in h, len(h), h))
    return heads[0] if heads else None


def _scorer_dims(path: str, sub: Mapping[str, Any], prefix: str = "") -> tuple[int, int, list[int]]:
    """``(features, globals, hidden widths)`` of the :class:`CandidateScorerNet` whose tensors
    are ``sub``'s under ``prefix``, checked against what a policy file holds before any
    allocation (a :class:`PolicyFileError`; a missing tensor is a ``KeyError``)."""
    n_layers = sum(1 for k in sub if k.startswith(f"{prefix}layers.") and k.endswith(".weight"))
    w = sub[f"{prefix}cand_in.weight"]
    hidden = [int(w.shape[0])] + [int(sub[f"{prefix}layers.{i}.weight"].shape[0])
                                  for i in range(n_layers)]
    widths = [*hidden, int(w.shape[1]), int(sub[f"{prefix}glob_in.weight"].shape[1])]
    if len(hidden) > MAX_LAYERS or max(widths) > MAX_WIDTH:
        raise PolicyFileError(
            f"{path}: the scorer's tensors declare {len(hidden)} hidden layers of widths "
            f"{hidden} over {widths[-2]} features and {widths[-1]} globals, more than a "
            f"policy file holds ({MAX_LAYERS} layers, {MAX_WIDTH} wide): not a model of this "
            "project")
    return widths[-2], widths[-1], hidden


def _joint_prefetch(path: str, n_actions: int) -> dict[str, Any]:
    """The policy file's ``prefetch`` section of a Joint-v0 model of ``n_actions`` actions
    (``K + 1``) saved at ``path``: its training run's ``env.opportunity`` and ``env.predictor``
    (Joint-v0's defaults where not set), from the ``config.yaml`` beside it; refused without
    that config, or with one of another ``env.K`` (another run's)."""
    import inspect

    from cachegym.envs.joint import JointEnv
    from cachegym.policies.successors import make_predictor

    run = _run_config(path)
    env = run[1].get("env") if run is not None else None
    if not isinstance(env, dict) or not str(env.get("_target_", "")).endswith("JointEnv"):
        raise ConfigError(f"{path}: a Joint-v0 model (an eviction scorer and a prefetch head, "
                          "whose prefetch settings are its env's, not in the zip) without the "
                          "config.yaml of the training run beside it: put it back, or "
                          + _joint_advice(path))
    if env.get("K") is not None and env.get("K") != n_actions - 1:  # (the config of another run)
        raise ConfigError(f"{path}: its model decides among {n_actions - 1} candidates, and the "
                          f"config.yaml beside it says env.K={env.get('K')}: not the config of the "
                          "run that saved it; put that run's config.yaml beside the zip")
    defaults = inspect.signature(JointEnv).parameters
    return prefetch_fields(n_actions - 1, env.get("opportunity", defaults["opportunity"].default),
                           make_predictor(env.get("predictor")))


def sb3_joint(path: str) -> tuple[JointScorerNet, int, dict[str, Any]] | None:
    """A Joint-v0 model's :class:`JointScorerNet`, its action count (``K + 1``) and its policy
    file's ``prefetch`` section (:func:`_joint_prefetch`), read without unpickling; ``None`` for
    a zip whose policy has no joint scorer."""
    state, _, fields = read_sb3_zip(path)
    return _sb3_joint(path, state, fields)


def _sb3_joint(path: str, state: Mapping[str, Any], fields: Mapping[str, Any]
               ) -> tuple[JointScorerNet, int, dict[str, Any]] | None:
    head = _head(state, "scorer.evict.cand_in.weight")
    if head is None:
        return None
    head += "scorer."
    sub = {k[len(head):]: v for k, v in state.items() if k.startswith(head)}
    try:
        n_features, n_globals, hidden = _scorer_dims(path, sub, "evict.")
        jnet = JointScorerNet(n_features, n_globals, hidden)
        jnet.load_state_dict(sub, strict=True)
    except (KeyError, RuntimeError, ValueError, IndexError) as e:
        raise PolicyFileError(f"{path}: the joint scorer's tensors do not form a JointScorerNet "
                              f"({type(e).__name__}: {e})") from None
    n = _action_count(path, fields, 2)
    return jnet, n, _joint_prefetch(path, n)


def sb3_scorer(path: str) -> tuple[CandidateScorerNet, int]:
    """The :class:`CandidateScorerNet` of an SB3 model zip and its ``K`` (the action space's
    ``n``), read without unpickling anything (:func:`read_sb3_zip`)."""
    state, _, fields = read_sb3_zip(path)
    return _sb3_scorer(path, state, fields)


def _sb3_scorer(path: str, state: Mapping[str, Any], fields: Mapping[str, Any]
                ) -> tuple[CandidateScorerNet, int]:
    head = _head(state, "scorer.cand_in.weight")
    if head is None:
        if any(".scorer.evict." in f".{k}" for k in state) and any(".scorer.prefetch." in f".{k}"
                                                                   for k in state):
            raise ConfigError(f"{path}: a Joint-v0 model (an eviction scorer and a prefetch "
                              "head, whose prefetch settings are its env's, not in the zip): "
                              + _joint_advice(path) + ", or train with cachegym train env=joint, "
                              "which exports both heads")
        raise ConfigError(f"{path}: the policy carries no CandidateScorerNet; train it with the "
                          "policies in cachegym.policies.training.nets")
    head += "scorer."
    sub = {k[len(head):]: v for k, v in state.items() if k.startswith(head)}
    try:
        n_features, n_globals, hidden = _scorer_dims(path, sub)
        net = CandidateScorerNet(n_features, n_globals, hidden)
        net.load_state_dict(sub, strict=True)
    except (KeyError, RuntimeError, ValueError, IndexError) as e:
        raise PolicyFileError(f"{path}: the scorer's tensors do not form a CandidateScorerNet "
                              f"({type(e).__name__}: {e})") from None
    return net, _action_count(path, fields, 1)


def _action_count(path: str, fields: Mapping[str, Any], least: int) -> int:
    """The action space's ``n`` of an SB3 zip's ``data`` fields (read as JSON), at least
    ``least``; a :class:`ConfigError` asking for ``--K`` where it cannot be read."""
    try:
        space = fields.get("action_space", {})
        n = int(space["n"]) if isinstance(space, Mapping) and "n" in space else None
    except (ValueError, TypeError):
        n = None
    if n is None or n < least:
        raise ConfigError(f"{path}: the number of candidates cannot be read without unpickling; "
                          "give it with --K (K=)")
    return n


def scorer_from_file(path: str | os.PathLike[str], ignore: Sequence[int] = ()) -> CandidateScorerNet:
    """The network of the policy file ``path`` as a :class:`CandidateScorerNet` computing the
    same scores (verified first, as :meth:`LearnedPolicy.load` does), to train further."""
    from cachegym.policies.learned import LearnedPolicy, read_policy_file

    LearnedPolicy.load(path)  # refuses a corrupt, truncated or mismatched file
    _, arrays = read_policy_file(path)
    return import_arrays(arrays, ignore)


ONNX_OPSET = 17


def export_onnx(policy: str | os.PathLike[str], out: str | os.PathLike[str]) -> str:
    """Write the network of the policy file ``policy`` as an ONNX model at ``out``; returns its
    path. Needs the ``onnx`` package (``pip install -e '.[onnx]'``), not torch.

    The model computes :meth:`policies.learned.CandidateScorer.scores` without the mask (the
    eviction scorer: a file's prefetch head is not exported, said as a warning): inputs
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
        raise ConfigError("ONNX export needs the onnx package: pip install onnx (the onnx extra: "
                          "pip install 'cachegym[onnx]')") from None
    src = os.fspath(policy)
    LearnedPolicy.load(src)  # refuses a corrupt, truncated or mismatched file
    header, arrays = read_policy_file(src)
    if header.get("prefetch"):  # (it was dropped without a word)
        log.warning("export_onnx: %s has a prefetch head too; the ONNX model holds its eviction "
                    "scorer alone (the prefetch head is served from the policy file)", src)
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
    # written whole: a failed write (a full disk) leaves an older model at dst as it was
    return replace_atomically(dst, lambda f: f.write(model.SerializeToString()), binary=True)
