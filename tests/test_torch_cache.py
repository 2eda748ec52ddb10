"""The on-disk artifact cache (axe/torch/cache.py) and the progress display (axe/progress.py):
keys, hits, concurrent builders, machines without TVM, shipped folders, list/clear, the CLI."""

import io
import json
import multiprocessing
import os
import sys
import time

import pytest

from axe.backends.cuda.artifact import SCHEMA, Artifact
from axe.progress import Progress
from axe.torch.cache import (ArtifactCache, ArtifactMissing, CacheKey, kernel_source_digest, parse_spec)


def fake_artifact(name="rows_dyn", n=1024, dtype="float16", scalars=()):
    """A valid artifact (launch.json passes the schema check) of a row-wise kernel over a
    runtime row count M: ``name(X_: (M, n), Y_: (M, n), *scalars)``, grid M."""
    tensor = {"kind": "tensor", "dtype": dtype, "shape": ["M", n], "strides": None, "alignment": 16}
    args = [dict(tensor, name="X_"), dict(tensor, name="Y_")] + [
        {"name": s, "kind": "scalar", "dtype": "float32"} for s in scalars]
    params = [dict(a, arg=a["name"]) if a["kind"] == "tensor" else dict(a, value=a["name"]) for a in args]
    launch = {"schema": SCHEMA, "name": name, "arch": "sm_90a", "kernel": f"{name}_kernel", "grid": ["M", 1, 1],
              "block": [128, 1, 1], "cluster": None, "dynamic_smem": 0, "cooperative": False, "args": args,
              "params": params, "symbols": {"M": {"arg": "X_", "dim": 0}}, "shape_vars": {"M": "int32"},
              "tensormaps": [], "resources": {}}
    return Artifact(cuda_source="// fake\n", ptx="// fake\n", cubin=os.urandom(64), launch=launch)


def key(target="sm_90a", tvm="0.27", **spec):
    return CacheKey("kernels.rmsnorm:dynamic", "s" * 64, "0.1.0+test", tvm, target, tuple(sorted((spec or {"n": 1024}).items())))


def test_key_digest_depends_on_every_field():
    base = key(n=1024, dtype="float16")
    assert base.digest == key(dtype="float16", n=1024).digest             # spec order does not matter
    variants = [key(n=2048, dtype="float16"), key(n=1024, dtype="bfloat16"), key(target="sm_100a", n=1024, dtype="float16"),
                key(tvm="0.28", n=1024, dtype="float16"),
                CacheKey(base.kernel, "t" * 64, base.axe, base.tvm, base.target, base.spec),
                CacheKey(base.kernel, base.source, "0.1.1", base.tvm, base.target, base.spec),
                CacheKey("kernels.softmax:dynamic", base.source, base.axe, base.tvm, base.target, base.spec)]
    digests = {v.digest for v in variants} | {base.digest}
    assert len(digests) == len(variants) + 1


