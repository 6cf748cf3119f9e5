#!/usr/bin/env python
"""Benchmarks that print ratios measured side by side in one run.

    cachegym bench pool      [--json PATH]   Pool.access vs a bare OrderedDict LRU loop
    cachegym bench replay    [--json PATH]   whole-trace replay vs libCacheSim
    cachegym bench env       [--json PATH]   env decisions/s and env share of PPO time
    cachegym bench decision  [--json PATH]   exported policy decision latency vs LRU
    cachegym bench offload   [--json PATH]   activation offload modes side by side, overhead vs plain
    cachegym bench quality   [--json PATH]   learned policy vs heuristics on held-out traces
    cachegym bench guard     [--json PATH]   guarded learned policy's requests/s (vs another checkout)
    cachegym bench guardmem  [--json PATH]   guarded learned policy's memory over 10M requests
    cachegym bench bounds    [--json PATH]   offline bounds: FOO on 7k requests, PFOO-L on 10^6
    cachegym bench regret    [--json PATH]   guarded learned policy vs each of its experts alone

Each benchmark lives in ``scripts/bench_<name>.py`` and exposes ``add_args(parser)`` and
``run(args) -> dict`` (the figures, also written as JSON with ``--json``).
"""

from __future__ import annotations

import argparse
import importlib
import json
import os
import sys

BENCHES = ("pool", "replay", "env", "decision", "offload", "quality", "guard", "guardmem", "bounds", "regret")
# the benchmarks' options that count something (requests, objects, steps, seconds, threads, ...):
# each must be positive when given
COUNTS = ("requests", "objects", "repeat", "accesses", "size", "steps", "seconds", "ppo_steps",
          "vocab", "d", "heads", "layers", "seq", "batch", "threads", "pairs",
          "max_requests", "capacity", "every",
          "foo_requests")
NONNEGATIVE = ("torch_threads",)  # (0: torch's default)


def loop_build() -> bool:
    """Print whether the pool's access loop runs compiled (a benchmark's speeds depend on it:
    an unbuilt checkout runs it interpreted) and return it, for the figures."""
    from cachegym.allocator.pool import COMPILED

    print("access loop: " + ("compiled (Cython, from allocator/loop.py)" if COMPILED else
                             "interpreted (not built, or CACHEGYM_PURE_PYTHON set)"))
    return bool(COMPILED)


def _strict(x: object) -> object:
    """``x`` with every non-finite float as ``None`` (strict JSON has no NaN: a NaN figure, such
    as a mean over no cell, is null)."""
    import math

    if isinstance(x, float) and not math.isfinite(x):
        return None
    if isinstance(x, dict):
        return {k: _strict(v) for k, v in x.items()}
    if isinstance(x, (list, tuple)):
        return [_strict(v) for v in x]
    return x


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = parser.add_subparsers(dest="bench", required=True)
    for name in BENCHES:
        p = sub.add_parser(name)
        p.add_argument("--json", metavar="PATH", help="also write the figures as JSON")
        if name in argv[:1]:  # import only the benchmark asked for (each has its own deps)
            mod = importlib.import_module(f"cachegym.scripts.bench_{name}")
            mod.add_args(p)
            p.set_defaults(_run=mod.run)
    args = parser.parse_args(argv)
    import math

    for name in (*COUNTS, *NONNEGATIVE):
        v = getattr(args, name, None)
        least = 0 if name in NONNEGATIVE else None
        if isinstance(v, (int, float)) and not isinstance(v, bool) and (
                not math.isfinite(v) or (v < 0 if least == 0 else not v > 0)):
            parser.error(f"argument --{name.replace('_', '-')}: must be "
                         f"{'' if math.isfinite(v) else 'a finite number '}"
                         f"{'>= 0' if least == 0 else '> 0'}, got {v}")
    import cachegym

    # which checkout is measured (`python scripts/bench.py` imports the installed cachegym)
    print(f"cachegym {os.path.dirname(os.path.abspath(cachegym.__file__))}", flush=True)
    if args.json:  # refuse a path the figures cannot be written to before a run of minutes
        d = os.path.dirname(os.path.abspath(args.json))
        if os.path.isdir(args.json) or not os.path.isdir(d) or not os.access(d, os.W_OK):
            why = ("it is a directory" if os.path.isdir(args.json) else
                   f"{d} is not a directory" if not os.path.isdir(d) else f"{d} is not writable")
            parser.error(f"argument --json: cannot write {args.json!r}: {why}")
    from cachegym.allocator.errors import CachegymError

    try:
        figures = args._run(args)
    except CachegymError as e:  # a bad input (file, trace, value): its message, no traceback
        print(f"error: {e}", file=sys.stderr)
        return 2
    if args.json:
        try:
            with open(args.json, "w") as f:
                json.dump(_strict(figures), f, indent=2, allow_nan=False)
        except OSError as e:  # the run's figures are not lost: printed instead
            print(json.dumps(_strict(figures), indent=2))
            print(f"error: cannot write {args.json!r}: {e.strerror or e}; the figures are printed "
                  "above", file=sys.stderr)
            return 2
        print(f"figures written to {args.json}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
