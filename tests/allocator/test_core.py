"""The compiled core is the .py source compiled, nothing else: setup.py compiles exactly the
modules that ``CACHEGYM_PURE_PYTHON=1`` runs interpreted, that switch really loads the .py, and a
built extension is never older than the source it was compiled from."""

from __future__ import annotations

import importlib
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from cachegym.allocator import _purepy

ROOT = Path(__file__).resolve().parents[2]


def test_setup_compiles_the_modules_pure_mode_interprets() -> None:
    """setup.py builds ``_purepy.CORE`` (its one list: no second list to keep equal)."""
    text = (ROOT / "setup.py").read_text()
    assert "for name in PUREPY.CORE]" in text and "cachegym/allocator/loop.py" not in text


def test_every_compiled_module_has_its_source_and_a_pxd_exactly_where_typed() -> None:
    assert _purepy.CORE == _purepy.TYPED + _purepy.PLAIN and len(set(_purepy.CORE)) == len(_purepy.CORE)
    for name in _purepy.CORE:
        pkg, _, mod = name.rpartition(".")
        assert (ROOT / pkg.replace(".", "/") / f"{mod}.py").is_file()
        has_pxd = (ROOT / pkg.replace(".", "/") / f"{mod}.pxd").is_file()
        if name in _purepy.TYPED:
            assert has_pxd, f"{name} has no .pxd (its native layout)"
        else:
            assert not has_pxd, f"{name} has a .pxd: list it in allocator/_purepy.py's TYPED"


def test_the_makefile_rebuilds_when_any_compiled_source_changes() -> None:
    """The Makefile's CORE_SRC names every compiled module's source (a change to one not named
    would leave a stale extension module in a checkout)."""
    text = (ROOT / "Makefile").read_text()
    block = text[text.index("CORE_SRC :="):]
    block = block[:block.index(")\n")]
    named = {w.removesuffix(".p*") for w in block.replace("\\", " ").split() if w.endswith(".p*")}
    assert named == {name.split(".", 1)[1].replace(".", "/") for name in _purepy.CORE}


def test_pure_mode_loads_every_core_module_from_its_source() -> None:
    code = ("import json, importlib, cachegym.allocator; mods = [importlib.import_module(m) for m in "
            f"{list(_purepy.CORE)!r}]; print(json.dumps([m.__file__ for m in mods]))")
    env = dict(os.environ, CACHEGYM_PURE_PYTHON="1")
    out = subprocess.run([sys.executable, "-c", code], env=env, cwd=ROOT, capture_output=True,
                         text=True, check=True).stdout
    paths = json.loads(out.splitlines()[-1])
    assert len(paths) == len(_purepy.CORE) and all(p.endswith(".py") for p in paths), paths


@pytest.mark.skipif(os.environ.get("CACHEGYM_PURE_PYTHON", "") not in ("", "0"),
                    reason="runs the core interpreted: no extension module is loaded")
def test_a_compiled_module_is_not_older_than_its_source() -> None:
    """A checkout whose .py changed after the build would run old code: ``make install``
    rebuilds (the Makefile's .built target), as does ``pip install -e .``."""
    for name in _purepy.CORE:
        m = importlib.import_module(name)
        if m.__file__ is None or m.__file__.endswith(".py"):
            continue  # no compiler where it was installed: the .py runs, nothing can be stale
        built = os.path.getmtime(m.__file__)
        pkg, _, mod = name.rpartition(".")
        for ext in (".py", ".pxd"):
            src = ROOT / pkg.replace(".", "/") / f"{mod}{ext}"
            if not src.exists():  # a PLAIN module has no .pxd
                continue
            assert os.path.getmtime(src) <= built, (
                f"{m.__file__} was built before {src} last changed: rebuild with `make install` "
                "or `python setup.py build_ext --inplace`")


def test_the_build_records_the_sources_of_what_it_compiled() -> None:
    """setup.py's build_ext writes allocator/_built.json: each module it built and the hash of
    the sources it was built from, the same hash ``_purepy.source_hash`` gives now."""
    record = ROOT / "allocator" / "_built.json"
    built = [n for n in _purepy.CORE if not importlib.import_module(n).__file__.endswith(".py")]  # type: ignore[union-attr]
    if not built:
        pytest.skip("nothing is compiled here (no C compiler, or CACHEGYM_PURE_PYTHON=1)")
    names = json.loads(record.read_text())
    assert set(built) <= set(names)
    assert _purepy.stale() == []


def test_a_module_edited_after_the_build_is_found_stale(tmp_path: Path) -> None:
    good = {n: _purepy.source_hash(str(ROOT / n.split(".", 1)[1].replace(".", "/"))) for n in _purepy.CORE}
    rec = tmp_path / "_built.json"
    rec.write_text(json.dumps(good))
    assert _purepy.stale(str(rec)) == []
    rec.write_text(json.dumps({**good, "cachegym.policies.lru": "0" * 64}))
    assert _purepy.stale(str(rec)) == ["cachegym.policies.lru"]
    for unreadable in ("{", "[1]"):
        rec.write_text(unreadable)
        assert _purepy.stale(str(rec)) == []
    assert _purepy.stale(str(tmp_path / "missing.json")) == []


def test_a_stale_build_warns_and_runs_the_sources(monkeypatch: pytest.MonkeyPatch) -> None:
    installed = []
    monkeypatch.setattr(_purepy, "stale", lambda record=None: ["cachegym.policies.lru"])
    monkeypatch.setattr(_purepy, "install", lambda: installed.append(True))
    with pytest.warns(RuntimeWarning, match=r"cachegym.policies.lru changed after it was compiled.*make install"):
        _purepy.check_build()
    assert installed == [True]
    monkeypatch.setattr(_purepy, "stale", lambda record=None: [])
    _purepy.check_build()
    # no build at all (a checkout's sources run without `make install`): said once, as slower
    monkeypatch.setattr(_purepy, "compiled_here", lambda: False)
    with pytest.warns(RuntimeWarning, match=r"the core is not compiled in .* runs interpreted"):
        _purepy.check_build()
    assert installed == [True]
