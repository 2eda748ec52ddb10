"""The Trainium part of ``axe demo``: build the trn1 kernels to NKI, run them on the NumPy model
against numpy, print the cost model's estimates and the kernels' sizes.

``python -m axe.demo_trainium --table`` also prints the estimates for the paper's sizes
(GEMM square 512-4096, MHA sequence 512-8192), run through the model with ``numerics=False``.
"""

from __future__ import annotations

import ast
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]


def code_lines(path) -> tuple[int, int]:
    """``(all lines, code lines)`` of a Python file: code lines exclude blank lines, comments and
    docstrings."""
    text = Path(path).read_text()
    doc = set()
    for node in ast.walk(ast.parse(text)):
        body = getattr(node, "body", None)
        if isinstance(body, list) and body and isinstance(body[0], ast.Expr) and \
                isinstance(getattr(body[0], "value", None), ast.Constant) and isinstance(body[0].value.value, str):
            doc.update(range(body[0].lineno, body[0].end_lineno + 1))
    lines = text.splitlines()
    code = sum(1 for i, line in enumerate(lines, 1)
               if line.strip() and not line.strip().startswith("#") and i not in doc)
    return len(lines), code


def _kernels():
    sys.path.insert(0, str(ROOT))
    from kernels.nki_attention import nki_attention
    from kernels.nki_gemm import nki_gemm
    return nki_gemm, nki_attention


def _inputs(kernel, rng):
    import ml_dtypes
    dt = {"float16": np.float16, "bfloat16": ml_dtypes.bfloat16}[kernel.meta["dtype"]]
    if kernel.name == "nki_gemm":
        M, N, K = kernel.meta["shape"]
        return {"A": rng.standard_normal((M, K)).astype(dt), "B": rng.standard_normal((K, N)).astype(dt)}
    h, s, d = kernel.meta["shape"]
    return {x: rng.standard_normal((h, s, d)).astype(dt) for x in ("Q", "K", "V")}


def run_demo(out_dir, table: bool = False) -> None:
    from axe.lang.kernel import compile_kernel, explain
    nki_gemm, nki_attention = _kernels()
    rng = np.random.default_rng()
    for k in (nki_gemm(1024, 1024, 1024, "float16"), nki_gemm(1000, 700, 300, "bfloat16"),
              nki_attention(2, 1024, "bfloat16"), nki_attention(1, 700, "bfloat16")):
        t0 = time.perf_counter()
        art = compile_kernel(k, "trn1")
        tag = f"{k.name}_{'x'.join(map(str, k.meta['shape']))}_{k.meta['dtype']}"
        path = art.save(str(Path(out_dir) / tag))
        inputs = _inputs(k, rng)
        out, cost = art.run(**inputs)
        ref = k.reference(**inputs)
        name = list(ref)[0]
        err = float(np.abs(out[name].astype(np.float32) - ref[name]).max() / np.abs(ref[name]).max())
        print(f"\n-- {k.name} {k.meta['dtype']} {'x'.join(map(str, k.meta['shape']))}: NKI source "
              f"{Path(path).relative_to(ROOT) if str(path).startswith(str(ROOT)) else path} "
              f"({len(art.source.splitlines())} lines), run on the model in {time.perf_counter() - t0:.1f}s; "
              f"max |error| / max |ref| vs numpy {err:.1e}")
        print(f"   cost model: {cost.summary()}")
    _one_source(rng)
    gemm = [r for r in explain(nki_gemm(1024, 1024, 1024), "trn1").split("\n\n") if r.startswith("gemm at")]
    print("\n" + gemm[0])
    for f in ("kernels/nki_gemm.py", "kernels/nki_attention.py"):
        total, code = code_lines(ROOT / f)
        print(f"   {f}: {total} lines, {code} of code (paper's axe kernels: 78 GEMM, 228 MHA; AWS NKI: 120, 1188)")
    if table:
        print_table(nki_gemm, nki_attention)


def _one_source(rng) -> None:
    """kernels/softmax.py and kernels/rmsnorm.py: the kernels the GPU section built, for trn1."""
    from kernels import rmsnorm, softmax
    from axe.lang.kernel import compile_kernel
    X = rng.standard_normal((softmax.ROWS, softmax.N)).astype(np.float16)
    W = rng.standard_normal((1, rmsnorm.N)).astype(np.float16)
    x = X.astype(np.float32)
    e = np.exp(x - x.max(1, keepdims=True))
    refs = {"softmax": e / e.sum(1, keepdims=True),
            "rmsnorm": x / np.sqrt((x * x).mean(1, keepdims=True) + rmsnorm.EPS) * W.astype(np.float32)}
    for k, inputs in ((softmax.softmax, {"X": X}), (rmsnorm.rmsnorm, {"X": X, "W": W})):
        out, cost = compile_kernel(k, "trn1").run(**inputs)
        err = float(np.abs(out["Y"].astype(np.float32) - refs[k.name]).max() / np.abs(refs[k.name]).max())
        print(f"\n-- kernels/{k.name}.py::{k.name} (one source: sm_90a, sm_100a above; trn1 here) "
              f"{softmax.ROWS}x{softmax.N} fp16 on the model: max |error| / max |ref| {err:.1e}; "
              f"estimated {cost.time_s * 1e6:.1f} us, busiest engine {max(cost.engine_s, key=cost.engine_s.get)}")


def print_table(nki_gemm, nki_attention) -> None:
    """Cost-model estimates for the paper's Figure 13 sizes (numerics off: rules and costs only)."""
    import ml_dtypes
    from axe.lang.kernel import compile_kernel
    print("\n| kernel | size | estimated time | TFLOP/s | TensorE util. | busiest engine |")
    print("|---|---|---|---|---|---|")
    for n in (512, 1024, 2048, 4096):
        z = np.zeros((n, n), np.float16)
        _, c = compile_kernel(nki_gemm(n, n, n), "trn1").run(numerics=False, A=z, B=z)
        _row(f"GEMM fp16", f"{n}^3", c)
    for s in (512, 1024, 2048, 4096, 8192):
        z = np.zeros((1, s, 128), ml_dtypes.bfloat16)
        _, c = compile_kernel(nki_attention(1, s), "trn1").run(numerics=False, Q=z, K=z, V=z)
        _row("MHA bf16 (1 head, d=128)", f"seq {s}", c)


def _row(kernel, size, c):
    busiest = max(c.engine_s, key=c.engine_s.get)
    print(f"| {kernel} | {size} | {c.time_s * 1e6:.1f} us | {c.flops / c.time_s / 1e12:.1f} | "
          f"{c.tensore_utilization:.1%} | {busiest} |")


if __name__ == "__main__":
    run_demo(ROOT / "build" / "demo" / "trn1", table="--table" in sys.argv)
