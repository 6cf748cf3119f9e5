"""Where a run writes its results, and one merged table per Hydra multirun.

Every run (``scripts/evaluate.py``, ``train.py``, ``main.py``) writes its results and a snapshot
of its composed config (``config.yaml``) in one directory, :func:`results_dir`: ``out_dir``
when given, else Hydra's output directory; in a multirun with ``out_dir`` each job adds
``job_<num>`` under it (jobs never share a results file).

After a multirun, the Hydra callback :class:`MergeResults` (registered under
``hydra.callbacks.merge`` in ``conf/evaluate.yaml`` and ``conf/train.yaml``) reads each job's
``results.csv`` and writes ``merged.csv`` beside the jobs (in ``out_dir`` when given, else in
the sweep directory), and prints a short table. :func:`merge_tables` is the whole statistic:
one row per (trace, capacity, policy, prefetch, preset) -- the key columns a table has --
with ``n_jobs`` and, for each metric (:data:`METRICS` and every ``gap_closed_*`` column), the
mean over the jobs and a 95% Student-t interval (n - 1 degrees of freedom) as
``<metric>_mean``, ``<metric>_ci95_lo``, ``<metric>_ci95_hi``. Blank (NaN) values are left
out of a metric's figures; a metric with one value has a mean and an empty interval.
A job that failed, or left no ``results.csv`` of this multirun, is named in a warning; the
others are merged, and the sweep then exits with status 1.
"""

from __future__ import annotations

import contextlib
import csv
import json
import logging
import math
import os
import re
import signal
import tempfile
import threading
import time
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from hydra.experimental.callback import Callback

from cachegym.allocator.errors import CachegymError, ConfigError, OutputError
from cachegym.allocator.files import replace_atomically

__all__ = ["KEY_COLUMNS", "METRICS", "KeepEarlierHydra", "MergeResults", "SweepMerge",
           "format_merged", "number", "in_multirun", "job_failed", "merge_sweep", "merge_tables",
           "read_results", "results_dir", "set_aside", "setting_of", "terminate_as_interrupt",
           "write_config"]

log = logging.getLogger(__name__)

KEY_COLUMNS = ("trace", "capacity", "policy", "prefetch", "preset", "row_kind")
METRICS = ("traffic_bytes", "stall_ns", "miss_ratio", "byte_miss_ratio")
_GAP = "gap_closed_"


# ---------------------------------------------------------------------- one run's directory
def _hydra_job() -> tuple[str | None, int | None]:
    """(Hydra's output directory, the job's number in a multirun) of the running job."""
    try:
        from hydra.core.hydra_config import HydraConfig
        from hydra.types import RunMode
    except ImportError:
        return None, None
    if not HydraConfig.initialized():
        return None, None
    hc = HydraConfig.get()
    num = int(hc.job.num) if hc.mode == RunMode.MULTIRUN else None
    return str(hc.runtime.output_dir), num


def in_multirun() -> bool:
    """Whether this process runs a job of a Hydra multirun."""
    return _hydra_job()[1] is not None


def job_results_dir(out_dir: Any, job_num: int | None, hydra_dir: str | None) -> str | None:
    """The rule, shared by a job and the merge: ``out_dir`` (plus ``job_<num>`` in a multirun),
    else Hydra's output directory; ``None`` when neither is known."""
    if out_dir is None:
        return hydra_dir
    out = os.path.expanduser(str(out_dir))
    return os.path.join(out, f"job_{job_num}") if job_num is not None else out


def new_run_dir(kind: str) -> str:
    """A new folder ``outputs/<kind>/<time>`` (relative to the working directory), made here:
    ``<time>_2``, ``_3``, ... where a run started in the same second made that one (two runs
    must not set aside or mix each other's files)."""
    base = os.path.join("outputs", kind, time.strftime("%Y-%m-%d_%H-%M-%S"))
    out, i = base, 1
    while True:
        try:
            os.makedirs(out)
            return out
        except FileExistsError:
            i += 1
            out = f"{base}_{i}"


_CLAIMS: dict[str, str] = {}
_CLAIM = ".cachegym_run"


