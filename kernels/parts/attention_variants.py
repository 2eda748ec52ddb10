"""Named configurations of the Hopper flash attention (``kernels/attention.py``), shared by the kernel
(its default per head size and mask), the GPU cases and the benchmark (which run where TVM is not
installed, so this module imports nothing).  Each name maps to the entries of the sm_90a row of
``TARGETS`` it replaces (that row is ``simple``: 2 consumer warpgroups, 128-key tiles, 2 stages,
the producer at 40 registers):

- ``simple``: each wgmma waited for (S, softmax, rescale, P·V in turn); the two consumer
  warpgroups overlap only as the warp schedulers happen to interleave them;
- ``ov``: FA3's overlap inside a consumer warpgroup (S_j and P_{j−1}·V_{j−1} issued together, the
  rescale of O under S_j's wgmma, the softmax of S_j under the P·V);
- ``ov176``: the same with 176-key tiles (FA3's non-causal head-128 tile), the producer at 24
  registers so the consumers get 240;
- ``ov3``: the same with three consumer warpgroups (192 query rows a CTA; head size 64);
- ``pp``, ``pp176``, ``pp3``: the overlap with the consumer warpgroups taking turns at the tensor
  cores (FA3's ping-pong: one's softmax under the others' wgmma), 128- or 176-key tiles, or three
  warpgroups (head size 64);
- ``pp_p``, ``pp3_p``, ``ov3_p``: persistent forms (one CTA per SM walking its query tiles: the next
  tile's Q, K and V load under the current one's end, O leaves through slots of its own), for
  short sequences where a CTA's start and end cost as much as a few key tiles;
- ``pp_p1``, ``pp3_p1``: the persistent ping-pongs with the CTA order a head at a time also when
  causal (``section=1``: a head's query tiles run side by side, so its K and V are read from DRAM
  once while they are in L2, rather than once per query tile a section apart);
- ``pp3_pu``: ``pp3_p`` with the consumers' warpgroup index broadcast from lane 0
  (``wg_broadcast``: ptxas then computes the Q slot's wgmma descriptors on the uniform datapath
  instead of per thread on the ALU pipe);
- ``pp3_pm``, ``pp3m``, ``pp_p1m``, ``pp176m``, ``ppm``, ``pp_pm``: ``pp3_p``, ``pp3``, ``pp_p1``,
  ``pp176``, ``pp``, ``pp_p`` with the broadcast and the block mask (``mask="block"``: only the
  64-key blocks the diagonal or the end crosses are masked, each score by two FMA-pipe
  instructions instead of ALU compares and selects);
- ``pp3_pmd``, ``pp3md``: ``pp3_pm``, ``pp3m`` where, causal, a warpgroup skips the key tiles past its
  last row (``skip_dead``: with 192 query rows a CTA, up to one a query tile for the first two
  warpgroups; Q·Kᵀ, softmax and P·V not issued, K and V only waited for and freed).
"""

