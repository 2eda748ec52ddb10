"""SGLang's Triton fused MoE as a benchmark peer, run from SGLang's own wheel on a machine that has
torch and Triton but none of SGLang's dependency tree.

Why not ``fused_experts`` itself: on CUDA it imports ``sgl_kernel`` (the ``sglang-kernel`` 0.4.10
wheel is 373 MB and built for torch 2.14; the 64 MiB carry and the GPU machine's torch 2.11 rule
it out) and ``sglang.srt.utils``, whose import chain reaches transformers, pydantic, zmq, aiohttp
and some thirty more packages.  So the peer is assembled from SGLang's kernels, loaded
**unchanged** from the wheel (``sglang-0.5.23``, files extracted, executed as they ship):

=================  ==========================================================================
step               what runs
=================  ==========================================================================
tile config        ``try_get_optimal_moe_config`` (``srt/layers/moe/moe_runner/triton_utils/
                   fused_moe_triton_config.py``) with its shipped tuned files: on an H200
                   with Triton 3.6 ``triton_3_6_0/E=128,N=768,device_name=NVIDIA_H200.json``
                   (no ``_down`` file there, so GEMM 2 reuses it, as SGLang does)
align, T·8 <= 64   ``moe_align_small_numel`` (``kernels/ops/moe/moe_align_small_numel.py``):
                   what SGLang runs on CUDA for these sizes
align, T·8 > 64    SGLang's CUDA ``moe_align_block_size`` kernel: its JIT source
                   (``kernels/jit/csrc/moe/moe_align_kernel.cu``, the kernel SGLang's own JIT
                   loader builds for this op) compiled by ``build_moe.py`` with nvcc for
                   sm_90a against tvm-ffi, as SGLang's loader would on the GPU (the production
                   call goes to ``sgl_kernel``'s prebuilt copy, not carried); loaded through
                   tvm-ffi (its 3.3 MB wheel is carried).  If that module is absent, SGLang's
                   Triton ``moe_align_block_size_triton`` (``test/kernels/moe_align.py``, its
                   test reference) substitutes, and the JSON says so; timed on its own
GEMM 1, GEMM 2     ``invoke_fused_moe_kernel`` (``kernels/ops/moe/fused_moe_triton_kernels.py``)
                   exactly as ``fused_experts`` calls it for bf16/fp16 without quantization
                   (routing weights applied in GEMM 2; up/down TMA when the config says so)
SiLU·up            ``act_and_mul_triton`` (same module; SGLang's CUDA path uses its JIT
                   ``silu_and_mul``, which needs tvm-ffi and nvcc at run time)
sum over top-8     ``moe_sum_reduce_triton`` (same module; on CUDA SGLang uses
                   ``sgl_kernel.moe_sum_reduce`` above 32 tokens, a torch.compile'd sum below)
=================  ==========================================================================

Stand-ins: SGLang's package ``__init__`` files are not executed (they import the server); empty
package shells point at the extracted folders instead.  The helper modules those kernel files
import are replaced by :mod:`benchmarks.moe_sglang_stubs`, whose functions return what SGLang's
own would on a CUDA GPU with a default server configuration (see there); none of them is kernel
logic.  Buffers are allocated once per token count (SGLang allocates them per call through
torch's caching allocator).
"""

import functools
import importlib
import os
import sys
import types
import zipfile

from benchmarks import moe_sglang_stubs as stubs

#: files of the wheel this peer executes, and the tuned-config folder their lookup reads
MEMBERS = ("sglang/kernels/ops/moe/fused_moe_triton_kernels.py",
           "sglang/kernels/ops/moe/moe_align_small_numel.py",
           "sglang/srt/layers/moe/moe_runner/triton_utils/fused_moe_triton_config.py",
           "sglang/srt/environ.py",
           "sglang/test/kernels/moe_align.py",
           "sglang/kernels/jit/csrc/moe/moe_align_kernel.cu")
CONFIGS = "sglang/srt/layers/moe/moe_runner/triton_utils/configs/"
JIT_INCLUDE = "sglang/kernels/jit/include/"     # the headers the CUDA align source includes
ALIGN_SO = "moe_align_jit.so"                   # built by build_align beside the extracted files
#: the translation unit build_align compiles: SGLang's align source, unchanged, and the tvm-ffi
#: export its JIT loader generates for int32 ids without the optional outputs
ALIGN_EXPORT = """#include <tvm/ffi/function.h>
#include <moe/moe_align_kernel.cu>
TVM_FFI_DLL_EXPORT_TYPED_FUNC(moe_align_block_size, (sglang::MoeAlignBlockSizeKernel<int32_t, false, false, false>::run));
"""
SMALL_NUMEL = 64        # moe_align_small_numel's limit (its SMALL_NUMEL_LIMIT, checked at load)


