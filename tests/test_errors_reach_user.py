"""Errors raised inside a kernel body reach the user whole: the original axe message (with the
dispatch table), the kernel's file:line, and none of TVM's "run with TVM_BACKTRACE" note."""

import inspect
import os
import subprocess
import sys

import pytest

pytest.importorskip("tvm")

from tvm.script import tirx as T  # noqa: E402

import axe.lang as Ax  # noqa: E402
from axe.lang import KernelError  # noqa: E402
from axe.schedules.dispatch import DispatchError  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _axe(*argv):
    return subprocess.run([sys.executable, "-m", "axe", *argv], cwd=ROOT, capture_output=True, text=True,
                          timeout=300)


def _line_of(fn, text):
    """The file line of the first line of ``fn``'s source that contains ``text``."""
    lines, first = inspect.getsourcelines(fn)
    return first + next(i for i, line in enumerate(lines) if text in line)


def _assert_wgmma_decline(out):
    assert "no schedule fits gemm on sm_100a" in out, out
    assert "wgmma" in out and "declined" in out and "tcgen05" in out, out
    assert "wgmma exists only on sm_90a; target sm_100a has tcgen05 instead" in out, out
    assert "tcgen05.mma is issued by one thread" in out, out
    assert "_kernels_gemm_ops.py:" in out, out
    assert "kernel wgmma_ss_bk at " in out, out
    assert "TVM_BACKTRACE" not in out and "Traceback" not in out, out


@pytest.fixture
def wgmma_file(tmp_path):
    """A kernel file whose warpgroup-issued gemm has a register accumulator: wgmma's form, which
    sm_100a cannot run (wgmma is sm_90a's; tcgen05 is issued by one thread into tensor memory)."""
    f = tmp_path / "wgmma_kernel.py"
    f.write_text(f"import sys\nsys.path.insert(0, {os.path.join(ROOT, 'tests', 'gpu')!r})\n"
                 "import _kernels_gemm_ops as k\nwgmma_ss = k.wgmma_tile()\n")
    return f


def test_axe_build_prints_the_dispatch_table(tmp_path, wgmma_file):
    out_dir = tmp_path / "out"
    r = _axe("build", str(wgmma_file), "--target", "sm_100a", "-o", str(out_dir))
    assert r.returncode == 1, r.stdout + r.stderr
    _assert_wgmma_decline(r.stderr)
    assert "TVM_BACKTRACE" not in r.stdout
    assert not out_dir.exists() or not any(out_dir.iterdir())          # nothing half-built


def test_axe_explain_prints_the_dispatch_table(wgmma_file):
    r = _axe("explain", f"{wgmma_file}::wgmma_ss_bk", "--target", "sm_100a")
    assert r.returncode == 1, r.stdout + r.stderr
    _assert_wgmma_decline(r.stderr)


@Ax.kernel()
def bad_layout():
    @T.prim_func
    def bad_layout(A_: T.Buffer((64, 128), "float16")):
        bx, tx_ = Ax.launch(4, 128)
        A = Ax.param(A_)
        R = Ax.registers((16, 64), "float16", "S[(16,8,4):(8@tx,1@tx,1@reg)]")   # 16×8×4 ≠ 16×64
        Ax.copy(R, A[bx * 16:(bx + 1) * 16, 0:64])
    return bad_layout


@Ax.kernel()
def undispatchable():
    @T.prim_func
    def undispatchable(A_: T.Buffer((64, 128), "float16")):
        bx, tx_ = Ax.launch(4, 128)
        A = Ax.param(A_)
        R = Ax.registers((16, 64), "float16", "S[(16,8,8):(8@tx,1@tx,1@foo)]")
        Ax.copy(R, A[bx * 16:(bx + 1) * 16, 0:64])
    return undispatchable


@Ax.kernel()
def fails_before_parsing():
    raise ValueError("a configuration check in the factory")


def test_build_func_reports_a_bad_layout_with_the_kernel_line():
    with pytest.raises(KernelError) as e:
        Ax.build_func(bad_layout)
    err = e.value
    line = _line_of(bad_layout.factory, "Ax.registers(")
    assert isinstance(err, ValueError) and err.kernel == "bad_layout" and err.line == line
    assert os.path.samefile(err.file, __file__)
    msg = str(err)
    assert msg.startswith(f"kernel bad_layout at {err.file}:{line}: ")
    assert "does not match layout S[(16,8,4):(8@tx,1@tx,1)]" in msg
    assert "TVM_BACKTRACE" not in msg and "error:" not in msg
    assert isinstance(err.cause, ValueError) and not isinstance(err.cause, KernelError)


def test_a_dispatch_failure_keeps_its_class_and_whole_table():
    with pytest.raises(DispatchError) as e:          # still caught as what it was
        Ax.build_func(undispatchable)
    err = e.value
    assert isinstance(err, KernelError) and type(err).__name__ == "KernelError"
    assert err.line == _line_of(undispatchable.factory, "Ax.copy(")
    msg = str(err)
    for words in ("no schedule fits copy on sm_90a", "- tma ", "- vector ",
                  "declined: axis foo of S[(16,8,8):(8@tx,1@tx,1@foo)] is not a thread or memory axis"):
        assert words in msg, msg
    with pytest.raises(DispatchError):
        Ax.explain(undispatchable)
    with pytest.raises(DispatchError):
        Ax.compile_kernel(undispatchable)


def test_an_error_before_parsing_names_the_factory_line():
    with pytest.raises(KernelError, match="a configuration check in the factory") as e:
        Ax.build_func(fails_before_parsing)
    assert e.value.line == _line_of(fails_before_parsing.factory, "raise ValueError")


def test_axe_explain_brief_keeps_each_calls_choice_and_names_the_declined(wgmma_file):
    """``--brief`` against the full table as the oracle: per call the same chosen line, and the names of
    exactly the candidates the full table shows as declined before it, without their reasons."""
    full = _axe("explain", f"{wgmma_file}::wgmma_ss_bk", "--target", "sm_90a")
    brief = _axe("explain", f"{wgmma_file}::wgmma_ss_bk", "--target", "sm_90a", "--brief")
    assert full.returncode == 0 and brief.returncode == 0, full.stderr + brief.stderr
    blocks_full, blocks_brief = full.stdout.strip().split("\n\n")[1:], brief.stdout.strip().split("\n\n")[1:]
    assert len(blocks_full) == len(blocks_brief) > 0
    for f, b in zip(blocks_full, blocks_brief):
        chosen = [ln for ln in f.splitlines() if ln.lstrip().startswith("+ ")]
        declined = [ln.split()[1] for ln in f.splitlines() if ln.lstrip().startswith("- ")]
        assert [ln for ln in b.splitlines() if ln.lstrip().startswith("+ ")] == chosen
        assert "declined:" not in b
        if declined:
            assert b.splitlines()[-1].strip() == f"({len(declined)} declined first: {', '.join(declined)})"
    assert len(brief.stdout.splitlines()) < len(full.stdout.splitlines())
