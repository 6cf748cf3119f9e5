"""Hydra glue: structured-config schemas, the one ``instantiate`` helper, trace loading.

Every ``hydra.utils.instantiate`` in cachegym goes through :func:`instantiate`, which turns
Hydra's nested ``InstantiationException`` into one :class:`~allocator.errors.ConfigError`
line naming the config key and the target. The dataclasses below are the schemas of the
``trace``, ``allocator`` and ``eval`` groups; :func:`register_configs` stores them in Hydra's
``ConfigStore`` so that a wrong type, an unknown key or a value outside an enumeration fails
when the config is composed, not halfway through a sweep::

    from cachegym.envs.config import register_configs, instantiate
    register_configs()          # before @hydra.main / compose

    pool = instantiate(cfg.allocator, capacity=1 << 30, policy=policy)
    traces = instantiate(cfg.trace)          # list[Trace] (see load_traces)

Schemas stored (``ConfigStore`` name -> node): ``evaluate_schema`` (the whole evaluate.yaml),
``trace/base_trace``, ``allocator/base_allocator``, ``eval/base_eval``. A yaml file of a group
extends its schema with ``defaults: [base_trace, _self_]``.

The guards of a learned policy are the config group ``conf/policy/guard/`` (one yaml per guard,
with the ``_target_`` that builds it); lists of them (``eval.learned_guards``) name its options,
which :func:`guard_node` reads and :func:`build_guard` instantiates through :func:`instantiate`.
"""

from __future__ import annotations

import contextlib
import logging
import os
import sys
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass, field
from enum import Enum
from typing import Any

from omegaconf import DictConfig, OmegaConf
from omegaconf.errors import MissingMandatoryValue, OmegaConfBaseException

from cachegym.allocator.errors import CachegymError, ConfigError
from cachegym.allocator.trace import Trace

__all__ = [
    "Placement", "Mode", "TraceFormat", "WritePolicy", "Oversize", "TraceConfig",
    "AllocatorConfig", "EvalConfig", "EvaluateConfig", "register_configs", "instantiate",
    "load_traces", "load_trace", "config_error", "enum_value", "GUARD_GROUP", "guard_options",
    "guard_node", "build_guard", "refuse_unknown_keys", "list_keys", "check_list_overrides", "unknown_key",
    "group_schema", "group_option",
]

log = logging.getLogger(__name__)


class _StrEnum(str, Enum):
    """An enumeration whose members compare equal to (and print as) their string value."""

    def __str__(self) -> str:
        return str(self.value)


class Placement(_StrEnum):
    bytes = "bytes"
    arena = "arena"


class Mode(_StrEnum):
    bytes = "bytes"
    objects = "objects"


class TraceFormat(_StrEnum):
    npz = "npz"
    oracleGeneral = "oracleGeneral"
    lcs = "lcs"
    vscsi = "vscsi"
    csv = "csv"
    txt = "txt"


# member names are the values (hyphens included), since configs give enumerations by name
WritePolicy = _StrEnum("WritePolicy", {"write-back": "write-back",  # type: ignore[call-overload,misc]
                                       "write-through": "write-through"})


class Oversize(_StrEnum):
    bypass = "bypass"
    error = "error"


def enum_value(v: Any) -> Any:
    """The plain value of an enumeration member (anything else unchanged)."""
    return v.value if isinstance(v, Enum) else v


# ---------------------------------------------------------------------- schemas
@dataclass
class TraceConfig:
    """Where the traces come from: files (``path`` or ``paths``, in ``format``; ``None`` infers
    it from the file name), else the seeded generator ``generator`` with ``params``.
    ``max_requests`` keeps the first rows only (``None``: all)."""

    _target_: str = "cachegym.envs.config.load_traces"
    path: str | None = None
    paths: list[str] = field(default_factory=list)
    format: TraceFormat | None = None
    options: dict[str, Any] = field(default_factory=dict)
    generator: str | None = None
    params: dict[str, Any] = field(default_factory=dict)
    seed: int = 0
    max_requests: int | None = None


@dataclass
class AllocatorConfig:
    """Pool options (see :class:`allocator.pool.Pool`). ``placement=bytes`` is byte accounting
    (libCacheSim's counts); ``arena`` places blocks best-fit. ``capacity`` and ``policy`` are
    passed by the caller of :func:`instantiate`."""

    _target_: str = "cachegym.allocator.pool.Pool"
    placement: Placement = Placement.bytes
    write_policy: WritePolicy = WritePolicy["write-back"]  # type: ignore[valid-type]
    oversize: Oversize = Oversize.bypass
    clean_ahead: float = 0.0
    """The share of the capacity kept clean ahead of eviction under a timing preset (dirty
    next victims written back early while the copy-out engine idles; ``Pool(clean_ahead=)``);
    0: off, the copies at eviction."""


