"""``python scripts/bench.py quality``: the learned policy against the heuristics and Belady on
held-out traces (DL traces of models not trained on at 25% and 50% of peak live bytes; Zipf and
scan), in bytes copied (traffic) and gap closed to an offline bound (FOO; LFOO-L past 30,000
requests, PFOO-L past 5M), with the targets' verdict. All policies replay each trace in the same run.

    python scripts/bench.py quality --policy outputs/main/<run>/train/policy.npz
    python scripts/bench.py quality            # newest main-job policy, else train one first
    python scripts/bench.py quality --train    # train afresh with conf/main.yaml's settings
    python scripts/bench.py quality --broad    # also other workload families (no target)
    python scripts/bench.py quality --zoo      # also DL traces of nine architectures never trained on
    python scripts/bench.py quality --broad --traces web_cdn_s777   # only these held-out traces
"""

from __future__ import annotations

import argparse
import glob
import os
from typing import Any

from cachegym.envs.paths import CONF_DIR


def add_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--policy", help="exported policy file (default: the newest outputs/main/*/train/policy.npz in this folder or the checkout)")
    p.add_argument("--train", action="store_true", help="train a policy first (conf/main.yaml training)")
    p.add_argument("--capacities", type=float, nargs="+", default=[0.25, 0.5],
                   help="fractions of peak live bytes (default 0.25 0.5)")
    p.add_argument("--max-requests", type=int, default=None, help="cut every trace to this many rows")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--broad", action="store_true",
                   help="also replay more workload families (mixture, KV cache, embedding, loop, "
                        "uniform, steep Zipf, phase change, long Zipf, web CDN and web sessions; "
                        "reported, no target)")
    p.add_argument("--traces", nargs="+", metavar="NAME",
                   help="replay only these held-out traces, by the names the table prints "
                        "(default: all of the sets asked for)")
    p.add_argument("--zoo", action="store_true",
                   help="also DL training traces of nine architectures never trained on (recurrent "
                        "LMs, speech, U-Net, VAE, Mixer, ViT, TCN, DenseNet; reported apart), recorded "
                        "on first use into outputs/recorded/ (about a minute; needs torch)")
    p.add_argument("-j", "--jobs", type=int, default=0,
                   help="runs replayed at once in worker processes (default 0: one per CPU core; "
                        "1: one after the other); the same figures but for the decision latency")


def _train(seed: int) -> str:
    from hydra import compose, initialize_config_dir

    from cachegym.policies.training.config import register_train_configs
    from cachegym.policies.training.train import train

    register_train_configs()
    with initialize_config_dir(config_dir=CONF_DIR, version_base="1.3"):
        cfg = compose("main", overrides=[f"seed={seed}", f"out_dir={os.path.abspath('outputs')}/bench_quality/seed{seed}"])
    return str(train(cfg)["policy"])


def run(args: argparse.Namespace) -> dict[str, Any]:
    import logging

    from cachegym.allocator.errors import ConfigError
    from cachegym.envs.evaluation import check_jobs
    from cachegym.policies.training.quality import (
        broad_held_out,
        default_held_out,
        format_quality,
        quality_rows,
        verdict,
        zoo_held_out,
    )

    logging.basicConfig(level=logging.WARNING)
    off = [c for c in args.capacities if not 0 < c <= 1]  # (3 was taken as 3 bytes)
    if off:
        raise ConfigError(f"--capacities: {off} are not fractions of peak live bytes in (0, 1]")
    path = args.policy
    if path is None and not args.train:  # the newest main job's, here or in the checkout
        from cachegym.envs.paths import PROJECT_ROOT

        roots = ["."] + ([PROJECT_ROOT] if PROJECT_ROOT else [])
        found = sorted({os.path.abspath(f) for r in roots for f in glob.glob(
            os.path.join(r, "outputs", "main", "*", "train", "policy.npz"))}, key=os.path.getmtime)
        path = found[-1] if found else None
    if path is None:
        print("training a policy first (conf/main.yaml settings) ...")
        path = _train(args.seed)
    print(f"policy: {path}")
    held = default_held_out(args.max_requests)
    if args.zoo:
        held += zoo_held_out(max_requests=args.max_requests)
    if args.broad:
        held += broad_held_out(args.max_requests)
    if args.traces:
        names = [h.trace.name for h in held]
        bad = [n for n in args.traces if n not in names]
        if bad:
            raise ConfigError(f"--traces: {bad} not among the held-out traces asked for; choose "
                              f"from {names}")
        held = [h for h in held if h.trace.name in args.traces]
    rows = quality_rows(path, held, args.capacities, seed=args.seed, progress=True,
                        jobs=check_jobs(args.jobs, "--jobs"))
    print(format_quality(rows))
    v = verdict(rows)

    def fam(name: str, label: str) -> None:
        if v[f"{name}_cells"]:
            print(f"{label}: {v[f'{name}_cells']} cells; gap closed to the bound (traffic) mean "
                  f"{v[f'{name}_mean_gap_closed_traffic']:.3f}, min {v[f'{name}_min_gap_closed_traffic']:.3f}; "
                  f"traffic vs the best heuristic mean {v[f'{name}_mean_traffic_vs_best']:+.2%}, worst "
                  f"{v[f'{name}_worst_traffic_vs_best']:+.2%}; behind the best heuristic in "
                  f"{v[f'{name}_cells_behind_best']}, behind LRU in {v[f'{name}_cells_behind_lru']}")

    fam("dl", "DL traces (default set)")
    fam("zoo", "Zoo (DL traces of architectures never trained on)")
    fam("zipf_scan", "Zipf/scan")
    fam("other", "Other families (no target)")
    cells = {"dl": v["dl_cells"] + v["zoo_cells"], "zipf_scan": v["zipf_scan_cells"]}

    def met(name: str) -> str:  # (a target none of whose cells ran, e.g. under --traces: no verdict)
        return "no cells" if not cells[name] else "met" if v[f"{name}_target_met"] else "NOT met"

    print(f"DL target (traffic <= best heuristic in every cell, mean gap closed >= 0.5, min >= 0): "
          f"{met('dl')}; Zipf/scan target (<= 1% more traffic than the best heuristic): "
          f"{met('zipf_scan')}")
    return {"policy": path, "rows": rows, "verdict": v}


if __name__ == "__main__":  # (the same as `python scripts/bench.py quality ...`)
    import sys

    from cachegym.scripts.bench import main

    sys.exit(main(["quality", *sys.argv[1:]]))
