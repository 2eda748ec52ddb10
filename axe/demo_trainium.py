"""The Trainium part of ``axe demo``: build the Trainium kernels to NKI for trn1 (``neuronxcc.nki``)
and trn2 (``nki.*``, Neuron 2.27+), run them on the NumPy model of each NeuronCore against numpy,
print the cost model's estimates and the kernels' sizes.

``python -m axe.demo_trainium --table`` also prints the estimates for the paper's sizes
(GEMM square 512-4096, MHA sequence 512-8192, and the attention of kernels/attention.py causal and
with grouped-query heads) on trn1 and trn2 side by side, run through the model with
``numerics=False`` (the table in docs/trainium.md).
"""

from __future__ import annotations

import ast
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]


def code_lines(path, names=()) -> tuple[int, int]:
    """``(all lines, code lines)`` of a Python file: code lines exclude blank lines, comments and
    docstrings.  ``names``: only the lines of the functions and classes so named (at any depth)."""
    text = Path(path).read_text()
    doc, keep = set(), set()
    for node in ast.walk(ast.parse(text)):
        body = getattr(node, "body", None)
        if isinstance(body, list) and body and isinstance(body[0], ast.Expr) and \
                isinstance(getattr(body[0], "value", None), ast.Constant) and isinstance(body[0].value.value, str):
            doc.update(range(body[0].lineno, body[0].end_lineno + 1))
        if getattr(node, "name", None) in names:
            keep.update(range(node.lineno, node.end_lineno + 1))
    lines = text.splitlines()
    picked = [i for i in range(1, len(lines) + 1) if not names or i in keep]
    code = sum(1 for i in picked if lines[i - 1].strip() and not lines[i - 1].strip().startswith("#") and i not in doc)
    return len(picked), code


#: the trn1 form of kernels/gemm.py: its mainloop part (layouts and the block loop)
GEMM_TRN1 = "kernels/parts/mainloops/neuron.py"


def _kernels():
    sys.path.insert(0, str(ROOT))
    from kernels.gemm import make
    from kernels.attention import nki_attention
    return make, nki_attention


def _shape(kernel) -> tuple:
    m = kernel.meta
    return (m["batch"], m["seq_q"], m["q_heads"], m["head_dim"]) if "seq_q" in m else (m["M"], m["N"], m["K"])


def _attention_reference(Q, K, V, scale):
    """float32 NumPy attention (no mask, as many kv heads as query heads) on [B, S, H, D] arrays."""
    q, k, v = (x.astype(np.float32).transpose(0, 2, 1, 3) for x in (Q, K, V))
    s = q @ k.transpose(0, 1, 3, 2) * np.float32(scale)
    p = np.exp(s - s.max(-1, keepdims=True))
    return ((p / p.sum(-1, keepdims=True)) @ v).transpose(0, 2, 1, 3)


def _inputs(kernel, rng):
    """Random inputs by parameter name, and the numpy reference of the output."""
    import ml_dtypes
    dt = {"float16": np.float16, "bfloat16": ml_dtypes.bfloat16}[kernel.meta["dtype"]]
    if "seq_q" not in kernel.meta:        # kernels/gemm.py (B as stored: K×N, or N×K for "col")
        M, N, K = _shape(kernel)
        col = kernel.meta["b_major"] == "col"
        A, B = rng.standard_normal((M, K)).astype(dt), rng.standard_normal((N, K) if col else (K, N)).astype(dt)
        return {"A": A, "B": B}, A.astype(np.float32) @ (B.T if col else B).astype(np.float32)
    m = kernel.meta
    shapes = {"Q": _shape(kernel), "K": (m["batch"], m["seq_kv"], m["kv_heads"], m["head_dim"])}
    inputs = {x: rng.standard_normal(shapes[x[0] if x == "Q" else "K"]).astype(dt) for x in ("Q", "K", "V")}
    return inputs, _attention_reference(**inputs, scale=m["scale"])


