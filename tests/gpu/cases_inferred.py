"""GPU cases for the kernels written with inferred layouts (issue 27 item 4, ``kernels/inferred/``):
transpose, RMSNorm, softmax, a CTA-collective rotary embedding and a TMA + wgmma GEMM (with its
hand-written twin ``kernels/inferred/hand_gemm.py``, checked here against torch) and a one-tile
wgmma with register A (``gemm_rs``, checked as its twin ``wgmma_rs_bk``), the production GEMM with
its shared tiles inferred (``pipelined_gemm``, B row- and column-major, beside ``kernels/gemm.py``'s
build of the same problem; ``cases_gemm.py``'s check), each checked on fresh random
data with its outputs poisoned with NaN before every launch — by the checks of their hand-written
twins (``cases_kernels.py``: transpose exact, RMSNorm and softmax against float64;
``cases_serving.py``: rotary against float64 at several token counts, guard values past the end).

Each build also refuses an artifact whose dispatch chose other schedules than the case records, so
a change to the inference rules that changes what runs shows up here first.  The ``*_bench``
sizes are what ``benchmarks/inferred.py build`` builds.
"""

import importlib
import importlib.util
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))


def _sibling(name):
    spec = importlib.util.spec_from_file_location(name, os.path.join(HERE, name + ".py"))
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


_kernels, _serving, _gemm_ops = _sibling("cases_kernels"), _sibling("cases_serving"), _sibling("cases_gemm_ops")
_gemm = _sibling("cases_gemm")

#: the GEMM pair's size here, and what dispatch chooses: the first k-block peeled, then the loop
GEMM = (512, 1024, 768)
GEMM_SCHEDULES = ["tma", "tma", "wgmma", "tma", "tma", "wgmma", "vector"]

#: the pipelined GEMM pair's problems (ragged: M, N and K not multiples of the 128×256×64 tile), and
#: what dispatch chooses: the stage's A and B by TMA, wgmma (first, loop, last k-block), the cast,
#: then stmatrix + TMA store per 128-column chunk
PIPELINED = {"row": (1000, 1496, 776, "bfloat16", "row"), "col": (1000, 1496, 776, "bfloat16", "col")}
PIPELINED_SCHEDULES = ["tma", "tma"] + ["wgmma"] * 3 + ["per_thread"] + ["stmatrix", "tma_store"] * 2
#: the mma.sync twins (kernels/inferred/mma_gemm.py): per k-step A and B by cp.async, ldmatrix into
#: the fragments, mma_sync; the accumulator stored with 16-byte vectors
MMA_SCHEDULES = ["cp_async", "cp_async", "ldmatrix", "ldmatrix", "mma_sync"] * 2 + ["vector"]

#: artifact → (module, attribute, args of a factory or None, size constants, schedules dispatch must choose)
CASES = {
    "inferred_transpose": ("kernels.inferred.transpose", "transpose", None, {},
                           ["tma", "ldmatrix", "stmatrix", "tma_store"]),
    "inferred_rmsnorm": ("kernels.inferred.rmsnorm", "rmsnorm", None, {},
                         ["vector", "vector", "per_thread", "cta_smem", "per_thread", "vector"]),
    "inferred_softmax": ("kernels.inferred.softmax", "softmax", None, {},
                         ["vector", "per_thread", "cta_smem", "per_thread", "cta_smem", "per_thread", "vector"]),
    "inferred_rotary": ("kernels.inferred.rotary", "dynamic", (128, 32, 8, "bfloat16", "int64"), {},
                        (["vector"] * 4 + ["per_thread"] * 2 + ["vector"] * 2) * 2),
    "inferred_gemm": ("kernels.inferred.gemm", "make", GEMM, {}, GEMM_SCHEDULES),
    "inferred_gemm_hand": ("kernels.inferred.hand_gemm", "make", GEMM, {}, GEMM_SCHEDULES),
    "inferred_gemm_rs": ("kernels.inferred.gemm_rs", "gemm_rs", None, {}, ["tma", "tma", "ldmatrix", "wgmma", "vector"]),
    "inferred_pipelined_gemm": ("kernels.inferred.pipelined_gemm", "make", PIPELINED["row"], {}, PIPELINED_SCHEDULES),
    "inferred_pipelined_gemm_col": ("kernels.inferred.pipelined_gemm", "make", PIPELINED["col"], {}, PIPELINED_SCHEDULES),
    "inferred_pipelined_gemm_hand": ("kernels.gemm", "make", PIPELINED["row"], {}, PIPELINED_SCHEDULES),
    "inferred_mma_gemm": ("kernels.inferred.mma_gemm", "make", (512, 512, 512), {}, MMA_SCHEDULES),
    "inferred_mma_gemm_hand": ("kernels.inferred.hand_mma_gemm", "make", (512, 512, 512), {}, MMA_SCHEDULES),
}


sized = _kernels._sized      # parse with the module's size constants replaced


def build(module_name, attr, args=None, consts=None, want=None, name=""):
    """The sm_90a artifact; raises when dispatch chose other schedules than ``want``."""
    sys.path.insert(0, ROOT)
    import axe.lang as Ax
    mod = importlib.import_module(module_name)
    with sized(mod, consts or {}):
        k = getattr(mod, attr)
        art = Ax.compile_kernel(k(*args) if args is not None else k, "sm_90a")
    got = [r.chosen for r in art.records]
    if want is not None and got != list(want):
        raise AssertionError(f"{name}: dispatch chose {got}, the case records {list(want)}")
    return art


BUILDS = {name: (lambda c=c, name=name: build(*c, name=name)) for name, c in CASES.items()}

def check_gemm(kernel, torch):
    """``C = A·Bᵀ`` (fp16 in, fp32 out) against torch's float32 product on fresh data, C poisoned."""
    m, k = _kernels._shape(kernel, "A")
    n = _kernels._shape(kernel, "B")[0]
    worst = 0.0
    for _ in range(3):
        a = torch.randn(m, k, device="cuda", dtype=torch.float16)
        b = torch.randn(n, k, device="cuda", dtype=torch.float16)
        c = torch.full((m, n), float("nan"), device="cuda", dtype=torch.float32)
        kernel(a, b, c)
        torch.cuda.synchronize()
        ref = a.float() @ b.float().t()
        err = ((c - ref).norm() / ref.norm()).item()
        assert err == err and err < 1e-3, f"gemm {m}x{n}x{k}: relative error {err}"
        worst = max(worst, err)
    return f"{m}x{n}x{k} fp16->fp32, 3 random runs, worst relative error {worst:.2e}"


CHECKS = {
    "inferred_transpose": _kernels.check_transpose,
    "inferred_rmsnorm": _kernels.check_rmsnorm,
    "inferred_softmax": _kernels.check_softmax,
    "inferred_rotary": _serving.check_rotary,
    "inferred_gemm": check_gemm,
    "inferred_gemm_hand": check_gemm,
    "inferred_mma_gemm": check_gemm,
    "inferred_mma_gemm_hand": check_gemm,
    "inferred_gemm_rs": _gemm_ops.check_bk,      # its twin wgmma_rs_bk's check
    "inferred_pipelined_gemm": _gemm._check,     # the production GEMM's check (B's layout from the name)
    "inferred_pipelined_gemm_col": _gemm._check,
    "inferred_pipelined_gemm_hand": _gemm._check,
}
