"""The shape the architecture asks of kernels/: compositions of parts, not switchboards.  Each kernel
function is short, kernels reach axe only through its kernel language (``axe.lang``: ``Ax.*``,
``Ax.cuda.*``) and its layout algebra — never a schedule's or a backend's internals — and the plain
GEMM is a short file."""

import ast
import pathlib

KERNELS = pathlib.Path(__file__).resolve().parent.parent / "kernels"
MAX_FUNCTION_LINES = 150
ALLOWED = ("axe.lang", "axe.layout")        # what a kernel may import from axe


def _files():
    return sorted(KERNELS.rglob("*.py"))


def test_no_kernel_function_is_long():
    long = [f"{p.relative_to(KERNELS.parent)}:{n.lineno} {n.name} ({n.end_lineno - n.lineno + 1} lines)"
            for p in _files() for n in ast.walk(ast.parse(p.read_text()))
            if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef)) and n.end_lineno - n.lineno + 1 > MAX_FUNCTION_LINES]
    assert not long, "functions in kernels/ over %d lines:\n  " % MAX_FUNCTION_LINES + "\n  ".join(long)


def test_kernels_use_the_kernel_language_not_internals():
    bad = []
    for p in _files():
        for n in ast.walk(ast.parse(p.read_text())):
            names = [n.module] if isinstance(n, ast.ImportFrom) and n.module else \
                [a.name for a in n.names] if isinstance(n, ast.Import) else []
            bad += [f"{p.relative_to(KERNELS.parent)}:{n.lineno} imports {m}" for m in names
                    if m and m.startswith("axe") and m != "axe" and not m.startswith(ALLOWED)]
    assert not bad, "kernels reach axe's internals:\n  " + "\n  ".join(bad)


def test_plain_gemm_is_short():
    lines = len((KERNELS / "gemm.py").read_text().splitlines())
    assert lines <= 250, f"kernels/gemm.py has {lines} lines (at most 250 with its docstrings)"
