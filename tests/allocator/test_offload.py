"""Activation offload on CPU (NumpyBackend): bitwise-equal training under a tight budget, no
data loss under any policy, parameters pass through, clear errors, nothing aliases the pool."""

from __future__ import annotations

import contextlib
import copy
import random
from collections import OrderedDict
from typing import Any

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from cachegym.allocator.backends import NumpyBackend  # noqa: E402
from cachegym.allocator.errors import BackendError, ConfigError, ObjectTooLarge  # noqa: E402
from cachegym.allocator.offload import (  # noqa: E402
    ActivationOffload,
    BudgetTooSmall,
    ReversePackOrder,
    TinyTransformer,
    activation_footprint,
    is_parameter,
    make_batches,
    train,
)
from cachegym.allocator.pool import Pool  # noqa: E402
from cachegym.allocator.trace import Op  # noqa: E402
from cachegym.policies.base import EvictionPolicyBase, first_evictable  # noqa: E402
from cachegym.policies.lru import LRU  # noqa: E402


class MRU(EvictionPolicyBase):
    """Evicts the most recently used object: the worst order for activations."""

    name = "mru"

    def __init__(self) -> None:
        self._order: OrderedDict[int, None] = OrderedDict()

    def victim(self, view: Any) -> int | None:
        return first_evictable(view, reversed(self._order))

    def on_hit(self, view: Any, key: int) -> None:
        self._order.move_to_end(key)

    def on_insert(self, view: Any, key: int) -> None:
        self._order[key] = None

    def on_evict(self, view: Any, key: int) -> None:
        del self._order[key]

    def on_free(self, view: Any, key: int) -> None:
        self._order.pop(key, None)


class SeededRandom(EvictionPolicyBase):
    name = "random"

    def __init__(self, seed: int = 0) -> None:
        self._rng = random.Random(seed)

    def victim(self, view: Any) -> int | None:
        cands = sorted(view.candidates())
        return self._rng.choice(cands) if cands else None


class RefusesEveryThird(LRU):
    """LRU that never admits every third saved tensor: those are streamed (packed straight to
    host memory, unpacked from it)."""

    name = "refusing"

    def admit(self, view: Any, key: int, size: int) -> bool:
        return key % 3 != 0


POLICIES = {"lru": LRU, "mru": MRU, "random": SeededRandom, "refusing": RefusesEveryThird}


@pytest.fixture(autouse=True)
def one_thread():
    """One intra-op thread: deterministic and fast on a shared two-core machine."""
    n = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(n)


def small_setup(seed: int = 0) -> tuple[Any, list[Any], dict[str, int]]:
    torch.manual_seed(seed)
    model = TinyTransformer(vocab=64, d=32, heads=2, layers=2, seq=16)
    batches = make_batches(64, 16, 4, 3, seed=seed)
    return model, batches, activation_footprint(model, batches[0])