@dataclass
class EvalConfig:
    """What the evaluator sweeps. ``capacities``: bytes (or objects in ``objects`` mode) as
    integers, or fractions in (0, 1] of the working set (``capacity_of=peak_live``: of the peak
    live bytes). ``policies``: registry names (or ``FILE.py:Class``); lru and belady are always
    run (normalised hit rate). ``learned``: exported policy files, each run under every guard of
    ``learned_guards`` (options of the config group ``conf/policy/guard/``: see
    :func:`guard_node`), named ``learned[GUARD]`` in the results (``learned[GUARD]:NAME`` for
    several files, NAME the file's name without ``.npz``). ``presets``: cost presets, ``none`` for instant copies."""

    mode: Mode = Mode.bytes
    capacities: list[Any] = field(default_factory=lambda: [0.01, 0.1])
    capacity_of: str = "working_set"
    policies: list[str] = field(default_factory=lambda: ["lru", "fifo", "lfu", "belady"])
    learned: list[str] = field(default_factory=list)
    learned_guards: list[str] = field(default_factory=lambda: ["shadow"])
    prefetchers: list[str] = field(default_factory=lambda: ["none"])
    presets: list[str] = field(default_factory=lambda: ["none"])
    bounds: list[str] = field(default_factory=lambda: ["auto"])
    """Offline bounds added as rows and used by the gap_closed columns: ``foo`` (FOO's exact LP:
    rows foo_l and foo_u; up to 200,000 requests), ``lfoo_l`` (its Lagrangian, any length, within
    a few % of it), ``pfoo_l`` (its one-resource relaxation, any length, much looser on traffic)
    or ``auto`` (foo up to 30,000 requests, lfoo_l up to 5M, pfoo_l beyond); with a preset also
    stall_lb and stall_ref (envs/gaps.py). ``[]``: none."""
    decision_timing: bool = True
    plots: bool = True
    progress: bool = True
    resume: bool = False
    """Reuse the runs already in ``out_dir/runs.jsonl`` (those an interrupted sweep completed,
    with the same trace, settings and spec) instead of running them again."""
    jobs: int = 1
    """Runs replayed at once, each in a worker process (1: one after the other, in this
    process; 0: one per CPU core). The rows are the same either way, but for the wall times and
    decision latencies, which runs side by side disturb."""


@dataclass
class EvaluateConfig:
    """Schema of ``conf/evaluate.yaml``."""

    trace: TraceConfig = field(default_factory=TraceConfig)
    allocator: AllocatorConfig = field(default_factory=AllocatorConfig)
    eval: EvalConfig = field(default_factory=EvalConfig)
    out_dir: str | None = None
    seed: int = 0


_registered = False


def _out_or(default: str, *, _root_: Any) -> str:
    """The config's ``out_dir`` if set, else ``default`` (the resolver ``cachegym.out_or``).

    ``out_dir`` is read here, not passed in: an interpolation in it that does not resolve
    (``out_dir=${oops}``) would otherwise fail inside Hydra's run-folder setup, which prints a
    traceback of its own; here it stops the command with one line (exit status 2)."""
    from omegaconf.errors import OmegaConfBaseException

    try:
        out_dir = _root_.get("out_dir")
    except OmegaConfBaseException as e:
        print(f"error: out_dir: {str(e).splitlines()[0]}. out_dir is a folder path "
              "(out_dir=outputs/mine); an interpolation in it names a key of the config or a "
              "resolver (${now:%Y-%m-%d}).", file=sys.stderr)
        raise SystemExit(2) from None
    return default if out_dir is None or out_dir == "" else os.path.expanduser(str(out_dir))


def register_configs() -> None:
    """Store the schemas in Hydra's ConfigStore (idempotent). Call before composing."""
    global _registered
    if _registered:
        return
    from hydra.core.config_store import ConfigStore
    from omegaconf import OmegaConf

    # hydra.run.dir of the scripts' configs: ``out_dir`` where one is given, so that Hydra's log
    # and .hydra/ land beside the results (else outputs/<job>/<time>)
    if not OmegaConf.has_resolver("cachegym.out_or"):
        OmegaConf.register_new_resolver("cachegym.out_or", _out_or)
    cs = ConfigStore.instance()
    cs.store(name="evaluate_schema", node=EvaluateConfig)
    cs.store(group="trace", name="base_trace", node=TraceConfig)
    cs.store(group="allocator", name="base_allocator", node=AllocatorConfig)
    cs.store(group="eval", name="base_eval", node=EvalConfig)
    _registered = True


