"""``python scripts/bench.py guard``: requests per second of an exported policy under its guard
(default: the ShadowGuard) replaying a bundled DL trace tiled to ``--requests`` (default 1M) in a
pool of ``--capacity`` of its peak live bytes; with ``--baseline DIR``, the same replay under the
code of another checkout (its ``allocator``/``policies`` built, e.g. the commit before a change),
side by side in the same run: each measurement is a fresh process, the two checkouts alternate
``--repeat`` times, and the medians are compared (the hits and misses must match where results
did not change). Requests per second are per second of the process's CPU time (what a loaded
machine changes least); per second of wall time too.

Each pair of measurements (one per checkout) runs with environments and argument lists of the
same size, padded by the same random amount, drawn again for each repeat: where a process's
stack starts depends on their size, and that alone moved a replay here by up to 10% (the same
code measured 89,000 and 99,000 requests/s with 0 and 1,000 bytes of padding), which differing
checkout paths would otherwise charge to one side.

    python scripts/bench.py guard [--policy PATH] [--trace gpt] [--requests 1000000]
    python scripts/bench.py guard --baseline ../old-checkout --repeat 3
"""

from __future__ import annotations

import argparse
import json
import os
import random
import statistics
import subprocess
import sys
import time
from typing import Any

from cachegym.envs.paths import PROJECT_ROOT, golden_policy

ROOT = PROJECT_ROOT or ""  # a checkout's: this benchmark compares checkouts (run() says so)


def add_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--policy", default=None,
                   help="exported policy file (default: the goldens' tests/golden/policy.npz)")
    p.add_argument("--guard", default="shadow", help="guard (conf/policy/guard/: shadow, trial, lru, none)")
    p.add_argument("--trace", nargs="+", default=["gpt"], help="bundled traces (data/traces/NAME.npz)")
    p.add_argument("--requests", type=int, default=1_000_000, help="requests per replay (default 1M)")
    p.add_argument("--capacity", type=float, default=0.25, help="fraction of peak live bytes (default 0.25)")
    p.add_argument("--repeat", type=int, default=1, help="measurements per checkout (default 1)")
    p.add_argument("--baseline", metavar="DIR", help="another checkout to measure side by side")


def measure(root: str, policy: str, guard: str, trace: str, requests: int, capacity: float) -> dict[str, Any]:
    """One replay in this process, with the code importable here (the child's work)."""
    import numpy as np

    from cachegym.allocator.pool import Pool
    from cachegym.allocator.trace import Trace
    from cachegym.envs.workloads import read_trace
    from cachegym.policies.registry import make_eviction

    t = read_trace(os.path.join(root, "data", "traces", f"{trace}.npz"))
    idx = np.resize(np.arange(len(t)), requests)  # the trace again and again
    tiled = Trace.from_arrays(t.key[idx], t.size[idx], t.op[idx],
                              kind=None if t.kind is None else t.kind[idx])
    cap = max(1, int(capacity * t.peak_live_bytes()))
    pol = make_eviction("learned", path=policy, guard=guard)
    pool = Pool(cap, pol, placement="bytes", oversize="bypass")
    from cachegym.allocator.pool import COMPILED

    t0, c0 = time.perf_counter(), time.process_time()
    st = pool.replay(tiled)
    dt, cpu = time.perf_counter() - t0, time.process_time() - c0
    n = st.hits + st.misses  # (the accesses: a recorded trace's frees are rows too)
    return {"req_per_s": n / cpu, "wall_req_per_s": n / dt, "cpu_s": cpu, "rows": requests,
            "hits": st.hits, "misses": st.misses, "compiled": bool(COMPILED)}


TARGET = 100_000
"""Issues #22 and #24: the deployed (guarded) policy replays at least 100,000 requests/s."""

_PAD = "CACHEGYM_BENCH_PAD"
"""An environment variable of filler (see the module's docstring)."""


def _child(root: str, args: argparse.Namespace, trace: str, pad: int = 0) -> dict[str, Any]:
    """One measurement of the checkout ``root`` in a fresh process, its environment padded with
    ``pad`` bytes."""
    env = dict(os.environ, PYTHONPATH=root, **{_PAD: "x" * pad})
    cmd = [sys.executable, os.path.abspath(__file__), "--child", root, args.policy, args.guard, trace,
           str(args.requests), str(args.capacity)]
    out = subprocess.run(cmd, env=env, cwd=root, capture_output=True, text=True)
    if out.returncode != 0:
        from cachegym.allocator.errors import ConfigError

        lines = out.stderr.strip().splitlines()
        raise ConfigError(f"the replay under {root} failed: {lines[-1] if lines else out.returncode}")
    return json.loads(out.stdout.strip().splitlines()[-1])  # type: ignore[no-any-return]