#: the same, one line a step, for the JSON
STEPS = {
    "config": "try_get_optimal_moe_config + the wheel's tuned files (srt/.../triton_utils/configs)",
    "align": "moe_align_small_numel (Triton) for T*topk <= 64; above, SGLang's CUDA moe_align_block_size from its "
             "JIT source (kernels/jit/csrc/moe/moe_align_kernel.cu) built with nvcc for sm_90a, through tvm-ffi, else "
             "SGLang's Triton moe_align_block_size_triton (test/kernels/moe_align.py); timed alone as sglang_align",
    "gemm1, gemm2": "invoke_fused_moe_kernel (kernels/ops/moe/fused_moe_triton_kernels.py), weights applied in gemm2",
    "silu*up": "act_and_mul_triton (same module) in place of the CUDA JIT silu_and_mul",
    "sum": "moe_sum_reduce_triton (same module) in place of sgl_kernel.moe_sum_reduce / torch.compile'd sum",
    "stand-ins": "benchmarks/moe_sglang_stubs.py: platform queries (CUDA, sm_90, PDL on), default server settings",
}


#: the file an extraction records its wheel's name in
WHEEL_NOTE = "WHEEL"


def extract(wheel, dest):
    """Unzip :data:`MEMBERS` and the tuned configs of ``wheel`` under ``dest``; returns ``dest``.
    ``wheel`` may instead be a folder that such an extraction made (``benchmarks/build_moe.py``
    puts one in the carry): it is used as it is."""
    if os.path.isdir(wheel):
        missing = [m for m in MEMBERS if not os.path.isfile(os.path.join(wheel, m))]
        if missing:
            raise FileNotFoundError(f"{wheel} lacks {missing}: not an extraction of SGLang's wheel")
        return wheel
    with zipfile.ZipFile(wheel) as z:
        names = [n for n in z.namelist() if n in MEMBERS or (n.startswith(CONFIGS) and n.endswith(".json"))
                 or (n.startswith(JIT_INCLUDE) and not n.endswith("/"))]
        missing = sorted(set(MEMBERS) - set(names))
        if missing:
            raise FileNotFoundError(f"{os.path.basename(wheel)} lacks {missing}: not the SGLang layout this peer knows")
        z.extractall(dest, names)
    with open(os.path.join(dest, WHEEL_NOTE), "w") as f:     # which release the files are, for the results
        f.write(os.path.basename(wheel))
    return dest


def wheel_of(source):
    """The wheel file name SGLang's files came from: ``source`` itself, or the note an extraction
    left in its folder (None for an older extraction without one)."""
    if not os.path.isdir(source):
        return os.path.basename(source)
    note = os.path.join(source, WHEEL_NOTE)
    return open(note).read().strip() if os.path.isfile(note) else None


def _shell(name, folder, **attrs):
    """An empty package ``name`` whose submodules are found in ``folder`` (its ``__init__`` unrun)."""
    mod = types.ModuleType(name)
    mod.__path__ = [folder]
    mod.__dict__.update(attrs)
    sys.modules[name] = mod
    return mod


@functools.lru_cache(maxsize=None)
def load(wheel, dest):
    """SGLang's kernel modules from ``wheel`` (extracted to ``dest``; or an extracted folder) as a
    namespace: ``kernels``, ``small_align``, ``config``, ``triton_align``, and ``cuda_align`` (None,
    with ``cuda_align_error`` saying why, where the built module cannot load).  Refuses to run
    where a real ``sglang`` is already imported (the shells would shadow it)."""
    if "sglang" in sys.modules:
        raise RuntimeError("an sglang package is already imported; the wheel's kernels are loaded into fresh shells")
    root = extract(wheel, dest)
    for pkg in ("sglang", "sglang.kernels", "sglang.kernels.ops", "sglang.kernels.ops.moe", "sglang.srt",
                "sglang.srt.layers", "sglang.srt.layers.moe", "sglang.srt.layers.moe.moe_runner", "sglang.test",
                "sglang.test.kernels"):
        _shell(pkg, os.path.join(root, *pkg.split(".")))
    # fused_moe_triton_config imports get_config from its package's __init__: no override is set
    _shell("sglang.srt.layers.moe.moe_runner.triton_utils",
           os.path.join(root, "sglang/srt/layers/moe/moe_runner/triton_utils"), get_config=lambda: None)
    stubs.install(sys.modules)
    ns = types.SimpleNamespace(
        kernels=importlib.import_module("sglang.kernels.ops.moe.fused_moe_triton_kernels"),
        small_align=importlib.import_module("sglang.kernels.ops.moe.moe_align_small_numel"),
        config=importlib.import_module("sglang.srt.layers.moe.moe_runner.triton_utils.fused_moe_triton_config"),
        triton_align=importlib.import_module("sglang.test.kernels.moe_align"))
    if ns.small_align.SMALL_NUMEL_LIMIT != SMALL_NUMEL:
        raise RuntimeError(f"SGLang's SMALL_NUMEL_LIMIT is {ns.small_align.SMALL_NUMEL_LIMIT}, this peer assumes "
                           f"{SMALL_NUMEL}: re-read its align dispatch")
    try:
        ns.cuda_align, ns.cuda_align_error = load_align(root), None
    except Exception as err:    # noqa: BLE001 - the Triton substitute runs instead; the reason is kept
        ns.cuda_align, ns.cuda_align_error = None, f"{type(err).__name__}: {err}"
    return ns


