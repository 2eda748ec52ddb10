"""Named configurations of the Hopper flash attention (``kernels/attention.py``) besides the default
row of its ``TARGETS`` table, shared by the GPU cases and the benchmark (which run where TVM is not
installed, so this module imports nothing): each name maps to ``kernels.attention.make``'s keywords.

- ``ov``: FA3's overlap inside a consumer warpgroup (S_j and P_{j−1}·V_{j−1} issued together, the
  softmax of S_j under the P·V);
- ``ov176``: the same with 176-key tiles (FA3's non-causal head-128 tile), the producer at 24
  registers so the consumers get 240;
- ``ov3``: the same with three consumer warpgroups (192 query rows a CTA; head size 64);
- ``pp``, ``pp176``: the overlap with the two consumer warpgroups taking turns at the tensor cores
  (FA3's ping-pong: one's softmax under the other's wgmma), 128- or 176-key tiles.
"""

VARIANTS = {
    "ov": dict(schedule="overlap"),
    "ov176": dict(schedule="overlap", bn=176, producer_regs=24),
    "ov3": dict(schedule="overlap", consumers=3, producer_regs=24),
    "pp": dict(schedule="pingpong"),
    "pp176": dict(schedule="pingpong", bn=176, producer_regs=24),
}

#: the head sizes each variant is built for (where it fits the registers without spilling)
HEAD_DIMS = {"ov": (64, 128), "ov176": (128,), "ov3": (64,), "pp": (64, 128), "pp176": (128,)}