def list_keys(schema: type, prefix: str = "") -> set[str]:
    """The dotted keys of the list-typed fields of the dataclass ``schema``, its sections'
    included (``eval.capacities``)."""
    import dataclasses
    import types
    import typing

    hints = typing.get_type_hints(schema)
    out: set[str] = set()
    for f in dataclasses.fields(schema):
        t = hints[f.name]
        args = [a for a in typing.get_args(t) if a is not type(None)]
        if typing.get_origin(t) in (typing.Union, types.UnionType) and len(args) == 1:
            t = args[0]  # (an optional list)
        if typing.get_origin(t) is list:
            out.add(prefix + f.name)
        elif dataclasses.is_dataclass(t):
            out |= list_keys(t, f"{prefix}{f.name}.")  # type: ignore[arg-type]
    return out


def unknown_key(key: str, schema: type, argv: Sequence[str] | None = None, prog: str = ""
                ) -> str | None:
    """Why the dotted ``key`` names no field of a section that the dataclass ``schema`` types
    (``eval.capacites``: with the closest field), or ``None``: a field, or below a section no
    dataclass types (``trace.params.*``), or a top-level key, which Hydra checks itself. Given
    the command line's overrides ``argv``, a top-level section typed ``Any`` that a config
    group fills (``TrainConfig.env`` and ``.agent``) is checked too, against the schema of the
    group's option that ``argv`` chooses (``agent=ppo``), else the primary config's default
    (:func:`group_option`, :func:`group_schema`); without ``argv`` (the option unknown) it is
    left to Hydra."""
    import dataclasses
    import typing

    parts = key.split(".")
    t: Any = schema
    why = ""
    for i, part in enumerate(parts):
        if i == 1 and t is Any and argv is not None:
            option, chosen = group_option(parts[0], schema, argv)
            t = group_schema(parts[0], option)
            why = f" of {parts[0]}={option}{'' if chosen else ' (the default)'}"
        if not (isinstance(t, type) and dataclasses.is_dataclass(t)):
            return None
        names = {f.name for f in dataclasses.fields(t)}
        if part not in names:
            if i == 0:
                return None if argv is None else _unknown_top_key(key, schema, names, prog)
            return _unknown_key_message(key, ".".join(parts[:i]), names, why)
        t = typing.get_type_hints(t).get(part)
    return None


_PRESET_KEYS = ("env.cost", "eval.presets", "main.presets")
"""Where each command reads its timing preset: train's env, evaluate's eval, the main job's
main (``prog``: the command, whose name says which; train's config has the main job's keys,
which train does not read)."""


def _unknown_top_key(key: str, schema: type, names: set[str], prog: str = "") -> str | None:
    """``key``'s first part is no top-level field of ``schema`` (``capacity=...``): the message,
    with the closest field of any typed section (``eval.capacities``), for a key on the
    command line; ``None`` for a config group (``experiment=quick``, ``hydra/...``: Hydra
    reads those) or a key of Hydra's. Hydra refuses such a key too, with advice to add it with
    ``+``, where nothing would read it."""
    import dataclasses
    import difflib
    import typing

    from cachegym.envs.paths import CONF_DIR

    top = key.split(".", 1)[0]
    if top.startswith(("hydra", "~")) or "/" in top or os.path.isdir(os.path.join(CONF_DIR, top)):
        return None
    known: dict[str, str] = {}  # a field's name -> its dotted key (top-level fields first)
    hints = typing.get_type_hints(schema)
    for n in sorted(names):
        known.setdefault(n, n)
    for n in sorted(names):
        t = hints.get(n)
        if isinstance(t, type) and dataclasses.is_dataclass(t):
            for f in dataclasses.fields(t):
                known.setdefault(f.name, f"{n}.{f.name}")
    last = key.rsplit(".", 1)[-1]
    close = [known[c] for c in difflib.get_close_matches(last, sorted(known), 2)]
    # the names a user may try for a timing preset, which each command reads from its own key
    # (the closest spelling, main.presets, was no preset of train's)
    mine = ("env.cost" if "train" in prog else "main.presets" if "demo" in prog or "main" in prog
            else None)
    synonyms = [k for k in _PRESET_KEYS if k.split(".", 1)[0] in names
                and (mine is None or k == mine)] if last in (
        "preset", "presets", "cost", "timing") else []
    close = synonyms or close
    hint = f"did you mean {' or '.join(close)}? " if close else ""
    return (f"{key}: unknown key; {hint}the top-level keys: "
            f"{', '.join(sorted(n for n in names if not n.startswith('_')))}")