def build_align(root, nvcc="nvcc", arch="sm_90a"):
    """Compile SGLang's CUDA align source under ``root`` (an extraction) into ``root/ALIGN_SO``
    with the flags SGLang's JIT loader uses for ``arch`` (C++20, -O3, relaxed constexpr,
    ``SGL_CUDA_ARCH``), against the tvm-ffi installed here (the carried wheel must be the same
    version).  Returns the path; raises with the compiler's output on failure."""
    import subprocess
    import tvm_ffi
    base = os.path.dirname(tvm_ffi.__file__)
    num = arch.split("_")[1].rstrip("a")
    src = os.path.join(root, "moe_align_export.cu")
    with open(src, "w") as f:
        f.write(ALIGN_EXPORT)
    jit = os.path.join(root, "sglang", "kernels", "jit")
    obj, out = src[:-3] + ".o", os.path.join(root, ALIGN_SO)
    steps = [[nvcc, "-Xcompiler", "-fPIC", f"-gencode=arch=compute_{arch[3:]},code={arch}", f"-DSGL_CUDA_ARCH={num}0",
              "-std=c++20", "-O3", "--expt-relaxed-constexpr", f"-I{jit}/include", f"-I{jit}/csrc",
              f"-I{base}/include", "-c", src, "-o", obj],
             [nvcc, "-shared", obj, f"-L{base}/lib", "-ltvm_ffi", "-o", out]]
    for cmd in steps:
        run = subprocess.run(cmd, capture_output=True, text=True)
        if run.returncode != 0:
            raise RuntimeError(f"{' '.join(cmd)} failed:\n{run.stdout}{run.stderr}")
    os.remove(obj)
    with open(os.path.join(root, ALIGN_SO + ".tvm_ffi"), "w") as f:
        f.write(tvm_ffi.__version__)
    return out


def load_align(root):
    """SGLang's CUDA align from ``root/ALIGN_SO`` as a tvm-ffi function; raises where the module
    is absent or was built against another tvm-ffi than the one imported."""
    import tvm_ffi
    path = os.path.join(root, ALIGN_SO)
    if not os.path.isfile(path):
        raise FileNotFoundError(f"{path} not built (benchmarks/build_moe.py builds it)")
    with open(path + ".tvm_ffi") as f:
        built = f.read().strip()
    if built != tvm_ffi.__version__:
        raise RuntimeError(f"{ALIGN_SO} was built against tvm-ffi {built}, this process has {tvm_ffi.__version__}")
    return tvm_ffi.load_module(path)["moe_align_block_size"]


def configs(ns, w1_shape, w2_shape, topk, tokens):
    """SGLang's (GEMM 1 config, GEMM 2 config) for ``tokens`` tokens, as its own lookup returns
    them (copies: the lookup's dicts are cached).  ``USE_TMA`` stays in the dicts."""
    up, (down, _) = ns.config.try_get_optimal_moe_config(tuple(w1_shape), tuple(w2_shape), topk, None, tokens,
                                                         return_down_config=True)
    up = dict(up)
    return up, dict(down) if down is not None else dict(up)


