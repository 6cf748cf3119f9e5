#!/usr/bin/env python
"""Evaluate eviction and prefetch policies over traces, capacities and cost presets.

    python scripts/evaluate.py trace.path=FILE trace.format=oracleGeneral eval.mode=bytes \\
        eval.capacities=[134217728,268435456] eval.policies=[lru,fifo,lfu,belady] out_dir=DIR
    python scripts/evaluate.py -m trace.path=A,B            # a parallel sweep (joblib)

Writes results.csv, results.json, config.yaml and PNG plots; the logic is
envs.evaluation.evaluate(cfg). A multirun also writes one merged table (merged.csv: mean and 95%
interval over the jobs, envs.sweep), in out_dir or the sweep directory; a failed job is named
there in a warning while the others go on.
Each completed run is kept in OUT/runs.jsonl as it finishes: after SIGINT or SIGTERM, the same
command with eval.resume=true runs only what is missing.
"""

from __future__ import annotations

import sys

import hydra
from omegaconf import DictConfig

from cachegym.envs.config import EvaluateConfig, check_list_overrides, register_configs
from cachegym.envs.evaluation import evaluate
from cachegym.envs.sweep import job_failed, terminate_as_interrupt

register_configs()


SCHEMA = EvaluateConfig  # the config's schema: its list-typed keys (check_list_overrides)


@hydra.main(version_base="1.3", config_path="../conf", config_name="evaluate")
def main(cfg: DictConfig) -> None:
    try:
        with terminate_as_interrupt():  # SIGTERM as SIGINT: the sweep stops between lines it wrote
            result = evaluate(cfg)
    except KeyboardInterrupt as e:
        print(f"interrupted ({str(e) or 'SIGINT'}): the completed runs are kept in runs.jsonl; run the "
              "same command with eval.resume=true to finish", file=sys.stderr)
        sys.exit(130)
    except Exception as e:  # (in a multirun the other jobs go on: job_failed)
        job_failed(e, "evaluate")
        return
    print(result["table"])
    print(f"results: {result['csv']}")


if __name__ == "__main__":
    check_list_overrides(sys.argv[1:], SCHEMA, "evaluate.py")
    main()