def group_option(group: str, schema: type, argv: Sequence[str] = ()) -> tuple[str | None, bool]:
    """``(option, chosen)``: the option of the config group ``group`` that the overrides
    ``argv`` choose (``group=NAME``: ``chosen``), else the one the primary config of ``schema``
    chooses by default (:func:`_default_option`; ``None``: none found)."""
    from hydra.core.config_store import ConfigStore

    option = None
    for tok in argv:
        k, eq, v = tok.partition("=")
        if eq and k.lstrip("+") == group:
            option = v.strip()
    if option is not None:
        return option, True
    return _default_option(group, schema, ConfigStore.instance()), False


def group_schema(group: str, option: str | None) -> type | None:
    """The dataclass typing ``option`` of the config group ``group`` (``conf/<group>/``): the
    structured config its yaml's defaults name (``base_sb3``: ``SB3AgentConfig``), or the
    option's own ConfigStore entry. ``None`` where none is found (no such group or option:
    Hydra says so)."""
    import dataclasses

    from hydra.core.config_store import ConfigStore

    if not option:
        return None
    path = os.path.join(_CONF_DIR, group, f"{option}.yaml")
    bases = [option]  # (an option may be a ConfigStore entry itself: base_sb3)
    if os.path.isfile(path):
        bases = [d for d in _yaml_defaults(path) if isinstance(d, str) and d != "_self_"]
    cs = ConfigStore.instance()
    for base in bases:
        try:
            node = cs.load(f"{group}/{base}.yaml").node
        except Exception:  # (hydra's ConfigLoadError: not in the ConfigStore)
            continue
        t = OmegaConf.get_type(node)
        if isinstance(t, type) and dataclasses.is_dataclass(t):
            return t
    return None


def _default_option(group: str, schema: type, cs: Any) -> str | None:
    """The option of ``group`` that the primary config of ``schema`` chooses by default: that
    of the ``conf/*.yaml`` whose defaults list ``schema``'s ConfigStore entry
    (``train_schema``: ``conf/train.yaml``)."""
    names = [name[:-len(".yaml")] for name, entry in cs.repo.items()
             if name.endswith(".yaml") and not isinstance(entry, dict)
             and OmegaConf.get_type(entry.node) is schema]
    if not names:
        return None
    for f in sorted(os.listdir(_CONF_DIR)):
        if not f.endswith(".yaml"):
            continue
        defaults = _yaml_defaults(os.path.join(_CONF_DIR, f))
        if not any(d in names for d in defaults if isinstance(d, str)):
            continue
        for d in defaults:
            if isinstance(d, DictConfig) and group in d:
                value = d[group]
                return str(value) if value is not None else None
    return None


def _yaml_defaults(path: str) -> list[Any]:
    """The defaults list of the yaml config ``path`` (empty where it has none or is unreadable:
    Hydra reports that itself)."""
    try:
        cfg = OmegaConf.load(path)
    except (OmegaConfBaseException, OSError, ValueError):
        return []
    defaults = cfg.get("defaults") if isinstance(cfg, DictConfig) else None
    return list(defaults) if defaults is not None else []


def _unknown_key_message(key: str, where: str, known: set[str], why: str = "") -> str:
    """``key`` (of the section ``where``, '' at the top) is none of ``known``: the message, with
    the closest known key and the section's keys (``why``: a reason after "unknown key")."""
    import difflib

    close = difflib.get_close_matches(key.rsplit(".", 1)[-1], sorted(known), 1)
    hint = f"did you mean {where + '.' if where else ''}{close[0]}? " if close else ""
    return (f"{key}: unknown key{why}; {hint}the keys of {where or 'the config'}: "
            f"{', '.join(sorted(n for n in known if not n.startswith('_')))}")