#: the Trainium targets, in the order the demo and the table show them
TARGETS = ("trn1", "trn2")


def run_demo(out_dir, table: bool = False, verbose: bool = True) -> None:
    """Build and run the Trainium kernels on the model: trn1 one line each (``verbose``: with the
    cost model's breakdown, the GEMM's dispatch record and the kernels' sizes), then the same
    kernels for trn2 (``verbose``: one line each; else one line for all).  ``out_dir`` is trn1's
    folder; trn2's sources go beside it (``out_dir/../trn2``)."""
    from axe.lang.kernel import explain
    gemm, nki_attention = _kernels()
    rng = np.random.default_rng()
    kernels = (gemm(1024, 1024, 1024, "float16"), gemm(1000, 700, 300, "bfloat16"),
               gemm(777, 1496, 328, "bfloat16", "col"), nki_attention(2, 1024, "bfloat16"),
               nki_attention(1, 700, "bfloat16"))
    for k in kernels:
        _run_one(k, "trn1", Path(out_dir), rng, verbose)
    _one_source(rng, verbose)
    worst = max(_run_one(k, "trn2", Path(out_dir).parent / "trn2", rng, verbose) for k in kernels)
    if not verbose:
        print(f"-- trn2 (nki.* API, NeuronCore-v3 model): the same {len(kernels)} kernels built and run, "
              f"max |error| / max |ref| {worst:.1e}")
    else:
        _one_source(rng, verbose, "trn2")
    if not verbose:
        return
    records = [r for r in explain(gemm(1024, 1024, 1024), "trn1").split("\n\n") if r.startswith("gemm at")]
    print("\n" + records[0])
    total, code = code_lines(ROOT / GEMM_TRN1)
    print(f"   kernels/gemm.py's trn1 form ({GEMM_TRN1}): {total} lines, {code} of code "
          "(paper's axe GEMM: 78, AWS NKI: 120)")
    total, code = code_lines(ROOT / "kernels/nki_attention.py")
    print(f"   kernels/nki_attention.py: {total} lines, {code} of code (paper's axe MHA: 228, AWS NKI: 1188)")
    if table:
        print_table(gemm, nki_attention)


def _run_one(k, target, out_dir, rng, verbose) -> float:
    """Build ``k`` for ``target``, save it under ``out_dir``, run it on the model against numpy;
    returns max |error| / max |ref|."""
    from axe.lang.kernel import compile_kernel
    t0 = time.perf_counter()
    art = compile_kernel(k, target)
    size = "x".join(map(str, _shape(k)))
    path = art.save(str(out_dir / f"{k.name}_{size}_{k.meta['dtype']}"))
    inputs, ref = _inputs(k, rng)
    out, cost = art.run(**inputs)
    got = out[k.outputs[0]].astype(np.float32)
    err = float(np.abs(got - ref).max() / np.abs(ref).max())
    where = Path(path).relative_to(ROOT) if str(path).startswith(str(ROOT)) else path
    if not verbose:
        if target == "trn1":        # trn2 gets one line for all kernels (run_demo)
            print(f"-- {k.name} {k.meta['dtype']} {size}: NKI source {where}, on the model: max |error| / max |ref| "
                  f"{err:.1e}, estimated {cost.time_s * 1e6:.1f} us")
        return err
    print(f"\n-- {target} {k.name} {k.meta['dtype']} {size}: NKI source {where} "
          f"({len(art.source.splitlines())} lines), run on the model in {time.perf_counter() - t0:.1f}s; "
          f"max |error| / max |ref| vs numpy {err:.1e}")
    print(f"   cost model: {cost.summary()}")
    return err