def padded_capacity(pairs, experts, block):
    """Upper bound on the block-padded pair count: every active expert (at most
    ``min(pairs, experts)``) adds at most ``block - 1`` pad slots; rounded up to a whole block."""
    bound = pairs + min(pairs, experts) * (block - 1)
    return -(-bound // block) * block


class Peer:
    """SGLang's MoE for one token count: ``align()``, ``experts()`` (GEMMs, SiLU·up and the sum on
    the last alignment) and ``__call__`` (both: the peers' contract, ids and weights in)."""

    def __init__(self, ns, x, w1, w2, ids, weights):
        import torch
        import triton.language as tl
        self.ns, self.x, self.w1, self.w2, self.ids, self.weights = ns, x, w1, w2, ids, weights
        tokens, self.topk = ids.shape
        experts, n2, hidden = w1.shape[0], w1.shape[1], w2.shape[1]
        self.up, self.down = configs(ns, w1.shape, w2.shape, self.topk, tokens)
        self.up_tma = bool(self.up.pop("USE_TMA", False)) and ns.kernels.support_tensor_descriptor()
        self.down_tma = bool(self.down.pop("USE_TMA", False)) and ns.kernels.support_tensor_descriptor()
        if self.down["BLOCK_SIZE_M"] != self.up["BLOCK_SIZE_M"]:
            self.down["BLOCK_SIZE_M"] = self.up["BLOCK_SIZE_M"]    # one alignment serves both GEMMs
        bm, pairs = self.up["BLOCK_SIZE_M"], ids.numel()
        self.small = pairs <= SMALL_NUMEL
        cap = padded_capacity(pairs, experts + 1, bm)      # +1: SGLang's bucket for filtered ids
        i32 = dict(dtype=torch.int32, device=x.device)
        self.sorted = torch.empty(cap, **i32)
        self.expert_of = torch.empty(cap // bm, **i32)
        self.total = torch.empty(1, **i32)
        # the TMA down path keeps GEMM 1's rows sorted and block padded
        rows = pairs + (min(pairs, experts + 1) * (bm - 1) if self.down_tma else 0)
        self.c1 = torch.empty(rows, n2, dtype=x.dtype, device=x.device)
        self.c2 = torch.empty(rows, n2 // 2, dtype=x.dtype, device=x.device)
        self.c3 = torch.empty(tokens, self.topk, hidden, dtype=x.dtype, device=x.device)
        self.out = torch.empty(tokens, hidden, dtype=x.dtype, device=x.device)
        self.compute = tl.bfloat16 if x.dtype == torch.bfloat16 else tl.float16
        self.experts_n = experts
        self.cumsum = torch.empty(experts + 2, **i32)         # the CUDA align's scratch
        self.align_name = ("moe_align_small_numel" if self.small else "moe_align_block_size (CUDA, JIT source)"
                           if ns.cuda_align is not None else "moe_align_block_size_triton (substitute)")

    def align(self):
        if self.small:
            self.ns.small_align.moe_align_small_numel(self.ids, self.experts_n + 1, self.up["BLOCK_SIZE_M"],
                                                      self.sorted, self.expert_of, self.total)
        elif self.ns.cuda_align is not None:
            import tvm_ffi
            with tvm_ffi.use_torch_stream():    # the kernel launches on tvm-ffi's stream: make it torch's
                # SGLang's call: experts + 1 buckets (its "+1 offset" convention), pads filled with numel
                self.ns.cuda_align(self.ids, self.experts_n + 1, self.up["BLOCK_SIZE_M"], self.sorted, self.expert_of,
                                   self.total, self.cumsum, True)
        else:
            # the test reference leaves pad slots as they were: SGLang's test pre-fills them likewise
            self.sorted.fill_(self.ids.numel())
            self.ns.triton_align.moe_align_block_size_triton(self.ids, self.experts_n, self.up["BLOCK_SIZE_M"],
                                                             self.sorted, self.expert_of, self.total)

    def _gemm(self, a, w, c, config, mul_weight, topk, **tma):
        self.ns.kernels.invoke_fused_moe_kernel(
            a, w, None, c, None, None, None, self.weights, self.ids, self.sorted, self.expert_of, self.total,
            mul_weight, topk, config, compute_type=self.compute, use_fp8_w8a8=False, use_int8_w8a8=False,
            use_int8_w8a16=False, use_int4_w4a16=False, per_channel_quant=False, filter_expert=False, **tma)

    def experts(self):
        k = self.ns.kernels
        self._gemm(self.x, self.w1, self.c1, self.up, False, self.topk, c_sorted=self.down_tma,
                   b_use_tma=self.up_tma)
        if self.down_tma:       # rows in sorted order: skip the padding blocks' rows by expert id
            k.act_and_mul_triton(self.c1, self.c2, self.up, expert_ids=self.expert_of, down_moe_use_tma=True)
        else:
            k.act_and_mul_triton(self.c1, self.c2, self.up)
        self._gemm(self.c2, self.w2, self.c3, self.down, True, 1, a_use_tma=self.down_tma, b_use_tma=self.down_tma,
                   router_topk=self.topk)
        k.moe_sum_reduce_triton(self.c3, self.out, 1.0)
        return self.out

    def __call__(self):
        self.align()
        return self.experts()

    def describe(self):
        """What this peer ran for its token count (recorded in the JSON)."""
        return {"up_config": self.up, "down_config": self.down, "up_tma": self.up_tma, "down_tma": self.down_tma,
                "align": self.align_name}