def _typed_leaf(key: str, schema: type, argv: Sequence[str]) -> tuple[type, str, Any] | None:
    """``(section schema, key within it, the field's type)`` where the dotted ``key`` is a
    field that dataclass ``schema`` types all the way down -- a top-level ``Any`` section that
    a config group fills (``env``, ``agent``) typed by the group's option that ``argv``
    chooses, as :func:`unknown_key` reads it --; ``None`` otherwise."""
    import dataclasses
    import typing

    parts = key.split(".")
    t: Any = schema
    owner: tuple[type, int] = (schema, 0)
    for i, part in enumerate(parts):
        if i == 1 and t is Any:
            t = group_schema(parts[0], group_option(parts[0], schema, argv)[0])
            owner = (t, 1)
        if not (isinstance(t, type) and dataclasses.is_dataclass(t)):
            return None
        if part not in {f.name for f in dataclasses.fields(t)}:
            return None
        t = typing.get_type_hints(t).get(part)
    if t is Any:
        return None
    return owner[0], ".".join(parts[owner[1]:]), t


def _optional(t: Any) -> tuple[Any, bool]:
    """``(T, True)`` for a field type ``T | None``, else ``(t, False)``."""
    import typing

    args = [a for a in typing.get_args(t) if a is not type(None)]
    if len(args) == 1 and len(typing.get_args(t)) == 2:
        return args[0], True
    return t, False


def _mistyped(tok: str, key: str, schema: type, argv: Sequence[str]) -> str | None:
    """Why the override ``tok`` gives its typed ``key`` a value of the wrong type or not one of
    its choices (``seed=abc``, ``eval.mode=bogus``, ``env.K=abc``), read by Hydra's own
    override parser and checked by OmegaConf against the schema, as Hydra would (whose
    message, exit status 1, closed with a pointer to HYDRA_FULL_ERROR); ``None`` for anything
    else (an interpolation, a sweep: Hydra reads those)."""
    from cachegym.envs.paths import CONF_DIR

    if os.path.isdir(os.path.join(CONF_DIR, *key.split("/"))):
        return None  # a config group's option (trace=zipf, allocator=arena): Hydra reads it
    import dataclasses

    leaf = _typed_leaf(key, schema, argv)
    if leaf is None or dataclasses.is_dataclass(_optional(leaf[2])[0]):
        return None  # (a section: a config group or a nested config, which Hydra reads)
    from hydra.core.override_parser.overrides_parser import OverridesParser
    from omegaconf import OmegaConf

    section, sub, ftype = leaf
    try:
        o = OverridesParser.create().parse_override(tok)
        if o.is_sweep_override():
            return None
        value = o.value()
        if isinstance(value, str) and "${" in value:
            return None
        OmegaConf.update(OmegaConf.structured(section), sub, value, merge=True)
    except Exception as e:  # (a grammar error too: Hydra's own message is then as clear)
        if type(e).__name__ != "ValidationError":
            return None
        first = str(e).splitlines()[0]
        return f"{tok}: {first} (the key {key} takes {_type_name(ftype)})"
    return None


def _type_name(ftype: Any) -> str:
    """A field's type in words (``an int``, ``one of bytes, objects``, ``... or null``)."""
    import enum
    import typing

    t, opt = _optional(ftype)
    if typing.get_origin(t) is list:
        words = "a list ('[a,b]')"
    elif isinstance(t, type) and issubclass(t, enum.Enum):
        words = "one of " + ", ".join(m.name for m in t)
    else:
        words = {int: "an int", float: "a number", bool: "true or false", str: "a string"}.get(
            t, getattr(t, "__name__", str(t)))
    return words + (" or null" if opt else "")


