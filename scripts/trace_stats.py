"""Print a trace's statistics; save its reuse-distance histogram, LRU's miss-ratio curve (PNG)
and the curve's points (mrc.csv) in an output folder.

    cachegym stats data/traces/gpt.npz                # -> outputs/trace_stats/gpt_npz/
    cachegym stats big.oracleGeneral --sample 0.01 --out /tmp/big

The curve is exact (stack distances) up to 2,000,000 requests and SHARDS-sampled above, or
at ``--sample R``; with frees in the trace it is a lower bound on LRU's miss ratio.
"""

from __future__ import annotations

import argparse
import csv
import os
import sys
from pathlib import Path
from typing import Any

from cachegym.allocator.errors import CachegymError
from cachegym.allocator.trace import existing_trace_file
from cachegym.envs.paths import resolve_data_path
from cachegym.envs.workloads.formats import (
    FORMATS,
    add_trace_params_option,
    parse_trace_params,
    read_trace,
)
from cachegym.envs.workloads.stats import (
    SHARDS_MIN_OBJECTS,
    format_stats,
    lru_mrc,
    plot_mrc,
    plot_reuse_histogram,
    shards_rate,
    trace_stats,
)


def _sizes_change(trace: Any) -> bool:
    """Whether some object of ``trace`` is requested with two sizes (a key freed and made anew
    is another object: :meth:`Trace.object_ids`)."""
    import numpy as np

    from cachegym.allocator.trace import Op

    req = trace.op != Op.FREE
    obj = trace.object_ids()[req]
    pairs = np.unique(np.stack([obj, trace.size[req]]), axis=1)
    return bool(pairs.shape[1] != len(np.unique(obj)))


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("path", type=Path, help="trace file")
    ap.add_argument("--format", default=None, help=f"one of {FORMATS} (default: from the file name)")
    ap.add_argument("--out", type=Path, default=None,
                    help="output folder (default: outputs/trace_stats/<trace file name, dots as _>/ here, "
                         "e.g. gpt_npz: x.csv and x.oracleGeneral get folders of their own; created)")
    ap.add_argument("--png", type=Path, default=None,
                    help="reuse-distance histogram path (default: <out>/reuse.png)")
    ap.add_argument("--mode", choices=("bytes", "objects"), default="bytes",
                    help="capacity in bytes, or in objects (every size 1)")
    ap.add_argument("--sample", type=float, default=None,
                    help="SHARDS rate in (0, 1] for the curve (default: exact up to 2M requests)")
    add_trace_params_option(ap)
    args = ap.parse_args(argv)
    if args.sample is not None and not 0 < args.sample <= 1:
        print(f"error: --sample must be a rate in (0, 1] (SHARDS: the share of objects sampled), "
              f"got {args.sample}", file=sys.stderr)
        return 2
    # '~' is the home folder (quoted, the shell leaves it); a relative path that is not here
    # may name a bundled trace (as `cachegym sim` reads it)
    src = resolve_data_path(os.path.expanduser(str(args.path)))
    try:
        existing_trace_file(src)  # (before an output folder is made for it)
    except CachegymError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    # the outputs' places, checked before minutes of work on a large trace
    out = args.out or Path("outputs") / "trace_stats" / args.path.name.replace(".", "_")
    try:
        out.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        print(f"error: cannot create the output folder {out}: {e}; pass --out DIR", file=sys.stderr)
        return 2
    png = args.png or out / "reuse.png"
    if args.png is not None:
        from matplotlib.backend_bases import FigureCanvasBase

        kinds = FigureCanvasBase.get_supported_filetypes()
        suffix = args.png.suffix.lower().lstrip(".")
        if suffix not in kinds:
            print(f"error: --png {args.png}: '.{suffix}' is not an image format matplotlib writes; "
                  f"name a .png (or one of {', '.join(sorted(kinds))})", file=sys.stderr)
            return 2
        if not args.png.parent.is_dir() or not os.access(args.png.parent, os.W_OK):
            print(f"error: --png {args.png}: {args.png.parent} is not a writable folder",
                  file=sys.stderr)
            return 2
    try:
        trace = read_trace(src, args.format, **parse_trace_params(args.trace_params))
        stats = trace_stats(trace)
        curve = lru_mrc(trace, args.mode, sample=args.sample)
    except CachegymError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    print(format_stats(stats))
    rate = shards_rate(trace, args.sample)
    m = round(1 / rate)
    if args.sample is not None and rate > args.sample:
        print(f"note: --sample {args.sample} keeps too few of the trace's {stats.unique_objects} objects "
              f"for a curve; sampled at {rate:.3g} instead ({SHARDS_MIN_OBJECTS} objects or all)")
    how = "exact" if m <= 1 else f"SHARDS, 1 in {m} objects"
    if args.mode == "bytes" and _sizes_change(trace):  # (stack distances take each object's last size)
        how = "approximate: objects change size" if m <= 1 else f"{how}; objects change size"
        print(f"note: objects of {trace.name} change size between requests: the curve's stack "
              "distances take each object's size at its last request, an approximation of LRU here")
    with open(out / "mrc.csv", "w", newline="") as f:  # (the figures first, then the plots)
        w = csv.writer(f)
        w.writerow([f"capacity_{args.mode}", "lru_miss_ratio"])
        w.writerows(zip(curve.capacities.tolist(), curve.miss_ratios.tolist()))
    plot_reuse_histogram(trace, str(png))
    plot_mrc(curve, str(out / "mrc.png"), args.mode,
             title=f"{trace.name}: LRU miss ratio ({how}{', frees: lower bound' if stats.frees else ''})")
    print(f"reuse-distance histogram -> {png}")
    print(f"LRU miss-ratio curve ({args.mode}, {how}) -> {out / 'mrc.png'}, {out / 'mrc.csv'}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
