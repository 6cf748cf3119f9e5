"""The ``cachegym`` command: one entry to the project's scripts.

    cachegym sim TRACE FORMAT lru,arc,learned:POLICY.npz 1GiB,10% [--preset h100_pcie5]
        [-t 'obj-id-col=2,obj-size-col=3']
    cachegym evaluate trace.path=T trace.format=oracleGeneral 'eval.capacities=[1GiB,10%]'
    cachegym train trace.path=T trace.format=oracleGeneral [init_from=policy.npz] [resume=RUN.zip]
    cachegym demo                        the main job (make demo) end to end
    cachegym export SOURCE --out policy.npz
    cachegym record gpt --out trace.npz
    cachegym stats TRACE                 reuse histogram and LRU's miss-ratio curve
    cachegym parity TRACE                request-by-request agreement with libCacheSim
    cachegym check my_policies.py:MRU    check a policy of yours against the pool's contract
    cachegym bench NAME                  the benchmarks (pool, replay, env, decision, ...)

``evaluate``, ``train`` and ``demo`` take Hydra overrides (and ``-m`` for sweeps), the others
their own options (``cachegym NAME --help``). Each runs the script of ``scripts/`` of that name:
the command adds no logic of its own but ``sim``'s argument parsing, which composes the
evaluator's config (``conf/evaluate.yaml``) from a libCacheSim-style one-liner.
"""

from __future__ import annotations

import argparse
import contextlib
import importlib
import logging
import os
import re
import shutil
import sys
from collections.abc import Callable, Sequence
from typing import Any

__all__ = ["COMMANDS", "main", "sim"]

# command -> (module of cachegym.scripts, Hydra app?, one line of help)
COMMANDS: dict[str, tuple[str, bool, str]] = {
    "sim": ("", False, "simulate policies on a trace at some capacities; print a table"),
    "evaluate": ("evaluate", True, "evaluation sweep (Hydra overrides: trace.path=, eval.*)"),
    "train": ("train", True, "train and export a learned policy (Hydra overrides)"),
    "demo": ("main", True, "the main job end to end on the bundled workload (make demo)"),
    "export": ("export", False, "a checkpoint or SB3 .zip to a policy file (or ONNX)"),
    "record": ("record_trace", False, "record a PyTorch training loop's tensor trace"),
    "stats": ("trace_stats", False, "a trace's reuse histogram and LRU miss-ratio curve"),
    "parity": ("parity", False, "request-by-request agreement with libCacheSim"),
    "check": ("check_policy", False, "check an eviction policy of yours against the pool's contract"),
    "bench": ("bench", False, "benchmarks that print ratios measured side by side"),
}


def _usage() -> str:
    width = max(map(len, COMMANDS))
    lines = [f"  {name:<{width}}  {text}" for name, (_, _, text) in COMMANDS.items()]
    return ("usage: cachegym COMMAND [ARGS...]\n\ncommands:\n" + "\n".join(lines)
            + "\n\n`cachegym COMMAND --help` for a command's options.")


def main(argv: list[str] | None = None) -> int:
    """Run ``cachegym COMMAND ARGS...``; the exit status (2 for a bad command or input; 141, as
    a shell reports SIGPIPE, where the reader of its output left: ``cachegym stats T | head``)."""
    try:
        return _main(argv)
    except BrokenPipeError:  # (a traceback, from whichever print came after the reader left)
        with contextlib.suppress(OSError):
            devnull = os.open(os.devnull, os.O_WRONLY)  # (Python flushes stdout at exit)
            os.dup2(devnull, sys.stdout.fileno())
        return 141


def refuse_negative_capacities(parser: argparse.ArgumentParser, argv: Sequence[str],
                               after: Callable[[str], bool]) -> None:
    """``parser.error`` for a negative capacity among ``argv`` (a token ``-5%`` or ``-1MiB,10%``
    that follows a token ``after`` accepts): argparse reads it as an unknown option and reports
    a missing argument."""
    for prev, tok in zip(["", *argv], argv):
        if after(prev) and re.fullmatch(r"-[0-9.][^,]*(,.*)?", tok):
            parser.error(f"capacities: {tok!r} is negative; a capacity is a size (512MiB, 1GiB) "
                         "or a share of the working set (10%, 0.1) greater than 0")