def check_list_overrides(argv: list[str], schema: type, prog: str) -> None:
    """Refuse, before Hydra reads them, the command-line overrides that give one value to a
    list-typed key (``eval.capacities=0.25``): Hydra's own message says that a float is not a
    list, not how to write one. Exits with status 2 and the override as it should be
    (``'eval.capacities=[0.25]'``; in a sweep, ``-m``/``--multirun``, where ``key=a,b`` sweeps
    the values: ``'eval.capacities=[0.05],[0.1]'``). Also a misspelt key of a section the
    schema types (``eval.capacites=...``, ``agent.totl_timesteps=...`` of the chosen ``agent=``
    option: :func:`unknown_key`), which Hydra refuses with advice to add it with ``+``, where
    nothing would read it; a value of the wrong type (:func:`_mistyped`; a sweep's values are
    Hydra's); and an ``out_dir`` (or ``hydra.run.dir``, a sweep's ``hydra.sweep.dir``) that
    cannot be made: a file in the way, a folder that is not writable."""
    import sys

    sweep = "-m" in argv or "--multirun" in argv
    run_dir = "hydra.sweep.dir" if sweep else "hydra.run.dir"
    keys = list_keys(schema)
    for tok in argv:
        if tok.startswith("-") or "=" not in tok:
            continue
        key, value = tok.split("=", 1)
        key = key.lstrip("+")
        v = value.strip()
        why = None
        if key in keys and not (v.startswith(("[", "$")) or v == "null"
                                or (sweep and (v.startswith("null") or "(" in v))):
            if sweep:
                why = (f"{tok}: {key} takes a list; to sweep lists, give each in brackets: "
                       f"'{key}=" + ",".join(f"[{x.strip()}]" for x in v.split(",")) + "' "
                       "(quoted for the shell)")
            elif key.split(".")[-1] == "traces":  # (a list of trace configs, not of names)
                why = (f"{key} takes a list of traces; write '{key}=[{{path: {value}}}]' for a "
                       f"trace file, '{key}=[{{generator: zipf}}]' for a generated one (quoted "
                       "for the shell)")
            else:
                why = (f"{key} takes a list; write '{key}=[{value}]' (quoted for the shell; "
                       f"several values: '{key}=[a,b]')")
        if why is None:
            why = unknown_key(key, schema, argv, prog)
        if why is None and key == GUARD_GROUP and os.path.isfile(  # (--help lists the group)
                os.path.join(_CONF_DIR, GUARD_GROUP, f"{v}.yaml")):
            why = (f"{key}={v}: the guard is chosen where a learned policy is evaluated or "
                   f"loaded, not as a config group here: cachegym evaluate "
                   f"'eval.learned_guards=[{v}]', cachegym sim ... --guard {v}, "
                   f"LearnedPolicy.load(path, guard={v!r}) (training validates under the shadow "
                   "guard, and the network alone under a timing preset)")
        if why is None and key in ("out_dir", run_dir) and not (sweep and "," in v):
            why = _unmakeable_dir(key, os.path.expanduser(v))
        if why is None and not tok.startswith("~"):
            why = _mistyped(tok, key, schema, argv)
        if why is not None:
            print(f"{prog}: {why}", file=sys.stderr)
            raise SystemExit(2)


def _unmakeable_dir(key: str, path: str) -> str | None:
    """Why the run directory ``path`` (config key ``key``) cannot be made, or ``None``: Hydra
    makes it before the job runs, and its error is a traceback (a file in the way, a folder
    that is not writable)."""
    if not path or path == "null" or "${" in path:
        return None
    if os.path.exists(path) and not os.path.isdir(path):
        return f"{key}: {path!r} is a file, not a directory; give a directory to write the results in"
    made = []  # the folders this check makes, to remove again (a trial is the only sure test)
    up = os.path.abspath(path)
    while not os.path.exists(up):
        made.append(up)
        up = os.path.dirname(up)
    if not os.path.isdir(up):
        return f"{key}: {path!r} cannot be made: {up!r} is a file; give a directory"
    try:
        os.makedirs(path, exist_ok=True)
        with tempfile.TemporaryFile(dir=path):
            pass
    except OSError as e:
        return f"{key}: {path!r} cannot be made or written in ({e.strerror}); give a writable directory"
    finally:
        for d in made:
            with contextlib.suppress(OSError):
                os.rmdir(d)
    return None


def check_seed(seed: Any, key: str = "seed") -> int:
    """``seed`` as an int in ``0..2**32 - 1`` (what NumPy, torch and Gymnasium all take), or a
    :class:`ConfigError` naming ``key``."""
    if isinstance(seed, bool) or not isinstance(seed, int) or not 0 <= seed < 2**32:
        raise ConfigError(f"{key}: {seed!r} is not allowed; give an integer from 0 to "
                          f"{2**32 - 1}")
    return seed


def refuse_unknown_keys(cfg: Any, where: str = "") -> None:
    """Refuse (:class:`ConfigError`) a key that no schema has, in every section of ``cfg`` that
    a schema (a dataclass above, or of :mod:`policies.training.config`) types. Hydra refuses a
    misspelt key on the command line but then suggests ``+key=value``, which adds it to a typed
    section where nothing reads it: the run would succeed with the setting ignored. The error
    names the key and the closest known one."""
    import dataclasses

    if not isinstance(cfg, DictConfig):
        return
    if not where and "seed" in cfg and not OmegaConf.is_missing(cfg, "seed"):
        check_seed(cfg.seed)  # (every entry point calls this first: the seed too, before any work)
    t = OmegaConf.get_type(cfg)
    known = ({f.name for f in dataclasses.fields(t)}
             if isinstance(t, type) and dataclasses.is_dataclass(t) else None)
    for k in [str(k) for k in cfg]:
        key = f"{where}.{k}" if where else k
        if key == "hydra":  # (Hydra's own node, in a config composed with return_hydra_config)
            continue
        if known is not None and k not in known:
            raise ConfigError(_unknown_key_message(
                key, where, known, " (no schema has it, so nothing would read it)"))
        if OmegaConf.is_missing(cfg, k) or OmegaConf.is_interpolation(cfg, k):
            continue
        refuse_unknown_keys(cfg.get(k), key)