def _claimed(folder: str) -> str:
    """``folder`` (Hydra's ``outputs/<kind>/<time>`` of a run given no ``out_dir``) if this
    process is the first to claim it, else ``<folder>_2``, ``_3``, ...: two runs started in the
    same second got the same folder, and the second set the first's results aside (a helper's
    audit). A claim is a file ``.cachegym_run`` made exclusively, holding the pid: a claim of a
    process that no longer runs is taken over (a finished run's folder, resumed or rerun, as
    before). The same process gets the same answer every time."""
    if folder in _CLAIMS:
        return _CLAIMS[folder]
    out, i = folder, 1
    while True:
        os.makedirs(out, exist_ok=True)
        marker = os.path.join(out, _CLAIM)
        try:
            fd = os.open(marker, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o644)
        except FileExistsError:
            if _running(marker):  # (a live run of the same second)
                i += 1
                out = f"{folder}_{i}"
                continue
            fd = os.open(marker, os.O_WRONLY | os.O_TRUNC)  # (a finished run's: resume, rerun)
        with os.fdopen(fd, "w") as f:
            f.write(f"{os.getpid()}\n")
        break
    if out != folder:
        log.warning("%s holds a run started in the same second: this run's results go to %s "
                    "(its log stays in %s; out_dir= names a folder of your own)", folder, out, folder)
    _CLAIMS[folder] = out
    return out


def _running(marker: str) -> bool:
    """Whether the process whose pid the claim ``marker`` holds still runs (and is not this
    one): a finished run's folder is the folder of the next run named to it (a resume with
    ``hydra.run.dir=``, a rerun), as before claims."""
    try:
        with open(marker) as f:
            pid = int(f.read().strip() or 0)
    except (OSError, ValueError):
        return False
    if pid <= 0 or pid == os.getpid():
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # (another user's live process)
        pass
    return True


def results_dir(cfg: Any, kind: str, *, exact: str | None = None) -> str:
    """The directory this run writes its results in (created): ``exact`` if given (a job that
    runs another, as the main job runs training and evaluation in its own subdirectories),
    else :func:`job_results_dir` of ``cfg.out_dir`` and the running Hydra job; outside Hydra,
    ``outputs/<kind>/<time>``."""
    hydra_dir, num = _hydra_job()
    out = exact if exact is not None else job_results_dir(cfg.get("out_dir"), num, hydra_dir)
    if out is None:
        out = new_run_dir(kind)
    elif exact is None and cfg.get("out_dir") is None and num is None:
        out = _claimed(out)  # (Hydra's time-stamped folder, which a run of the same second shares)
    try:
        os.makedirs(out, exist_ok=True)
    except FileExistsError:
        raise ConfigError(f"out_dir: {out!r} is a file, not a directory; give a directory to "
                          "write the results in") from None
    except OSError as e:  # a file in the path, no permission, ...
        raise ConfigError(f"out_dir: cannot create the directory {out!r} ({e.strerror}); give a "
                          "writable directory") from None
    try:  # (an existing directory may refuse writes: say so now, not by a traceback later)
        with tempfile.TemporaryFile(dir=out):
            pass
    except OSError as e:
        raise ConfigError(f"out_dir: cannot write in the directory {out!r} ({e.strerror}); give a "
                          "writable directory") from None
    return out


def set_aside(out_dir: str, names: Sequence[str], keep: Sequence[str] = ()) -> str | None:
    """Move the entries ``names`` of ``out_dir`` (files or folders an earlier run wrote: its
    results, its config) that exist into ``out_dir/previous/<their time>/``, so that a new run
    in the same directory neither mixes its files with the earlier run's nor loses them if it
    fails; those whose real path is in ``keep`` (an input of this run, e.g. the model it
    resumes, which the run may overwrite) are copied there instead, and stay. Logs a warning
    naming the folder and returns it (``None``: nothing to set aside)."""
    import shutil

    kept = {os.path.realpath(p) for p in keep}
    present = [n for n in names if os.path.lexists(os.path.join(out_dir, n))]
    if not present:
        return None
    hydra = None
    dest = _previous_dir(out_dir, [os.path.join(out_dir, n) for n in present])
    moved, copied = [], []
    try:
        os.makedirs(dest)
        for n in present:
            src = os.path.join(out_dir, n)
            if os.path.realpath(src) not in kept:
                os.replace(src, os.path.join(dest, n))
                moved.append(n)
            elif os.path.isfile(src):
                shutil.copy2(src, os.path.join(dest, n))
                copied.append(n)
        # the earlier run's Hydra folder, kept beside this run's (KeepEarlierHydra)
        sub = _hydra_sub()[0]
        earlier = os.path.join(out_dir, sub + _EARLIER)
        if os.path.isdir(earlier):
            os.makedirs(os.path.dirname(os.path.join(dest, sub)), exist_ok=True)
            os.replace(earlier, os.path.join(dest, sub))
            hydra = sub
    except OSError as e:  # all or nothing: the earlier run's files go back where they were
        back = [n for n in reversed(moved) if _move_back(dest, out_dir, n)]
        if len(back) == len(moved) and os.path.isdir(dest):
            shutil.rmtree(dest, ignore_errors=True)  # (empty now, or copies of inputs)
        where = ("nothing was moved" if len(back) == len(moved) else
                 f"{', '.join(n for n in moved if n not in back)} stayed in {dest}")
        raise OutputError(f"{out_dir} holds an earlier run's {', '.join(present)}, which a new "
                          f"run there first moves to {os.path.join(out_dir, 'previous')}/: that "
                          f"failed ({e.strerror or e}: {e.filename}); {where}. Give another "
                          "out_dir, or make those files movable") from None
    held = [n for n in moved + copied if n != hydra] + ([f"{hydra}/"] if hydra else [])
    log.warning("%s held an earlier run's %s: %s to %s", out_dir, ", ".join(held),
                "moved" if not copied else f"moved ({', '.join(copied)} copied: an input of this run)",
                dest)
    return dest


