"""The PyTorch recorder, the ready-made models, the record script and the bundled traces."""

from __future__ import annotations

import subprocess
import sys
from collections import Counter
from pathlib import Path

import numpy as np
import pytest

from cachegym.allocator.trace import Kind, Op, Trace
from tests.scripts_loader import load_script

torch = pytest.importorskip("torch")

ROOT = Path(__file__).resolve().parents[2]
TRACES = ROOT / "data" / "traces"
COLUMNS = ("key", "size", "op", "kind", "step")


def _two_layer(seed: int = 0):  # type: ignore[no-untyped-def]
    from cachegym.envs.workloads.recorder import record

    torch.manual_seed(seed)
    model = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.ReLU(), torch.nn.Linear(16, 4))
    opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    gen = torch.Generator().manual_seed(seed)

    def make_batch(step: int):  # type: ignore[no-untyped-def]
        return torch.randn(32, 8, generator=gen), torch.randint(0, 4, (32,), generator=gen)

    def loss_fn(m, b):  # type: ignore[no-untyped-def]
        return torch.nn.functional.cross_entropy(m(b[0]), b[1])

    return model, record(model, opt, make_batch, loss_fn, steps=3, seed=seed)


@pytest.fixture(scope="module")
def recorded() -> tuple[object, Trace]:
    return _two_layer()


def test_every_parameter_appears(recorded: tuple[object, Trace]) -> None:
    model, t = recorded
    params = t.kind == Kind.PARAMETER
    param_keys = np.unique(t.key[params])
    sizes = Counter(int(t.size[params][t.key[params] == k][0]) for k in param_keys)
    want = Counter(p.untyped_storage().nbytes() for p in model.parameters())  # type: ignore[attr-defined]
    assert sizes == want
    # every parameter is read in every step, and updated in place by the optimizer
    for k in param_keys:
        rows = t.key == k
        assert set(t.step[rows & (t.op == Op.READ)]) == {0, 1, 2}
        assert (t.op[rows] == Op.WRITE).sum() == 3


def test_gradients_written_in_backward(recorded: tuple[object, Trace]) -> None:
    _, t = recorded
    grads = np.unique(t.key[t.kind == Kind.GRADIENT])
    assert len(grads) == 4 * 3  # four parameters, three steps (set_to_none frees them)
    first_param_write = {s: np.flatnonzero((t.kind == Kind.PARAMETER) & (t.op == Op.WRITE) & (t.step == s))[0]
                         for s in range(3)}
    for g in grads:
        rows = np.flatnonzero(t.key == g)
        assert t.op[rows[0]] == Op.WRITE  # created by a backward op
        assert rows[0] < first_param_write[int(t.step[rows[0]])]  # before the optimizer update


def test_freed_storage_never_reappears(recorded: tuple[object, Trace]) -> None:
    _, t = recorded
    free_rows = np.flatnonzero(t.op == Op.FREE)
    assert len(free_rows) > 0
    freed_keys = t.key[free_rows]
    assert len(np.unique(freed_keys)) == len(freed_keys)  # each key freed at most once
    last_row = {int(k): i for i, k in enumerate(t.key)}
    for r, k in zip(free_rows, freed_keys):
        assert last_row[int(k)] == r
    assert (t.kind[free_rows] != Kind.PARAMETER).all()
    assert (t.kind[t.op == Op.FREE] == Kind.ACTIVATION).any()


def test_compute_is_measured_and_kinds_cover_training(recorded: tuple[object, Trace]) -> None:
    _, t = recorded
    assert t.compute_ns.sum() > 0
    assert {Kind.PARAMETER, Kind.GRADIENT, Kind.OPTIMIZER_STATE, Kind.ACTIVATION} <= set(np.unique(t.kind))
    assert t.meta["generator"] == "recorder"


def test_deterministic_given_seed(recorded: tuple[object, Trace]) -> None:
    _, a = recorded
    _, b = _two_layer()
    for c in COLUMNS:
        np.testing.assert_array_equal(getattr(a, c), getattr(b, c), err_msg=c)


def test_import_does_not_load_torch() -> None:
    code = "import sys, cachegym.envs.workloads; assert 'torch' not in sys.modules, 'torch imported'"
    subprocess.run([sys.executable, "-c", code], check=True, cwd=ROOT)



