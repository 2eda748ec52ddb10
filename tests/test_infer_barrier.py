"""A load that completes on an mbarrier must go to a schedule that arrives on it.

The inferred transpose (``kernels/inferred/transpose.py``) hung on an H100 (2026-11-27): the swizzle
search gave its TMA-loaded tile ``Swizzle(3,3,6)``, which TMA cannot write, so its
``copy(..., barrier=bar)`` fell to ``cp.async``, which ignores ``barrier=``, and the kernel's
``mbarrier_wait(bar, 0)`` waited for an arrival that never came.  Two guards, both checked here on
the CPU: inference gives a tile loaded with ``barrier=`` only layouts TMA can write, and dispatch
declines ``barrier=`` in every copy schedule that would not arrive on the barrier.  The emitted
source of every inferred kernel is also checked for waits nothing can satisfy."""

import os
import re

import pytest

from axe.layout import parse

tvm = pytest.importorskip("tvm")
os.environ.setdefault("CUDA_PATH", "/usr/local/cuda")
from tvm.script import tirx as T  # noqa: E402

import axe.lang as Ax  # noqa: E402


def _no_nvcc():
    """Builds keep TVM's CUDA source and skip nvcc: scripts/cuda_snapshot.py's ``no_nvcc``."""
    import importlib.util
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    spec = importlib.util.spec_from_file_location("cuda_snapshot", os.path.join(root, "scripts", "cuda_snapshot.py"))
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod.no_nvcc()


def test_tma_expressible_agrees_with_the_tma_schedules_swizzle_rule():
    """Every candidate the search weighs: ``tma_expressible`` holds exactly for the unpadded plain
    tile and TMA's own swizzles (the TMA schedule's ``swizzle_mode``) whose rows fit."""
    from axe.backends.cuda.schedules.tma import swizzle_mode
    from axe.layout.swizzle import SwizzledLayout
    from axe.layout.swizzle_search import candidates, tma_expressible
    for shape, eb in (((64, 64), 2), ((32, 32), 4), ((16, 128), 1), ((64, 16), 2)):
        n = shape[0] * shape[1]
        for L, offs in candidates(shape, eb, (16 // eb,)):
            padded = int(offs.max()) + 1 != n
            mode = swizzle_mode(L, eb)
            want = not padded and not isinstance(mode, str)
            if want and isinstance(L, SwizzledLayout):
                want = shape[-1] % (mode // eb) == 0
            if want and not isinstance(L, SwizzledLayout):
                want = shape[-1] * eb % 16 == 0
            assert tma_expressible(L, shape, eb) == want, (shape, eb, L)


def test_the_inferred_transpose_loads_by_tma_and_every_wait_can_return():
    """The tile loaded with ``barrier=`` gets a layout TMA writes; dispatch chooses TMA for the load;
    the CUDA arrives on (expect_tx) every mbarrier it waits on, and commits every cp.async group it
    waits for."""
    from axe.layout.swizzle_search import tma_expressible
    import kernels.inferred.transpose as m
    _, ctx = Ax.build_func(m.transpose)
    tile = ctx.infer.fixed[0]
    assert tma_expressible(tile.layout, (m.TILE, m.TILE), 2), tile.layout
    assert [r.chosen for r in ctx.records] == ["tma", "ldmatrix", "stmatrix", "tma_store"]


@pytest.mark.parametrize("name", ["transpose", "rmsnorm", "softmax", "rotary"])
def test_inferred_kernels_emit_no_wait_that_nothing_satisfies(name):
    import importlib
    mod = importlib.import_module(f"kernels.inferred.{name}")
    k = mod.dynamic(128, 32, 8, "bfloat16", "int64") if name == "rotary" else getattr(mod, name)
    with _no_nvcc():
        src = Ax.compile_kernel(k, "sm_90a").cuda_source
    body = src[src.rindex('extern "C" __global__'):]
    calls = re.findall(r"tvm_builtin_\w+\(", body)
    waits = [c for c in calls if "mbarrier_wait" in c or "mbarrier_try_wait" in c]
    arrives = [c for c in calls if "arrive" in c]
    assert not waits or arrives, f"{name}: waits on an mbarrier nothing arrives on"
    pending = 0            # cp.async groups: a wait_group needs a commit before it
    for c in calls:
        if "cp_async_commit_group" in c and "bulk" not in c:
            pending += 1
        if "cp_async_wait_group" in c and "bulk" not in c:
            assert pending, f"{name}: cp.async.wait_group with no group committed"
    issued = sum("bulk_tensor_s2g" in c for c in calls)
    assert issued or not any("bulk_wait_group" in c for c in calls), f"{name}: bulk wait without a store"


def test_a_copy_with_barrier_tma_cannot_take_is_refused_not_left_to_hang():
    """A declared ``Swizzle(3,3,6)`` tile loaded with ``barrier=``: TMA declines the swizzle and
    cp.async, vector… decline ``barrier=`` (they would not arrive on it), so the build fails naming
    barrier= instead of emitting a wait that never returns."""
    from axe.schedules.dispatch import NO_BARRIER

    @Ax.kernel(name="bad_barrier_load")
    def k():
        @T.prim_func
        def k(A_: T.Buffer((64, 64), "float16"), B_: T.Buffer((64, 64), "float16"), A_map: T.handle("tensormap")):
            _bx, _tx = Ax.launch(1, 128)
            A = Ax.param(A_, tensormap=A_map)
            B = Ax.param(B_)
            bar = Ax.cuda.mbarrier(count=1)
            s = Ax.shared((64, 64), "float16", parse("Swizzle(3,3,6) ∘ (S[(64,64):(64,1)])"), name="s")
            Ax.copy(s, A, barrier=bar)
            Ax.cuda.mbarrier_wait(bar, 0)
            Ax.copy(B, s)
        return k
    with pytest.raises(Exception) as err:
        Ax.build_func(k)
    text = str(err.value)
    assert "cp_async" in text and NO_BARRIER in text and "not a TMA mode" in text


def test_the_benchmark_bounds_each_pair_and_times_the_others(tmp_path, monkeypatch):
    """``benchmarks/inferred.py run``: each pair is a child process; one that never finishes is
    killed after ``--timeout`` and recorded with ``error``, the pairs after it still run."""
    import importlib.util
    import json
    import sys
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    spec = importlib.util.spec_from_file_location("bench_inferred", os.path.join(root, "benchmarks", "inferred.py"))
    bench = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(bench)
    child = tmp_path / "child.sh"            # stands in for the GPU child: transpose hangs
    child.write_text('#!/bin/sh\ncase "$*" in *"--kernel transpose"*) exec sleep 60;; esac\n'
                     'while [ "$1" != "--row-json" ]; do shift; done\n'
                     'echo \'{"kernel": "k", "hand_us": 1.0, "inferred_us": 1.0, "device": "stub"}\' > "$2"\n')
    child.chmod(0o755)
    monkeypatch.setattr(sys, "executable", str(child))
    out = tmp_path / "r.json"
    bench.main(["run", "--only", "transpose", "rmsnorm", "--timeout", "1", "--json", str(out)])
    got = json.loads(out.read_text())
    assert got["device"] == "stub"
    hung, ok = got["rows"]
    assert "timed out after 1.0 s" in hung["error"] and hung["kernel"] == "transpose"
    assert ok["hand_us"] == 1.0 and "error" not in ok
