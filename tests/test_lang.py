"""The kernel language: tensors with layouts, scopes and slices, both register forms compile."""

import os

import pytest

pytest.importorskip("tvm")
os.environ.setdefault("CUDA_PATH", "/usr/local/cuda")

from tvm.script import tirx as T  # noqa: E402

import axe.lang as Ax  # noqa: E402
from axe.layout import S, tx  # noqa: E402


def _ptx(k, target="sm_90a"):
    return Ax.compile_kernel(k, target)


@Ax.kernel()
def collective():
    """AXE-LAYOUT example 7, CTA-collective: S[(16,8,8):(8@tx,1@tx,1@reg)] over a 16×64 tile."""
    @T.prim_func
    def collective(A_: T.Buffer((64, 128), "float16"), B_: T.Buffer((64, 128), "float16")):
        bx, tx_ = Ax.launch(4, 128)
        A = Ax.param(A_)
        B = Ax.param(B_)
        R = Ax.registers((16, 64), "float16", "S[(16,8,8):(8@tx,1@tx,1@reg)]")
        Ax.copy(R, A[bx * 16:(bx + 1) * 16, 0:64])
        Ax.copy(B[bx * 16:(bx + 1) * 16, 0:64], R)
    return collective


@Ax.kernel()
def per_thread():
    """Example 7, per thread: S[(2,4):(4,1)] + ((tx//8)*128 + (tx%8)*8 + 2112) in thread scope."""
    @T.prim_func
    def per_thread(A_: T.Buffer((8192,), "float16"), B_: T.Buffer((8192,), "float16")):
        bx, tx_ = Ax.launch(1, 128)
        A = Ax.param(A_)
        B = Ax.param(B_)
        r = Ax.registers((2, 4), "float16", "S[(2,4):(4,1)]")
        with Ax.thread():
            Ax.copy(r, Ax.view(A, "S[(2,4):(4,1)]", base=(tx_ // 8) * 128 + (tx_ % 8) * 8 + 2112))
            Ax.copy(Ax.view(B, "S[(2,4):(4,1)]", base=(tx_ // 8) * 128 + (tx_ % 8) * 8 + 2112), r)
    return per_thread


def test_collective_register_form_compiles_to_vectors():
    art = _ptx(collective)
    assert [r.chosen for r in art.records] == ["vector", "vector"]
    assert "ld.global.v4" in art.ptx and "st.global.v4" in art.ptx


def test_per_thread_form_compiles_with_16_byte_vectors():
    art = _ptx(per_thread)
    assert all(r.chosen == "vector" for r in art.records)
    assert "16-byte" in art.records[0].plan   # the thread's 2×4 run is contiguous and 8-aligned
    assert "ld.global.v4" in art.ptx


@Ax.kernel()
def sliced():
    """Warps 0–3 produce into shared memory, warps 4–7 consume it (a scope slice)."""
    @T.prim_func
    def sliced(A_: T.Buffer((128, 64), "float16"), B_: T.Buffer((128, 64), "float16")):
        bx, tx_ = Ax.launch(1, 256)
        A = Ax.param(A_)
        B = Ax.param(B_)
        tile = Ax.shared((128, 64), "float16")
        with Ax.warps(0, 4):
            Ax.copy(tile, A)
        Ax.sync()
        with Ax.warps(4, 8):
            Ax.copy(B, tile)
    return sliced


def test_scope_slices_guard_and_rebase_threads():
    func, ctx = Ax.build_func(sliced)
    text = func.script()
    assert "tx_ >= 0 and tx_ < 128" in text and "tx_ >= 128 and tx_ < 256" in text
    assert [r.call.scope.threads for r in ctx.records] == [128, 128]
    assert ctx.records[0].chosen == "cp_async" and ctx.records[1].chosen == "vector"
    art = _ptx(sliced)
    assert "cp.async.cg.shared.global" in art.ptx


def test_tensor_slice_uses_layout_algebra():
    from axe.ops.tensor import Tensor
    from axe.layout import parse
    L = parse("S[(2,8,3,8):(192,8,64,1)]")
    t = Tensor(object(), L, (16, 24), "float16", "shared", name="t")
    sub = t[0:8, 8:24]
    assert sub.shape == (8, 16)
    assert sub.layout.offset["m"] == 64


def test_bad_layout_shape_is_refused():
    from axe.ops.tensor import Tensor
    with pytest.raises(ValueError, match="has 12 elements"):
        Tensor(object(), S[(4, 4)], (3, 4), "float16", "global", name="x")


def test_symbolic_slice_start_needs_one_layout_for_every_block():
    """A start bx*4 is any multiple of 4; [0,4) and [8,12) are S[4:1] but [4,8) wraps the inner
    iter, so no single layout serves every bx and the slice must be refused, not guessed."""
    import tvm
    from axe.layout import LayoutError, parse
    from axe.ops.tensor import Tensor
    bx = tvm.tirx.Var("bx", "int32")
    t = Tensor(object(), parse("S[(2,6):(100,1)]"), (12,), "float16", "shared", name="t")
    with pytest.raises(LayoutError, match="block 1 differs"):
        t.region([bx * 4], [4])
    ok = Tensor(object(), parse("S[(2,8):(100,1)]"), (16,), "float16", "shared", name="u").region([bx * 4], [4])
    assert ok.layout == parse("S[4:1]")


def test_symbolic_start_on_an_affine_dimension():
    """Rows [r, r+64) of a row-major stand-in at a start r that is only known at run time (a
    tile that begins inside another group's rows): an affine dimension slices to one layout at any
    start, the offset moving by r·stride exactly (checked by substituting values), while a tiled
    dimension still needs a whole number of blocks."""
    import tvm
    import tvm.sym
    from axe.layout import LayoutError, parse
    from axe.ops.tensor import Tensor
    r = tvm.tirx.Var("r", "int32")
    t = Tensor(object(), parse("S[(64,2048):(2048,1)]"), (64, 2048), "bfloat16", "global", name="A")
    sub = t.region([r, 128], [64, 64])
    assert sub.layout == parse("S[(64,64):(2048,1)]") + 128
    assert sub.starts == (r, 128)
    for v in (0, 16, 48, 1000):
        ana = tvm.sym.Analyzer()
        ana.bind(r, v)
        assert int(ana.simplify(sub.base)) == v * 2048
    tiled = Tensor(object(), parse("S[(2,8):(100,1)]"), (16,), "float16", "shared", name="u")
    with pytest.raises(LayoutError, match="not provably a multiple of its extent 4"):
        tiled.region([r], [4])


# --- the language belongs to no target: backends register, constructs are reached through them ---

def _run_py(code, script=None):
    """Run ``code`` in a fresh interpreter (from the file ``script`` when given: TVMScript reads a
    kernel's source) at the repository root; its stdout."""
    import subprocess
    import sys
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    if script is not None:
        script.write_text(code)
    args = [str(script)] if script is not None else ["-c", code]
    out = subprocess.run([sys.executable, *args], capture_output=True, text=True, cwd=root,
                         env={**os.environ, "PYTHONPATH": root})
    assert out.returncode == 0, out.stderr
    return out.stdout


def test_the_language_imports_no_backend():
    """``import axe.lang`` imports no backend; ``Ax.cuda`` / ``Ax.neuron`` import theirs on first use."""
    out = _run_py("import sys, axe.lang as Ax\n"
                  "be = lambda: sorted({m.split('.')[2] for m in sys.modules if m.startswith('axe.backends.')})\n"
                  "print(be()); Ax.neuron; print(be()); Ax.cuda.mbarrier; print(be())")
    assert out.split("\n")[:3] == ["[]", "['neuron']", "['cuda', 'neuron']"]


def _trn1_kernel(body):
    """A trn1 kernel whose body runs ``body()`` after entering the NeuronCore."""
    @Ax.kernel(name="uses_construct")
    def k():
        @T.prim_func
        def uses_construct(A_: T.Buffer((128, 64), "float16")):
            Ax.neuron.core()
            body()
        return uses_construct
    return k


@pytest.mark.parametrize("construct,call", [
    ("Ax.cuda.mbarrier", lambda: Ax.cuda.mbarrier(1, 2)),
    ("Ax.cuda.pipeline", lambda: Ax.cuda.pipeline(4, producers=2)),
    ("Ax.cuda.setmaxnreg", lambda: Ax.cuda.setmaxnreg(40, False)),
    ("Ax.cuda.role", lambda: Ax.cuda.role(0, 1, regs=40)),
    ("Ax.cuda.cluster_launch", lambda: Ax.cuda.cluster_launch(132, 384, 2)),
    ("Ax.cuda.tmem", lambda: Ax.cuda.tmem((128, 256))),
])
def test_a_cuda_construct_in_a_trn1_build_names_construct_and_target(construct, call):
    k = _trn1_kernel(call)
    for build in (Ax.compile_kernel, Ax.explain):
        with pytest.raises(Ax.KernelError, match=rf"^kernel uses_construct at .*: {construct} is a construct of the "
                                                 r"cuda backend; this build is for trn1") as err:
            build(k, "trn1")
        assert isinstance(err.value, Ax.TargetError)


def test_a_trainium_construct_in_a_gpu_build_names_construct_and_target():
    with pytest.raises(Ax.TargetError, match=r"Ax.neuron.core is a construct of the neuron backend; this build is "
                                             r"for sm_100a"):
        Ax.compile_kernel(_trn1_kernel(lambda: None), "sm_100a")


def test_an_old_top_level_spelling_names_the_new_one():
    with pytest.raises(AttributeError, match=r"no attribute 'mbarrier' \(mbarrier is a construct of a target: write "
                                             r"Ax.cuda.mbarrier\)"):
        Ax.mbarrier
    with pytest.raises(AttributeError, match=r"no attribute 'sbuf' \(.*Ax.neuron.sbuf\)"):
        Ax.sbuf
    with pytest.raises(AttributeError, match=r"no attribute 'nothing'$"):
        Ax.nothing


def test_mesh_signals_need_the_targets_mesh_hook():
    with pytest.raises(Ax.TargetError, match=r"signals between devices .*target family 'neuron'.* no 'mesh' hook"):
        Ax.compile_kernel(_trn1_kernel(Ax.fence_system), "trn1")


def test_a_third_target_is_a_folder(tmp_path):
    """A backend package dropped next to the others (here on ``axe.backends.__path__``) is a new
    target: its language is ``Ax.<family>``, its build hook builds its targets, its constructs are
    refused in other builds; no shared file names it."""
    pkg = tmp_path / "toy"
    pkg.mkdir()
    (pkg / "__init__.py").write_text(
        'HOOKS = {"language": "axe.backends.toy.lang", "build_kernel": "axe.backends.toy.lang:build"}\n')
    (pkg / "lang.py").write_text(
        "from tvm.script import tirx as T\n"
        "CALLS = []\n"
        "def hello(x):\n    CALLS.append(x)\n    T.evaluate(x)\n"
        "def build(k, func, ctx, target):\n    return ('toy artifact', k.name, target, list(CALLS))\n")
    out = _run_py(
        "import axe.backends, axe.lang as Ax\n"
        f"axe.backends.__path__.append({str(tmp_path)!r})\n"
        "from tvm.script import tirx as T\n"
        "@Ax.kernel(name='hi')\n"
        "def hi():\n"
        "    @T.prim_func\n"
        "    def hi(A: T.Buffer((4,), 'int32')):\n"
        "        Ax.toy.hello(7)\n"
        "    return hi\n"
        "print(Ax.compile_kernel(hi, 'toy'))\n"
        "try:\n    Ax.compile_kernel(hi, 'sm_90a')\n"
        "except Ax.TargetError as e:\n    print(e.message)\n", tmp_path / "main.py")
    assert out.split("\n")[:2] == ["('toy artifact', 'hi', 'toy', [7])",
                                   "Ax.toy.hello is a construct of the toy backend; this build is for sm_90a "
                                   "(target family cuda)"]


def test_a_target_without_a_backend_is_refused_by_name():
    with pytest.raises(Ax.TargetError, match=r"no backend for target family 'vulkan'.*backends: \['cuda', 'neuron'\]"):
        Ax.compile_kernel(collective, "vulkan")


def test_tile_schedule_visits_every_tile_once_on_ints_and_tir():
    """TileSchedule is target-neutral arithmetic: brute force over the workers' loops covers every
    (m, n) exactly once, in bands of ``group`` rows; the TIR form simplifies to the same values."""
    import itertools
    import tvm
    for m_tiles, n_tiles, ctas, group in itertools.product((1, 5, 16), (1, 3, 7), (1, 4, 132), (1, 2, 8)):
        s = Ax.TileSchedule(m_tiles, n_tiles, ctas, group)
        seen = [s.coords(s.tile(c, i)) for c in range(ctas) for i in range(s.count(c))]
        assert sorted(seen) == [(m, n) for m in range(m_tiles) for n in range(n_tiles)]
        assert all(s.coords(t)[0] // group == t // (group * n_tiles) for t in range(s.tiles))
    s, t = Ax.TileSchedule(5, 7, 4, 2), tvm.tirx.Var("t", "int32")
    m, n = s.coords(t)
    for v in range(s.tiles):
        ana = tvm.sym.Analyzer()
        ana.bind(t, v)
        assert tuple(int(ana.simplify(e)) for e in (m, n)) == s.coords(v)


def test_target_families_come_from_the_backends_hooks():
    """``target_family`` reads each backend's declared target prefixes (no backend is named in the
    shared layer): every prefix maps to the backend that declares it."""
    import importlib

    from axe.schedules.context import _target_prefixes, target_family
    from axe.schedules.registry import families
    declared = {(p, f) for f in families()
                for p in getattr(importlib.import_module(f"axe.backends.{f}"), "HOOKS", {}).get("targets", ())}
    assert declared == set(_target_prefixes()) and {f for _, f in declared} == {"cuda", "neuron"}
    assert [target_family(t) for t in ("sm_90a", "sm_100a", "trn1", "toy")] == ["cuda", "cuda", "neuron", "toy"]
