"""``python scripts/bench.py quality``: the learned policy against the heuristics and Belady on
held-out traces (DL traces of models not trained on at 25% and 50% of peak live bytes; Zipf and
scan), with the targets' verdict. All policies replay each trace in the same run.

    python scripts/bench.py quality --policy outputs/main/<run>/train/policy.npz
    python scripts/bench.py quality            # newest main-job policy, else train one first
    python scripts/bench.py quality --train    # train afresh with conf/main.yaml's settings
    python scripts/bench.py quality --broad    # also other workload families (no target)
    python scripts/bench.py quality --zoo      # also DL traces of nine architectures never trained on
"""

from __future__ import annotations

import argparse
import glob
import os
from typing import Any

from envs.paths import PROJECT_ROOT as ROOT


def add_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--policy", help="exported policy file (default: newest outputs/main/*/train/policy.npz)")
    p.add_argument("--train", action="store_true", help="train a policy first (conf/main.yaml training)")
    p.add_argument("--capacities", type=float, nargs="+", default=[0.25, 0.5],
                   help="fractions of peak live bytes (default 0.25 0.5)")
    p.add_argument("--max-requests", type=int, default=None, help="cut every trace to this many rows")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--broad", action="store_true",
                   help="also replay more workload families (mixture, KV cache, embedding, loop, "
                        "uniform, steep Zipf, phase change; reported, no target)")
    p.add_argument("--zoo", action="store_true",
                   help="also DL training traces of nine architectures never trained on (recurrent "
                        "LMs, speech, U-Net, VAE, Mixer, ViT, TCN, DenseNet; reported apart), recorded "
                        "on first use into outputs/recorded/ (about a minute; needs torch)")


def _train(seed: int) -> str:
    from hydra import compose, initialize_config_dir

    from policies.training.config import register_train_configs
    from policies.training.train import train

    register_train_configs()
    with initialize_config_dir(config_dir=os.path.join(ROOT, "conf"), version_base="1.3"):
        cfg = compose("main", overrides=[f"seed={seed}", f"out_dir={ROOT}/outputs/bench_quality/seed{seed}"])
    return str(train(cfg)["policy"])


def run(args: argparse.Namespace) -> dict[str, Any]:
    import logging

    from policies.training.quality import (
        broad_held_out,
        default_held_out,
        format_quality,
        quality_rows,
        verdict,
        zoo_held_out,
    )

    logging.basicConfig(level=logging.WARNING)
    path = args.policy
    if path is None and not args.train:
        found = sorted(glob.glob(os.path.join(ROOT, "outputs", "main", "*", "train", "policy.npz")),
                       key=os.path.getmtime)
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
    rows = quality_rows(path, held, args.capacities, seed=args.seed, progress=True)
    print(format_quality(rows))
    v = verdict(rows)
    print(f"DL traces (default set): mean normalised hit rate {v['dl_mean_normalized_hit_rate']:.3f} (target >= 0.7), "
          f"min {v['dl_min_normalized_hit_rate']:.3f} (target >= 0): "
          f"{'met' if v['dl_target_met'] else 'NOT met'}; learned behind LRU in "
          f"{v['dl_cells_behind_lru']} of {v['dl_cells']} cells")
    if args.zoo:
        print(f"Zoo (DL traces of architectures never trained on): learned behind LRU in "
              f"{v['zoo_cells_behind_lru']} of {v['zoo_cells']} cells, hit ratio "
              f"{v['zoo_mean_gain_over_lru']:+.4f} over LRU on average; normalised hit rate median "
              f"{v['zoo_median_normalized_hit_rate']:.3f}, min {v['zoo_min_normalized_hit_rate']:.3f}")
    print(f"Zipf/scan: worst hit-ratio gap to the best heuristic {v['zipf_scan_worst_gap']:+.4f} "
          f"(target <= 0.02): {'met' if v['zipf_scan_target_met'] else 'NOT met'}")
    if args.broad:
        print(f"Other families (no target): gap to the best heuristic mean {v['other_mean_gap']:+.4f}, "
              f"worst {v['other_worst_gap']:+.4f}; learned behind LRU in "
              f"{v['other_cells_behind_lru']} of {v['other_cells']} cells")
    return {"policy": path, "rows": rows, "verdict": v}