@pytest.mark.parametrize("name", ["gru_lm", "lstm_lm", "speech_gru", "unet", "vae", "mixer", "vit", "tcn",
                                  "densenet", "mobilenet", "moe", "conv_ae", "gcn"])
def test_every_ready_made_architecture_records_a_training_step(name: str) -> None:
    """Each architecture of the zoo (held out) and of the training mix's recorded ones
    (``record_training``) trains (a finite loss, so the batches fit the model) and
    its trace has what a training step has: parameters read and updated, gradients,
    optimizer state, activations freed within the step."""
    from cachegym.envs.workloads.models import make_workload
    from cachegym.envs.workloads.recorder import record

    w = make_workload(name, seed=0)
    assert torch.isfinite(w.loss_fn(w.model, w.make_batch(0)))
    w = make_workload(name, seed=0)
    t = record(w.model, w.optimizer, w.make_batch, w.loss_fn, steps=1, seed=0, name=name)
    kinds = set(np.unique(t.kind).tolist())
    assert {Kind.PARAMETER, Kind.GRADIENT, Kind.OPTIMIZER_STATE, Kind.ACTIVATION} <= kinds, name
    params = t.kind == Kind.PARAMETER
    assert len(np.unique(t.key[params])) == len(list(w.model.parameters()))
    assert (t.op[params] == Op.WRITE).any()  # the optimizer's in-place updates
    acts = np.unique(t.key[t.kind == Kind.ACTIVATION])
    assert np.isin(acts, t.key[t.op == Op.FREE]).mean() > 0.5  # activations die within the step
    assert w.description and len(t) > 150  # (the smallest, conv_ae: 178 events a step)

def test_a_storage_grown_in_place_is_a_new_object_of_its_new_size() -> None:
    """A buffer grown by resize_ kept its first size (40,000 bytes recorded as 4): the old
    allocation is freed and the grown one is a new key of the new size, freed once."""
    from cachegym.envs.workloads.recorder import record

    model = torch.nn.Linear(4, 1)

    def loss_fn(m, b):  # type: ignore[no-untyped-def]
        buf = torch.zeros(1)
        buf.resize_(10_000)
        buf.fill_(1.0)
        return m(b).sum() + buf[:1].sum()

    t = record(model, None, lambda s: torch.ones(2, 4), loss_fn, steps=1)
    sizes = dict(zip(t.key.tolist(), t.size.tolist()))
    assert 40_000 in sizes.values()
    for k, s in sizes.items():
        frees = int(((t.key == k) & (t.op == Op.FREE)).sum())
        assert frees <= 1 and (t.size[t.key == k] == s).all()
    grown = next(k for k, s in sizes.items() if s == 40_000)
    first = np.flatnonzero(t.key == grown)[0]
    assert (t.op[:first][t.size[:first] == 4] == Op.FREE).any()  # the 4-byte one freed before


def test_an_unsafe_view_touches_no_memory() -> None:
    """A batched matmul returns its result through ``aten._unsafe_view``, a view the schema does
    not call one: it was recorded as a read and a write of the result (218 spurious writes in
    two steps of the gpt recording), re-dirtying an activation nothing had written."""
    from cachegym.envs.workloads.recorder import record

    def loss_fn(m, b):  # type: ignore[no-untyped-def]
        return (b @ b.transpose(-1, -2)).sum()  # 4-d matmul: bmm, then _unsafe_view

    t = record(torch.nn.Linear(1, 1), None, lambda s: torch.ones(2, 2, 3, 5), loss_fn, steps=1)
    for k in np.unique(t.key[t.kind == Kind.ACTIVATION]):
        ops = [Op(o) for o in t.op[t.key == k]]
        assert ops.count(Op.WRITE) == 1 and ops[0] == Op.WRITE, ops  # bmm's write, once
    assert Counter(Op(o) for o in t.op) == {Op.READ: 2, Op.WRITE: 2, Op.FREE: 3}