# ---------------------------------------------------------------------- instantiate
def instantiate(node: Any, /, **kwargs: Any) -> Any:
    """``hydra.utils.instantiate(node, **kwargs)`` with errors reduced to one line.

    Raises :class:`ConfigError` naming the node's key and ``_target_`` when the target cannot
    be imported or rejects its arguments; a :class:`CachegymError` raised by the target itself
    (e.g. :class:`~allocator.errors.TraceError`) passes through unchanged.
    """
    from hydra.errors import InstantiationException
    from hydra.utils import instantiate as hydra_instantiate

    key = _key_of(node)
    target = _target_of(node)
    if target is None:
        raise ConfigError(f"{key}: no _target_ to instantiate; set {key}._target_ to a class "
                          "or function path (e.g. cachegym.allocator.pool.Pool)")
    try:
        if isinstance(node, DictConfig):  # enumerations reach the target as plain strings
            node = OmegaConf.create(to_container(node))
        return hydra_instantiate(node, **kwargs)
    except InstantiationException as e:
        cause = _root_cause(e)
        if isinstance(cause, CachegymError):
            raise cause from None
        detail = str(cause).strip().splitlines()[0] if str(cause).strip() else type(cause).__name__
        raise ConfigError(f"{key}: cannot instantiate {target}: {detail}") from None
    except OmegaConfBaseException as e:
        raise config_error(e) from None


def config_error(e: Exception) -> ConfigError:
    """An OmegaConf validation error as one line: ``key: problem``."""
    msg = str(e).strip().splitlines()
    first = msg[0] if msg else type(e).__name__
    full_key = getattr(e, "full_key", None)
    if isinstance(e, MissingMandatoryValue):
        first += " (a required value, written ??? in the config: set it on the command line)"
    return ConfigError(f"{full_key}: {first}" if full_key else first)


def _key_of(node: Any) -> str:
    if isinstance(node, DictConfig):
        k = node._get_full_key(None)
        return k or "<config>"
    return "<config>"


def _target_of(node: Any) -> str | None:
    if isinstance(node, DictConfig):
        return node.get("_target_")  # type: ignore[no-any-return]
    if isinstance(node, dict):
        return node.get("_target_")
    return getattr(node, "_target_", None)


def _root_cause(e: BaseException) -> BaseException:
    """What an instantiation failed of: the first of this project's errors in ``e``'s chain of
    causes (one raised ``from`` a library's error says it best), else the chain's last."""
    seen = 0
    while e.__cause__ is not None and seen < 10:
        e = e.__cause__
        seen += 1
        if isinstance(e, CachegymError):
            break
    return e


# ---------------------------------------------------------------------- guards
GUARD_GROUP = "policy/guard"
"""The config group of a learned policy's guards (``conf/policy/guard/``)."""
_CONF_DIR = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "conf")


def guard_options() -> list[str]:
    """The options of :data:`GUARD_GROUP`: its yaml files' names, sorted."""
    d = os.path.join(_CONF_DIR, GUARD_GROUP)
    if not os.path.isdir(d):
        raise ConfigError(f"the config group {GUARD_GROUP} is missing: no directory {d} (the "
                          "guards' configs live in the project's conf/)")
    return sorted(f[:-5] for f in os.listdir(d) if f.endswith(".yaml"))


def guard_node(name: str, key: str = "eval.learned_guards") -> DictConfig:
    """The config of guard ``name``, an option of :data:`GUARD_GROUP` (``conf/policy/guard/
    NAME.yaml``); a :class:`ConfigError` naming config key ``key`` and the choices otherwise."""
    options = guard_options()
    if not isinstance(name, str) or name not in options:
        raise ConfigError(f"{key}: unknown guard {name!r}; choices: {', '.join(options)} (the "
                          f"options of conf/{GUARD_GROUP}/)")
    node = OmegaConf.load(os.path.join(_CONF_DIR, GUARD_GROUP, f"{name}.yaml"))
    if not isinstance(node, DictConfig):
        raise ConfigError(f"conf/{GUARD_GROUP}/{name}.yaml: expected a mapping with _target_")
    return node