def _previous_dir(out_dir: str, paths: Sequence[str]) -> str:
    """A folder not yet taken, ``out_dir/previous/<time>`` (``_2``, ``_3``, ... after it), for
    what an earlier run left at ``paths``: their newest modification time."""
    stamp = time.strftime("%Y-%m-%d_%H-%M-%S", time.localtime(
        max(os.lstat(p).st_mtime for p in paths)))
    dest, i = os.path.join(out_dir, "previous", stamp), 1
    while os.path.lexists(dest):
        i += 1
        dest = os.path.join(out_dir, "previous", f"{stamp}_{i}")
    return dest


def _move_back(dest: str, out_dir: str, name: str) -> bool:
    """Move ``dest/name`` back to ``out_dir/name`` (:func:`set_aside`'s undo); False if it
    cannot be moved."""
    try:
        os.replace(os.path.join(dest, name), os.path.join(out_dir, name))
        return True
    except OSError:
        return False


def write_config(cfg: Any, out_dir: str) -> str:
    """The run's composed config, resolved, as ``out_dir/config.yaml`` beside its results
    (Hydra's own, unresolved, is ``.hydra/config.yaml`` of its run directory: ``out_dir`` where
    one is given, a sweep's job directory, or a run given the directory by ``exact``); returns
    the path."""
    from omegaconf import OmegaConf

    text = OmegaConf.to_yaml(cfg, resolve=True) if OmegaConf.is_config(cfg) else str(cfg)
    return replace_atomically(os.path.join(out_dir, "config.yaml"), lambda f: f.write(text))


def job_failed(error: Exception, what: str) -> None:
    """What a script does with an error of its run: in a multirun job, log it and return (the
    other jobs go on; the merge names this one); otherwise print a cachegym error and exit 2,
    and let any other exception through."""
    logger = logging.getLogger(what)
    error = _as_config_error(error)
    if in_multirun():
        if isinstance(error, CachegymError):
            logger.error("job failed: %s", error)
        else:
            logger.exception("job failed")
        return
    run_dir = _hydra_job()[0]
    if run_dir is not None:  # (a folder the user named may hold an earlier run)
        _settle_earlier_hydra(run_dir, *_hydra_sub(), "restore")
    if not isinstance(error, CachegymError):
        raise error
    import sys

    logger.debug("failed", exc_info=True)
    print(f"error: {error}", file=sys.stderr)
    if run_dir is not None and not _remove_if_only_hydras(run_dir):
        # the run's log file says so too (it holds the run's work); the console has it already
        record = logger.makeRecord(logger.name, logging.ERROR, __file__, 0, "failed: %s", (error,), None)
        for h in logging.getLogger().handlers:
            if isinstance(h, logging.FileHandler):
                h.handle(record)
    sys.exit(2)


def _as_config_error(error: Exception) -> Exception:
    """An interpolation of the config that does not resolve (``'capacities=[${oops}]'``) as a
    :class:`ConfigError` naming the key (a traceback from wherever the value was read, before);
    any other error as it is."""
    try:
        from omegaconf.errors import InterpolationResolutionError
    except ImportError:
        return error
    if not isinstance(error, InterpolationResolutionError):
        return error
    key = getattr(error, "full_key", None) or "the config"
    msg = str(error).splitlines()[0] if str(error) else type(error).__name__
    return ConfigError(f"{key}: an interpolation does not resolve ({msg}); write the value, or "
                       "${...} naming a key that exists")


