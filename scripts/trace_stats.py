"""Print a trace's statistics and save its reuse-distance histogram.

    python scripts/trace_stats.py data/traces/gpt.npz --png gpt_reuse.png
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from allocator.errors import CachegymError
from envs.workloads.formats import FORMATS, read_trace
from envs.workloads.stats import format_stats, plot_reuse_histogram, trace_stats


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("path", type=Path, help="trace file")
    ap.add_argument("--format", default=None, help=f"one of {FORMATS} (default: from the file name)")
    ap.add_argument("--png", type=Path, default=None,
                    help="reuse-distance histogram (default: <trace>_reuse.png next to the trace)")
    ap.add_argument("--obj-id-col", type=int, default=None, help="csv: 1-based id column")
    ap.add_argument("--obj-size-col", type=int, default=None, help="csv: 1-based size column")
    ap.add_argument("--time-col", type=int, default=None, help="csv: 1-based time column")
    args = ap.parse_args(argv)
    options = {k: v for k, v in (("obj_id_col", args.obj_id_col), ("obj_size_col", args.obj_size_col),
                                 ("time_col", args.time_col)) if v is not None}
    try:
        trace = read_trace(args.path, args.format, **options)
    except CachegymError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    print(format_stats(trace_stats(trace)))
    png = args.png or args.path.with_name(args.path.stem + "_reuse.png")
    plot_reuse_histogram(trace, str(png))
    print(f"reuse-distance histogram -> {png}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