def build_guard(name: str, key: str = "eval.learned_guards") -> Any:
    """A new guard (or ``None``: the network alone) from the config of guard ``name``
    (:func:`guard_node`), through :func:`instantiate`: one per policy, since a guard holds state."""
    return instantiate(guard_node(name, key))


# ---------------------------------------------------------------------- traces
def _missing_file_advice(p: str) -> str:
    """What to do about a trace file ``p`` that is not there: for a relative path, where it was
    looked for (the working directory, then the bundled traces)."""
    if os.path.isabs(p):
        return "give an existing trace file"
    from cachegym.envs.paths import data_path

    return (f"give an existing trace file (relative paths are read from {os.getcwd()}, then "
            f"among the bundled traces in {data_path('traces')})")


def _check_trace_file(p: str, key: str = "trace.path") -> None:
    """ConfigError (naming ``key``) unless ``p`` is a regular file: a directory, a pipe
    (``<(zcat ...)``) or a missing file each said as what it is."""
    if os.path.isdir(p):
        raise ConfigError(f"{key}: {p!r} is a directory, not a trace file; give the trace "
                          "file in it")
    if os.path.exists(p) and not os.path.isfile(p):
        raise ConfigError(f"{key}: {p!r} is not a regular file (a pipe?): save it to a file "
                          "first and give that file")
    if not os.path.isfile(p):
        raise ConfigError(f"{key}: no such file {p!r}; {_missing_file_advice(p)}")


def load_traces(
    path: str | None = None,
    paths: list[str] | None = None,
    format: str | None = None,
    options: dict[str, Any] | None = None,
    generator: str | None = None,
    params: dict[str, Any] | None = None,
    seed: int = 0,
    max_requests: int | None = None,
) -> list[Trace]:
    """The traces a ``trace`` config names: the files ``path`` and ``paths`` (read with
    ``envs.workloads.read_trace(p, format=format, **options)``), else ``generator(seed=seed,
    **params)`` from ``envs.workloads.generate``. Files win over a generator."""
    from cachegym.envs.paths import resolve_data_path
    from cachegym.envs.workloads import read_trace

    files = ([path] if path else []) + list(paths or [])
    keys = ["trace.path"] * bool(path) + [f"trace.paths[{i}]" for i in range(len(paths or []))]
    fmt = enum_value(format)
    opts = dict(options or {})
    traces: list[Trace] = []
    for p, key in zip(files, keys):
        p = resolve_data_path(os.path.expanduser(str(p)))
        _check_trace_file(p, key)
        traces.append(read_trace(p, format=fmt, **opts))
    if not files:
        if not generator:
            raise ConfigError("trace: give trace.path=FILE (or trace.paths=[...]) or "
                              "trace.generator=NAME (e.g. zipf)")
        from cachegym.envs.workloads import GENERATORS, generate

        if generator not in GENERATORS:
            raise ConfigError(f"trace.generator: unknown generator {generator!r}; "
                              f"allowed: {sorted(GENERATORS)}")
        t = generate(generator, seed=seed, **dict(params or {}))
        if len(t) == 0:  # (a sweep then replayed nothing, at a capacity of 1 byte, and exited 0)
            raise ConfigError(f"trace.params: generator {generator!r} made no requests with "
                              f"{dict(params or {})}; give it sizes above 0 (e.g. n_requests)")
        traces.append(t)
    if max_requests is not None:
        if max_requests <= 0:
            raise ConfigError(f"trace.max_requests must be > 0, got {max_requests}")
        traces = [t if len(t) <= max_requests else t.window(0, max_requests) for t in traces]
    return traces


def load_trace(node: Any) -> Trace:
    """The single trace a ``trace`` config names (ConfigError if it names several)."""
    traces = instantiate(node)
    if len(traces) != 1:
        raise ConfigError(f"trace: expected one trace, the config names {len(traces)}")
    return traces[0]  # type: ignore[no-any-return]


def to_container(cfg: Any) -> Any:
    """Plain Python containers (enumerations as their string values)."""
    return OmegaConf.to_container(cfg, resolve=True, enum_to_str=True, throw_on_missing=True) if isinstance(
        cfg, DictConfig) else cfg