def _remove_if_only_hydras(run_dir: str) -> bool:
    """Remove Hydra's default run directory ``run_dir`` (``outputs/<command>/<time>`` under the
    working directory; never a folder the user named) where it holds nothing but what Hydra
    wrote there before the job ran (``.hydra/`` and empty logs): a config refused before any
    work leaves no folder behind. True when removed."""
    import shutil

    rel = os.path.relpath(os.path.realpath(run_dir), os.path.realpath(os.getcwd())).split(os.sep)
    if len(rel) != 3 or rel[0] != "outputs":
        return False
    try:
        names = os.listdir(run_dir)
    except OSError:
        return False
    for n in names:
        p = os.path.join(run_dir, n)
        if (n == ".hydra" and os.path.isdir(p)) or n == _CLAIM:  # (this run's claim: results_dir)
            continue
        if n.endswith(".log") and os.path.isfile(p) and os.path.getsize(p) == 0:
            continue
        return False
    shutil.rmtree(run_dir, ignore_errors=True)
    for up in (os.path.join(rel[0], rel[1]), rel[0]):  # outputs/<command>/ and outputs/, if empty
        try:
            os.rmdir(up)
        except OSError:  # not empty
            break
    return True


# ---------------------------------------------------------------------- merging
def read_results(path: str) -> list[dict[str, str]]:
    """The rows of a ``results.csv`` (every cell a string; blank for NaN)."""
    with open(path, newline="", encoding="utf-8") as f:
        return list(csv.DictReader(f))


def number(cell: Any) -> float:
    """A results cell as a float: NaN for a blank, ``None`` or anything else that is not a
    number (``results.csv`` keeps NaN as a blank)."""
    try:
        return float(cell)
    except (TypeError, ValueError):
        return math.nan


def _is_metric(col: str) -> bool:
    return col in METRICS or col.startswith(_GAP)


def _interval(xs: Sequence[float]) -> tuple[float, float, float]:
    """(mean, low, high) of a 95% Student-t interval; NaN bounds below two values."""
    n = len(xs)
    if n == 0:
        return math.nan, math.nan, math.nan
    mean = math.fsum(xs) / n
    if n == 1:
        return mean, math.nan, math.nan
    from scipy.stats import t

    sd = math.sqrt(math.fsum((x - mean) ** 2 for x in xs) / (n - 1))
    half = float(t.ppf(0.975, n - 1)) * sd / math.sqrt(n)
    return mean, mean - half, mean + half


def setting_of(overrides: Sequence[str]) -> tuple[str, ...]:
    """A job's setting: its overrides but the seeds' (``seed=``, ``trace.seed=``, any key whose
    last part is ``seed``), which make it one sample of that setting."""
    return tuple(o for o in overrides
                 if o.split("=", 1)[0].lstrip("+~").rsplit(".", 1)[-1] != "seed")


def merge_tables(tables: Mapping[str, Sequence[Mapping[str, Any]]],
                 settings: Mapping[str, Sequence[str]] | None = None) -> list[dict[str, Any]]:
    """One row per key over the jobs' tables (``{job: rows}``): the key columns, ``n_jobs``
    (the jobs with a row of that key) and each metric's mean and 95% interval over the jobs.
    ``capacity`` is the capacity as given (``capacity_spec``, e.g. ``0.1``) where a table has
    it, so that jobs whose traces differ (one per seed) still meet on one row. Rows of one
    key within one job are averaged first (each job is one sample). ``settings``
    (``{job: setting}``, :func:`setting_of` its overrides) keeps jobs of different settings
    apart -- another trace file, mode or hyperparameter is not another sample --: where they
    differ, ``setting`` is the first key column: the overrides not common to every job (of
    ``settings``: the sweep's, those without a table included)."""
    keys = [c for c in KEY_COLUMNS if any(c in r for rows in tables.values() for r in rows)]
    # the sweep's settings, its failed jobs' included: where one setting's jobs alone left
    # results, their rows still say which setting they are
    settings = settings or {}
    own = {job: tuple(settings.get(job, ())) for job in {*settings, *tables}}
    common = set.intersection(*map(set, own.values())) if own else set()
    label = {job: " ".join(o for o in ov if o not in common) for job, ov in own.items()}
    if len(set(label.values())) > 1:
        keys.insert(0, "setting")
    metrics: list[str] = []
    for rows in tables.values():
        for r in rows:
            metrics.extend(c for c in r if _is_metric(c) and c not in metrics)
    groups: dict[tuple[str, ...], dict[str, dict[str, list[float]]]] = {}
    for job, rows in tables.items():
        for r in rows:
            cells = dict(r)
            cells["setting"] = label[job]
            if cells.get("capacity_spec") not in (None, ""):
                cells["capacity"] = cells["capacity_spec"]
            key = tuple(str(cells.get(c, "")) for c in keys)
            per_job = groups.setdefault(key, {}).setdefault(job, {m: [] for m in metrics})
            for m in metrics:
                x = number(cells.get(m))
                if not math.isnan(x):
                    per_job[m].append(x)
    merged = []
    for key, jobs in groups.items():
        row: dict[str, Any] = dict(zip(keys, key))
        row["n_jobs"] = len(jobs)
        for m in metrics:
            xs = [math.fsum(v[m]) / len(v[m]) for v in jobs.values() if v[m]]
            row[f"{m}_mean"], row[f"{m}_ci95_lo"], row[f"{m}_ci95_hi"] = _interval(xs)
        merged.append(row)
    return merged


