#!/usr/bin/env python
"""Train a learned eviction policy (with env=joint, eviction and prefetch) and export it (the
logic: cachegym.policies.training.train.train).

    python scripts/train.py                                  # imitation of FOO's plan (BC + DAgger)
    python scripts/train.py agent=imitation_ppo              # ... then a MaskablePPO fine-tune
    python scripts/train.py agent=ppo agent.total_timesteps=50000
    python scripts/train.py -m agent=ppo,dqn,maskable_ppo seed=0,1   # sweep (joblib launcher)
    python scripts/train.py -m hydra/launcher=slurm ...      # a cluster, by config alone
    python scripts/train.py -m hydra/sweeper=tune            # tune lr and hidden sizes (Optuna)
    python scripts/train.py trace.path=T trace.format=oracleGeneral      # on your trace alone
    python scripts/train.py trace.path=T init_from=OUT/policy.npz        # fine-tune a policy
    python scripts/train.py agent=ppo resume=OUT/ppo.zip                  # continue an SB3 run
    python scripts/train.py agent=ppo env.vec=subproc agent.n_envs=4      # envs in processes
    python scripts/train.py env=joint env.reward=stall env.cost=h100_pcie5 env.capacity_of=peak_live
                                                             # eviction + prefetch, one file

A multirun writes one merged table of the jobs' validation figures (merged.csv, envs.sweep).

The SB3 agents (and imitation_ppo's fine-tune) also save ``OUT/<algo>.zip`` (``sb3 model:
PATH``), which ``resume=`` continues. The last line printed is ``policy: PATH``; evaluate it with
``python scripts/evaluate.py eval.policies=[lru] eval.learned=[PATH]`` (and a joint file's
prefetch head with ``eval.prefetchers=[learned:PATH] eval.presets=[h100_pcie5]``).
"""

from __future__ import annotations

import sys

import hydra
from omegaconf import DictConfig

from cachegym.envs.config import check_list_overrides
from cachegym.envs.sweep import job_failed
from cachegym.policies.training.config import TrainConfig, register_train_configs

register_train_configs()


SCHEMA = TrainConfig  # the config's schema: its list-typed keys (check_list_overrides)


@hydra.main(version_base="1.3", config_path="../conf", config_name="train")
def main(cfg: DictConfig) -> float | None:
    """Train and export; returns the figure a Hydra sweeper maximises: the exported policy's
    validation score, by which the run's ``validation.select_best`` compares its checkpoints
    (in the run's objective, ``env.reward``: traffic, the mean gap closed to the offline bound
    minus the worst shortfall below LRU; misses, the same in misses; stall, minus the stall ratio
    to LRU, with lookahead for a joint network). ``None`` where there is none (no validation
    traces, a failed run),
    which Optuna records as a failed trial (a NaN stops hydra-optuna-sweeper)."""
    from cachegym.policies.training.train import train

    try:
        result = train(cfg)
    except KeyboardInterrupt as e:  # (SIGINT, or SIGTERM while an SB3 agent learns)
        print(getattr(e, "resume_with", "interrupted: the checkpoints so far are in "
                      "OUT/checkpoints (init_from= starts a run from one)"), file=sys.stderr)
        sys.exit(130)
    except Exception as e:  # (in a multirun the other jobs go on: job_failed)
        job_failed(e, "train")
        return None
    print(f"validation: {result['validation']}")
    print(f"outputs: {result['out_dir']}")
    if result.get("sb3_model"):
        print(f"sb3 model: {result['sb3_model']}")
    print(f"policy: {result['policy']}")
    score = result.get("score")
    print(f"score: {score}" + ("" if score is not None else " (no validation: validation.traces "
                                                             "chooses them)"))
    return None if score is None else float(score)


if __name__ == "__main__":
    check_list_overrides(sys.argv[1:], SCHEMA, "train.py")
    main()
