"""Config names -> policy instances.

``make_eviction("lru")``, ``make_eviction("belady", trace=trace)``,
``make_eviction("learned", path="path/to/policy.npz", guard="none")`` (an exported policy file
under a guard: a :class:`~policies.learned.GuardName`, the options of ``conf/policy/guard/``,
``shadow`` by default; see :func:`make_learned`); ``make_prefetch("markov")``,
``make_prefetch("lookahead", trace=trace, depth=4)``. Unknown names raise
:class:`~allocator.errors.ConfigError` listing the valid ones. Extra keyword parameters go to
the class constructor; one it does not take is refused by name (a ``ConfigError`` listing the
accepted ones), never ignored.

A policy of your own needs no change here: name it by where it lives, ``my_policies.py:MRU``
(a file) or ``my_pkg.policies:MRU`` (an importable module; the working directory is searched
too), e.g. ``eval.policies=[lru,my_policies.py:MRU]``. Its class is called with no arguments,
or with ``trace=`` when its constructor takes one (an oracle).
"""

from __future__ import annotations

import contextlib
import importlib
import importlib.util
import inspect
import os
import sys
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from cachegym.allocator.errors import ConfigError
from cachegym.policies.base import construct

if TYPE_CHECKING:
    from cachegym.allocator.trace import Trace
    from cachegym.policies.base import EvictionPolicy, PrefetchPolicy

__all__ = ["make_eviction", "make_policy", "make_learned", "make_prefetch", "EVICTION_NAMES", "PREFETCH_NAMES", "ORACLES",
           "keyword_names", "refuse_unknown"]


_EVICTION = {
    "lru": "lru:LRU", "fifo": "classic:FIFO", "lfu": "classic:LFU", "random": "classic:RandomEviction",
    "clock": "classic:CLOCK", "arc": "adaptive:ARC", "sieve": "classic:SIEVE",
    "s3fifo": "adaptive:S3FIFO", "lirs": "lirs:LIRS", "slru": "adaptive:SLRU",
    "gdsf": "priority:GDSF", "belady": "priority:Belady",
}
"""The registered eviction policies: short name -> ``module:Class`` (a module of
``cachegym.policies``, or any importable module named in full: ``my_pkg.policies:MRU``),
imported on first use. To give a policy of your own a short name, add a line here."""
_PREFETCH = {"none": "prefetch:NoPrefetch", "markov": "prefetch:MarkovPrefetcher",
             "stride": "prefetch:StridePrefetcher", "lookahead": "prefetch:LookaheadPrefetcher",
             "history": "prefetch:HistoryPrefetcher"}
"""The registered prefetchers, as :data:`_EVICTION`."""


def _import_here_too(module: str) -> Any:
    """``importlib.import_module(module)``, also from the working directory where the module is
    not found on the path (``my_policies`` beside the user, as ``python -m`` finds it; the
    ``cachegym`` command's path does not hold the working directory)."""
    try:
        return importlib.import_module(module)
    except ModuleNotFoundError as e:
        if e.name is None or not module.startswith(e.name) or os.getcwd() in sys.path:
            raise
        sys.path.append(os.getcwd())
        return importlib.import_module(module)


def _class_of(table: dict[str, str], name: str) -> Callable[..., Any]:
    """The class registered as ``name`` in ``table``, imported now; a line that names no class
    is a :class:`ConfigError` that names it (the other names still work)."""
    spec = table[name]
    mod, _, cls = spec.partition(":")
    module = mod if "." in mod else f"cachegym.policies.{mod}"
    try:
        try:
            found = importlib.import_module(module)
        except ModuleNotFoundError as e:  # not a module of cachegym.policies: an importable one
            if module == mod or e.name != module:  # of that name (my_policies.py beside the run)
                raise
            found = _import_here_too(mod)
        return getattr(found, cls)  # type: ignore[no-any-return]
    except (ImportError, AttributeError) as e:
        raise ConfigError(f"the registry's line {name!r}: {spec!r} names no class ({e}): give "
                          "'module:Class' with a module of cachegym.policies ('lru:LRU') or an "
                          "importable module ('my_policies:MRU' for my_policies.py on the Python "
                          "path, 'my_pkg.policies:MRU'); a file elsewhere is named FILE.py:Class "
                          "where the policy is used") from e


EVICTION_NAMES = tuple(_EVICTION)
PREFETCH_NAMES = tuple(_PREFETCH)
ORACLES = frozenset({"belady", "lookahead"})
"""The registered policies that read the trace's future (built with ``trace=``): references for
what a policy could do, not baselines a deployed pool could run."""
_NEEDS_TRACE = ORACLES
# the members every eviction policy has (allocator/seams.py: EvictionPolicy); victim is checked apart
_EVICTION_HOOKS = ("on_hit", "on_miss", "on_insert", "on_evict", "on_free")