@dataclass(frozen=True)
class SweepMerge:
    """What :func:`merge_sweep` did: the merged rows and file, the jobs merged (by label) and
    those left out, each with the reason."""

    rows: list[dict[str, Any]]
    path: str | None
    merged: list[str]
    missing: dict[str, str]


def merge_sweep(jobs: Mapping[str, str], out_path: str, *, since: float | None = None,
                settings: Mapping[str, Sequence[str]] | None = None) -> SweepMerge:
    """Merge the ``results.csv`` files ``{job label: path}`` into ``out_path`` (a CSV, NaN as
    blank); ``settings`` as :func:`merge_tables` takes them. A file that is absent, unreadable, empty or older than ``since`` (a timestamp:
    left by an earlier run) leaves its job out, named in a warning. Nothing is written when
    no job has results."""
    tables: dict[str, list[dict[str, str]]] = {}
    missing: dict[str, str] = {}
    for label, path in jobs.items():
        if not os.path.isfile(path):
            missing[label] = f"no {path}"
            continue
        if since is not None and os.path.getmtime(path) < since:
            missing[label] = f"{path} is from an earlier run"
            continue
        try:
            rows = read_results(path)
        except (OSError, UnicodeDecodeError, csv.Error) as e:
            missing[label] = f"{path} unreadable ({e})"
            continue
        if not rows:
            missing[label] = f"{path} has no rows"
            continue
        tables[label] = rows
    if missing:
        log.warning("%d of %d jobs left no results and are not in the merged table: %s",
                    len(missing), len(jobs), "; ".join(f"{k} ({v})" for k, v in missing.items()))
    if not tables:
        log.warning("no job of the sweep left results: no merged table written")
        return SweepMerge([], None, [], missing)
    rows = merge_tables(tables, settings)
    cols = list(rows[0])

    def write(f: Any) -> None:
        w = csv.DictWriter(f, fieldnames=cols)
        w.writeheader()
        for r in rows:
            w.writerow({c: ("" if isinstance(v, float) and math.isnan(v) else v)
                        for c, v in r.items()})

    os.makedirs(os.path.dirname(os.path.abspath(out_path)), exist_ok=True)
    replace_atomically(out_path, write)
    return SweepMerge(rows, out_path, list(tables), missing)


def format_merged(rows: Sequence[Mapping[str, Any]], *, width: int = 4) -> str:
    """A short fixed-width table: the key columns, ``n_jobs`` and the main metrics as
    ``mean ± half-width``."""
    if not rows:
        return ""
    keys = [c for c in ("setting", *KEY_COLUMNS) if c in rows[0] and c != "row_kind"]
    shown = [m for m in ("traffic_bytes", "stall_ns", "miss_ratio", "gap_closed_traffic")
             if f"{m}_mean" in rows[0]]

    def cell(r: Mapping[str, Any], m: str) -> str:
        mean, lo, hi = r[f"{m}_mean"], r[f"{m}_ci95_lo"], r[f"{m}_ci95_hi"]
        if math.isnan(mean):
            return ""
        text = f"{mean:.{width}g}"
        return text if math.isnan(lo) else f"{text} ± {(hi - lo) / 2:.2g}"

    table = [[*keys, "n_jobs", *shown]]
    table += [[str(r[k]) for k in keys] + [str(r["n_jobs"])] + [cell(r, m) for m in shown]
              for r in rows]
    widths = [max(len(line[i]) for line in table) for i in range(len(table[0]))]
    return "\n".join("  ".join(c.ljust(w) for c, w in zip(line, widths)).rstrip()
                     for line in table)


# ---------------------------------------------------------------------- the Hydra callback
current_sweep_dir: str | None = None  # the running multirun's folder (set by MergeResults)


OPTUNA_RESULTS = "optimization_results.yaml"
"""What hydra-optuna-sweeper (``hydra/sweeper=tune``) writes in the sweep directory: the best
trial's parameters and value; :func:`name_best_trial` adds its job folder and policy file."""


