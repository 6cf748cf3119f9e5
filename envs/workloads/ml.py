"""Seeded generators of accelerator-memory workloads: DL training, LLM KV cache, embeddings.

Same conventions as :mod:`envs.workloads.synthetic`: ``seed`` feeds ``np.random.default_rng``
only, and ``meta`` records the generator name and parameters. Keys reused after a free name new
objects (the :class:`Trace` semantics), as a real allocator reuses addresses.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from cachegym.allocator.trace import Kind, Op, Trace
from cachegym.envs.workloads.synthetic import _check, make_trace, zipf_ranks

__all__ = ["dl_training", "llm_kv_cache", "embedding"]

_R, _W, _F = int(Op.READ), int(Op.WRITE), int(Op.FREE)


@dataclass
class _Events:
    """Append-only event columns (a generator's scratch buffer)."""

    key: list[int] = field(default_factory=list)
    size: list[int] = field(default_factory=list)
    op: list[int] = field(default_factory=list)
    ns: list[int] = field(default_factory=list)
    kind: list[int] = field(default_factory=list)
    step: list[int] = field(default_factory=list)

    def add(self, key: int, size: int, op: int, ns: float, kind: int, step: int) -> None:
        self.key.append(key)
        self.size.append(size)
        self.op.append(op)
        self.ns.append(round(ns))
        self.kind.append(kind)
        self.step.append(step)

    def extend(self, key: np.ndarray, size: int, op: int, ns: float, kind: int, step: int) -> None:
        n = len(key)
        self.key.extend(key.tolist())
        self.size.extend([size] * n)
        self.op.extend([op] * n)
        self.ns.extend([round(ns)] * n)
        self.kind.extend([kind] * n)
        self.step.extend([step] * n)

    def trace(self, name: str, params: dict[str, object]) -> Trace:
        return make_trace(name, params, np.array(self.key, np.int64), np.array(self.size, np.int64),
                          np.array(self.op, np.uint8), compute_ns=np.array(self.ns, np.int64),
                          kind=np.array(self.kind, np.uint8), step=np.array(self.step, np.int64))


# ---------------------------------------------------------------------- DL training
def dl_training(
    n_layers: int = 8,
    hidden: int = 1024,
    batch_tokens: int = 2048,
    steps: int = 3,
    act_factor: float = 4.0,
    n_optimizer_states: int = 2,
    bytes_per_elem: int = 4,
    tflops: float = 50.0,
    mem_gbps: float = 2000.0,
    jitter: float = 0.2,
    *,
    seed: int = 0,
) -> Trace:
    """A periodic training loop over ``n_layers`` layers, ``steps`` iterations.

    Per layer ``l`` (sizes jittered per layer by ``exp(N(0, jitter))``): parameters of
    ``4 * hidden**2`` elements, activations of ``batch_tokens * hidden * act_factor`` elements,
    gradients as large as parameters, ``n_optimizer_states`` optimizer tensors as large as
    parameters (Adam 2, SGD with momentum 1). Per step:

    - forward, l = 0..L-1: read param, write activation;
    - backward, l = L-1..0: read activation, read param, write gradient, free activation;
    - optimizer, l = 0..L-1: read gradient, read+write each state (write only at step 0, when
      the state is created), read+write param, free gradient (``zero_grad(set_to_none=True)``).

    ``compute_ns``: forward ``2 * tokens * params / tflops``, backward twice that, optimizer
    memory-bound at ``mem_gbps``.
    """
    params = dict(locals())
    _check(n_layers >= 1 and steps >= 1, "n_layers/steps", (n_layers, steps), ">= 1")
    rng = np.random.default_rng(seed)
    width = np.exp(rng.normal(0.0, jitter, n_layers))
    p_elems = np.maximum(1, np.round(4 * hidden * hidden * width)).astype(np.int64)
    a_elems = np.maximum(1, np.round(batch_tokens * hidden * act_factor * np.sqrt(width))).astype(np.int64)
    p_bytes, a_bytes = (p_elems * bytes_per_elem).tolist(), (a_elems * bytes_per_elem).tolist()
    fwd_ns = (2.0 * batch_tokens * p_elems / (tflops * 1e3)).tolist()
    opt_ns = (p_elems * bytes_per_elem * (3 + 2 * n_optimizer_states) / mem_gbps).tolist()

    def k(cls: int, layer: int) -> int:  # 0 param, 1 grad, 2 activation, 3.. optimizer states
        return (cls << 32) | layer

    ev = _Events()
    for s in range(steps):
        for lay in range(n_layers):
            ev.add(k(0, lay), p_bytes[lay], _R, fwd_ns[lay], Kind.PARAMETER, s)
            ev.add(k(2, lay), a_bytes[lay], _W, 0, Kind.ACTIVATION, s)
        for lay in reversed(range(n_layers)):
            ev.add(k(2, lay), a_bytes[lay], _R, 0, Kind.ACTIVATION, s)
            ev.add(k(0, lay), p_bytes[lay], _R, 2 * fwd_ns[lay], Kind.PARAMETER, s)
            ev.add(k(1, lay), p_bytes[lay], _W, 0, Kind.GRADIENT, s)
            ev.add(k(2, lay), a_bytes[lay], _F, 0, Kind.ACTIVATION, s)
        for lay in range(n_layers):
            ev.add(k(1, lay), p_bytes[lay], _R, 0, Kind.GRADIENT, s)
            for j in range(n_optimizer_states):
                if s > 0:
                    ev.add(k(3 + j, lay), p_bytes[lay], _R, 0, Kind.OPTIMIZER_STATE, s)
                ev.add(k(3 + j, lay), p_bytes[lay], _W, 0, Kind.OPTIMIZER_STATE, s)
            ev.add(k(0, lay), p_bytes[lay], _R, opt_ns[lay], Kind.PARAMETER, s)
            ev.add(k(0, lay), p_bytes[lay], _W, 0, Kind.PARAMETER, s)
            ev.add(k(1, lay), p_bytes[lay], _F, 0, Kind.GRADIENT, s)
    return ev.trace("dl_training", params)


# ---------------------------------------------------------------------- LLM KV cache
@dataclass
class _Request:
    prefix: int  # shared prefix id, -1 for none
    prompt_blocks: list[int]  # own blocks (prefix blocks excluded)
    tokens_in_last: int
    remaining: int  # output tokens still to generate


def _lognormal_ints(rng: np.random.Generator, mean: float, sigma: float, lo: int, hi: int) -> int:
    mu = np.log(mean) - sigma * sigma / 2  # so that E[x] = mean
    return int(np.clip(np.round(rng.lognormal(mu, sigma)), lo, hi))


def llm_kv_cache(
    n_steps: int = 200,
    arrival_rate: float = 0.5,
    prompt_mean: float = 256.0,
    prompt_sigma: float = 0.8,
    output_mean: float = 96.0,
    output_sigma: float = 0.8,
    max_running: int = 16,
    block_tokens: int = 16,
    kv_bytes_per_token: int = 2 * 32 * 4096 * 2,
    shared_prefix_fraction: float = 0.3,
    n_prefixes: int = 4,
    prefix_tokens: int = 128,
    attn_ns_per_block: float = 2_000.0,
    decode_ns_per_token: float = 20_000.0,
    prefill_ns_per_token: float = 200.0,
    *,
    seed: int = 0,
) -> Trace:
    """An LLM serving engine's paged KV cache (vLLM-style blocks of ``block_tokens`` tokens).

    Requests arrive as a Poisson process (``arrival_rate`` per engine step); prompt and output
    lengths are log-normal with the stated means and sigmas (prompt clipped to [1, 4096],
    output to [1, 2048]). Up to ``max_running`` requests run; the rest queue (FIFO). A fraction
    ``shared_prefix_fraction`` of requests starts with one of ``n_prefixes`` shared prefixes of
    ``prefix_tokens`` tokens, whose blocks are written once and then only read (prefix
    caching; never freed). Events:

    - admission (prefill): read (or first write) the prefix blocks, write the own prompt blocks;
    - every decode step, for every running request: read all its blocks, then append one token
      to the last block (a write; a new block when the last one is full);
    - completion: free the request's own blocks (their ids are reused, LIFO, like a block
      allocator's free list).

    Default ``kv_bytes_per_token`` is a 7B model in fp16 (2 x 32 layers x 4096 x 2 bytes).
    ``step`` is the engine step; all sizes are one block.
    """
    params = dict(locals())
    _check(block_tokens >= 1, "block_tokens", block_tokens, ">= 1")
    _check(prefix_tokens % block_tokens == 0, "prefix_tokens", prefix_tokens,
           f"a multiple of block_tokens={block_tokens}")
    _check(0 <= shared_prefix_fraction <= 1, "shared_prefix_fraction", shared_prefix_fraction, "in [0, 1]")
    rng = np.random.default_rng(seed)
    block = block_tokens * kv_bytes_per_token
    prefix_base = 1 << 40
    prefix_blocks = prefix_tokens // block_tokens
    prefix_written = [False] * n_prefixes
    free_ids: list[int] = []
    next_id = 0
    queue: list[_Request] = []
    running: list[_Request] = []
    ev = _Events()

    def new_block() -> int:
        nonlocal next_id
        if free_ids:
            return free_ids.pop()
        next_id += 1
        return next_id - 1

    def prefix_keys(r: _Request) -> np.ndarray:
        return prefix_base + r.prefix * prefix_blocks + np.arange(prefix_blocks if r.prefix >= 0 else 0)

    for s in range(n_steps):
        for _ in range(int(rng.poisson(arrival_rate))):
            prompt = _lognormal_ints(rng, prompt_mean, prompt_sigma, 1, 4096)
            output = _lognormal_ints(rng, output_mean, output_sigma, 1, 2048)
            shared = n_prefixes > 0 and rng.random() < shared_prefix_fraction
            prefix = int(rng.integers(n_prefixes)) if shared else -1
            own = prompt if prefix < 0 else max(1, prompt - prefix_tokens)
            n_own = -(-own // block_tokens)
            queue.append(_Request(prefix, [-1] * n_own, own - (n_own - 1) * block_tokens, output))
        while queue and len(running) < max_running:  # admission = prefill
            r = queue.pop(0)
            if r.prefix >= 0:
                op = _R if prefix_written[r.prefix] else _W
                prefix_written[r.prefix] = True
                ev.extend(prefix_keys(r), block, op, 0, Kind.KV_BLOCK, s)
            r.prompt_blocks = [new_block() for _ in r.prompt_blocks]
            ev.extend(np.array(r.prompt_blocks), block, _W, prefill_ns_per_token * block_tokens,
                      Kind.KV_BLOCK, s)
            running.append(r)
        still: list[_Request] = []
        for r in running:  # one decode step
            ev.extend(prefix_keys(r), block, _R, attn_ns_per_block, Kind.KV_BLOCK, s)
            ev.extend(np.array(r.prompt_blocks), block, _R, attn_ns_per_block, Kind.KV_BLOCK, s)
            if r.tokens_in_last == block_tokens:
                r.prompt_blocks.append(new_block())
                r.tokens_in_last = 0
            r.tokens_in_last += 1
            ev.add(r.prompt_blocks[-1], block, _W, decode_ns_per_token, Kind.KV_BLOCK, s)
            r.remaining -= 1
            if r.remaining == 0:
                ev.extend(np.array(r.prompt_blocks), block, _F, 0, Kind.KV_BLOCK, s)
                free_ids.extend(reversed(r.prompt_blocks))
            else:
                still.append(r)
        running = still
    return ev.trace("llm_kv_cache", params)


# ---------------------------------------------------------------------- embeddings
def embedding(
    n_batches: int = 200,
    batch_size: int = 128,
    pooling: int = 4,
    n_rows: int = 1_000_000,
    n_tables: int = 1,
    alpha: float = 1.05,
    dim: int = 64,
    bytes_per_elem: int = 4,
    train: bool = True,
    lookup_ns: float = 50.0,
    batch_ns: float = 200_000.0,
    *,
    seed: int = 0,
) -> Trace:
    """Embedding-table rows of a recommender: each batch looks up ``batch_size * pooling``
    Zipf(alpha) ids per table (rank -> row by a random permutation, like hashed ids), reads
    each distinct row once (sorted, as a gather does), and, with ``train``, writes each back
    (sparse optimizer update). Rows are ``dim * bytes_per_elem`` bytes; keys are
    ``table << 32 | row``. The batch's dense compute (``batch_ns``) follows its last read."""
    params = dict(locals())
    _check(n_rows >= 1 and n_tables >= 1, "n_rows/n_tables", (n_rows, n_tables), ">= 1")
    rng = np.random.default_rng(seed)
    perms = [rng.permutation(n_rows) for _ in range(n_tables)]
    row_bytes = dim * bytes_per_elem
    per_batch = batch_size * pooling
    ids = [perms[t][zipf_ranks(rng, n_batches * per_batch, n_rows, alpha)].reshape(n_batches, -1)
           for t in range(n_tables)]
    keys, ops, ns, steps = [], [], [], []
    for b in range(n_batches):
        rows = np.concatenate([(t << 32) | np.unique(ids[t][b]) for t in range(n_tables)])
        read_ns = np.full(len(rows), lookup_ns)
        read_ns[-1] += batch_ns
        keys.append(rows)
        ops.append(np.full(len(rows), _R, np.uint8))
        ns.append(read_ns)
        if train:
            keys.append(rows)
            ops.append(np.full(len(rows), _W, np.uint8))
            ns.append(np.full(len(rows), lookup_ns))
        steps.append(np.full(len(rows) * (2 if train else 1), b))
    key = np.concatenate(keys)
    return make_trace("embedding", params, key, np.full(len(key), row_bytes, np.int64),
                      np.concatenate(ops), compute_ns=np.round(np.concatenate(ns)).astype(np.int64),
                      kind=np.full(len(key), Kind.EMBEDDING_ROW, np.uint8),
                      step=np.concatenate(steps))