def _main(argv: list[str] | None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if not argv or argv[0] in ("-h", "--help", "help"):
        print(_usage())
        return 0 if argv else 2
    cmd, rest = argv[0], argv[1:]
    if cmd not in COMMANDS:
        print(f"cachegym: unknown command {cmd!r}\n\n{_usage()}", file=sys.stderr)
        return 2
    if cmd == "sim":
        return sim(rest)
    module, is_hydra, _ = COMMANDS[cmd]
    try:
        return _run(cmd, module, is_hydra, rest)
    except ModuleNotFoundError as e:  # an extra not installed: which, and how (was a traceback)
        extra = _EXTRAS.get((e.name or "").partition(".")[0])
        if extra is None:
            raise
        print(f"cachegym {cmd}: needs {e.name}, of the {extra} extra: pip install -c "
              f"constraints.txt 'cachegym[{extra}]' (in a checkout: make install)", file=sys.stderr)
        return 2


_EXTRAS = {"torch": "train", "stable_baselines3": "train", "sb3_contrib": "train",
           "tensorboard": "train", "libcachesim": "dev", "onnx": "onnx"}
"""The optional packages a command may need, and the extra of pyproject.toml that installs each."""


def _run(cmd: str, module: str, is_hydra: bool, rest: list[str]) -> int:
    mod = importlib.import_module(f"cachegym.scripts.{module}")
    if is_hydra:  # one value for a list-typed key: refused with the list to write
        from cachegym.envs.config import check_list_overrides

        check_list_overrides(rest, mod.SCHEMA, f"cachegym {cmd}")
        problem = _unknown_group_option(rest)
        if problem:  # (Hydra's own message: 15 lines, the schema's base_* nodes among the options)
            print(f"cachegym {cmd}: {problem}", file=sys.stderr)
            return 2
        if {"hydra/launcher=slurm", "hydra/launcher=submitit_slurm"} & set(rest) \
                and shutil.which("srun") is None:  # (submitit's refusal came as a traceback)
            print(f"cachegym {cmd}: hydra/launcher=slurm submits the jobs with SLURM, and this "
                  "machine has no `srun`: run the command on a SLURM login node, or drop the "
                  "launcher (the jobs then run side by side on this machine)", file=sys.stderr)
            return 2
        if "hydra/launcher=ray_cluster" in rest and _multirun(rest):  # (the launcher's jobs)
            problem = _no_ray_cluster(rest)
            if problem:
                print(f"cachegym {cmd}: {problem}", file=sys.stderr)
                return 2
    # the script sees `cachegym CMD ARGS...` as its sys.argv: Hydra's main reads the overrides (and
    # -m, --cfg, ...) there, argparse names the program after argv[0] (its usage: `cachegym CMD`)
    saved = sys.argv
    sys.argv = [f"cachegym {cmd}", *rest]
    try:
        if is_hydra:
            mod.main()
            return 0
        return int(mod.main(rest) or 0)
    except KeyboardInterrupt:  # a multirun's launcher (a job's own stop exits 130 in the job)
        if not is_hydra or not _multirun(rest):
            raise
        print(f"\n{_interrupted_sweep(cmd)}", file=sys.stderr)
        return 130
    finally:
        sys.argv = saved


def _multirun(rest: list[str]) -> bool:
    """Whether the Hydra overrides ``rest`` ask for a multirun (a sweep through the launcher)."""
    return bool({"-m", "--multirun"} & set(rest)) or any(
        a.startswith("hydra.mode=MULTIRUN") for a in rest)


def _unknown_group_option(rest: list[str]) -> str | None:
    """The first ``GROUP=OPTION`` override of one of this project's config groups (``conf/``'s
    folders: agent, env, policy, policy/guard, trace, allocator, experiment) naming no option of
    it, said with the options; ``None`` when all name one (Hydra's own groups and plugins are
    left to Hydra)."""
    from cachegym.envs.paths import CONF_DIR

    if any(a.startswith(("--config-dir", "-cd", "--config-path", "-cp", "hydra.searchpath",
                         "+hydra.searchpath")) for a in rest):
        return None  # (configs of the user's may add options: Hydra knows them)
    for arg in rest:
        key, eq, value = arg.partition("=")
        key = key.lstrip("+")
        if not eq or key.startswith(("hydra", "~")) or "." in key or any(c in value for c in "()[]{}*$"):
            continue  # (Hydra's sweep functions, globs and interpolations: Hydra reads them)
        folder = os.path.join(CONF_DIR, *key.split("/"))
        if not os.path.isdir(folder):
            continue
        options = sorted(f[:-5] for f in os.listdir(folder) if f.endswith(".yaml"))
        for v in value.split(","):  # (a multirun's list)
            v = v.strip().strip("'\"")  # (quoted as Hydra takes it: agent='ppo')
            if v and v != "null" and v not in options:
                generator = ""
                if key == "trace":  # (a generator's name: trace=scan)
                    from cachegym.envs.workloads.registry import GENERATORS

                    if v in GENERATORS:
                        generator = (f" (for the generator {v!r}: trace=generated "
                                     f"trace.generator={v}, and '++trace.params={{...}}' for "
                                     "its parameters)")
                return (f"{key}={v}: no such option of the config group {key!r}; the options: "
                        f"{', '.join(options)}{generator}")
    return None


def _no_ray_cluster(rest: list[str]) -> str | None:
    """hydra/launcher=ray_cluster joins a running Ray cluster (``address: auto``): where none
    is named (no ``hydra.launcher.ray.init.address=``, no ``RAY_ADDRESS``), say so in a line
    when this machine belongs to none (Ray's refusal came as a traceback through Hydra's)."""
    if os.environ.get("RAY_ADDRESS") or any(
            a.lstrip("+").startswith("hydra.launcher.ray.init.address=") for a in rest):
        return None
    try:
        import ray
    except ImportError:
        return ("hydra/launcher=ray_cluster needs Ray: pip install 'cachegym[cluster]'")
    try:
        ray.init(address="auto", logging_level=logging.ERROR, log_to_driver=False)
    except ConnectionError as e:
        return (f"hydra/launcher=ray_cluster joins a running Ray cluster and this machine belongs "
                f"to none ({str(e).split('.')[0]}): start one (`ray start --head`), name one "
                "(hydra.launcher.ray.init.address=HEAD_IP:6379), or use hydra/launcher=ray, "
                "which starts Ray inside the command")
    finally:
        if ray.is_initialized():
            ray.shutdown()
    return None


def _interrupted_sweep(cmd: str) -> str:
    """What an interrupted multirun kept, and how to finish it."""
    from cachegym.envs import sweep

    where = sweep.current_sweep_dir or "the sweep folder Hydra printed"
    if cmd == "evaluate":
        return (f"interrupted: each job's completed runs are kept in {where}/job_<n>/runs.jsonl; "
                f"run the same command with out_dir={where} eval.resume=true to finish")
    return (f"interrupted: each job's folder in {where} keeps what it saved (a training saves "
            "its model and says how to resume it in its log); the sweep's table was not merged")


def _split(text: str) -> list[str]:
    """The comma-separated items of ``text``, each once (``10%,10%`` ran twice, two rows)."""
    return list(dict.fromkeys(x.strip() for x in text.split(",") if x.strip()))


def sim(argv: list[str]) -> int:
    """``cachegym sim TRACE FORMAT POLICIES CAPACITIES``: the evaluator (one implementation)
    over one trace, composed from a one-liner; prints its table, writes its results."""
    from cachegym.envs.workloads import add_trace_params_option

    p = argparse.ArgumentParser(
        prog="cachegym sim", description="Simulate eviction policies on one trace (the evaluator "
        "of `cachegym evaluate`, composed from a libCacheSim-style one-liner).",
        epilog="example: cachegym sim trace.oracleGeneral oracleGeneral lru,arc,s3fifo 1GiB,10%")
    p.add_argument("trace", help="trace file")
    p.add_argument("format", help="its format: npz, oracleGeneral, lcs, vscsi, csv, txt (auto: from its name; "
                   ".zst, .gz, .xz, .bz2 read as the file they hold)")
    p.add_argument("policies", help="comma-separated: registry names (lru, arc, s3fifo, gdsf, "
                   "belady, ...), FILE.py:Class, or learned:POLICY.npz for an exported policy "
                   "(LRU is always added: the gap_* columns are measured from it to a bound, none "
                   "with --bounds none)")
    p.add_argument("capacities", help="comma-separated: sizes (512MiB, 1GiB, 1073741824) or "
                   "fractions of the working set (10%%, 0.1)")
    add_trace_params_option(p)
    p.add_argument("--guard", default="shadow", help="comma-separated guards of learned:PATH "
                   "policies, each a row (conf/policy/guard/: shadow, trial, lru, none; default "
                   "shadow)")
    p.add_argument("--prefetch", default="none", help="comma-separated prefetchers (none, "
                   "lookahead, history, markov, stride, learned:PATH, FILE.py:Class; default none)")
    p.add_argument("--preset", default="none", help="comma-separated timing presets for stall "
                   "(none, a100_pcie4, h100_pcie5, h200_pcie5, gh200_c2c, FILE.json)")
    p.add_argument("--bounds", default="auto", help="offline bounds, as rows and the gap_* "
                   "columns: auto (the default: FOO up to 30,000 requests, else LFOO-L, about "
                   "20 s per million requests, PFOO-L past 5 million), foo, lfoo_l, pfoo_l, or none")
    p.add_argument("--clean-ahead", type=float, default=0.0, metavar="SHARE",
                   help="under a preset, the share of the capacity kept clean ahead of eviction "
                   "(dirty next victims written back early while the copy-out engine idles; "
                   "0, the default: off)")
    p.add_argument("--mode", default="bytes", choices=("bytes", "objects"),
                   help="bytes (default: each object its size, capacities in bytes) or objects "
                   "(every object size 1: capacities and traffic count objects, as a "
                   "libCacheSim run with --ignore-obj-size)")
    p.add_argument("--capacity-of", default="working_set", choices=("working_set", "peak_live"),
                   help="what a share in CAPACITIES is of: the bytes of every object the trace "
                   "names (working_set, default) or the most bytes live at once (peak_live: a DL "
                   "trace that frees its tensors)")
    p.add_argument("--out", help="results folder (default outputs/sim/<time>)")
    p.add_argument("--plots", action="store_true", help="also write the plots")
    p.add_argument("--resume", action="store_true", help="reuse the completed runs an "
                   "interrupted sim left in --out (the same --out: OUT/runs.jsonl)")
    p.add_argument("-j", "--jobs", type=int, default=1, help="runs replayed at once, in worker "
                   "processes (0: one per CPU core; default 1). The same rows; wall times and "
                   "decision latencies are measured beside the other runs")
    refuse_negative_capacities(p, argv, lambda prev: prev not in ("-j", "--jobs", "--clean-ahead"))
    args = p.parse_args(argv)
    if args.resume and not args.out:
        p.error("--resume needs the --out of the interrupted sim (its default is a new "
                "time-stamped folder)")
    ev_log = logging.getLogger("cachegym.envs.evaluation")
    was = (ev_log.level, ev_log.propagate)
    handler = None
    if not sys.stderr.isatty():  # no progress bar (a log file, CI): a line per finished task
        handler = logging.StreamHandler(sys.stderr)
        handler.setFormatter(logging.Formatter("%(message)s"))
        ev_log.addHandler(handler)
        ev_log.setLevel(logging.INFO)
        ev_log.propagate = False
    try:
        return _sim_run(args)
    finally:  # (a second sim in the same process added a second handler: every line twice,
        # the first to a stream that may be closed since)
        if handler is not None:
            ev_log.removeHandler(handler)
            ev_log.setLevel(was[0])
            ev_log.propagate = was[1]


def _sim_run(args: Any) -> int:
    """``cachegym sim``'s sweep, its arguments parsed (:func:`sim`)."""
    from cachegym.allocator.errors import CachegymError

    cfg = None
    try:
        cfg = sim_config(args)
        from cachegym.envs.evaluation import evaluate

        result = evaluate(cfg)
    except CachegymError as e:  # a bad input: its message, no traceback
        print(f"error: {sim_names(str(e))}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:  # (the evaluator logged how far it got)
        if cfg is not None:
            print(f"interrupted: the completed runs are kept in {cfg.out_dir}; the same command "
                  f"with --resume{'' if args.out else f' --out {cfg.out_dir}'} finishes the sweep",
                  file=sys.stderr)
        return 130
    print(result["table"])
    print(f"results: {result['csv']}")
    return 0


# the evaluator's config keys that ``cachegym sim`` fills, by the argument the user typed
_SIM_ARGS = {
    "trace.path": "TRACE", "trace.format": "FORMAT", "trace.options": "-t",
    "eval.policies": "POLICIES", "eval.learned_guards": "--guard", "eval.learned": "POLICIES",
    "eval.capacities": "CAPACITIES", "eval.prefetchers": "--prefetch", "eval.presets": "--preset",
    "eval.bounds": "--bounds", "eval.mode": "--mode", "eval.capacity_of": "--capacity-of",
    "eval.jobs": "--jobs", "allocator.clean_ahead": "--clean-ahead", "eval.resume": "--resume",
    "out_dir": "--out",
}
# (a key inside a Hydra override the message spells out, '++trace.options=...', stays as it is)
_SIM_KEY = re.compile(r"(?<![\w.+])(" + "|".join(re.escape(k) for k in sorted(_SIM_ARGS, key=len,
                                                                                 reverse=True))
                      + r")(?![\w.=])")


# the evaluator's advice in its config's spelling, as ``cachegym sim`` takes the same
_SIM_ADVICE = (
    ("eval.learned=[PATH] (and eval.learned_guards=[shadow,...] for its guards)",
     "learned:PATH (and --guard for its guard)"),
    ("exported policy files: eval.learned=[PATH]", "exported policy files: learned:PATH"),
    ("or [] for none", "or none"),
)


def sim_names(message: str) -> str:
    """An error of the evaluator as ``cachegym sim``'s user reads it: the config keys it filled
    named by the arguments they came from (``trace.path`` -> ``TRACE``, ``eval.prefetchers`` ->
    ``--prefetch``), and its advice spelt as ``sim`` takes it (``eval.learned=[PATH]`` ->
    ``learned:PATH``)."""
    for config, sim in _SIM_ADVICE:
        message = message.replace(config, sim)
    return _SIM_KEY.sub(lambda m: _SIM_ARGS[m.group(1)], message)


def sim_config(args: argparse.Namespace) -> Any:
    """The evaluator's config (``conf/evaluate.yaml``) for ``cachegym sim``'s arguments."""
    from hydra import compose, initialize_config_dir
    from omegaconf import OmegaConf

    from cachegym.allocator.errors import ConfigError
    from cachegym.allocator.sizes import parse_capacity
    from cachegym.envs.config import guard_node, register_configs
    from cachegym.envs.paths import CONF_DIR
    from cachegym.envs.sweep import new_run_dir
    from cachegym.envs.workloads import parse_trace_params
    from cachegym.envs.workloads.formats import format_name

    names, learned = [], []
    for spec in _split(args.policies):
        if spec.lower().startswith("learned:"):
            learned.append(os.path.expanduser(spec.split(":", 1)[1]))
        else:
            names.append(spec)
    if not names and not learned:
        raise ConfigError("policies: give at least one, e.g. lru,arc,learned:policy.npz")
    # each as written where it has a unit or a percent sign (the rows' capacity_spec then reads
    # as with `cachegym evaluate`: "10%", "512MiB"), else its number
    from cachegym.allocator.sizes import unit_of

    caps: list[Any] = []
    for c in _split(args.capacities):
        value = parse_capacity(c, "capacities")  # (a bad one refused here, in sim's words)
        caps.append(c if unit_of(c) else value)
    if not caps:
        raise ConfigError("capacities: give at least one, e.g. 1GiB,10%")
    guards = _split(args.guard) or ["shadow"]
    for g in guards:  # options of conf/policy/guard/, even without learned:PATH
        guard_node(g, "--guard")
    fmt = None if args.format.lower() in ("auto", "") else format_name(args.format)
    options = parse_trace_params(args.trace_params)
    register_configs()
    with initialize_config_dir(config_dir=CONF_DIR, version_base="1.3"):
        cfg = compose("evaluate", overrides=["trace=file"])
    out = args.out or new_run_dir("sim")
    values = {
        "trace.path": args.trace, "trace.format": fmt, "trace.options": options, "out_dir": out,
        "eval.mode": args.mode, "eval.capacity_of": args.capacity_of, "eval.capacities": caps,
        "eval.policies": names, "eval.learned": learned, "eval.learned_guards": guards,
        "eval.prefetchers": _split(args.prefetch) or ["none"],
        "eval.presets": _split(args.preset) or ["none"], "eval.bounds": [b for b in _split(args.bounds) if b != "none"],
        "allocator.clean_ahead": args.clean_ahead,
        "eval.plots": bool(args.plots), "eval.jobs": args.jobs, "eval.progress": sys.stderr.isatty(),  # a bar on a terminal
        "eval.resume": bool(args.resume),
    }
    try:
        for key, value in values.items():
            OmegaConf.update(cfg, key, value, merge=False)
    except Exception as e:  # a schema's type or enumeration check: one line
        why = str(e).splitlines()[0] if str(e) else type(e).__name__  # (OmegaConf adds key/type lines)
        raise ConfigError(f"{key}: {value!r} is not allowed: {why}") from None
    return cfg


if __name__ == "__main__":
    raise SystemExit(main())
