"""The parts GEMM-shaped kernels are composed of (CUTLASS 3's collective design in axe's operators):
a kernel is a **tile scheduler** × a **mainloop** × an **epilogue**, put together by a kernel skeleton.

=====================================  ==================================================================
``schedulers/persistent.py``           persistent data-parallel, grouped rasterization, static or run-time tile counts, CTA clusters
``schedulers/stream_k.py``             stream-K: the last waves split over all CTAs in k-blocks
``schedulers/split_k.py``              split-K: K cut into S slices on different CTAs, partials reduced in order
``schedulers/owners.py``               the owners' order of a distributed (reduce-scatter) epilogue
``schedulers/gather.py``               the gather order of an all-gather + GEMM: own rows first, a peer's after its signals
``schedulers/grouped.py``              grouped GEMMs (MoE): the tile count read on the device, its stream-K split, two GEMMs in one order
``mainloops/tma_wgmma.py``             TMA producer + wgmma consumers (cooperative, ping-pong), B multicast to CTA pairs
``mainloops/tcgen05.py``               sm_100a: one MMA thread into a TMEM accumulator, CTA-pair MMAs
``mainloops/neuron.py``                trn1: the NeuronCore block loop (PSUM accumulation)
``mainloops/fp8_block_scaled.py``      sm_90a FP8: per-k-block wgmma into a partial, promoted with SA·SB block scales
``mainloops/gathered_rows.py``         grouped GEMMs: A rows by TMA or gathered through an index (cp.async), the expert's B rows
``epilogues/store.py``                 cast + stmatrix + TMA store in chunks
``epilogues/elementwise.py``           the store after ``acc · row_scale · col_scale + bias + residual`` (any subset)
``epilogues/static_store.py``          the store through a static buffer, stream-K finished at one store site (FP8)
``epilogues/handover.py``              a split tile's fp32 partial handed over (stream-K, split-K)
``epilogues/reduce_scatter.py``        push peer tiles to their owners, add the peers' partials
``epilogues/all_gather.py``            push own rows to every peer from the producer warpgroup; store at the owner's rows
``epilogues/fused.py``                 SiLU·up or cast, then the store of a tile's own rows (16-row boxes); stream-K hand-over
``warp_specialized.py``                the persistent warp-specialized kernel skeleton (sm_90a, sm_100a)
=====================================  ==================================================================

A part states its contract in its module docstring and is tested on its own (``tests/test_parts.py``).
:func:`compose` refuses a combination that cannot work when it is composed, naming both parts and
the reason.
"""


class Problem:
    """The GEMM a kernel computes: ``C (M×N) = A (M×K) · B`` with B stored K×N (``"row"``) or N×K
    (``"col"``); ``M`` may be a TIR variable (a run-time row count); ``a_shape``: A as the kernel
    declares it (a distributed kernel's A carries an owner dimension); ``rows``: the row count the
    tile scheduler plans for (default M; a bound on a run-time M schedules statically); ``swap``: the
    kernel computes ``Cᵀ = B·Aᵀ`` (B's rows fill the MMA's M side, A's few rows its N side; the
    mainloop gets the operands in that order and the epilogue stores transposed)."""

    def __init__(self, M, N, K, dtype, b_major, a_shape=None, rows=None, swap=False):
        self.M, self.N, self.K, self.dtype, self.b_major = M, N, K, dtype, b_major
        self.rows, self.swap = (M if rows is None else rows), swap
        self.a_shape = a_shape or (M, K)
        self.b_shape = (K, N) if b_major == "row" else (N, K)


class CompositionError(ValueError):
    """Two parts that cannot work together."""


#: (scheduler test, mainloop test, epilogue test, reason): a combination matching all three is refused
RULES = (
    (lambda s: s.hands_over, lambda m: True, lambda e: not e.hands_over,
     "the scheduler splits tiles in k, and the epilogue has no partial hand-over"),
    (lambda s: s.hands_over, lambda m: m.split != "rows" or m.cluster > 1, lambda e: True,
     "split tiles hand partials over per (CTA, consumer warpgroup) of one cooperative tile without CTA pairs"),
    (lambda s: True, lambda m: m.mma == "tcgen05", lambda e: e.name.startswith("reduce-scatter"),
     "the reduce-scatter epilogue reads the accumulator from wgmma's registers (not built for TMEM)"),
    (lambda s: s.name == "owners' order", lambda m: m.split != "rows" or m.cluster > 1, lambda e: True,
     "the owners' order is built for the cooperative tile without CTA pairs"),
    (lambda s: s.name == "gather order", lambda m: m.split != "rows" or m.cluster > 1, lambda e: True,
     "the gather order is built for the cooperative tile without CTA pairs"),
    (lambda s: True, lambda m: m.mma == "tcgen05", lambda e: e.name.startswith("all-gather"),
     "the all-gather part is built for the wgmma mainloop's producer warpgroup"),
)


def compose(sched, main, epi):
    """``(sched, main, epi)`` if they can work together, else :class:`CompositionError` naming the
    parts and the reason."""
    if sched.stack != main.cluster:
        raise CompositionError(f"{sched.name} scheduler in clusters of {sched.stack} with {main.name} mainloop in "
                               f"CTA groups of {main.cluster}: both must agree")
    for s_ok, m_ok, e_ok, why in RULES:
        if s_ok(sched) and m_ok(main) and e_ok(epi):
            raise CompositionError(f"{sched.name} scheduler + {main.name} mainloop + {epi.name} epilogue: {why}")
    return sched, main, epi