def run(args: argparse.Namespace) -> dict[str, Any]:
    from cachegym.allocator.errors import ConfigError
    from cachegym.envs.config import guard_node

    if not ROOT:
        raise ConfigError("bench guard measures checkouts of the repository side by side (this "
                          "one and --baseline): run it in a checkout (git clone; make install)")
    # checked here, in the caller's folder (each replay runs in its checkout's: a relative
    # --policy named another file there, or none)
    args.policy = args.policy or golden_policy()
    if not os.path.isfile(args.policy):
        raise ConfigError(f"--policy {args.policy!r}: no such file; give an exported policy file")
    args.policy = os.path.abspath(args.policy)
    guard_node(args.guard, "--guard")
    for trace in args.trace:
        if not os.path.isfile(os.path.join(ROOT, "data", "traces", f"{trace}.npz")):
            raise ConfigError(f"--trace {trace!r}: not a bundled trace (data/traces/NAME.npz)")
    trees = {"this": ROOT}
    if args.baseline:
        base = os.path.abspath(args.baseline)
        if not os.path.isdir(os.path.join(base, "policies")):
            raise ConfigError(f"--baseline {args.baseline!r}: not a checkout of this project (no "
                              "policies/ in it)")
        trees["baseline"] = base
    figures: dict[str, Any] = {"requests": args.requests, "guard": args.guard, "traces": {}}
    # the root's path is in the environment (PYTHONPATH) and the arguments: padded to the longest
    size = {name: len(os.fsencode(root)) for name, root in trees.items()}  # (bytes, not characters)
    longest = max(size.values())
    rng = random.Random(0)
    for trace in args.trace:
        runs: dict[str, list[dict[str, Any]]] = {name: [] for name in trees}
        for _ in range(args.repeat):
            pad = rng.randrange(4096)  # the same for both checkouts, another for each repeat
            for name, root in trees.items():  # alternating: load changes hit both alike
                r = _child(root, args, trace, pad + 2 * (longest - size[name]))
                runs[name].append(r)
                print(f"{trace:>14} {name:>8}: {r['req_per_s']:>9,.0f} requests/s of CPU time "
                      f"({r['wall_req_per_s']:,.0f} of wall time; hits {r['hits']:,}, misses "
                      f"{r['misses']:,})", flush=True)
        row: dict[str, Any] = {name: {"req_per_s": statistics.median(r["req_per_s"] for r in rs),
                      "hits": rs[0]["hits"], "misses": rs[0]["misses"],
                      "compiled": rs[0].get("compiled")} for name, rs in runs.items()}
        interpreted = [name for name in row if row[name]["compiled"] is False]
        if interpreted:  # (an unbuilt checkout measured 52x slower: no change of the code's)
            print(f"{trace:>14}   note: the loop ran interpreted under {', '.join(interpreted)} "
                  "(not built there: make install); the figures compare builds, not code")
        if "baseline" in row:
            row["speedup"] = row["this"]["req_per_s"] / row["baseline"]["req_per_s"]
            row["same_results"] = (row["this"]["hits"], row["this"]["misses"]) == (
                row["baseline"]["hits"], row["baseline"]["misses"])
            print(f"{trace:>14}   median: {row['this']['req_per_s']:,.0f} vs "
                  f"{row['baseline']['req_per_s']:,.0f} requests/s: x{row['speedup']:.2f}"
                  f"{'' if row['same_results'] else ' (results differ)'}")
        figures["traces"][trace] = row
        got = row["this"]["req_per_s"]
        print(f"{trace:>14}   target (issues #22, #24): {TARGET:,} requests/s of the deployed "
              f"policy: {'met' if got >= TARGET else 'NOT met'} (x{got / TARGET:.2f})")
    figures["target_req_per_s"] = TARGET
    return figures



if __name__ == "__main__" and sys.argv[1:2] == ["--child"]:
    root_, policy_, guard_, trace_, n_, cap_ = sys.argv[2:8]
    print(json.dumps(measure(root_, policy_, guard_, trace_, int(n_), float(cap_))))
elif __name__ == "__main__":  # (the same as `python scripts/bench.py guard ...`)
    from cachegym.scripts.bench import main

    sys.exit(main(["guard", *sys.argv[1:]]))
