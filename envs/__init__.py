"""Gymnasium environments over the pool, and workloads (traces, generators, recorder)."""