_OLD_LEARNED_PREFIXES = {"learned": "shadow", "learned_trial": "trial", "learned_lru": "lru",
                         "learned_bare": "none"}
"""The ``PREFIX:PATH`` names an exported policy had before the guard became a config group, and
the guard each stood for: refused with :func:`old_learned_name_error`."""


def old_learned_name_error(name: str, key: str | None = None) -> ConfigError | None:
    """The error for a ``learned:PATH`` name (or ``learned_trial:``, ``learned_lru:``,
    ``learned_bare:``) saying what to write instead, with ``key`` the config key that holds it
    (``None``: a Python caller); ``None`` for any other name."""
    prefix, sep, path = name.strip().partition(":")
    guard = _OLD_LEARNED_PREFIXES.get(prefix.lower()) if sep else None
    if guard is None:
        return None
    path = path or "PATH"
    where = f"{key}: " if key else ""
    how = ("in a config an exported policy is a file of eval.learned, its guard a config group "
           "(learned:PATH is `cachegym sim`'s shorthand for them)" if prefix.lower() == "learned"
           else "exported policies are no longer named PREFIX:PATH; the guard is a config group")
    return ConfigError(
        f"{where}{name!r}: {how} (conf/policy/guard/: {', '.join(_guard_names())}): write "
        f"eval.learned=[{path}] eval.learned_guards=[{guard}] on the command line, or "
        f"make_eviction('learned', path={path!r}, guard={guard!r}) in Python")


def _guard_names() -> tuple[str, ...]:
    from cachegym.policies.learned import GUARD_NAMES

    return GUARD_NAMES


def make_learned(path: str | os.PathLike[str], *, guard: Any = "shadow", **params: Any) -> EvictionPolicy:
    """The exported policy file ``path`` under ``guard`` (a :class:`~policies.learned.GuardName`:
    shadow, trial, lru or none; a guard object or ``False`` as :class:`~policies.learned.LearnedPolicy`
    takes them); ``params`` (``budget_us``, ``K``, ``seed``) go to
    :meth:`~policies.learned.LearnedPolicy.load`."""
    if not path or not str(path).strip():
        raise ConfigError("learned policy needs a file: make_eviction('learned', path=PATH, "
                          "guard='shadow')")
    from cachegym.policies.learned import LearnedPolicy  # lazy: may pull numpy only

    refuse_unknown("policy 'learned'", params, ["path", *LearnedPolicy.load_keywords()])
    return LearnedPolicy.load(path, guard=guard, **params)


def make_eviction(name: str, *, trace: Trace | None = None, seed: int | None = None,
                  **params: Any) -> EvictionPolicy:
    """The eviction policy called ``name`` (see :data:`EVICTION_NAMES`; ``"learned"`` with
    ``path=`` and ``guard=``: :func:`make_learned`). ``seed``: a run's seed, for ``random`` (0
    without one) and for a class of the user's whose constructor takes ``seed`` (its own
    default without one)."""
    if not isinstance(name, str):
        raise ConfigError(f"eviction policy name must be a string, got {name!r}")
    key = name.strip().lower()
    old = old_learned_name_error(name)
    if old is not None:
        raise old
    if key == "learned":
        if seed is not None:  # (the candidate sampler's: a run's seed, as for random)
            params.setdefault("seed", seed)
        return make_learned(params.pop("path", None) or "", **params)
    if is_import_spec(name):
        return _build_imported(name, "victim", trace, params, seed)  # type: ignore[no-any-return]
    if key not in _EVICTION:
        raise ConfigError(
            f"unknown eviction policy {name!r}; valid names: {', '.join(EVICTION_NAMES)}, "
            "learned (with path=FILE and guard=shadow|trial|lru|none) for an exported policy "
            "file, or FILE.py:Class / module:Class for a class of your own")
    cls = _class_of(_EVICTION, key)
    if key == "random":
        params.setdefault("seed", 0 if seed is None else seed)
    elif seed is not None and "seed" in (keyword_names(cls) or ()):  # (a registered class of
        params.setdefault("seed", seed)  # the user's, as FILE.py:Class gets it)
    return _build(key, cls, trace, params)  # type: ignore[no-any-return]


make_policy = make_eviction
"""The public name (``cachegym.make_policy``) of :func:`make_eviction`."""


