#!/usr/bin/env python
"""Export a trained agent to a policy file that ``LearnedPolicy.load`` reads with NumPy alone.

    cachegym export outputs/train/<run>/checkpoints/step_4.npz --out policy.npz
    cachegym export model.zip --algo maskable_ppo --out policy.npz [--K 32]
    cachegym export outputs/train/<run>/maskable_ppo.zip --out policy.npz  # a run's settings
    cachegym export policy.npz --onnx policy.onnx      # also (or only) an ONNX model
    cachegym export evict.npz --prefetch-from joint.npz --out both.npz   # one file, two heads

(``scripts/train.py`` and the main job already export their final policy; this script turns a
checkpoint, or an SB3 model saved with ``model.save()``, into a deployable file; ``--onnx`` writes
the same network as an ONNX model, for serving outside Python -- it needs the ``onnx`` package;
``--prefetch-from`` puts the prefetch head of a policy trained with ``env=joint`` beside the
eviction scorer of the source, as the main job does.)

An SB3 .zip is read without running its code: only the tensors of its policy.pth
(torch.load(weights_only=True)) and plain JSON fields. stable-baselines3's own load unpickles
entries of the zip, so a crafted file runs any command it likes; --trust-pickle uses it anyway,
for files you made yourself only.
The logic is ``policies.training.export.export_file`` and ``export_onnx``.
"""

from __future__ import annotations

import argparse
import os
import sys

from cachegym.allocator.errors import CachegymError


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("source", help="checkpoint/policy .npz, or SB3 model .zip")
    p.add_argument("--out", help="policy file to write (.npz); may be left out with --onnx and a "
                   "policy .npz source")
    p.add_argument("--onnx", metavar="PATH", help="also write the network as an ONNX model (inputs "
                   "candidates (N, K, F) and globals (N, G), output scores (N, K))")
    p.add_argument("--K", type=int, default=None, help="candidates per eviction decision (default: "
                   "the source's; a prefetch head keeps its own)")
    p.add_argument("--candidate-rule", choices=["lru", "sample"], default=None,
                   help="how a decision picks its candidates (default: the source's; for an SB3 "
                        ".zip the env.candidates of the training run's config.yaml beside it, else "
                        "Evict-v0's default, sample)")
    p.add_argument("--prefetch-from", metavar="POLICY", default=None,
                   help="a policy file with a prefetch head (trained with env=joint): its head is "
                        "written beside the source's eviction scorer (same feature specification "
                        "and versions, or it is refused)")
    p.add_argument("--algo", choices=["ppo", "maskable_ppo", "dqn"], default=None,
                   help="for an SB3 .zip (default: the one its policy class names, read without "
                        "unpickling, else the training run's config.yaml beside it)")
    p.add_argument("--trust-pickle", action="store_true",
                   help="load an SB3 .zip with stable-baselines3's load, which unpickles (runs code "
                        "from) the file: only for files you made yourself (default: read its "
                        "tensors only)")
    args = p.parse_args(argv)
    if args.out is None and not (args.onnx and args.source.endswith(".npz")):
        p.error("--out is required (it may be left out only with --onnx and a policy .npz source)")
    from cachegym.policies.training.export import export_file, export_onnx

    try:
        from cachegym.allocator.files import file_to_write

        for out in (args.out, args.onnx):  # both checked before either is written
            if out is not None:
                file_to_write(out)
        path = args.source
        if args.out is not None:
            path = export_file(args.source, args.out, K=args.K, candidate_rule=args.candidate_rule,
                               algo=args.algo, trust_pickle=args.trust_pickle,
                               prefetch_from=args.prefetch_from)
        onnx_path = export_onnx(path, args.onnx) if args.onnx else None
    except CachegymError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    except OSError as e:  # an output that cannot be written (a directory in the way, permissions)
        print(f"error: cannot write {e.filename!r}: {e.strerror}; give --out/--onnx paths in a "
              "writable directory", file=sys.stderr)
        return 2
    if onnx_path is not None:
        print(f"onnx: {os.path.abspath(onnx_path)}")
    if args.out is not None:
        print(f"policy: {os.path.abspath(path)}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