def test_a_steps_gradients_are_freed_by_the_next_zero_grad() -> None:
    """A list of the gradients kept by the recording loop outlived the next step's
    ``zero_grad(set_to_none=True)``: each gradient was freed only after its successor was
    written, the gradients counted twice in the peak live bytes (gpt: 18.7 MB, not 16.0)."""
    from cachegym.envs.workloads.recorder import record

    model = torch.nn.Sequential(torch.nn.Linear(8, 8), torch.nn.Linear(8, 1))
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    t = record(model, opt, lambda s: torch.ones(4, 8), lambda m, b: m(b).sum(), steps=3)
    grad_bytes = sum(p.numel() * p.element_size() for p in model.parameters())
    live, seen = 0, set()
    for k, op, size, kind in zip(t.key.tolist(), t.op.tolist(), t.size.tolist(), t.kind.tolist()):
        if kind != Kind.GRADIENT:
            continue
        if op == Op.FREE:
            live -= size
        elif k not in seen:
            seen.add(k)
            live += size
        assert live <= grad_bytes, f"{live} bytes of gradients live, the model has {grad_bytes}"
    assert len(seen) == 3 * len(list(model.parameters()))  # a new gradient each step


def _record_script():  # type: ignore[no-untyped-def]
    """scripts/record_trace.py as a module."""
    return load_script("record_trace")


def test_record_script_smoke(tmp_path: Path) -> None:
    record_trace = _record_script()
    out = tmp_path / "r.npz"
    assert record_trace.main(["resnet", "--steps", "1", "--seed", "0", "--out", str(out)]) == 0
    t = Trace.load(out)
    assert len(t) > 1000 and t.meta["workload"] == "resnet"


@pytest.mark.parametrize("flag", ["--steps", "--threads"])
def test_record_script_refuses_counts_below_one(flag: str, tmp_path: Path,
                                                capsys: pytest.CaptureFixture[str]) -> None:
    """--steps 0 or --threads 0 is an argument error naming the flag (it was a traceback)."""
    record_trace = _record_script()
    with pytest.raises(SystemExit) as e:
        record_trace.main(["resnet", flag, "0", "--out", str(tmp_path / "r.npz")])
    assert e.value.code == 2
    assert f"argument {flag}: must be an integer >= 1, got 0" in capsys.readouterr().err
    assert not (tmp_path / "r.npz").exists()