@pytest.mark.parametrize("policy", sorted(POLICIES))
def test_training_is_bitwise_equal_under_a_tight_budget(policy: str) -> None:
    model, batches, fp = small_setup()
    budget = max(fp["total"] // 6, 2 * fp["largest"])
    assert budget < fp["total"] // 3  # far below the activation footprint
    ref_model = copy.deepcopy(model)
    ref = train(ref_model, batches, 4)
    off = ActivationOffload(budget, backend=NumpyBackend(), policy=POLICIES[policy]())
    try:
        got = train(model, batches, 4, offload=off)
        st = off.stats()
        assert got["losses"] == ref["losses"]
        for p, q in zip(model.parameters(), ref_model.parameters()):
            assert torch.equal(p, q)
        assert st["evictions"] > 0 and st["writebacks"] > 0
        assert st["prefetches"] > 0
        assert st["bytes_d2h"] > 0 and st["bytes_h2d"] > 0
        assert st["peak_device_bytes"] <= budget
        assert st["packed"] == st["unpacked"] == st["freed"]
        assert len(off.pool) == 0  # every saved tensor's pool object was freed
        if policy == "lru":
            assert st["prefetch_hits"] > 0
        assert (st["streamed"] > 0) == (policy == "refusing")
    finally:
        off.close()


class SaveAll(torch.autograd.Function):
    """Saves the given tensors; backward checks what comes back against reference copies."""

    @staticmethod
    def forward(ctx: Any, x: Any, *saved: Any) -> Any:
        ctx.save_for_backward(*saved)
        return x * 2

    @staticmethod
    def backward(ctx: Any, g: Any) -> Any:
        # copies: an unpacked view keeps its pool object pinned while it is referenced
        ctx.results = [(t.clone(), t.stride()) for t in ctx.saved_tensors]
        return (g * 2,) + (None,) * len(ctx.results)


def _assorted(seed: int) -> list[Any]:
    g = torch.Generator().manual_seed(seed)
    a = torch.randn(37, 53, generator=g)
    return [
        a.t(),  # non-contiguous, dense
        torch.randn(2, 3, 5, 7, generator=g).to(memory_format=torch.channels_last),
        a[::2, 1:],  # not dense: comes back contiguous with the same values
        torch.randn(1000, generator=g, dtype=torch.float64),
        torch.randn(64, 33, generator=g).to(torch.bfloat16),
        torch.randint(0, 1 << 40, (129,), generator=g),
        torch.rand(77, generator=g) > 0.5,
        torch.tensor(3.25),
        torch.randn(300, 20, generator=g).expand(2, 300, 20),  # stride 0
    ]


@pytest.mark.parametrize("policy", sorted(POLICIES))
def test_saved_tensors_come_back_equal_under_every_policy(policy: str) -> None:
    tensors = _assorted(1) + _assorted(2) + _assorted(3)
    largest = max(t.numel() * t.element_size() for t in tensors)
    off = ActivationOffload(2 * largest, backend=NumpyBackend(), policy=POLICIES[policy](),
                            prefetcher=ReversePackOrder(depth=3))
    x = torch.randn(8, requires_grad=True)
    refs = [t.clone() for t in tensors]
    try:
        with off:
            ys = [SaveAll.apply(x, t, tensors[-i - 1]) for i, t in enumerate(tensors)]
            y = sum(y.sum() for y in ys)
        nodes = [yy.grad_fn for yy in ys]
        y.backward()
        st = off.stats()
        assert st["evictions"] > 0 and (st["streamed"] > 0) == (policy == "refusing")
        for i, node in enumerate(nodes):
            a, b = node.results
            for (got, stride), want, src in ((a, refs[i], tensors[i]),
                                             (b, refs[-i - 1], tensors[-i - 1])):
                assert got.dtype == want.dtype and got.shape == want.shape
                assert torch.equal(got, want)
                if src.is_contiguous() or src.stride() == torch.empty_like(src).stride():
                    assert stride == src.stride()
    finally:
        off.close()


def test_parameters_pass_through_and_only_activations_are_packed() -> None:
    model, batches, fp = small_setup()
    storages = {p.untyped_storage().data_ptr() for p in model.parameters()}
    saved: list[tuple[bool, int]] = []  # (shares a parameter's storage, bytes)

    def spy(t: Any) -> Any:
        saved.append((t.untyped_storage().data_ptr() in storages, t.numel() * t.element_size()))
        return t

    with torch.autograd.graph.saved_tensors_hooks(spy, lambda t: t):
        model(batches[0][0]).sum()
    n_param = sum(1 for is_p, _ in saved if is_p)
    act_bytes = sum(n for is_p, n in saved if not is_p)
    assert n_param > 0
    off = ActivationOffload(4 * fp["total"], backend=NumpyBackend())
    try:
        with off:
            loss = model(batches[0][0]).sum()
        assert off.counters.passed_through == n_param
        assert off.counters.bytes_packed == act_bytes
        assert sum(off.pool.view.info(k).size for k in off.pool.resident_keys()) == act_bytes
        loss.backward()
    finally:
        off.close()
    w = torch.nn.Parameter(torch.ones(3))
    assert is_parameter(w) and is_parameter(w.t()) and is_parameter(w[:2])
    assert not is_parameter(w * 2) and not is_parameter(torch.ones(3))


def test_budget_smaller_than_the_largest_saved_tensor_is_a_clear_error() -> None:
    model, batches, fp = small_setup()
    off = ActivationOffload(fp["largest"] // 2, backend=NumpyBackend())
    try:
        with pytest.raises(BudgetTooSmall) as ei, off:
            model(batches[0][0]).sum()
        assert isinstance(ei.value, ObjectTooLarge)
        msg = str(ei.value)
        assert "raise the budget" in msg and str(fp["largest"]) in msg
    finally:
        off.close()


class CudaClaimingBackend(NumpyBackend):
    device_type = "cuda"
    device_id = 0


def test_tensor_on_the_wrong_device_is_a_clear_error() -> None:
    off = ActivationOffload(1 << 20, backend=CudaClaimingBackend())
    x = torch.randn(16, requires_grad=True)
    try:
        with pytest.raises(BackendError, match=r"on cpu .* holds cuda:0 memory"), off:
            x.exp().sum()  # exp saves its result
    finally:
        off.close()


@pytest.mark.parametrize("zero_copy", [True, False])
def test_unpacked_tensors_do_not_alias_memory_the_pool_reuses(zero_copy: bool) -> None:
    off = ActivationOffload(1 << 16, backend=NumpyBackend(), prefetcher=None,
                            zero_copy=zero_copy)
    x = torch.randn(1024, requires_grad=True)
    seen: list[Any] = []

    class Probe(torch.autograd.Function):
        @staticmethod
        def forward(ctx: Any, x: Any) -> Any:
            ctx.save_for_backward(x * 3)
            return x.clone()

        @staticmethod
        def backward(ctx: Any, g: Any) -> Any:
            (s,) = ctx.saved_tensors
            want = s.clone()
            for k in range(1, 40):  # churn: the pool evicts and reuses every unpinned block
                off.pool.put(-k, np.full(12_000, 0xFF, np.uint8))
            seen.append(torch.equal(s, want))
            return g

    try:
        with off:
            y = Probe.apply(x).sum()
        y.backward()
        assert seen == [True]
        assert off.pool.stats.evictions > 30
        off.collect()
        assert off.counters.freed == off.counters.packed == 1  # unpinned, then freed
    finally:
        off.close()


def test_graph_freed_without_backward_frees_the_pool() -> None:
    model, batches, fp = small_setup()
    off = ActivationOffload(fp["total"] // 2, backend=NumpyBackend())
    try:
        with off:
            loss = model(batches[0][0]).sum()
        assert len(off.pool) == off.counters.packed > 0
        del loss
        assert off.collect() == off.counters.packed
        assert len(off.pool) == 0
    finally:
        off.close()


def test_backward_twice_with_retain_graph() -> None:
    model, batches, fp = small_setup()
    ref_model = copy.deepcopy(model)
    loss = ref_model(batches[0][0]).square().mean()
    loss.backward(retain_graph=True)
    loss.backward()
    off = ActivationOffload(max(fp["total"] // 4, 2 * fp["largest"]), backend=NumpyBackend())
    try:
        with off:
            loss = model(batches[0][0]).square().mean()
        loss.backward(retain_graph=True)
        loss.backward()
        for p, q in zip(model.parameters(), ref_model.parameters()):
            assert torch.equal(p.grad, q.grad)
        assert off.counters.unpacked == 2 * off.counters.packed
    finally:
        off.close()


def test_reverse_pack_order_prefetches_the_next_saved_tensors() -> None:
    pool = Pool(4 * 512, LRU(), backend=None)
    pf = ReversePackOrder(depth=2)
    for k in range(6):
        pool.access(k, 512, True)
        assert list(pf.prefetch(pool.view, k)) == []  # packs predict nothing
    assert set(pool.resident_keys()) == {2, 3, 4, 5}
    pool.access(5, 512)
    assert list(pf.prefetch(pool.view, 5)) == []  # 4 and 3 are resident
    pool.free(4)
    pool.access(3, 512)
    assert pf.prefetch(pool.view, 3) == [1]  # 2 is resident: the next two are 2 and 1
    pool.free(1)
    assert pf.prefetch(pool.view, 3) == [0]
    with pytest.raises(ConfigError):
        ReversePackOrder(depth=0)


@pytest.mark.parametrize("clocked", [False, True])
def test_recorded_trace_replays_to_the_same_decisions(clocked: bool) -> None:
    """A recorded offload replays to its decisions and counts; with a clock, to its stall too:
    the wall time between two pool operations is compute on the earlier access's row, never on
    the frees collected at the later one (a replay runs no free row's compute: it dropped most
    of an offload's)."""
    model, batches, fp = small_setup()
    budget = max(fp["total"] // 4, 2 * fp["largest"])
    clock = iter(range(0, 10**12, 50_000))  # 50 us between any two readings
    # (copies, not zero-copy views: a view pins its object while autograd holds it, which a
    # replay cannot see, and a pinned object changes which one is evicted)
    off = ActivationOffload(budget, backend=NumpyBackend(), record=True, zero_copy=False,
                            timer=(lambda: next(clock)) if clocked else None)
    try:
        train(model, batches, 2, offload=off)
        tr = off.trace()
        st = off.stats()
    finally:
        off.close()
    assert int((tr.op == Op.WRITE).sum()) == st["packed"]
    assert int((tr.op == Op.READ).sum()) == st["unpacked"]
    frees = tr.op == Op.FREE
    assert int(frees.sum()) == st["freed"] and not tr.compute_ns[frees].any()
    assert int(tr.compute_ns.sum()) == st["compute_ns"] and (st["compute_ns"] > 0) == clocked
    sim = Pool(budget, LRU(), prefetcher=ReversePackOrder(), cost="h100_pcie5",
               placement="arena", clean_ahead=0.25).replay(tr)  # as the offload pool (arena)
    for f in ("hits", "misses", "evictions", "writebacks", "prefetches", "bytes_h2d", "bytes_d2h",
              "compute_ns", "stall_ns"):
        assert getattr(sim, f) == st[f], f


def test_bench_offload_smoke() -> None:
    """Every mode side by side (with the exported golden policy), losses bitwise equal."""
    import argparse

    from tests.scripts_loader import load_script

    mod = load_script("bench_offload")
    parser = argparse.ArgumentParser()
    mod.add_args(parser)
    args = parser.parse_args(["--steps", "2", "--pairs", "3", "--d", "16", "--layers", "1",
                              "--seq", "8", "--batch", "2", "--device", "cpu",
                              "--policy", "tests/golden/policy.npz"])
    fig = mod.run(args)
    modes = {r["mode"]: r for r in fig["modes"]}
    assert list(modes)[:3] == ["none", "save_on_cpu", "reload"]
    for f in ("25%", "50%", "75%"):
        assert f"lru+reverse-pack@{f}" in modes and f"learned@{f}" in modes
    assert fig["losses_bitwise_equal"] and modes["none"]["slowdown"] == 1.0
    assert modes["none"]["peak_device_bytes"] == fig["activation_bytes"]
    assert modes["lru+reverse-pack@25%"]["peak_device_bytes"] < modes["lru+reverse-pack@75%"][
        "peak_device_bytes"] <= fig["activation_bytes"]
    assert modes["lru+reverse-pack@25%"]["evictions"] > 0
    assert fig["offload_evictions"] == 0  # the overhead check's budget holds everything
    assert fig["overhead_of_medians"] == pytest.approx(
        fig["offload_step_ms"] / fig["plain_step_ms"] - 1)
    assert np.isfinite(fig["overhead"]) and fig["pairs"] == 3


def test_offload_takes_a_size_string_and_a_policy_file() -> None:
    from cachegym.policies.learned import LearnedPolicy

    model, batches, fp = small_setup()
    ref = copy.deepcopy(model)
    budget = max(fp["total"] // 2, 2 * fp["largest"])
    off = ActivationOffload(f"{budget / 1024}KiB", policy="tests/golden/policy.npz")
    try:
        assert off.pool.capacity == budget and isinstance(off.pool.policy, LearnedPolicy)
        got = train(model, batches, 2, offload=off)["losses"]
        assert off.stats()["evictions"] > 0
    finally:
        off.close()
    assert got == train(ref, batches, 2)["losses"]
    with pytest.raises(ConfigError, match="not a file"):
        ActivationOffload(budget, policy="no/such/policy.npz")
    with pytest.raises(ConfigError, match="budget"):
        ActivationOffload("12 parsecs")


def test_on_demand_reload_keeps_the_losses() -> None:
    from cachegym.allocator.offload import on_demand_reload

    model, batches, _ = small_setup()
    ref = copy.deepcopy(model)
    assert train(model, batches, 2, offload=on_demand_reload())["losses"] == \
        train(ref, batches, 2)["losses"]


@pytest.mark.parametrize("zero_copy", [True, False])
def test_unpacked_views_kept_alive_leave_room_for_the_next_unpack(zero_copy: bool) -> None:
    """Views of pinned objects that a caller (or a backward node) keeps used to fill the pool
    (PoolExhausted at the third unpack): a view pins only while room for the largest saved
    tensor stays unpinned, else the unpack copies."""
    off = ActivationOffload(2 * 4096, backend=NumpyBackend(), prefetcher=None,
                            zero_copy=zero_copy)
    kept: list[Any] = []

    class Keep(torch.autograd.Function):
        @staticmethod
        def forward(ctx: Any, x: Any) -> Any:
            ctx.save_for_backward(x * 3)  # 4096 bytes
            return x.clone()

        @staticmethod
        def backward(ctx: Any, g: Any) -> Any:
            kept.append(ctx.saved_tensors[0])  # the caller holds on to what it unpacked
            return g

    x = torch.randn(1024, requires_grad=True)
    try:
        with off:
            y = sum(Keep.apply(x).sum() for _ in range(3))
        y.backward()
        assert len(kept) == 3
        pinned = [off.pool.view.info(k).pins for k in off.pool.resident_keys()]
        assert sum(pinned) == (1 if zero_copy else 0)  # one view: room for another 4096 bytes
    finally:
        off.close()


def test_an_object_off_the_device_is_never_read_or_written() -> None:
    from cachegym.allocator.errors import PoolError

    off = ActivationOffload(4096, backend=NumpyBackend(), prefetcher=None)
    try:
        off.pool.access(1, 4096, True)
        assert off._offset(1, "pack") == 0
        off.pool.access(2, 4096, True)  # evicts 1
        with pytest.raises(PoolError, match="not on the device right after its access"):
            off._offset(1, "unpack")
    finally:
        off.close()


def test_shadow_guard_shadows_place_objects_as_the_guarded_pool(tmp_path):
    """A guard's shadow pools place objects as the guarded pool does. In an arena, fragmentation
    changes what a policy costs: on an activation-offload trace (a small transformer's saved
    tensors, 8 steps) at half its footprint, GDSF (keeping small objects) copies far more bytes
    and stalls more than in byte accounting. Shadows that counted bytes made the guard follow
    GDSF there (measured: 24.3 ms of stall and 1,011 MB copied against LRU's 19.1 ms and 706 MB);
    with arena shadows it ends within 2% of its best expert, each measured alone in the same
    arena (18.96 ms, 708 MB)."""
    from cachegym.policies.adaptive import S3FIFO
    from cachegym.policies.classic import LFU
    from cachegym.policies.learned import LearnedPolicy, ShadowGuard
    from cachegym.policies.priority import GDSF
    from tests.policies.test_learned import hottest_policy

    torch.manual_seed(0)
    model = TinyTransformer(256, 256, 4, 4, 128)
    batches = make_batches(256, 128, 8, 4, seed=0)
    fp = activation_footprint(model, batches[0])
    cap = fp["total"] // 2
    off = ActivationOffload(cap, policy=LRU(), record=True, timer=None)
    try:
        train(model, batches, 8, offload=off)
        trace = off.trace()
    finally:
        off.close()

    def run(policy) -> Any:
        return Pool(cap, policy, placement="arena", cost="h100_pcie5").replay(trace)

    gdsf_bytes = Pool(cap, GDSF(), placement="bytes", cost="h100_pcie5").replay(trace)
    alone = {n: run(p) for n, p in (("lru", LRU()), ("s3fifo", S3FIFO()), ("gdsf", GDSF()),
                                    ("lfu", LFU()))}
    assert alone["gdsf"].traffic_bytes > 1.2 * gdsf_bytes.traffic_bytes  # placement matters
    bare = hottest_policy(tmp_path)
    alone["network"] = run(LearnedPolicy(bare.scorer, bare.header, guard=False))
    guard = ShadowGuard()
    got = run(LearnedPolicy(bare.scorer, bare.header, guard=guard))
    assert guard.objective == "stall"
    assert all(e.pool.placement == "arena" for e in guard.experts.values())
    assert got.stall_ns <= 1.02 * min(st.stall_ns for st in alone.values())
    assert got.traffic_bytes <= 1.02 * min(st.traffic_bytes for st in alone.values())


def test_a_budget_of_the_largest_saved_tensor_trains_a_conv_net_with_zero_copy_views() -> None:
    """Backward of max_pool2d unpacks its input and its indices together: with both as pinned
    views a budget of the largest saved tensor raised PoolExhausted at every step."""
    torch.manual_seed(2)
    m = torch.nn.Sequential(torch.nn.Conv2d(3, 8, 3, padding=1), torch.nn.BatchNorm2d(8),
                            torch.nn.ReLU(), torch.nn.MaxPool2d(2), torch.nn.Conv2d(8, 16, 3, padding=1),
                            torch.nn.ReLU(), torch.nn.AdaptiveAvgPool2d(1), torch.nn.Flatten(),
                            torch.nn.Linear(16, 10))
    x = torch.randn(4, 3, 16, 16)
    fp = activation_footprint(m, (x, None), lambda mod, b: mod(b[0]).square().mean())
    ref = copy.deepcopy(m)
    ref(x).square().mean().backward()
    off = ActivationOffload(fp["largest"], backend=NumpyBackend(), zero_copy=True)
    for _ in range(2):
        m.zero_grad()
        with off:
            loss = m(x).square().mean()
        loss.backward()
        off.collect()
    for p, q in zip(m.parameters(), ref.parameters()):
        assert torch.equal(p.grad, q.grad)
    off.close()


@pytest.mark.parametrize(("model", "budgets"), [
    ("transformer", [2048, 2560]), ("lstm", [30736, 32768, 33792])])
def test_zero_copy_views_leave_room_by_blocks_not_bytes(model: str, budgets: list[int]) -> None:
    """The pin rule compared raw bytes with the requested budget: with zero_copy=True backward
    raised PoolExhausted at these budgets (not at every larger one), where copies trained."""
    def make() -> Any:
        torch.manual_seed(0)
        if model == "transformer":
            return torch.nn.TransformerEncoderLayer(16, 2, 32, dropout=0.1, batch_first=True), \
                torch.randn(2, 5, 16)

        class LSTMHead(torch.nn.Module):
            def __init__(self) -> None:
                super().__init__()
                self.lstm, self.head = torch.nn.LSTM(6, 8, num_layers=2, batch_first=True), torch.nn.Linear(8, 2)

            def forward(self, x: Any) -> Any:
                return self.head(self.lstm(x)[0])
        return LSTMHead(), torch.randn(3, 7, 6)

    def grads(off: ActivationOffload | None) -> list[Any]:
        m, x = make()
        out = []
        for step in range(3):
            torch.manual_seed(100 + step)
            m.zero_grad()
            with off if off is not None else contextlib.nullcontext():
                loss = m(x).square().mean()
            loss.backward()
            out += [loss.detach().clone(), *[p.grad.clone() for p in m.parameters() if p.grad is not None]]
            with torch.no_grad():
                for p in m.parameters():
                    p.sub_(0.01)
        return out

    ref = grads(None)
    for budget in budgets:
        off = ActivationOffload(budget, backend=NumpyBackend(), zero_copy=True)
        got = grads(off)
        assert all(torch.equal(a, b) for a, b in zip(got, ref)), budget
        assert off.stats()["peak_device_bytes"] <= budget
        off.close()


def test_a_budget_below_a_tensors_blocks_names_the_blocks_it_needs() -> None:
    """The message said a 600-byte tensor needs more than a budget of 1000 bytes; 600 failed too
    (it takes two 512-byte blocks)."""
    x = torch.randn(150, requires_grad=True)
    says = (r"of 600 bytes takes 1024 bytes of the pool \(whole 512-byte blocks\), more than its "
            r"budget of 1000 bytes \(512 in whole blocks\); raise the budget to at least 1024")
    with pytest.raises(BudgetTooSmall, match=says), ActivationOffload(1000):
        (x * 1).exp().sum()
    with pytest.raises(ConfigError, match=r"budget 256 bytes: the pool places each saved tensor in "
                                          r"whole 512-byte blocks"):
        ActivationOffload(256)


@pytest.mark.parametrize(("kwargs", "match"), [
    ({"backend": "numpy"}, r"backend 'numpy': give a backend object, NumpyBackend\(\)"),
    ({"backend": NumpyBackend}, r"backend <class .*NumpyBackend'>: give a backend object"),
    ({"min_bytes": "x"}, r"min_bytes 'x': give bytes"),
    ({"min_bytes": -1}, r"min_bytes -1"),
    ({"timer": 5}, r"timer 5: give a clock returning ns"),
    ({"timer": lambda: 1.5}, r"returned 1.5: give a clock returning integer nanoseconds"),
    ({"zero_copy": "no"}, r"zero_copy='no': give True or False"),
    ({"record": 1}, r"record=1: give True or False"),
])
def test_offload_arguments_of_the_wrong_kind_are_refused_up_front(kwargs: dict[str, Any], match: str) -> None:
    """They raised AttributeError / ValueError / a TypeError at the first pack inside the
    forward, or were taken ('no' as true)."""
    with pytest.raises(ConfigError, match=match):
        ActivationOffload("1MiB", **kwargs)


def test_the_count_rule_evicts_no_tensor_needed_before_the_one_it_prefetches() -> None:
    """On a pool of a few saved tensors the first step's count rule (the next two in reverse
    pack order) evicted the tensor needed next to fetch the one after it: twice the traffic of
    no prefetcher (98,304 against 49,152 bytes)."""
    def traffic(**kw: Any) -> int:
        torch.manual_seed(0)
        m = torch.nn.Sequential(torch.nn.Linear(64, 128), torch.nn.ReLU(), torch.nn.Linear(128, 8))
        off = ActivationOffload(24576, backend=NumpyBackend(), clean_ahead=0, **kw)
        with off:
            loss = (m(torch.randn(32, 64)) ** 2).mean()
        loss.backward()
        t = int(off.stats()["traffic_bytes"])
        off.close()
        return t

    assert traffic() <= traffic(prefetcher=None)


class _FailsOnce(NumpyBackend):
    """A backend whose next device-buffer request or host stream fails (a CUDA error, a full
    host memory)."""

    fail_device = fail_stream_in = False

    def device_buffer(self, offset: int, nbytes: int) -> Any:
        if self.fail_device:
            self.fail_device = False
            raise RuntimeError("simulated copy failure")
        return super().device_buffer(offset, nbytes)

    def stream_in(self, key: int, nbytes: int) -> Any:
        if self.fail_stream_in:
            self.fail_stream_in = False
            raise MemoryError("no host memory")
        return super().stream_in(key, nbytes)


def test_a_failed_copy_on_save_is_typed_and_leaves_the_pool_as_before() -> None:
    # it was a bare RuntimeError, and the object's block stayed taken for good
    be = _FailsOnce()
    off = ActivationOffload("64KiB", backend=be)
    m = torch.nn.Sequential(torch.nn.Linear(64, 64), torch.nn.Tanh(), torch.nn.Linear(64, 64))
    x = torch.randn(32, 64)
    be.fail_device = True
    with pytest.raises(BackendError, match="nothing of it was kept"), off:
        m(x).sum()
    off.collect()
    assert len(off.pool) == 0 and off.pool.view.used == 0
    with off:
        loss = m(x).sum()
    loss.backward()
    off.close()


class _Refuse(EvictionPolicyBase):
    """LRU order that admits nothing: every saved tensor is streamed to host memory."""

    def __init__(self) -> None:
        self.lru = LRU()

    def victim(self, view: Any) -> int | None:
        return self.lru.victim(view)

    def admit(self, view: Any, key: int, size: int) -> bool:
        return False


def test_a_failed_read_back_on_backward_is_typed_and_keeps_the_tensor() -> None:
    be = _FailsOnce()
    off = ActivationOffload("64KiB", backend=be, policy=_Refuse())
    m = torch.nn.Sequential(torch.nn.Linear(64, 64), torch.nn.Tanh(), torch.nn.Linear(64, 64))
    x = torch.randn(32, 64, requires_grad=True)
    with off:
        loss = m(x).sum()
    be.fail_stream_in = True
    with pytest.raises(BackendError, match="it stays there") as e:
        loss.backward(retain_graph=True)
    assert e.value.key is not None and e.value.direction == "h2d"
    loss.backward()  # the tensor was kept: the backward runs again
    off.close()


def test_frozen_weights_conjugate_views_and_nested_tensors() -> None:
    # a frozen weight (LoRA's base model) was packed as an activation; a conjugate view and a
    # nested tensor failed the save with torch's errors
    frozen = torch.nn.Parameter(torch.ones(3, 3), requires_grad=False)
    assert is_parameter(frozen) and is_parameter(frozen.t())
    off = ActivationOffload("1MiB", backend=NumpyBackend())
    w = torch.randn(8, 8, dtype=torch.cfloat, requires_grad=True)
    x = torch.randn(4, 8, dtype=torch.cfloat)
    z = x @ w
    want = torch.autograd.grad((z * z.conj()).real.sum(), w)[0]
    with off:
        z = x @ w
        loss = (z * z.conj()).real.sum()
    assert torch.equal(torch.autograd.grad(loss, w)[0], want)
    with pytest.warns(UserWarning, match="prototype"):  # (torch's, for strided nested tensors)
        nt = torch.nested.nested_tensor([torch.randn(2, 3), torch.randn(4, 3)], requires_grad=True)
    with off:
        out = (nt * 2).sin()
    assert out.is_nested
    off.close()


def test_a_prefetcher_that_is_not_a_file_is_named_as_the_prefetcher() -> None:
    with pytest.raises(ConfigError, match=r"ActivationOffload prefetcher: 'reverse-pack'.*make_prefetch"):
        ActivationOffload("1MiB", prefetcher="reverse-pack")


def test_two_threads_cannot_both_enter_one_offload() -> None:
    import threading

    off = ActivationOffload("1MiB", backend=NumpyBackend())
    slow = off.collect

    def collect() -> int:  # widens the gap between the check and the hooks (it was not atomic)
        import time

        time.sleep(0.05)
        return slow()

    off.collect = collect  # type: ignore[method-assign]
    errors: list[BaseException] = []
    inside = threading.Barrier(2, timeout=10)

    def enter() -> None:
        try:
            with off:
                inside.wait()
        except ConfigError as e:
            errors.append(e)
            inside.abort()
        except threading.BrokenBarrierError:
            pass

    threads = [threading.Thread(target=enter) for _ in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(errors) == 1 and "already active" in str(errors[0])
    assert off._hooks is None
    off.close()


def test_two_offloads_cannot_share_one_backend() -> None:
    """A helper's audit: two offloads given one NumpyBackend placed their tensors in one arena
    and numbered their host buffers from 0 alike; the first model's gradients came back wrong
    (max |diff| 255). The second is refused; once the first is closed it may take the backend."""
    be = NumpyBackend()
    a = ActivationOffload("256KiB", backend=be)
    try:
        with pytest.raises(ConfigError, match="already holds the bytes of another open pool"):
            ActivationOffload("256KiB", backend=be)
    finally:
        a.close()
    b = ActivationOffload("256KiB", backend=be)
    b.close()


def test_a_pack_interrupted_after_the_pool_took_its_tensor_frees_it() -> None:
    """An interrupt (or the timer's error) after ``pool.access`` but before the handle was made
    left the tensor's block taken for good (only the copy was guarded)."""
    armed = [False]
    off: Any = None

    def timer() -> int:
        if armed[0] and len(off.pool):  # the clock read after the pool took the tensor
            armed[0] = False
            raise KeyboardInterrupt
        return 1000

    off = ActivationOffload("1MiB", backend=NumpyBackend(), timer=timer, prefetcher=None)
    x = torch.randn(4096, requires_grad=True)
    try:
        armed[0] = True
        with pytest.raises(KeyboardInterrupt), off:
            x.exp().sum()
        assert not armed[0]  # (it fired)
        assert len(off.pool) == 0 and off.pool.snapshot().device_bytes == 0
        with off:  # the next step runs as ever
            loss = x.exp().sum()
        loss.backward()
        assert torch.equal(x.grad, x.detach().exp())
    finally:
        off.close()


def test_leaving_an_offload_in_another_thread_is_refused_and_changes_nothing() -> None:
    """It marked the offload left, then autograd's pop failed (its hooks are per thread) and
    stayed installed in the thread that entered: tensors saved outside any with-block went on
    being offloaded."""
    import threading

    off = ActivationOffload("1MiB", backend=NumpyBackend())
    errors: list[BaseException] = []

    def leave() -> None:
        try:
            off.__exit__(None, None, None)
        except BaseException as e:  # noqa: BLE001 (the test reads it)
            errors.append(e)

    try:
        off.__enter__()
        th = threading.Thread(target=leave)
        th.start()
        th.join()
        assert len(errors) == 1 and isinstance(errors[0], ConfigError)
        assert "leave it in the thread that entered it" in str(errors[0])
        off.__exit__(None, None, None)  # the entering thread leaves it
        x = torch.randn(64, requires_grad=True)
        before = off.stats()["packed"]
        x.exp().sum()  # outside: not offloaded
        assert off.stats()["packed"] == before
    finally:
        off.close()
