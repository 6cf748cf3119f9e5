#!/usr/bin/env python
"""The main job (``make demo``): train a learned eviction policy for traffic (imitation of the
offline ``foo`` teacher, FOO's plan, then a short RL fine-tune on the traffic reward) and, in a
second short run (``env=joint``, stall under a timing preset), a prefetch head; export both heads in
one file; evaluate it on held-out workloads against LRU, LFU, ARC, S3-FIFO, SLRU, GDSF and Belady,
each without prefetch, with lookahead, with history and with the file's prefetch head (stall
beside traffic), print the table, a summary of the deployed policy per held-out cell, and save the plots.

    python scripts/main.py                      # outputs under outputs/main/<time>/
    python scripts/main.py out_dir=DIR seed=1
    python scripts/main.py main.prefetch=false  # eviction only (no prefetch stage)

The logic is policies.training.main_job.run_main(cfg); the last line is ``policy: PATH``.
"""

from __future__ import annotations

import os
import sys

import hydra
from omegaconf import DictConfig

from cachegym.envs.config import check_list_overrides
from cachegym.envs.sweep import job_failed
from cachegym.policies.training.config import TrainConfig, register_train_configs

register_train_configs()


SCHEMA = TrainConfig  # the config's schema: its list-typed keys (check_list_overrides)


@hydra.main(version_base="1.3", config_path="../conf", config_name="main")
def main(cfg: DictConfig) -> None:
    from cachegym.policies.training.main_job import run_main

    try:
        res = run_main(cfg)
    except Exception as e:  # (in a multirun the other jobs go on: job_failed)
        job_failed(e, "main")
        return
    print(res["table"])
    if res["summary"]:
        print(res["summary"])
    print(f"finished in {res['wall_s']:.0f} s")
    print(f"outputs: {res['out_dir']} (results: {res['csv']}; plots: {len(res['plots'])} in "
          f"{os.path.dirname(res['csv'])}; training logs: {res['train']['out_dir']})")
    print(f"policy: {res['policy']}")


if __name__ == "__main__":
    check_list_overrides(sys.argv[1:], SCHEMA, "main.py")
    main()
