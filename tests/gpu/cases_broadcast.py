"""GPU cases for broadcasting in copy and elementwise (issue 27 item 1): a rotary embedding written
the CTA-collective way, one token per CTA, checked against numpy.

Each CTA rotates the 32 heads × 128 values of its token (``x1``, ``x2``: the halves, register
tiles ``S[(32,8,8):(8@tx,1@tx,1)]`` over shape (32, 64), 256 threads) by the token's cos/sin row
(shape (1, 64)) and scales each head by its gain ``g`` (shape (32, 1), held as
``S[32:8@tx] + R[8:1@tx]``: replicas between the shard's thread digits):
``y1 = (x1·cos − x2·sin)·g``, ``y2 = (x2·cos + x1·sin)·g``.  The variants differ in where
cos/sin live and so in the schedule dispatch must choose (each build refuses an artifact whose
dispatch chose otherwise):

- ``bcast_rope_replicated``: cos/sin ``S[(8,8):(1@tx,1)] + R[32:8@tx]``, replicated over the
  heads: every thread already holds its angles, ``per_thread`` reads them in place;
- ``bcast_rope_staged``: cos/sin ``S[(8,8):(1@tx,1)]``, held by 8 threads only:
  ``smem_staged`` moves them through shared memory;
- ``bcast_rope_copy``: cos/sin copied from global (1, 64) straight into (32, 64) tiles laid out
  like x (a broadcasting copy, 16-byte ``vector`` loads), then a plain elementwise;
- ``bcast_rope_rank1``: cos/sin as rank-1 (64,) replicated tiles, right-aligned to (32, 64)
  (numpy's rule), read in place by ``per_thread``;
- ``bcast_rope_inferred``: every register tile declared without a layout (issue 27 item 2):
  inference gives x the 16-byte vector layout and cos/sin/gain replicas of it.

The kernels are in ``_kernels_broadcast.py`` (imported by the builders only: it imports TVM),
so the GPU machine needs only the checks; tests/test_broadcast.py builds the same kernels on the CPU and checks the decisions.
"""

import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))

TOKENS, HEADS, HALF = 8, 32, 64
X_LAYOUT = "S[(32,8,8):(8@tx,1@tx,1)]"
CS_REPLICATED = "S[(8,8):(1@tx,1)] + R[32:8@tx]"
CS_EIGHT = "S[(8,8):(1@tx,1)]"
G_REPLICATED = "S[32:8@tx] + R[8:1@tx]"        # a head's gain on each of its 8 threads

_LOADS = ["vector"] * 4 + ["per_thread"]
#: variant → (x layout, cos/sin layout, cos/sin shape, gain layout, the schedules dispatch must choose)
VARIANTS = {
    "bcast_rope_replicated": (X_LAYOUT, CS_REPLICATED, (1, HALF), G_REPLICATED,
                              _LOADS + ["per_thread"] * 2 + ["vector"] * 2),
    "bcast_rope_staged": (X_LAYOUT, CS_EIGHT, (1, HALF), G_REPLICATED,
                          _LOADS + ["smem_staged"] * 2 + ["vector"] * 2),
    "bcast_rope_copy": (X_LAYOUT, X_LAYOUT, (HEADS, HALF), G_REPLICATED,
                        _LOADS + ["per_thread"] * 2 + ["vector"] * 2),
    "bcast_rope_rank1": (X_LAYOUT, CS_REPLICATED, (HALF,), G_REPLICATED,
                         _LOADS + ["per_thread"] * 2 + ["vector"] * 2),
    "bcast_rope_inferred": (None, None, (1, HALF), None,
                            _LOADS + ["per_thread"] * 2 + ["vector"] * 2),
}


def rope_kernel(name):
    """The kernel of variant ``name`` (built by ``_kernels_broadcast``, which imports TVM)."""
    sys.path.insert(0, HERE)
    import _kernels_broadcast
    x, cs, cs_shape, g, _ = VARIANTS[name]
    return _kernels_broadcast.rope_kernel(name, x, cs, cs_shape, g)


def _builder(name):
    def build():
        import axe.lang as Ax
        art = Ax.compile_kernel(rope_kernel(name), "sm_90a")
        got, want = [r.chosen for r in art.records], VARIANTS[name][4]
        if got != want:
            raise AssertionError(f"{name}: dispatch chose {got}, the case tests {want}")
        return art
    return build


BUILDS = {name: _builder(name) for name in VARIANTS}


def reference(x, cos, sin, gain):
    """numpy: rotate each token's heads by its cos/sin row and scale each by its gain (float64)."""
    import numpy as np
    x = x.astype(np.float64).reshape(TOKENS, HEADS, 2 * HALF)
    c, s = cos.astype(np.float64)[:, None, :], sin.astype(np.float64)[:, None, :]
    g = gain.astype(np.float64).reshape(TOKENS, HEADS, 1)
    x1, x2 = x[..., :HALF], x[..., HALF:]
    return np.concatenate([(x1 * c - x2 * s) * g, (x2 * c + x1 * s) * g], axis=-1).reshape(TOKENS * HEADS, 2 * HALF)


def check_rope(kernel, torch):
    import numpy as np
    worst = 0.0
    for _ in range(3):
        x = torch.randn((TOKENS * HEADS, 2 * HALF), device="cuda", dtype=torch.float32)
        ang = torch.rand((TOKENS, HALF), device="cuda", dtype=torch.float32) * 6.2832
        cos, sin = ang.cos(), ang.sin()
        gain = torch.rand((TOKENS * HEADS, 1), device="cuda", dtype=torch.float32) + 0.5
        y = torch.full_like(x, float("nan"))
        kernel(x, cos, sin, gain, y)
        torch.cuda.synchronize()
        got = y.cpu().numpy().astype(np.float64)
        want = reference(x.cpu().numpy(), cos.cpu().numpy(), sin.cpu().numpy(), gain.cpu().numpy())
        assert not np.isnan(got).any(), f"{kernel.launch['name']}: {int(np.isnan(got).sum())} outputs never written"
        err = float(np.abs(got - want).max())
        worst = max(worst, err)
        assert err < 1e-5, f"{kernel.launch['name']}: max abs error {err:.2e} against numpy"
    return f"{TOKENS} tokens × {HEADS} heads × {2 * HALF} fp32, 3 random runs, max abs err {worst:.1e} vs numpy"


CHECKS = {name: check_rope for name in VARIANTS}