def test_key_make_hashes_sources_without_importing(tmp_path, monkeypatch):
    pkg = tmp_path / "kpkg"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    (pkg / "helper.py").write_text("X = 1\n")
    (pkg / "k.py").write_text("import tvm_is_not_needed_here\nfrom .helper import X\n\ndef make(n):\n    return n\n")
    (pkg / "other.py").write_text("Y = 2\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    kernel_source_digest.cache_clear()
    k1 = CacheKey.make("kpkg.k:make", "sm_90a", {"n": 8})
    assert "kpkg.k" not in sys.modules                        # read as text, never executed
    (pkg / "other.py").write_text("Y = 3\n")                  # not imported by k: same key
    kernel_source_digest.cache_clear()
    assert CacheKey.make("kpkg.k:make", "sm_90a", {"n": 8}) == k1
    (pkg / "helper.py").write_text("X = 2\n")                 # imported by k (relatively): a new key
    kernel_source_digest.cache_clear()
    assert CacheKey.make("kpkg.k:make", "sm_90a", {"n": 8}).digest != k1.digest
    with pytest.raises(TypeError, match="n=1.5 must be an int"):
        CacheKey.make("kpkg.k:make", "sm_90a", {"n": 1.5})
    with pytest.raises(ArtifactMissing, match="'kpkg.nope' is not found on sys.path"):
        CacheKey.make("kpkg.nope:make", "sm_90a", {})
    kernel_source_digest.cache_clear()


def test_build_once_then_hit(tmp_path):
    cache = ArtifactCache(tmp_path / "c", shipped=[])
    calls = []
    k = key(n=1024, dtype="float16")
    p1 = cache.get(k, lambda: calls.append(1) or fake_artifact())
    p2 = cache.get(k, lambda: calls.append(1) or fake_artifact())
    assert calls == [1] and p1 == p2 == cache.entry_dir(k)
    assert Artifact.load(p1).launch["name"] == "rows_dyn"           # a whole, valid artifact
    assert json.loads((p1 / "key.json").read_text())["spec"] == {"n": 1024, "dtype": "float16"}
    assert ArtifactCache(tmp_path / "c", shipped=[]).find(k) == p1   # a later process hits it too
    assert not [p for p in p1.parent.iterdir() if p.name.startswith(".")]   # no temporary folder left


def test_failed_build_leaves_no_entry(tmp_path):
    cache = ArtifactCache(tmp_path, shipped=[])
    k = key()

    def broken():
        raise RuntimeError("nvcc failed")
    with pytest.raises(RuntimeError, match="nvcc failed"):
        cache.get(k, broken)
    assert cache.find(k) is None and cache.entries() == []
    assert [p.name for p in cache.entry_dir(k).parent.iterdir() if p.is_dir()] == []


def _racer(root, k, log, go):
    """One of several processes that want the same entry at once (module level: picklable)."""
    go.wait()

    def build():
        with open(log, "a") as f:
            f.write(f"{os.getpid()}\n")
        time.sleep(0.3)                     # a slow build: the others must wait, then hit
        return fake_artifact()
    p = ArtifactCache(root, shipped=[]).get(k, build)
    with open(log, "a") as f:
        f.write(f"got {p}\n")


def test_concurrent_processes_build_once(tmp_path):
    ctx = multiprocessing.get_context("fork")
    k, log, go = key(n=4096), tmp_path / "log", ctx.Event()
    procs = [ctx.Process(target=_racer, args=(tmp_path / "c", k, log, go)) for _ in range(4)]
    for p in procs:
        p.start()
    go.set()
    for p in procs:
        p.join(30)
        assert p.exitcode == 0
    lines = log.read_text().splitlines()
    builds = [x for x in lines if not x.startswith("got ")]
    got = {x for x in lines if x.startswith("got ")}
    assert len(builds) == 1, lines                       # one builder; three waited and hit
    assert got == {f"got {ArtifactCache(tmp_path / 'c', shipped=[]).entry_dir(k)}"} and len(lines) == 5
    Artifact.load(ArtifactCache(tmp_path / "c", shipped=[]).entry_dir(k))


def test_without_tvm_any_tvm_build_serves_and_a_miss_says_how_to_build(tmp_path):
    shipped = tmp_path / "shipped"
    ArtifactCache(shipped, shipped=[]).get(key(tvm="0.27.0.post1", n=1024), fake_artifact)
    cache = ArtifactCache(tmp_path / "empty", shipped=[shipped])
    found = cache.find(key(tvm=None, n=1024))
    assert found is not None and found.is_relative_to(shipped)
    assert cache.get(key(tvm=None, n=1024), lambda: pytest.fail("must not build")) == found
    with pytest.raises(ArtifactMissing) as e:
        cache.get(key(tvm=None, n=2048, dtype="bfloat16"), lambda: pytest.fail("must not build"))
    msg = str(e.value)
    for word in ("kernels.rmsnorm:dynamic(dtype=bfloat16, n=2048) for sm_90a", "TVM is not installed",
                 "axe cache build kernels.rmsnorm:dynamic dtype=bfloat16 n=2048 --target sm_90a", str(shipped)):
        assert word in msg, msg
    # with a known TVM version only the exact key serves
    assert cache.find(key(tvm="0.28", n=1024)) is None


def test_without_tvm_the_newest_build_of_the_release_serves(tmp_path):
    cache = ArtifactCache(tmp_path, shipped=[])
    k = key(n=1024)

    def with_axe(axe, tvm="0.27"):
        return CacheKey(k.kernel, k.source, axe, tvm, k.target, k.spec)
    old = cache.get(with_axe("0.1.0+aaaa"), fake_artifact)
    os.utime(old / "key.json", (1, 1))                       # built long ago
    new = cache.get(with_axe("0.1.0+bbbb"), fake_artifact)
    cache.get(with_axe("0.2.0+cccc"), fake_artifact)         # another release: never served
    assert cache.find(with_axe("0.1.0+dddd", tvm=None)) == new
    assert cache.find(with_axe("0.1.0+dddd")) is None        # with TVM: only the exact tree
    assert cache.find(with_axe("0.3.0+aaaa", tvm=None)) is None


def test_list_and_clear_leave_shipped_folders(tmp_path):
    shipped = tmp_path / "shipped"
    ArtifactCache(shipped, shipped=[]).get(key(n=1024), fake_artifact)
    cache = ArtifactCache(tmp_path / "c", shipped=[shipped])
    for n in (2048, 4096):
        cache.get(key(n=n), fake_artifact)
    entries = cache.entries()
    assert sorted((e.fields["spec"]["n"], e.shipped) for e in entries) == [(1024, True), (2048, False), (4096, False)]
    sizes = {e.fields["spec"]["n"]: e.bytes for e in entries}
    want = sum(f.stat().st_size for f in cache.entry_dir(key(n=2048)).iterdir())
    assert sizes[2048] == want
    n, size = cache.clear()
    assert n == 2 and size == sizes[2048] + sizes[4096]
    assert [e.fields["spec"]["n"] for e in cache.entries()] == [1024]     # the shipped one stays
    assert cache.clear() == (0, 0)


@pytest.mark.parametrize("words", [["n=1024", "dtype=float16"], ["b=true", "x=1.5", "s=null"], []])
def test_parse_spec_inverts_spec_words(words):
    spec = parse_spec(words)
    k = key(**spec) if spec else CacheKey("m:f", "s", "a", None, "sm_90a", ())
    assert parse_spec(k.spec_words()) == dict(k.spec)
    if words[:1] == ["b=true"]:
        assert spec == {"b": True, "x": "1.5", "s": "null"}
    with pytest.raises(ValueError, match="'oops' is not NAME=VALUE"):
        parse_spec(["oops"])


def test_cli_cache_list_and_clear(tmp_path, monkeypatch, capsys):
    from axe.cli import main
    monkeypatch.setenv("AXE_CACHE_DIR", str(tmp_path))
    monkeypatch.delenv("AXE_SHIPPED_DIRS", raising=False)
    ArtifactCache().get(key(n=1024, dtype="float16"), fake_artifact)
    assert main(["cache", "list"]) == 0
    out = capsys.readouterr().out
    assert "kernels.rmsnorm:dynamic" in out and "dtype=float16 n=1024" in out and "sm_90a" in out and str(tmp_path) in out
    assert main(["cache", "clear"]) == 0
    assert "removed 1 entries" in capsys.readouterr().out
    assert ArtifactCache().entries() == []


def test_progress_plain_lines_and_tty():
    clock = iter(range(100)).__next__
    out = io.StringIO()
    with Progress(2, "build", stream=out, clock=clock) as p:
        with p.step("a"):
            pass
        with pytest.raises(ValueError):
            with p.step("b"):
                raise ValueError("x")
    lines = out.getvalue().splitlines()
    assert lines == ["[1/2] build a ok 1.0 s", "[2/2] build b FAILED after 1.0 s", "build: 2 done, 1 failed, 5.0 s"]
    tty = io.StringIO()
    with Progress(1, "build", stream=tty, tty=True, clock=iter(range(100)).__next__) as p:
        with p.step("a"):
            pass
    text = tty.getvalue()
    assert text.startswith("\r[0/1] build a ...\x1b[K\r[1/1] build a ok 1.0 s\x1b[K")   # rewritten in place
    assert text.endswith("\rbuild: 1 done, 0 failed, 3.0 s\x1b[K\n") and text.count("\n") == 1
