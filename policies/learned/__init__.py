"""Learned (exported) policies: one self-describing file, loaded with NumPy alone.

    policy_file   the file format: save_policy_file, read_policy_file (load and verify)
    network       the forward pass: CandidateScorer (over policies.kernels.Scorer)
    prefetch_head PrefetchHead: a file's prefetch scorer deciding prefetches after each access
    models        the guards' experts: registered policies (LRU, S3-FIFO, GDSF, LFU) and the
                  network alone, each deciding in a shadow pool of the same core (Expert)
    guards        ShadowGuard (the default), Guard (trial windows), LRUGuard; make_guard
                  builds one by name (GuardName: conf/policy/guard/'s options)
    policy        LearnedPolicy: the network deciding evictions in the pool, under a guard, and
                  its prefetch head (if the file has one) answering prefetch()

Each module imports only those above it in this list.
"""

from __future__ import annotations

from cachegym.policies.learned.guards import (
    GUARD_NAMES,
    Guard,
    GuardName,
    LRUGuard,
    ShadowGuard,
    make_guard,
)
from cachegym.policies.learned.network import CandidateScorer
from cachegym.policies.learned.policy import DEFAULT_BUDGET_US, LearnedPolicy
from cachegym.policies.learned.policy_file import (
    FORMAT,
    FORMAT_VERSION,
    diff_feature_spec,
    read_policy_file,
    save_policy_file,
    weights_checksum,
)
from cachegym.policies.learned.prefetch_head import PrefetchHead

__all__ = [
    "FORMAT", "FORMAT_VERSION", "CandidateScorer", "LearnedPolicy", "save_policy_file",
    "read_policy_file", "weights_checksum", "diff_feature_spec", "DEFAULT_BUDGET_US", "Guard", "LRUGuard",
    "ShadowGuard", "GuardName", "GUARD_NAMES", "make_guard", "PrefetchHead",
]
