"""Record the tensor-level access trace of a ready-made PyTorch workload on CPU.

    cachegym record gpt --steps 4 --seed 0 --out gpt.npz
"""

from __future__ import annotations

import argparse
import logging
import sys
from pathlib import Path


def _seed(text: str) -> int:
    try:
        n = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"must be an integer, got {text!r}") from None
    if not 0 <= n < 2**63:  # (torch's seed is a 64-bit integer: larger ones overflowed in it)
        raise argparse.ArgumentTypeError(f"must be an integer in 0..2**63-1, got {n}")
    return n


def _out_path(out: Path) -> Path | str:
    """``--out`` as the ``.npz`` file it will be (``.npz`` added to a name without a suffix),
    or the reason it cannot be one."""
    if str(out) in ("", ".") or out.is_dir():
        return f"--out {str(out)!r} is a folder; give a file name, e.g. {out / 'trace.npz'}"
    if out.suffix == "":
        out = out.with_name(out.name + ".npz")
    elif out.suffix.lower() != ".npz":
        return (f"--out {out}: the recorder writes .npz traces (with their kind, step and compute "
                f"columns); give {out.with_suffix('.npz')}")
    if out.is_dir():
        return f"--out {out} is a folder; give a file name"
    return out


def _positive(text: str) -> int:
    try:
        n = int(text)
    except ValueError:  # (argparse said "invalid _positive value")
        raise argparse.ArgumentTypeError(f"must be an integer >= 1, got {text!r}") from None
    if n < 1:
        raise argparse.ArgumentTypeError(f"must be an integer >= 1, got {n}")
    return n


def main(argv: list[str] | None = None) -> int:
    import torch

    from cachegym.allocator.errors import CachegymError
    from cachegym.envs.workloads.models import WORKLOADS, make_workload
    from cachegym.envs.workloads.recorder import record

    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("model", choices=sorted(WORKLOADS), help="ready-made workload")
    ap.add_argument("--steps", type=_positive, default=3, help="iterations to record (default 3)")
    ap.add_argument("--seed", type=_seed, default=0, help="seed of model, batches and recording")
    ap.add_argument("--out", type=Path, required=True, help="output .npz trace (.npz is added to "
                    "a name without a suffix)")
    ap.add_argument("--inference", action="store_true", help="forward passes only, no optimizer")
    ap.add_argument("--threads", type=_positive, default=1, help="torch CPU threads (default 1)")
    args = ap.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    out = _out_path(args.out)  # (checked before the recording's minutes)
    if isinstance(out, str):
        print(f"error: {out}", file=sys.stderr)
        return 2

    torch.set_num_threads(args.threads)
    w = make_workload(args.model, args.seed)
    opt = None if args.inference else w.optimizer
    meta = {"workload": args.model, "description": w.description, "inference": args.inference,
            "command": " ".join(["python", "scripts/record_trace.py", *(argv or sys.argv[1:])])}
    try:
        trace = record(w.model, opt, w.make_batch, w.loss_fn, steps=args.steps, seed=args.seed,
                       name=out.stem, meta=meta)
        out.parent.mkdir(parents=True, exist_ok=True)
        trace.save(out)
    except CachegymError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    except OSError as e:  # --out cannot be written (a file where its directory should be, permissions)
        print(f"error: cannot write {str(out)!r}: {e.strerror}; give --out in a writable directory",
              file=sys.stderr)
        return 2
    logging.info("%s: %d events, %d objects, peak live %d bytes -> %s", args.model, len(trace),
                 int(trace.object_ids().max()) + 1, trace.peak_live_bytes(), out)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
