"""axe kernels as PyTorch functions.

- :mod:`axe.torch.cache` — the on-disk artifact cache (``$AXE_CACHE_DIR``, shipped folders);
- :mod:`axe.torch.jit` — :class:`JitKernel`: a kernel factory called on tensors, built on first
  call per specialization, cached, launched through :mod:`axe.runtime`;
- :mod:`axe.torch.ops` — ``torch.library`` custom ops ``axe::rmsnorm``, ``axe::softmax``,
  ``axe::gemm``, ... (with fake implementations for ``torch.compile`` and CUDA graphs), launched
  through :mod:`axe.torch.fast_ops` — the compiled launcher, built on first import against the torch
  that imports it (``axe.torch.ops.launcher()`` says which path is in force);
- :mod:`axe.torch.tune` — ``axe tune``: measured configurations per row-count bucket (GEMM, FP8 GEMM);
- :mod:`axe.torch.distributed` — distributed kernels taking and returning DTensors;
- :mod:`axe.torch.attention` — ``torch.ops.axe.attention`` (flash-attention forward, GQA), registered
  when the module is imported (``import axe.torch.attention``, or reading ``axe.torch.attention``);
- :mod:`axe.torch.moe_ops` — ``torch.ops.axe.fused_moe`` (SGLang's / vLLM's ``fused_experts``
  conventions) and :mod:`axe.torch.fp8_ops` — ``torch.ops.axe.gemm_fp8`` (block-scaled, DeepGEMM's
  scale layout), registered the same way.

Importing this package imports neither torch nor TVM; its modules import torch when used.
"""

__all__ = ["ArtifactCache", "ArtifactMissing", "CacheKey", "JitKernel"]


def __getattr__(name):
    if name in ("ArtifactCache", "ArtifactMissing", "CacheKey"):
        from . import cache
        return getattr(cache, name)
    if name == "JitKernel":
        from .jit import JitKernel
        return JitKernel
    if name in ("attention", "moe_ops", "fp8_ops"):   # a submodule: import_module, not ``from . import`` (it would ask us again)
        import importlib
        return importlib.import_module(f"{__name__}.{name}")
    raise AttributeError(f"module 'axe.torch' has no attribute {name!r}")
