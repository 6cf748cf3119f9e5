#!/usr/bin/env python
"""Train a learned eviction policy (with env=joint, eviction and prefetch) and export it (the
logic: cachegym.policies.training.train.train).

    python scripts/train.py                                  # Belady imitation (BC + DAgger)
    python scripts/train.py agent=imitation_ppo              # ... then a MaskablePPO fine-tune
    python scripts/train.py agent=ppo agent.total_timesteps=50000
    python scripts/train.py -m agent=ppo,dqn,maskable_ppo seed=0,1   # sweep (joblib launcher)
    python scripts/train.py -m hydra/launcher=slurm ...      # a cluster, by config alone
    python scripts/train.py env=joint env.reward=stall env.cost=h100_pcie5 env.capacity_of=peak_live
                                                             # eviction + prefetch, one file

The last line printed is ``policy: PATH``; evaluate it with
``python scripts/evaluate.py eval.policies=[lru] eval.learned=[PATH]`` (and a joint file's
prefetch head with ``eval.prefetchers=[learned:PATH] eval.presets=[h100_pcie5]``).
"""

from __future__ import annotations

import logging
import sys

import hydra
from omegaconf import DictConfig

from cachegym.allocator.errors import CachegymError
from cachegym.policies.training.config import register_train_configs

register_train_configs()


@hydra.main(version_base="1.3", config_path="../conf", config_name="train")
def main(cfg: DictConfig) -> float:
    """Train and export; returns the objective a Hydra sweeper maximises: the exported policy's
    validation gap closed to the offline bound in traffic (NaN without validation traces)."""
    from cachegym.policies.training.train import train

    try:
        result = train(cfg)
    except CachegymError as e:
        logging.getLogger("train").debug("failed", exc_info=True)
        print(f"error: {e}", file=sys.stderr)
        sys.exit(2)
    print(f"validation: {result['validation']}")
    print(f"outputs: {result['out_dir']}")
    print(f"policy: {result['policy']}")
    return float((result["validation"] or {}).get("gap_closed_traffic", float("nan")))


if __name__ == "__main__":
    main()
