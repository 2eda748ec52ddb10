"""DeepSeek-V3's block quantization in torch (no TVM: the GPU machine imports it): activations
per row and 128 elements of K, weights per 128×128 block, e4m3 with the fp32 scale
``amax / 448``; and the fp32 reference of the dequantized operands.

Scale layouts are those :mod:`kernels.gemm_fp8` takes: SA stored ``(ceil(K/128), Mp)`` (each
k-block's row scales contiguous, Mp = M rounded up to 4 for 16-byte TMA rows), SB
``(ceil(N/128), ceil(K/128))`` row-major.
"""

BLOCK = 128
E4M3_MAX = 448.0


def scale_shapes(M, N, K):
    """``(SA shape, SB shape)`` as stored (see the module docstring)."""
    kb = -(-K // BLOCK)
    return (kb, -(-M // 4) * 4), (-(-N // BLOCK), kb)


def _pad(x, rows, cols):
    import torch.nn.functional as F
    return F.pad(x, (0, cols - x.shape[1], 0, rows - x.shape[0]))


def quantize_rows(x):
    """``(x_fp8 (M, K), SA (KB, Mp))``: one scale per row and 128 columns, ``x ≈ x_fp8 · up(SA)``."""
    import torch
    M, K = x.shape
    (kb, mp), _ = scale_shapes(M, 1, K)
    blocks = _pad(x.float(), M, kb * BLOCK).view(M, kb, BLOCK)
    scale = blocks.abs().amax(-1).clamp(min=1e-12) / E4M3_MAX          # (M, KB)
    q = (blocks / scale[..., None]).view(M, kb * BLOCK)[:, :K].to(torch.float8_e4m3fn)
    sa = torch.zeros(kb, mp, device=x.device, dtype=torch.float32)
    sa[:, :M] = scale.t()
    return q.contiguous(), sa


def quantize_blocks(w):
    """``(w_fp8 (N, K), SB (NB, KB))``: one scale per 128×128 block."""
    import torch
    N, K = w.shape
    _, (nb, kb) = scale_shapes(1, N, K)
    blocks = _pad(w.float(), nb * BLOCK, kb * BLOCK).view(nb, BLOCK, kb, BLOCK)
    scale = blocks.abs().amax(dim=(1, 3)).clamp(min=1e-12) / E4M3_MAX   # (NB, KB)
    q = (blocks / scale[:, None, :, None]).view(nb * BLOCK, kb * BLOCK)[:N, :K].to(torch.float8_e4m3fn)
    return q.contiguous(), scale.contiguous()


def dequantize(A, B, SA, SB):
    """fp32 ``(a, b)``: each fp8 element times the scale of its block."""
    M, K = A.shape
    N = B.shape[0]
    a = A.float() * SA[:, :M].t().repeat_interleave(BLOCK, 1)[:, :K]
    b = B.float() * SB.repeat_interleave(BLOCK, 0).repeat_interleave(BLOCK, 1)[:N, :K]
    return a, b


def reference(A, B, SA, SB):
    """fp32 ``C = a·bᵀ`` of the dequantized operands (``{"C": ...}``)."""
    a, b = dequantize(A, B, SA, SB)
    return {"C": a @ b.t()}