def name_best_trial(sweep_dir: str, jobs: Mapping[str, Sequence[str]],
                    since: float | None = None) -> tuple[str, str | None] | None:
    """The results folder and exported policy file (``None``: none) of the best trial of an
    Optuna sweep in ``sweep_dir``, among ``jobs`` (this sweep's: each job's results folder and
    its overrides, as :class:`MergeResults` reads them). The sweep's :data:`OPTUNA_RESULTS`,
    written after ``since``, names the best parameters and value alone: the job whose overrides
    give each parameter its value and, where its ``train.json`` holds a ``score``, whose score
    is the best value; its folder and policy are added to that file as ``best_job`` and
    ``best_policy``. ``None`` where there is no such file or job (a resumed study whose best
    trial ran in an earlier sweep)."""
    from omegaconf import DictConfig, OmegaConf

    path = os.path.join(sweep_dir, OPTUNA_RESULTS)
    if not os.path.isfile(path) or (since is not None and os.path.getmtime(path) < since):
        return None
    results_file = OmegaConf.load(path)
    if not isinstance(results_file, DictConfig):
        return None
    saved = OmegaConf.to_container(results_file, resolve=False)  # (a value may read "${x}")
    params, best = saved.get("best_params"), saved.get("best_value")  # type: ignore[union-attr]
    if not isinstance(params, dict) or not params:
        return None
    for out, overrides in sorted(jobs.items()):
        given = dict(str(o).split("=", 1) for o in overrides if "=" in str(o))
        if not all(k in given and _same_value(given[k], v) for k, v in params.items()):
            continue
        score, policy = _training_outcome(out)
        if score is not None and isinstance(best, (int, float)) and not math.isclose(
                score, best, rel_tol=1e-9, abs_tol=1e-12):
            continue  # (the same parameters, another trial: a resumed study's replay)
        saved.update(best_job=out, best_policy=policy)  # type: ignore[union-attr]
        OmegaConf.save(OmegaConf.create(saved), path)
        return out, policy
    return None


def _same_value(text: str, value: Any) -> bool:
    """Whether an override's value ``text`` is ``value`` (numbers compared as numbers)."""
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        try:
            return float(text) == float(value)
        except ValueError:
            return False
    return text.strip("'\"") == str(value)


def _training_outcome(job: str) -> tuple[float | None, str | None]:
    """A training job's validation score and exported policy file (each ``None`` where its
    ``train.json`` has none, or the file is gone)."""
    try:
        with open(os.path.join(job, "train.json")) as f:
            info = json.load(f)
    except (OSError, ValueError):
        return None, None
    if not isinstance(info, dict):
        return None, None
    score, policy = info.get("score"), info.get("policy")
    return (float(score) if isinstance(score, (int, float)) else None,
            policy if isinstance(policy, str) and os.path.isfile(policy) else None)


_HYDRA_FILES = ("config.yaml", "hydra.yaml", "overrides.yaml")  # what Hydra writes there
_EARLIER = ".earlier"  # beside a run's Hydra folder: the earlier run's (KeepEarlierHydra)


def _hydra_sub(config: Any = None) -> tuple[str, bool]:
    """The name of the Hydra folder in a run's directory (``hydra.output_subdir``; ``.hydra``
    where the run writes none) and whether this run writes one, from ``config`` or else the
    running Hydra job's (outside Hydra: ``.hydra``, none)."""
    sub: Any = None
    if config is not None:
        sub = config.hydra.get("output_subdir")
    else:
        with contextlib.suppress(Exception):  # (not in a Hydra job)
            from hydra.core.hydra_config import HydraConfig

            sub = HydraConfig.get().output_subdir
    return (".hydra", False) if sub is None else (str(sub), True)


def _keep_earlier_hydra(run_dir: str, sub: str, writes: bool) -> None:
    """Before a run starts in ``run_dir``: the Hydra folder an earlier run left there, kept
    beside it as ``<sub>.earlier`` (copied where this run writes its own over it, else moved)."""
    folder = os.path.join(run_dir, sub)
    earlier = folder + _EARLIER
    if os.path.lexists(earlier) or not any(os.path.isfile(os.path.join(folder, n))
                                        for n in _HYDRA_FILES):
        return  # (nothing earlier; or a kept one left by a run that was killed: both stay)
    import shutil

    with contextlib.suppress(OSError):  # (best effort: the run goes on)
        if not writes:
            os.replace(folder, earlier)
            return
        os.makedirs(earlier)
        for n in _HYDRA_FILES:  # (their times too: MergeResults tells an earlier job by them)
            if os.path.isfile(os.path.join(folder, n)):
                shutil.copy2(os.path.join(folder, n), os.path.join(earlier, n))