def make_prefetch(name: str | None, *, trace: Trace | None = None,
                  **params: Any) -> PrefetchPolicy:
    """The prefetch policy called ``name`` (see :data:`PREFETCH_NAMES`; ``None`` is "none")."""
    key = "none" if name is None else str(name).strip().lower()
    if name is not None and is_import_spec(str(name)):
        return _build_imported(str(name), "prefetch", trace, params)  # type: ignore[no-any-return]
    if key not in _PREFETCH:
        what = (f" ({key!r} is an eviction policy: give it as the policy)" if key in _EVICTION
                else "")
        raise ConfigError(
            f"unknown prefetch policy {name!r}{what}; valid names: {', '.join(PREFETCH_NAMES)}, "
            "or FILE.py:Class / module:Class for a class of your own")
    return _build(key, _class_of(_PREFETCH, key), trace, params)  # type: ignore[no-any-return]


def keyword_names(fn: Callable[..., Any]) -> list[str] | None:
    """The parameters ``fn`` takes by keyword, in order; ``None`` when it takes ``**kwargs``
    (any name) or has no signature."""
    try:
        sig = inspect.signature(fn)
    except (TypeError, ValueError):
        return None
    if any(p.kind is inspect.Parameter.VAR_KEYWORD for p in sig.parameters.values()):
        return None
    named = (inspect.Parameter.POSITIONAL_OR_KEYWORD, inspect.Parameter.KEYWORD_ONLY)
    return [n for n, p in sig.parameters.items() if p.kind in named]


def refuse_unknown(where: str, params: dict[str, Any], accepted: list[str] | None) -> None:
    """Raise :class:`ConfigError` naming each keyword of ``params`` not in ``accepted``, and
    the accepted ones: a misspelt option is refused, never silently ignored. ``accepted``
    ``None`` (:func:`keyword_names` of a callable taking ``**kwargs``): any name goes."""
    if accepted is None:
        return
    unknown = sorted(set(params) - set(accepted))
    if unknown:
        s = "s" if len(unknown) > 1 else ""
        raise ConfigError(f"{where}: unknown argument{s} {', '.join(map(repr, unknown))}; "
                          f"accepted: {', '.join(accepted) or 'none'}")


def _build(key: str, cls: Callable[..., Any], trace: Trace | None, params: dict[str, Any]) -> Any:
    if key in _NEEDS_TRACE:
        if trace is None:
            raise ConfigError(f"{key!r} is an oracle that reads the future: pass trace=<the Trace "
                              "it will replay>")
        params = {"trace": trace, **params}
    refuse_unknown(f"policy {key!r}", params, keyword_names(cls))
    return construct(f"policy {key!r}", cls, params)


def is_import_spec(name: str) -> bool:
    """``FILE.py:Class`` or ``module.path:Class`` (an old ``learned:PATH`` name is not one)."""
    where, sep, attr = name.strip().rpartition(":")
    return bool(sep and where and attr) and old_learned_name_error(name) is None and attr.isidentifier()


def import_spec_file(name: str) -> str | None:
    """The absolute path of the file that ``FILE.py:Class`` names (``~`` expanded); ``None``
    for ``module.path:Class`` or any other name."""
    where, sep, _ = name.strip().rpartition(":")
    return os.path.abspath(os.path.expanduser(where)) if sep and where.endswith(".py") else None


def resolve_import_spec(name: str) -> Callable[..., Any]:
    """The class named by ``FILE.py:Class`` or ``module.path:Class``; a
    :class:`~allocator.errors.ConfigError` that says what is missing otherwise."""
    where, _, attr = name.strip().rpartition(":")
    path = import_spec_file(name)
    if path is not None:
        if not os.path.isfile(path):
            raise ConfigError(f"policy {name!r}: no file {where!r} (from {os.getcwd()})")
        mod_name = f"cachegym_user_{abs(hash(path)):x}"
        mod = sys.modules.get(mod_name)
        if mod is None:
            spec = importlib.util.spec_from_file_location(mod_name, path)
            if spec is None or spec.loader is None:
                raise ConfigError(f"policy {name!r}: {where!r} cannot be loaded as Python")
            mod = importlib.util.module_from_spec(spec)
            sys.modules[mod_name] = mod  # before running it, as an import does (dataclasses need it)
            # its folder on the path while it runs, as `python FILE.py` has it: it may import the
            # modules beside it
            folder = os.path.dirname(os.path.abspath(path))
            added = folder not in sys.path
            if added:
                sys.path.insert(0, folder)
            try:
                spec.loader.exec_module(mod)
            except Exception as e:
                del sys.modules[mod_name]
                raise ConfigError(f"policy {name!r}: importing {where!r} failed: "
                                  f"{type(e).__name__}: {e}") from e
            finally:
                if added:
                    with contextlib.suppress(ValueError):
                        sys.path.remove(folder)
    else:
        try:
            mod = _import_here_too(where)
        except ModuleNotFoundError as e:
            raise ConfigError(f"policy {name!r}: no module {where!r} ({e}); put it on PYTHONPATH, "
                              "in the working directory, or name its file: FILE.py:Class") from e
        except Exception as e:
            raise ConfigError(f"policy {name!r}: importing {where!r} failed: "
                              f"{type(e).__name__}: {e}") from e
    cls = getattr(mod, attr, None)
    if cls is None or not callable(cls):
        found = sorted(k for k, v in vars(mod).items() if isinstance(v, type) and not k.startswith("_"))
        raise ConfigError(f"policy {name!r}: {where!r} has no class {attr!r}"
                          + (f"; it has {', '.join(found)}" if found else ""))
    return cls  # type: ignore[no-any-return]


