"""Check cachegym's classic policies against libCacheSim on a trace, request by request.

    cachegym parity TRACE [--capacities 0.01,0.1] [--policies lru,arc,s3fifo]
    cachegym parity data/traces/gpt.npz --capacity-of peak_live --capacities 0.25,0.5
    cachegym parity data/traces/gpt.npz --frees   # frees as libCacheSim deletes

The trace (any format ``read_trace`` takes) is written once as oracleGeneral; libCacheSim and
the pool replay that file at each capacity (bytes, or a fraction of the working set / peak live
bytes) and every request is compared: a hit on both sides or a miss on both. Prints one row per
policy and capacity, and the first request that differs, if any. With ``--frees`` the trace's
frees stay: ``Pool.free`` in the pool, ``remove`` (a delete) in libCacheSim, both sides fed the
trace's rows directly (all policies but Belady, SLRU and LIRS: ``policies.parity.FREES_UNSERVED``);
where a freed key comes back, ARC differs because libCacheSim's remove keeps the ghost, which a
model of that remove checks on every such row (``policies.parity.FREES_EXPLAINED``).
Exit status 0 when every policy but LIRS agrees on every request or differs only as explained,
and LIRS's model of libCacheSim's algorithm misses exactly as libCacheSim (the pool's LIRS can
differ: libCacheSim's can hold more than its capacity; see ``policies/parity.py``), 1 otherwise,
2 on bad input. Needs ``pip install libcachesim``.
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

from cachegym.allocator.errors import CachegymError
from cachegym.envs.paths import resolve_data_path
from cachegym.envs.workloads.formats import (
    FORMATS,
    add_trace_params_option,
    parse_trace_params,
    read_trace,
)


def _number(text: str) -> int | float:
    from cachegym.allocator.errors import ConfigError
    from cachegym.allocator.sizes import parse_capacity

    try:
        return int(text)
    except ValueError:
        try:
            return float(text)
        except ValueError:
            try:
                return parse_capacity(text, "--capacities")  # 512MiB, 10%
            except ConfigError as e:
                raise argparse.ArgumentTypeError(str(e)) from None


def _list(text: str) -> list[str]:
    return [x.strip() for x in text.split(",") if x.strip()]


def main(argv: list[str] | None = None) -> int:
    from cachegym.policies.parity import EXACT, FREES_UNSERVED, LCS_INIT, LCS_MIN_CAPACITY

    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("path", type=Path, help="trace file")
    ap.add_argument("--format", default=None, help=f"one of {FORMATS} (default: from the file name)")
    ap.add_argument("--capacities", type=lambda s: [_number(x) for x in _list(s)],
                    default=[0.01, 0.1],
                    help="comma-separated: sizes (4096, 64MiB, 10GB) or shares of --capacity-of "
                         "(0.1 or 10%%; default 0.01,0.1)")
    ap.add_argument("--capacity-of", default="working_set", choices=("working_set", "peak_live"),
                    help="what a share of --capacities is of: the bytes of every object the trace "
                         "names (working_set, default) or the most bytes live at once (peak_live)")
    ap.add_argument("--policies", type=_list, default=None,
                    help=f"comma-separated, from {','.join(LCS_INIT)} (default: all; with --frees "
                         "all that libCacheSim can delete from)")
    add_trace_params_option(ap)
    ap.add_argument("--frees", action="store_true",
                    help="keep the trace's frees: Pool.free here, libCacheSim's remove there")
    from cachegym.cli import refuse_negative_capacities

    refuse_negative_capacities(ap, sys.argv[1:] if argv is None else argv,
                               lambda prev: prev == "--capacities")
    args = ap.parse_args(argv)
    if args.policies == []:
        ap.error("--policies names none: give some (comma-separated), or leave it out for all")
    if not args.capacities:
        ap.error("--capacities names none: give some (comma-separated)")
    default_policies = args.policies is None
    if default_policies:
        args.policies = [p for p in LCS_INIT if not (args.frees and p in FREES_UNSERVED)]
    try:
        from cachegym.envs.evaluation import check_capacities, resolve_capacity
        from cachegym.policies.parity import compare

        check_capacities("--capacities", args.capacities)
        # '~' is the home folder (quoted, the shell leaves it); a relative path that is not
        # here may name a bundled trace (as `cachegym sim` reads it)
        trace = read_trace(resolve_data_path(os.path.expanduser(str(args.path))), args.format,
                           **parse_trace_params(args.trace_params))
        caps = [resolve_capacity(c, trace, "bytes", args.capacity_of) for c in args.capacities]
        runs = {c: list(args.policies) for c in caps}  # the policies compared at each capacity
        if default_policies:  # (named ones are refused by compare, saying why)
            for p in args.policies:
                least, why = LCS_MIN_CAPACITY.get(p, (1, ""))
                small = [c for c in caps if c < least]
                if small:  # left out only where libCacheSim's cannot run
                    print(f"{p} left out at capacit{'y' if len(small) == 1 else 'ies'} "
                          f"{', '.join(map(str, small))}: libCacheSim's cannot run there ({why}; "
                          f"at least {least} bytes)")
                    for c in small:
                        runs[c].remove(p)
        rows = [r for c in caps if runs[c] for r in compare(trace, runs[c], [c], frees=args.frees)]
        order = {p: i for i, p in enumerate(args.policies)}
        rows.sort(key=lambda r: order[r.policy])  # (stable: by policy, then capacity as given)
    except CachegymError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    print(f"{args.path}: {rows[0].requests if rows else 0} requests "
          f"({'frees as libCacheSim deletes' if args.frees else 'frees dropped'})")
    print(f"{'policy':<8} {'capacity':>12} {'miss ratio':>10} {'libCacheSim':>11} "
          f"{'byte misses':>13} {'libCacheSim':>13} {'differ':>7}")
    failed = 0
    for r in rows:
        n = max(r.requests, 1)
        print(f"{r.policy:<8} {r.capacity:>12} {r.misses / n:>10.4f} {r.lcs_misses / n:>11.4f} "
              f"{r.byte_misses:>13} {r.lcs_byte_misses:>13} {r.differing:>7}")
        model_ok = r.policy in EXACT or r.model_misses == r.lcs_misses
        if r.policy not in EXACT:  # (LIRS: its model is what must agree)
            print(f"  {r.policy} @ {r.capacity}: its model of libCacheSim's algorithm "
                  f"{r.model_misses} misses, libCacheSim {r.lcs_misses}"
                  + ("" if model_ok else " (they must be equal)"))
        if not r.agrees or not model_ok:
            expected = (r.policy not in EXACT and model_ok) or bool(r.explained)
            failed += not expected
            why = ("expected for LIRS: libCacheSim's can hold more than its capacity, after "
                   "which the two caches' contents, and hits, differ either way"
                   if r.policy not in EXACT else r.explained)
            what = (r.first or "the byte-miss counts differ") if not r.agrees else (
                "every request agrees, but the model's misses do not")
            print(f"  {r.policy} @ {r.capacity}: {what}" + (f" ({why})" if expected else ""))
    exact = [r for r in rows if r.policy in EXACT]
    explained = sum(bool(r.explained) for r in exact)
    others = [r for r in rows if r.policy not in EXACT]
    print(f"agree on every request: {sum(r.agrees for r in exact)} of {len(exact)} "
          f"(policy, capacity) pairs{f'; {explained} differ as explained' if explained else ''}"
          f"{'' if not failed else f'; {failed} differ'}"
          + (f" (LIRS apart: {sum(r.agrees for r in others)} of {len(others)} agree, its model "
             f"misses as libCacheSim in {sum(r.model_misses == r.lcs_misses for r in others)}; "
             "libCacheSim's LIRS can exceed its capacity)" if others else ""))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