def _settle_earlier_hydra(run_dir: str, sub: str, writes: bool, then: str) -> None:
    """The earlier run's Hydra folder kept in ``run_dir`` (:func:`_keep_earlier_hydra`), where
    it is still there: back in place where this run wrote no Hydra folder of its own; else as
    ``then`` says: ``"restore"`` its files over this run's (a single run refused before it set
    the earlier results aside), ``"aside"`` into ``previous/<its time>/`` (a multirun job that
    failed: its own folder names it to the merge), ``"drop"`` (a resumed run: its own describes
    the same sweep)."""
    import shutil

    folder = os.path.join(run_dir, sub)
    earlier = folder + _EARLIER
    if not os.path.isdir(earlier):
        return
    with contextlib.suppress(OSError):
        if not writes:
            if not os.path.lexists(folder):
                os.replace(earlier, folder)
        elif then == "restore":
            for n in _HYDRA_FILES:
                p, k = os.path.join(folder, n), os.path.join(earlier, n)
                if os.path.isfile(k):
                    os.replace(k, p)
                elif os.path.isfile(p):
                    os.remove(p)
            shutil.rmtree(earlier)
        elif then == "aside":
            dest = _previous_dir(run_dir, [os.path.join(earlier, n)
                                           for n in os.listdir(earlier)] or [earlier])
            os.makedirs(os.path.dirname(os.path.join(dest, sub)), exist_ok=True)
            os.replace(earlier, os.path.join(dest, sub))
        else:
            shutil.rmtree(earlier)


def _job_dirs(sweep_dir: str) -> list[str]:
    """The directories of a multirun's jobs in ``sweep_dir`` (its subdirectories but
    ``previous``)."""
    try:
        names = sorted(os.listdir(sweep_dir))
    except OSError:
        return []
    return [os.path.join(sweep_dir, n) for n in names
            if n != "previous" and os.path.isdir(os.path.join(sweep_dir, n))]


class KeepEarlierHydra(Callback):
    """Hydra callback: before a run writes its Hydra config (``.hydra/``) into its directory --
    ``out_dir`` where one is given, which may hold an earlier run; for a multirun each job's
    directory under it -- the earlier run's is kept beside it (``.hydra.earlier/``). A run that
    sets the earlier results aside (:func:`set_aside`) moves it with them; a single run refused
    before that puts it back (:func:`job_failed`); at the end, what is left is put back (a run
    that wrote none of its own), moved to ``previous/`` (a multirun job that failed: its own
    folder names it to the merge) or dropped (a resumed run: its own describes the same
    sweep). On disk, so that a multirun's jobs in other processes (the joblib launcher) find
    it."""

    def on_run_start(self, config: Any, **kwargs: Any) -> None:
        _keep_earlier_hydra(str(config.hydra.run.dir), *_hydra_sub(config))

    def on_run_end(self, config: Any, **kwargs: Any) -> None:
        _settle_earlier_hydra(str(config.hydra.run.dir), *_hydra_sub(config), "drop")

    def on_multirun_start(self, config: Any, **kwargs: Any) -> None:
        for d in _job_dirs(str(config.hydra.sweep.dir)):
            _keep_earlier_hydra(d, *_hydra_sub(config))

    def on_multirun_end(self, config: Any, **kwargs: Any) -> None:
        for d in _job_dirs(str(config.hydra.sweep.dir)):
            _settle_earlier_hydra(d, *_hydra_sub(config), "aside")