def _signature(cls: Callable[..., Any]) -> inspect.Signature | None:
    try:
        return inspect.signature(cls)
    except (TypeError, ValueError):
        return None


def check_import_spec(name: str, method: str, seed: int = 0) -> None:
    """What the evaluator checks of an import spec before it replays anything: the class is
    found, and one is built now (then dropped; given ``seed`` where it takes one, as a run
    gives it the run's) and has ``method`` -- unless it takes the trace (read later), in which
    case its signature must accept ``trace`` (and ``seed``, where it takes one) alone. The
    errors are those of building it for a run."""
    cls = resolve_import_spec(name)
    sig = _signature(cls)
    if sig is not None and "trace" in sig.parameters:
        given = {"trace": None, **({"seed": seed} if "seed" in sig.parameters else {})}
        try:
            sig.bind(**given)
        except TypeError as e:
            raise ConfigError(f"policy {name!r}: constructing it will fail: {e}; its signature: "
                              f"{sig} (the evaluator passes {'= and '.join(given)}= alone)") from None
        return
    _build_imported(name, method, None, {}, seed=seed)


def _build_imported(name: str, method: str, trace: Trace | None, params: dict[str, Any],
                    seed: int | None = None) -> Any:
    """An instance of the class that ``name`` (an import spec) names, checked to have
    ``method`` (``victim`` for eviction, ``prefetch`` for prefetching). A constructor that takes
    ``trace`` is given the trace (an oracle), one that takes ``seed`` the run's ``seed`` (as the
    built-in ``random``), unless ``params`` name them."""
    cls = resolve_import_spec(name)
    if not isinstance(cls, type):  # (a function was called: "int has no victim() method")
        raise ConfigError(f"policy {name!r} names a {type(cls).__name__}, not a class: name the "
                          "policy's class (FILE.py:Class), whose instances have the hooks of "
                          "allocator/seams.py")
    sig = _signature(cls)
    if sig is not None and "trace" in sig.parameters and trace is not None:
        params = {"trace": trace, **params}
    if sig is not None and "seed" in sig.parameters and seed is not None:
        params = {"seed": seed, **params}
    refuse_unknown(f"policy {name!r}", params, keyword_names(cls))
    try:
        obj = cls(**params)
    except TypeError as e:
        raise ConfigError(f"policy {name!r}: constructing it failed: {e}"
                          + (f"; its signature: {sig}" if sig is not None else "")) from e
    except Exception as e:  # the user's own code failed: say whose, keep the cause chained
        raise ConfigError(f"policy {name!r}: its constructor raised {type(e).__name__}: {e}; fix "
                          "the class or its arguments") from e
    if not callable(getattr(obj, method, None)):
        kind = "an eviction policy" if method == "victim" else "a prefetch policy"
        hint = ""
        if method == "victim" and callable(getattr(obj, "prefetch", None)):
            hint = ("; it has prefetch(): give it as a prefetcher (--prefetch, eval.prefetchers, "
                    "Pool(prefetcher=)), which cachegym check does not check: cachegym sim runs it")
        elif method != "victim" and callable(getattr(obj, "victim", None)):
            hint = "; it has victim(): give it as the eviction policy"
        raise ConfigError(f"policy {name!r}: {type(obj).__name__} has no {method}() method, so it "
                          f"is not {kind} (see allocator/seams.py){hint}")
    missing = [m for m in _EVICTION_HOOKS if not callable(getattr(obj, m, None))]
    if method == "victim" and missing:
        raise ConfigError(f"policy {name!r}: {type(obj).__name__} has no {', '.join(missing)}: an "
                          f"eviction policy has victim and the hooks {', '.join(_EVICTION_HOOKS)}; "
                          "derive it from cachegym.policies.base.EvictionPolicyBase for no-op hooks")
    return obj
