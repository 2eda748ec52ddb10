"""The API reference (``scripts/api_docs.py``, pdoc) builds on every CI run: every public module
imports, every name in an ``__all__`` resolves, and public functions, classes and methods have
docstrings (beyond the shrinking list of those that had none when the reference began)."""

import importlib.util
import subprocess
import sys
import types
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


@pytest.fixture(scope="module")
def api_docs():
    spec = importlib.util.spec_from_file_location("api_docs", ROOT / "scripts" / "api_docs.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_reference_builds_without_problems(api_docs, tmp_path):
    # its own process, as a developer runs it: the build resolves lazy exports and sets pdoc's options
    r = subprocess.run([sys.executable, str(ROOT / "scripts" / "api_docs.py"), "-o", str(tmp_path)],
                       cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, "the API reference has problems:\n" + r.stderr[-6000:]
    for package in api_docs.PACKAGES:
        assert (tmp_path / f"{package.replace('.', '/')}.html").exists(), package
    layout = (tmp_path / "axe" / "layout.html").read_text()
    assert "tile_of" in layout and "canonicalize" in layout
    # lazily exported names (a module __getattr__) are documented where the package exports them
    assert "LaunchError" in (tmp_path / "axe" / "runtime.html").read_text()
    assert (tmp_path / "axe" / "layout" / "interop" / "cute.html").exists()
    assert (tmp_path / "index.html").exists()


def test_the_check_finds_what_it_must(api_docs):
    import pdoc.doc

    m = types.ModuleType("axe.api_docs_probe", "A probe.")
    exec("class Shown:\n    '''A class.'''\n    def bare(self): pass\n"
         "def bare(): pass\ndef _private(): pass\ndef told():\n    '''Told.'''\n", vars(m))
    for f in (m.Shown, m.Shown.bare, m.bare, m._private, m.told):
        f.__module__ = m.__name__
    sys.modules[m.__name__] = m
    try:
        found = api_docs.undocumented([pdoc.doc.Module(m)])
    finally:
        del sys.modules[m.__name__]
    assert found == {"axe.api_docs_probe.bare", "axe.api_docs_probe.Shown.bare"}

    bad = types.ModuleType("axe.api_docs_lazy")
    bad.__all__ = ["missing"]
    sys.modules[bad.__name__] = bad
    try:
        problems = api_docs.import_all([bad.__name__])
    finally:
        del sys.modules[bad.__name__]
    assert problems and "does not resolve" in problems[0]
    assert "does not import" in api_docs.import_all(["axe.no_such_module"])[0]