class MergeResults(Callback):
    """Hydra callback: after a multirun, merge each job's results into one table.

    ``results``: each job's results file, relative to its results directory (``results.csv``;
    ``eval/results.csv`` for the main job). ``out``: the merged file's name, written in
    ``out_dir`` when the sweep has one, else in the sweep directory. Jobs are the sweep
    directory's Hydra job directories (``.hydra/hydra.yaml``) written by this multirun.
    """

    def __init__(self, results: str = "results.csv", out: str = "merged.csv") -> None:
        self.results, self.out = results, out
        self._start: float | None = None

    def on_multirun_start(self, config: Any, **kwargs: Any) -> None:
        global current_sweep_dir
        self._start = time.time() - 1.0  # (file times may be coarser than the clock)
        out_dir = config.get("out_dir")  # (the folder the jobs' results go to: cli's advice)
        current_sweep_dir = os.path.abspath(os.path.expanduser(str(
            out_dir if out_dir not in (None, "") else config.hydra.sweep.dir)))
        sweep_dir = os.path.abspath(str(config.hydra.sweep.dir))
        if os.path.isdir(sweep_dir):  # an earlier Optuna study's best, not overwritten
            set_aside(sweep_dir, [OPTUNA_RESULTS])

    def on_multirun_end(self, config: Any, **kwargs: Any) -> None:
        from hydra.core.utils import configure_log
        from omegaconf import OmegaConf

        # the sweep's own logging again (an in-process launcher leaves the last job's), so that
        # the warning naming the jobs left out reaches the console
        configure_log(config.hydra.hydra_logging, config.hydra.verbose)
        sweep_dir = os.path.abspath(str(config.hydra.sweep.dir))
        out_dir = OmegaConf.select(config, "out_dir", default=None)
        jobs: dict[str, tuple[int, str]] = {}
        settings: dict[str, tuple[str, ...]] = {}
        overrides_of: dict[str, list[str]] = {}  # a job's results folder -> its overrides
        tasks: dict[str, tuple[str, ...]] = {}  # a job's label -> its overrides, sorted
        for root, dirs, files in os.walk(sweep_dir):
            # (not an earlier run's files: set aside, or kept beside a job's Hydra folder)
            dirs[:] = [d for d in dirs if d != "previous" and not d.endswith(_EARLIER)]
            if os.path.basename(root) == ".hydra" and "hydra.yaml" in files:
                meta = os.path.join(root, "hydra.yaml")
                if self._start is not None and os.path.getmtime(meta) < self._start:
                    continue  # a job of an earlier multirun into the same directory
                job_dir = os.path.dirname(root)
                hc = OmegaConf.load(meta).hydra
                num = int(hc.job.num)
                task = [str(o) for o in hc.overrides.task]
                overrides = " ".join(task) or "(no overrides)"
                res = job_results_dir(out_dir, num, job_dir)
                assert res is not None
                overrides_of[res] = task
                jobs[f"job {num}: {overrides}"] = (num, os.path.join(res, self.results))
                settings[f"job {num}: {overrides}"] = setting_of(task)
                tasks[f"job {num}: {overrides}"] = tuple(sorted(task))
                dirs.clear()
        ordered = dict(sorted(jobs.items(), key=lambda kv: kv[1][0]))
        if not ordered:  # (seed='range(0,0)': zero jobs, and exit status 0)
            import sys

            print("error: the sweep ran no job (a sweep list with no values?); nothing to merge",
                  file=sys.stderr)
            raise SystemExit(2)
        # an earlier, larger sweep's job folders past this sweep's (its job_2, job_3 beside this
        # one's job_0, job_1) are set aside: a script reading job_*/ mixed the two sweeps
        base = os.path.expanduser(str(out_dir)) if out_dir is not None else sweep_dir
        ours = {f"job_{num}" for num, _ in jobs.values()}
        stale = sorted(d for d in (os.listdir(base) if os.path.isdir(base) else [])
                       if re.fullmatch(r"job_\d+", d) and d not in ours
                       and os.path.isdir(os.path.join(base, d)))
        if stale:
            set_aside(base, stale)
        # a job repeating another's overrides (seed=0,0,1) is the same sample again, not
        # another: counted twice it narrowed the interval (a helper's audit)
        first: dict[tuple[str, ...], str] = {}
        repeats = []
        for label in list(ordered):
            same = first.setdefault(tasks[label], label)
            if same != label:
                repeats.append(f"{label.split(':', 1)[0]} repeats {same.split(':', 1)[0]}")
                del ordered[label]
        if repeats:
            log.warning("%s of the sweep's jobs repeat another's overrides and are merged once "
                        "(one sample each): %s", len(repeats), "; ".join(repeats))
        target = os.path.join(base, self.out)
        # an earlier sweep's table into the same folder is set aside, not overwritten
        set_aside(os.path.dirname(target), [self.out])
        done = merge_sweep({k: p for k, (_, p) in ordered.items()}, target, since=self._start,
                           settings=settings)
        if done.path is not None:
            print(format_merged(done.rows))
            print(f"merged {len(done.merged)} of {len(ordered)} jobs: {done.path}")
        try:  # (an Optuna sweep's: its best trial by folder and policy file)
            best = name_best_trial(sweep_dir, overrides_of, since=self._start)
        except Exception as e:  # (never in the way of the merge's verdict below)
            log.warning("could not name the best trial of %s: %s", sweep_dir, e)
            best = None
        if best is not None:
            print(f"best trial: {best[0]}" + (f", policy: {best[1]}" if best[1] else ""))
        if done.missing:  # (the others merged first): a sweep with a failed job does not exit 0
            import sys

            print(f"error: {len(done.missing)} of {len(ordered)} jobs failed or left no results "
                  "(named above)", file=sys.stderr)
            raise SystemExit(1)


@contextlib.contextmanager
def terminate_as_interrupt() -> Iterator[None]:
    """SIGTERM (a scheduler's stop, ``kill``) raises :class:`KeyboardInterrupt` in the main
    thread while this runs, as SIGINT does, so that a stopped training saves what it has (it
    ended without a word, and without its model). Elsewhere than the main thread: nothing."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def interrupt(signum: int, frame: Any) -> None:
        raise KeyboardInterrupt(f"signal {signum}")

    before = signal.signal(signal.SIGTERM, interrupt)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, before)
