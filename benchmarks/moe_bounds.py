"""Lower bounds on the MoE layer's time from what it must move and compute, against the device's
measured copy bandwidth and dense tensor-core throughput.

Counted per call (the peers' contract: hidden states, ids and weights in, the output out):

- bytes: the expert weights actually touched, ``distinct experts hit x (gate+up + down) bytes``,
  plus the activations that must cross DRAM at least once (``x`` read, the output written, ids
  and weights read).  Intermediates (the permuted rows, GEMM 1's output) are not counted: an
  ideal kernel keeps them on chip.
- flops: ``2 x T x top-k x (hidden x 2·inter + inter x hidden)``, the two GEMMs' multiply-adds
  (SiLU, the weighting and the sum are negligible next to them).

The bound is ``max(bytes / copy bandwidth, flops / mm throughput)``; a kernel's *fraction of the
bound* is ``bound / its time`` (1.0 = at the ceiling).
"""


def counted(tokens, experts_hit, topk, hidden, inter, elem_bytes, id_bytes=4, weight_bytes=4):
    """``{"bytes", "flops", "weight_bytes", "act_bytes"}`` for one call on ``tokens`` tokens whose
    routing hits ``experts_hit`` distinct experts."""
    per_expert = (2 * inter * hidden + hidden * inter) * elem_bytes
    weights = experts_hit * per_expert
    acts = 2 * tokens * hidden * elem_bytes + tokens * topk * (id_bytes + weight_bytes)
    flops = 2 * tokens * topk * (hidden * 2 * inter + inter * hidden)
    return {"bytes": weights + acts, "flops": flops, "weight_bytes": weights, "act_bytes": acts}


def bound_ms(count, bandwidth, peak):
    """``{"mem_ms", "compute_ms", "bound_ms"}``: ``count`` (from :func:`counted`) at ``bandwidth``
    bytes/s and ``peak`` flop/s."""
    mem, comp = count["bytes"] / bandwidth * 1e3, count["flops"] / peak * 1e3
    return {"mem_ms": mem, "compute_ms": comp, "bound_ms": max(mem, comp)}


def copy_bandwidth(torch, timed, nbytes=2 << 30):
    """Device-to-device copy bandwidth in bytes/s (bytes read + bytes written per second) of one
    ``nbytes`` torch copy, timed by ``timed(fn) -> ms``."""
    src = torch.empty(nbytes, dtype=torch.uint8, device="cuda").fill_(1)
    dst = torch.empty_like(src)
    ms = timed(lambda: dst.copy_(src))
    del src, dst
    return 2 * nbytes / (ms * 1e-3)


def read_bandwidth(torch, timed, nbytes=2 << 30):
    """Device read bandwidth in bytes/s: one reduction (``torch.sum``) over ``nbytes`` of bf16,
    whose output is a scalar, timed by ``timed(fn) -> ms``."""
    src = torch.ones(nbytes // 2, dtype=torch.bfloat16, device="cuda")
    ms = timed(lambda: src.sum(dtype=torch.float32))
    del src
    return nbytes / (ms * 1e-3)


def mm_throughput(torch, timed, dtype, n=8192):
    """Dense ``n^3`` torch.mm throughput in flop/s for ``dtype`` (cuBLAS's wgmma kernels on Hopper)."""
    a = torch.randn(n, n, device="cuda").to(dtype)
    b = torch.randn(n, n, device="cuda").to(dtype)
    ms = timed(lambda: torch.mm(a, b))
    del a, b
    return 2 * n ** 3 / (ms * 1e-3)