VARIANTS = {
    "simple": dict(),
    "ov": dict(schedule="overlap"),
    "ov176": dict(schedule="overlap", bn=176, producer_regs=24),
    "ov3": dict(schedule="overlap", consumers=3, producer_regs=24),
    "pp": dict(schedule="pingpong"),
    "pp176": dict(schedule="pingpong", bn=176, producer_regs=24),
    "pp3": dict(schedule="pingpong", consumers=3, producer_regs=24),
    "pp_p": dict(schedule="pingpong", persistent=True),
    "pp3_p": dict(schedule="pingpong", consumers=3, producer_regs=24, persistent=True),
    "ov3_p": dict(schedule="overlap", consumers=3, producer_regs=24, persistent=True),
    "pp_p1": dict(schedule="pingpong", persistent=True, section=1),
    "pp3_p1": dict(schedule="pingpong", consumers=3, producer_regs=24, persistent=True, section=1),
    # fewer ALU-pipe instructions per key tile: the warpgroup index broadcast (``wg_broadcast``) alone,
    # and with the block mask (``kernels.attention.MASKS``), for the causal defaults
    "pp3_pu": dict(schedule="pingpong", consumers=3, producer_regs=24, persistent=True, wg_broadcast=True),
    "pp3_pm": dict(schedule="pingpong", consumers=3, producer_regs=24, persistent=True, wg_broadcast=True,
                   mask="block"),
    "pp3m": dict(schedule="pingpong", consumers=3, producer_regs=24, wg_broadcast=True, mask="block"),
    "pp_p1m": dict(schedule="pingpong", persistent=True, section=1, wg_broadcast=True, mask="block"),
    "pp176m": dict(schedule="pingpong", bn=176, producer_regs=24, wg_broadcast=True, mask="block"),
    "ppm": dict(schedule="pingpong", wg_broadcast=True, mask="block"),
    "pp_pm": dict(schedule="pingpong", persistent=True, wg_broadcast=True, mask="block"),
    "pp3_pmd": dict(schedule="pingpong", consumers=3, producer_regs=24, persistent=True, wg_broadcast=True,
                    mask="block", skip_dead=True),
    "pp3md": dict(schedule="pingpong", consumers=3, producer_regs=24, wg_broadcast=True, mask="block",
                  skip_dead=True),
}

#: the head sizes each variant is built for (where it fits the registers without spilling)
HEAD_DIMS = {"simple": (64, 128), "ov": (64, 128), "ov176": (128,), "ov3": (64,), "pp": (64, 128), "pp176": (128,),
             "pp3": (64,), "pp_p": (64, 128), "pp3_p": (64,), "ov3_p": (64,), "pp_p1": (64, 128), "pp3_p1": (64,),
             "pp3_pu": (64,), "pp3_pm": (64,), "pp3m": (64,), "pp_p1m": (64, 128), "pp176m": (128,),
             "pp3_pmd": (64,), "pp3md": (64,), "ppm": (64, 128), "pp_pm": (64, 128)}

#: the default variant per (head size, causal), by the longest key sequence it serves: ``((bound,
#: variant), ..., (None, variant))``, the first whose bound is >= seq_kv.  Short sequences take the
#: persistent forms (a CTA walks a few key tiles per query tile, so starting and ending one costs as
#: much as several tiles: the next tile's loads hide under the current one's end) — causal, in the
#: order a head at a time (``*_p1``: its query tiles side by side read its K and V once from DRAM); longer ones head
#: 64 three consumer warpgroups (192-row tiles halve the K/V traffic per FLOP against 128 and hide
#: the exp2s, which cost as much as its GEMMs) — without a mask overlapped inside each warpgroup, with
#: one ping-ponged so the diagonal's masking hides under the other's wgmma; head 128 FA3's
#: ping-pong, causal with 176-key tiles from 8192 keys, where the diagonal's masked tiles are few
#: among the unmasked ones.  From 2048 keys (to 4096 causal, to 8192 at head 64 unmasked) the
#: persistent forms with the warpgroup index broadcast and the block mask (``pp3_pm``, ``pp_p1m``,
#: ``pp_pm``: about 40% fewer ALU instructions per key loop) replace their plain twins.  The fastest
#: measured per row of ``benchmarks/attention.py`` (docs/attention.md has the figures)
DEFAULTS = {(64, False): ((8192, "pp3_pm"), (None, "ov3")),
            (64, True): ((1024, "pp_p1"), (4096, "pp3_pm"), (None, "pp3")),
            (128, False): ((1024, "pp_p"), (None, "pp_pm")),
            (128, True): ((1024, "pp_p1"), (4096, "pp_p1m"), (None, "pp176"))}


def default(head_dim, causal, seq_kv=None):
    """The name of the default variant for this head size, mask and key length (None: the longest
    sequences' choice)."""
    for bound, name in DEFAULTS[(head_dim, bool(causal))]:
        if bound is None or (seq_kv is not None and seq_kv <= bound):
            return name
    raise AssertionError("every DEFAULTS entry ends with (None, variant)")