def test_record_script_unwritable_out_is_one_error_line(tmp_path: Path,
                                                       capsys: pytest.CaptureFixture[str]) -> None:
    record_trace = _record_script()
    blocker = tmp_path / "a_file"  # a file where --out's directory would be
    blocker.write_text("")
    assert record_trace.main(["resnet", "--steps", "1", "--out", str(blocker / "r.npz")]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: cannot write ") and "writable directory" in err


@pytest.mark.parametrize(("out", "says"), [
    ("", "is a folder"), ("DIR", "is a folder"), ("x.csv", "give {tmp}/x.npz"),
    ("x.oracleGeneral", "the recorder writes .npz traces")])
def test_record_script_refuses_an_out_it_would_not_write_as_named(
        out: str, says: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """--out DIR wrote DIR.npz beside it, --out x.csv wrote x.csv.npz, --out '' wrote ..npz
    here; each logged the path given. Refused before the recording."""
    record_trace = _record_script()
    path = "" if out == "" else str(tmp_path if out == "DIR" else tmp_path / out)
    assert record_trace.main(["resnet", "--steps", "1", "--out", path]) == 2
    assert says.format(tmp=tmp_path) in capsys.readouterr().err
    assert sorted(tmp_path.iterdir()) == []


def test_record_script_adds_npz_and_names_the_file_written(
        tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    record_trace = _record_script()
    with caplog.at_level("INFO"):
        assert record_trace.main(["conv_ae", "--steps", "1", "--out", str(tmp_path / "t")]) == 0
    assert [p.name for p in tmp_path.iterdir()] == ["t.npz"]
    assert caplog.text.rstrip().endswith(f"-> {tmp_path / 't.npz'}")


def test_record_script_refuses_a_seed_torch_cannot_take(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        _record_script().main(["resnet", "--seed", str(2**64), "--out", "x.npz"])
    assert "argument --seed: must be an integer in 0..2**63-1" in capsys.readouterr().err


@pytest.mark.parametrize("path", sorted(TRACES.glob("*.npz")), ids=lambda p: p.stem)
def test_bundled_traces(path: Path) -> None:
    t = Trace.load(path)
    assert 15_000 <= len(t) <= 200_000
    assert path.name in (TRACES / "README.md").read_text()
    assert "command" in t.meta and t.peak_live_bytes() > 0


def test_bundled_traces_exist() -> None:
    names = {p.stem for p in TRACES.glob("*.npz")}
    assert {"gpt", "resnet", "mlp_embedding"} <= names and len(names) >= 5


def test_two_optimizers_both_step_and_both_states_are_labelled() -> None:
    """A GAN-like step (a helper's audit): a list of optimizers was an AttributeError, and
    the workaround labelled the second optimizer's state as activations."""
    from cachegym.envs.workloads.recorder import record

    torch.manual_seed(0)
    g, d = torch.nn.Linear(8, 8), torch.nn.Linear(8, 1)
    model = torch.nn.ModuleDict({"g": g, "d": d})
    opts = [torch.optim.Adam(g.parameters()), torch.optim.Adam(d.parameters())]
    before = [p.detach().clone() for p in model.parameters()]

    def loss_fn(m, x):  # type: ignore[no-untyped-def]
        return m["d"](m["g"](x)).square().mean()

    t = record(model, opts, lambda s: torch.randn(4, 8), loss_fn, steps=2)
    sizes = set(t.size[t.kind == Kind.OPTIMIZER_STATE].tolist())
    assert 8 * 8 * 4 in sizes  # the generator's weight's exp_avg / exp_avg_sq (first optimizer)
    assert 1 * 8 * 4 in sizes  # the discriminator's (the second: labelled activations before)
    assert all(not torch.equal(a, b) for a, b in zip(before, model.parameters()))  # both stepped
    assert t.meta["params"]["optimizer"] == "Adam,Adam"


@pytest.mark.parametrize("case, match", [
    ("other_model", "holds none of the model's parameters"),
    ("loss_none", r"loss_fn\(model, batch\) returned NoneType"),
    ("no_grad", "gradients are off here"),
    ("model_as_optimizer", "optimizer must be a torch.optim.Optimizer"),
    ("batch_not_callable", "make_batch must be a function"),
    ("steps_text", "steps must be an int >= 1, got '3'"),
    ("sparse", "a sparse gradient"),
    ("meta", "no tensor access was recorded"),
])
def test_record_refuses_what_it_cannot_record_naming_the_argument(case: str, match: str) -> None:
    """They were AttributeErrors after a forward and backward, a crash inside the recorder, an
    empty trace, or nothing at all (an optimizer of another model never stepped this one)."""
    from cachegym.allocator.errors import ConfigError
    from cachegym.envs.workloads.recorder import record

    model = torch.nn.Linear(4, 2)
    opt: object = torch.optim.SGD(model.parameters(), lr=0.1)
    batch: object = lambda s: torch.randn(3, 4)  # noqa: E731
    loss = lambda m, b: m(b).sum()  # noqa: E731
    steps: object = 1
    ctx = torch.enable_grad()
    if case == "other_model":
        opt = torch.optim.SGD(torch.nn.Linear(4, 2).parameters(), lr=0.1)
    elif case == "loss_none":
        loss = lambda m, b: None  # noqa: E731
    elif case == "no_grad":
        ctx = torch.no_grad()
    elif case == "model_as_optimizer":
        opt = model
    elif case == "batch_not_callable":
        batch = torch.randn(3, 4)
    elif case == "steps_text":
        steps = "3"
    elif case == "sparse":
        model = torch.nn.Embedding(10, 4, sparse=True)  # type: ignore[assignment]
        opt = torch.optim.SGD(model.parameters(), lr=0.1)
        batch = lambda s: torch.tensor([1, 2])  # noqa: E731
    elif case == "meta":
        model = torch.nn.Linear(4, 2, device="meta")
        opt = None
        batch = lambda s: torch.randn(3, 4, device="meta")  # noqa: E731
    with ctx, pytest.raises(ConfigError, match=match):
        record(model, opt, batch, loss, steps=steps)  # type: ignore[arg-type]
