"""Check eviction policies against the pool's contract (``cachegym.envs.check``).

    cachegym check my_policies.py:MRU            # a policy of your own, by where it lives
    cachegym check lru,arc my_pkg.policies:MRU   # registry names and module:Class too
    cachegym check learned:policy.npz            # an exported learned policy (under its guard)

Each policy is replayed through the pool on small generated traces (reads, writes, frees, pins,
objects larger than the pool, prefetches in flight, victims chosen by an agent, the same trace
twice); every victim and hook is checked as it happens. Prints what ran per policy; the first
broken rule names the check, the trace row and what to fix. Exit status 0 when every policy
passes, 1 when one breaks a rule, 2 on bad input.
"""

from __future__ import annotations

import argparse
import sys
import traceback
from collections.abc import Callable
from typing import Any

from cachegym.allocator.errors import CachegymError


def _factory(spec: str) -> str | Callable[[], Any]:
    """What :func:`check_policy` takes for ``spec``: the spec itself, or for ``learned:PATH`` a
    function that loads the file (under its default guard)."""
    from cachegym.envs.evaluation import learned_path

    path = learned_path(spec)
    if path is None:
        return spec
    from cachegym.policies.registry import make_learned

    make_learned(path)  # (a bad file is refused here, before any check)
    return lambda: make_learned(path)


def _where(e: BaseException) -> str:
    """Where the policy's own exception (chained to ``e``) was raised, or ``""``."""
    orig = e.__cause__
    while orig is not None and orig.__cause__ is not None:
        orig = orig.__cause__
    if orig is None or orig.__traceback__ is None:
        return ""
    frame = traceback.extract_tb(orig.__traceback__)[-1]
    return f"\n  {type(orig).__name__} raised at {frame.filename}:{frame.lineno} in {frame.name}"


def main(argv: list[str] | None = None) -> int:
    from cachegym.envs.check import PolicyCheckError, check_policy

    ap = argparse.ArgumentParser(prog="cachegym check", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("policies", nargs="+", help="registry names, FILE.py:Class, module:Class or "
                    "learned:POLICY.npz (comma-separated or several arguments)")
    ap.add_argument("--seeds", default="1,2", help="generated traces, one per seed (default 1,2)")
    ap.add_argument("--requests", type=int, default=1500, help="requests per trace (default 1500)")
    args = ap.parse_args(argv)
    specs = [s.strip() for arg in args.policies for s in arg.split(",") if s.strip()]
    if not specs:
        ap.error("name at least one policy (a registry name, FILE.py:Class, module:Class or "
                 "learned:POLICY.npz)")
    try:
        seeds = [int(s) for s in args.seeds.split(",") if s.strip()]
    except ValueError:
        ap.error(f"--seeds takes comma-separated integers, got {args.seeds!r}")
    failed = 0
    for spec in specs:
        try:
            report = check_policy(_factory(spec), seeds=seeds, requests=args.requests)
            report.policy = spec  # (as a failure is named: a class's name may be another's)
            print(report, flush=True)
        except PolicyCheckError as e:
            failed += 1
            print(f"{spec}: FAILED {e}{_where(e)}", flush=True)
        except CachegymError as e:
            print(f"cachegym check: {spec}: {e}", file=sys.stderr)
            return 2
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