def _one_source(rng, verbose=True, target="trn1") -> None:
    """kernels/softmax.py and kernels/rmsnorm.py: the kernels the GPU section built, for ``target``."""
    from kernels import rmsnorm, softmax
    from axe.lang.kernel import compile_kernel
    X = rng.standard_normal((softmax.ROWS, softmax.N)).astype(np.float16)
    W = rng.standard_normal((1, rmsnorm.N)).astype(np.float16)
    x = X.astype(np.float32)
    e = np.exp(x - x.max(1, keepdims=True))
    refs = {"softmax": e / e.sum(1, keepdims=True),
            "rmsnorm": x / np.sqrt((x * x).mean(1, keepdims=True) + rmsnorm.EPS) * W.astype(np.float32)}
    for k, inputs in ((softmax.softmax, {"X": X}), (rmsnorm.rmsnorm, {"X": X, "W": W})):
        out, cost = compile_kernel(k, target).run(**inputs)
        err = float(np.abs(out["Y"].astype(np.float32) - refs[k.name]).max() / np.abs(refs[k.name]).max())
        print("\n" * verbose + f"-- kernels/{k.name}.py::{k.name} (one source: sm_90a, sm_100a above; {target} here) "
              f"{softmax.ROWS}x{softmax.N} fp16 on the model: max |error| / max |ref| {err:.1e}; "
              f"estimated {cost.time_s * 1e6:.1f} us, busiest engine {max(cost.engine_s, key=cost.engine_s.get)}")


def print_table(gemm, nki_attention, targets=TARGETS) -> None:
    """Cost-model estimates for the paper's Figure 13 sizes on each target, side by side (numerics
    off: rules and costs only): per target, estimated time, TFLOP/s, TensorE utilization (of that
    core's peak) and the busiest engine."""
    from axe.lang.kernel import compile_kernel
    head = "".join(f" {t} time | {t} TFLOP/s | {t} TensorE util. | {t} busiest |" for t in targets)
    print(f"\n| kernel | size |{head}")
    print("|---|---|" + "---|---|---|---|" * len(targets))
    for n in (512, 1024, 2048, 4096):
        z = np.zeros((n, n), np.float16)
        costs = [compile_kernel(gemm(n, n, n), t).run(numerics=False, A=z, B=z)[1] for t in targets]
        _row("GEMM fp16", f"{n}^3", costs)
    for s in (512, 1024, 2048, 4096, 8192):
        costs = [_attention_cost(nki_attention(1, s), t) for t in targets]
        _row("MHA bf16 (1 head, d=128)", f"seq {s}", costs)
    from kernels import attention
    for s in (2048, 8192):
        costs = [_attention_cost(attention.make(1, s, s, 1, 1, 128, "bfloat16", True), t) for t in targets]
        _row("MHA bf16 causal (1 head, d=128)", f"seq {s}", costs)
    for s in (2048, 8192):
        costs = [_attention_cost(attention.make(1, s, s, 4, 1, 64, "bfloat16", True, lse=True), t) for t in targets]
        _row("GQA 4:1 bf16 causal + LSE (4 q heads, d=64)", f"seq {s}", costs)


def _attention_cost(kernel, target):
    """The model's cost of ``kernel`` (kernels/attention.py) on ``target``, numerics off."""
    import ml_dtypes
    from axe.lang.kernel import compile_kernel
    m = kernel.meta
    q = np.zeros(_shape(kernel), ml_dtypes.bfloat16)
    kv = np.zeros((m["batch"], m["seq_kv"], m["kv_heads"], m["head_dim"]), ml_dtypes.bfloat16)
    return compile_kernel(kernel, target).run(numerics=False, Q=q, K=kv, V=kv)[1]


def _row(kernel, size, costs):
    cells = "".join(f" {c.time_s * 1e6:.1f} us | {c.flops / c.time_s / 1e12:.1f} | {c.tensore_utilization:.1%} | "
                    f"{max(c.engine_s, key=c.engine_s.get)} |" for c in costs)
    print(f"| {kernel} | {size} |{cells}")


if __name__ == "__main__":
    run_demo(ROOT / "build" / "demo" / "trn1", table="--table" in sys.argv)
