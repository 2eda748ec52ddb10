"""The shapes the fused tensor-parallel kernels are built for, and the gate/up weight's tile
interleave, without TVM (a serving machine that only runs shipped artifacts asks them before
choosing a path, :mod:`axe.torch.tp`, and prepares the fused SiLU·up weight).

Law: ``ag_gemm_fits(M, N, K, w)`` is None exactly when :func:`kernels.ag_gemm.make` builds the global
problem; ``gemm_rs_fits`` likewise for :func:`kernels.gemm_rs.make` (default tile); otherwise each
says why not in one line.
"""

TILE_ROWS = 128          # the cooperative tile's rows (kernels.gemm_config.BM)
#: rows of one interleave period of the fused gate/up weight that ``kernels/gemm.py``'s
#: ``act="silu_mul"`` takes in every tile (the transposed decode tile's 128 weight rows)
GATE_UP_PERIOD = 128


def ag_gemm_fits(M, N, K, world):
    """None if the fused all-gather + GEMM is built for global M × N × K on ``world`` GPUs, else why not."""
    if world < 2:
        return f"world must be at least 2, got {world} (use kernels/gemm.py on one GPU)"
    if M % world or N % world:
        return f"M={M} and N={N} must be multiples of world={world} (unequal shards are not supported)"
    if (M // world) % TILE_ROWS:
        return f"the rows per rank M/w={M // world} must be a multiple of {TILE_ROWS} (the tile's rows)"
    if K % 64:
        return f"K={K} must be a multiple of 64"
    if (N // world) % 8:
        return f"the columns per rank N/w={N // world} must be a multiple of 8"
    return None


def gemm_rs_fits(M, N, K, world):
    """None if the fused GEMM + reduce-scatter is built for global M × N × K on ``world`` GPUs, else why not."""
    if world < 2:
        return f"world must be at least 2, got {world} (use kernels/gemm.py on one GPU)"
    if M % world or K % world:
        return f"M={M} and K={K} must be multiples of world={world} (unequal shards are not supported)"
    if M // world < TILE_ROWS:
        return (f"the rows per rank M/w={M // world} are fewer than the tile's {TILE_ROWS} rows (the owners' "
                "order reads whole row blocks); use the non-fused path, axe's GEMM + a reduce-scatter")
    if (K // world) % 8 or K // world < 64:
        return f"the local K={K // world} must be a multiple of 8 and at least 64"
    return None


def interleave(gate, up, bn=256):
    """The weight (N × K, an ``nn.Linear`` weight's rows) whose tiles of ``bn`` rows hold ``bn/2``
    gate rows then the same ``bn/2`` up rows (torch tensors ``gate``, ``up``: I × K, I a multiple
    of ``bn/2``).  Law: row ``t·bn + c`` is ``gate[t·bn/2 + c]`` and row ``t·bn + bn/2 + c`` is
    ``up[t·bn/2 + c]`` for c < bn/2.  ``bn=128`` is the one weight every tile of ``kernels/gemm.py``'s
    ``act="silu_mul"`` takes (the transposed decode tile's 128 rows, split 64/64 over its two
    warpgroups; wider tiles hold whole periods)."""
    import torch
    h = bn // 2
    if gate.shape != up.shape or gate.shape[0] % h:
        raise ValueError(f"interleave: gate {tuple(gate.shape)} and up {tuple(up.shape)} must match, rows a "
                         f"multiple of {h}")
    return torch.stack([gate.reshape(-1, h, gate.shape[1]), up.reshape(-1, h, up.shape[1])], 1).reshape(-1, gate.shape[1])
