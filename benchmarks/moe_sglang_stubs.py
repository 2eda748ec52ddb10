"""Stand-ins for the SGLang helper modules that its MoE kernel files import (see
:mod:`benchmarks.moe_sglang`).  Each function answers what SGLang's own answers on an NVIDIA GPU
(an H100/H200: CUDA, sm_90) with the server's default settings; none of them is kernel logic.
The real modules cannot be imported there: ``sglang.srt.utils`` alone pulls in the server's
dependency tree, and ``sglang.kernels.jit.utils`` its JIT compiler.
"""

import os
import types


def _cuda():
    import torch
    return torch.cuda.is_available() and torch.version.cuda is not None


def _capability():
    import torch
    return torch.cuda.get_device_capability() if _cuda() else (0, 0)


def is_arch_support_pdl():
    """``sglang.kernels.jit.utils.is_arch_support_pdl``: programmatic dependent launch from sm_90
    on (CUDA, not ROCm/MUSA).  True on an H100/H200, so SGLang's kernels launch with PDL there."""
    return _cuda() and _capability()[0] >= 9


def is_sm90_supported():
    """``sglang.srt.utils.is_sm90_supported``: an sm_9x device and CUDA >= 12.3 (only read on the
    fp8 path, which this benchmark does not take)."""
    import torch
    cuda = tuple(int(v) for v in (torch.version.cuda or "0.0").split(".")[:2])
    return _cuda() and _capability()[0] == 9 and cuda >= (12, 3)


def is_hip():
    import torch
    return torch.version.hip is not None


def get_device_name(device_id=0):
    """``sglang.srt.utils.get_device_name`` on CUDA: torch's name, which picks the tuned file."""
    import torch
    return torch.cuda.get_device_name(device_id)


def get_moe_padding_size(is_aiter_moe):
    """``sglang.srt.layers.moe.utils.get_moe_padding_size``: 0 (no weight padding) unless ROCm's
    aiter or ``SGLANG_MOE_PADDING`` asks for it; this peer refuses those rather than guess."""
    if is_aiter_moe or os.environ.get("SGLANG_MOE_PADDING", "0") != "0":
        raise NotImplementedError("padded MoE weights (aiter or SGLANG_MOE_PADDING) are not part of this benchmark")
    return 0


def _unused(name):
    def fn(*args, **kwargs):
        raise NotImplementedError(f"{name}: quantized MoE is not part of this benchmark")
    fn.__name__ = name
    return fn


#: the default server's execution settings that the config lookup and kernels read
EXEC = types.SimpleNamespace(deterministic=types.SimpleNamespace(enable_deterministic_inference=False),
                             moe=types.SimpleNamespace(enable_fused_moe_sum_all_reduce=False))

MODULES = {
    "sglang.kernels.jit": {},
    "sglang.kernels.jit.utils": {"is_arch_support_pdl": is_arch_support_pdl},
    "sglang.kernels.ops.quantization": {},
    "sglang.kernels.ops.quantization.fp8_kernel": {n: _unused(n) for n in (
        "per_token_group_quant_fp8", "scaled_fp8_quant", "sglang_per_token_group_quant_fp8")},
    "sglang.kernels.ops.quantization.int8_kernel": {n: _unused(n) for n in (
        "per_token_group_quant_int8", "per_token_quant_int8", "sglang_per_token_group_quant_int8")},
    "sglang.srt.batch_invariant_ops": {"is_batch_invariant_mode_enabled": lambda: False},
    "sglang.srt.layers.moe.utils": {"get_moe_padding_size": get_moe_padding_size},
    "sglang.srt.runtime_context": {"get_exec": lambda: EXEC},
    "sglang.srt.utils": {"cpu_has_amx_support": lambda: False, "is_cpu": lambda: False, "is_cuda": _cuda,
                         "is_hip": is_hip, "is_sm90_supported": is_sm90_supported,
                         "get_device_name": get_device_name},
}


def install(modules):
    """Put the stand-in modules into ``modules`` (``sys.modules``)."""
    for name, attrs in MODULES.items():
        mod = types.ModuleType(name)
        mod.__dict__.update(attrs)
        mod.__path__ = []       # a package for the names that have submodules; harmless otherwise
        modules[name] = mod
