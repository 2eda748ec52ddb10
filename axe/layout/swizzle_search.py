"""Swizzle synthesis: the shared-memory layout with the fewest bank conflicts for a tile's writes
and reads, each candidate's count computed exactly by enumerating a warp's addresses.

*The bank model* (Hopper and earlier: 32 banks of 4 bytes).  One warp-wide instruction in which
each active lane touches ``w`` contiguous bytes (``w`` = vector × element bytes, 1 to 16, aligned)
is served in *phases* of 128 bytes of requests: all 32 lanes when ``w ≤ 4``, else ``128 / w``
consecutive lanes (16 for 8-byte, 8 for 16-byte accesses, as for ``ldmatrix``'s row addresses).
A phase takes as many *wavefronts* as the largest number of distinct 4-byte words it touches in
one bank (words are ``byte // 4``, banks ``word mod 32``; lanes touching the same word share it:
a broadcast).  An instruction's *conflicts* are its wavefronts minus the fewest its words could
take (``⌈distinct words / 32⌉`` per phase).  Bank conflicts are a property of each instruction;
a pattern's count is the sum over its instructions.

*Accesses* come from Axe layouts: :func:`warp_accesses` reads a warp's thread→element map (a
layout over the tile naming ``lane`` and registers ``m``) and groups each lane's registers into
vectors; :func:`ldmatrix_accesses` is ldmatrix.x4's (each lane names one 16-byte row).

*Candidates* (:func:`candidates`) map the tile's row-major element index to a memory offset:
CuTe's XOR swizzles ``Swizzle(B, M, S)`` of the row-major offset (a bijection on the tile when
its size is a multiple of ``2^(M+B)``; vectors stay whole when ``2^M`` is a multiple of every
vector), and — axe's layouts are not limited to powers of two — row-padded layouts
``S[(…, R, C):(…, C + p, 1)]`` that buy freedom from conflicts with ``p`` elements a row.
"""

from __future__ import annotations

from math import prod
from typing import NamedTuple, Sequence

from .group import LayoutError
from .layout import Layout, all_indices, flatten_index
from .swizzle import Swizzle, SwizzledLayout

__all__ = ["Access", "Cost", "Candidate", "BANKS", "BANK_BYTES", "wavefronts", "cost", "warp_accesses",
           "ldmatrix_accesses", "candidates", "search_swizzle", "storage_offsets"]

BANKS, BANK_BYTES, PHASE_BYTES = 32, 4, 128


class Access(NamedTuple):
    """One warp-wide instruction: ``lanes[l]`` the tile element (row-major flat index) where lane
    l's vector starts, or None (inactive); each lane touches ``vector`` consecutive elements."""

    lanes: tuple
    vector: int


class Cost(NamedTuple):
    """``wavefronts`` taken, ``ideal`` the fewest possible, ``conflicts = wavefronts − ideal``;
    ``worst``: the most wavefronts one phase took (an n-way conflict takes n)."""

    wavefronts: int
    ideal: int
    worst: int

    @property
    def conflicts(self) -> int:
        return self.wavefronts - self.ideal

    def __add__(self, other):
        return Cost(self.wavefronts + other[0], self.ideal + other[1], max(self.worst, other[2]))


NO_COST = Cost(0, 0, 0)


def wavefronts(byte_addresses: Sequence, width: int) -> Cost:
    """The cost of one instruction whose lane l touches bytes ``[a_l, a_l + width)`` (``a_l`` None:
    inactive), under the model above.  Law: equals, per phase, the maximum over banks of the
    number of distinct words in that bank, summed over phases."""
    per_phase = BANKS if width <= BANK_BYTES else PHASE_BYTES // width
    words_per_lane = max(1, width // BANK_BYTES)
    total = NO_COST
    for p in range(0, len(byte_addresses), per_phase):
        words = set()
        for a in byte_addresses[p:p + per_phase]:
            if a is not None:
                words.update(a // BANK_BYTES + k for k in range(words_per_lane))
        if not words:
            continue
        load = [0] * BANKS
        for w in words:
            load[w % BANKS] += 1
        worst = max(load)
        total = total + Cost(worst, -(-len(words) // BANKS), worst)
    return total


def cost(accesses: Sequence[Access], offset, elem_bytes: int) -> Cost:
    """The summed cost of ``accesses`` when tile element x lives at memory element ``offset(x)``.

    Raises :class:`LayoutError` when a lane's vector is not contiguous and aligned in memory
    under ``offset`` (no vector instruction could make that access)."""
    total = NO_COST
    for acc in accesses:
        addrs = []
        for x in acc.lanes:
            if x is None:
                addrs.append(None)
                continue
            o = offset(x)
            if acc.vector > 1 and (o % acc.vector or any(offset(x + j) != o + j for j in range(1, acc.vector))):
                raise LayoutError(f"a {acc.vector}-element vector at tile element {x} is not contiguous and "
                                  "aligned in memory under this layout")
            addrs.append(o * elem_bytes)
        total = total + wavefronts(addrs, acc.vector * elem_bytes)
    return total


def _lane_reg(c, first_warp: bool) -> tuple[int, int] | None:
    lane = c["lane"] + c["tx"]
    others = [a for a in c if a not in ("lane", "tx", "m")]
    if others and not first_warp:
        raise LayoutError(f"a warp access map names lanes and registers only, not {others}")
    if first_warp and (lane >= 32 or any(c[a] for a in others)):
        return None
    return lane, c["m"]


def warp_accesses(L, shape: Sequence[int], vector: int = 1, first_warp: bool = False) -> list[Access]:
    """The instructions of a warp that holds the tile as ``L`` (over ``shape``; lanes on ``lane``
    or ``tx`` < 32, registers on ``m``) and moves registers ``[k·vector, (k+1)·vector)`` of
    every lane with instruction k.  ``first_warp``: ``L`` spreads the tile over more threads
    (``tx`` ≥ 32, other warps): the accesses of the first warp, the others' being alike.

    Law: in instruction k, lane l's vector starts at the tile element held at (l, k·vector), and
    its j-th element is the tile element held at (l, k·vector + j), which must be the next one in
    row-major order.  A replica lane holds its own copy (a read by several lanes)."""
    held = {}
    for u in all_indices(tuple(shape)):
        x = flatten_index(u, shape)
        for c in L.map(u, shape):
            got = _lane_reg(c, first_warp)
            if got is None:
                continue
            lane, reg = got
            if not 0 <= lane < 32:
                raise LayoutError(f"warp access map {L}: element {u} on lane {lane}, outside one warp")
            held[(lane, reg)] = x
    if not held:
        return []
    regs = max(r for _, r in held) + 1
    out = []
    for k in range(-(-regs // vector)):
        lanes = []
        for lane in range(32):
            first = held.get((lane, k * vector))
            for j in range(1, vector):
                if held.get((lane, k * vector + j)) != (None if first is None else first + j):
                    raise LayoutError(f"warp access map {L}: lane {lane}'s registers {k * vector}…"
                                      f"{k * vector + vector - 1} are not {vector} consecutive tile elements")
            lanes.append(first)
        if any(x is not None for x in lanes):
            out.append(Access(tuple(lanes), vector))
    return out


def ldmatrix_accesses(shape: Sequence[int], elem_bytes: int = 2, trans: bool = False) -> list[Access]:
    """ldmatrix.x4 over a row-major ``(rows, cols)`` tile of 2-byte elements, one instruction per
    16×16 block: lane l names row ``l mod 16`` of the block at column block ``l // 16`` (8 elements,
    16 bytes).  ``trans`` (``.trans``) reads the same rows; only the registers differ."""
    rows, cols = shape
    if elem_bytes != 2 or rows % 16 or cols % 16:
        raise LayoutError(f"ldmatrix.x4 reads 16×16 blocks of 2-byte elements; tile {tuple(shape)} of "
                          f"{elem_bytes}-byte elements")
    del trans
    out = []
    for r0 in range(0, rows, 16):
        for c0 in range(0, cols, 16):
            lanes = tuple((r0 + lane % 16) * cols + c0 + 8 * (lane // 16) for lane in range(32))
            out.append(Access(lanes, 8))
    return out


class Candidate(NamedTuple):
    """A shared-memory layout for the tile (``layout`` over its shape, memory offsets in elements),
    its ``write`` and ``read`` costs and its ``storage`` (elements of memory it spans)."""

    layout: object
    write: Cost
    read: Cost
    storage: int

    @property
    def conflicts(self) -> int:
        return self.write.conflicts + self.read.conflicts

    def describe(self, elem_bytes: int = 0) -> str:
        """One line: the layout, each side's conflicts and worst phase, the storage it spans."""
        extra = f", {self.storage} elements" + (f" ({self.storage * elem_bytes} B)" if elem_bytes else "")
        return (f"{self.layout}: write {self.write.conflicts} conflicts (worst {self.write.worst}-way), read "
                f"{self.read.conflicts} (worst {self.read.worst}-way){extra}")


def storage_offsets(layout, shape: Sequence[int]) -> list[int]:
    """``offset[x]``: the memory element of tile element x (row-major flat index) under ``layout``
    (its memory axis; a layout naming other axes is no shared-memory layout)."""
    out = []
    for u in all_indices(tuple(shape)):
        (c,) = layout.map(u, shape)
        if any(a != "m" for a in c):
            raise LayoutError(f"shared layout {layout} names axes other than memory at {u}")
        out.append(c["m"])
    return out


def _log2(n: int) -> int:
    return n.bit_length() - 1


def candidates(shape: Sequence[int], elem_bytes: int, vectors: Sequence[int] = (1,), pad: bool = True) -> list:
    """Every layout the search weighs for a row-major tile of ``shape``, with its offsets
    (an array, ``offset[x]`` for row-major element x): the identity, each XOR ``Swizzle(B, M, S)``
    (1 ≤ B ≤ 6, 2^M a multiple of every vector, S ≥ B, source bits inside the tile, and 2^(M+B)
    dividing the tile so that it is a bijection), and (``pad``) row paddings of up to 32 words
    in whole vectors.  Law: each offsets list equals :func:`storage_offsets` of its layout."""
    import numpy as np
    shape = tuple(shape)
    n = prod(shape)
    plain = Layout(_row_major(shape))
    base = np.arange(n, dtype=np.int64)
    out = [(plain, base)]
    vmax = max(vectors)
    lo = _log2(vmax) if all(v & (v - 1) == 0 for v in vectors) else None
    for b in range(1, 7) if lo is not None else ():
        for m in range(lo, 10):
            if n % (1 << (m + b)):
                continue
            for s in range(b, 16):
                if (1 << (m + s)) >= n:       # its source bits lie past the tile: the identity
                    break
                sw = Swizzle(b, m, s)
                out.append((SwizzledLayout(plain, sw), base ^ ((base >> s) & (((1 << b) - 1) << m))))
    if pad and len(shape) >= 2:
        rows, cols = prod(shape[:-1]), shape[-1]
        step = max(vmax, max(1, BANK_BYTES // elem_bytes))
        for p in range(step, BANKS * BANK_BYTES // elem_bytes + 1, step):
            out.append((Layout(_row_major(shape, pad=p)), (base // cols) * (cols + p) + base % cols))
    return out


def _row_major(shape, pad=0):
    strides, w = [], 1
    for i, e in enumerate(reversed(shape)):
        strides.append(w)
        w *= e + (pad if i == 0 else 0)
    return tuple(zip(shape, reversed(strides)))


def tma_expressible(layout, shape: Sequence[int], elem_bytes: int) -> bool:
    """Whether a TMA load or store can write the row-major tile ``shape`` laid out as ``layout``
    (one candidate of :func:`candidates`): unpadded and either plain (a row of a 16-byte multiple,
    at most 256 elements) or TMA's 32/64/128-byte swizzle ``Swizzle(b, log2(16/e), 3)``, b in 1..3,
    with the row a whole number of swizzle rows.  Mirrors the TMA schedule's ``swizzle_mode`` and
    its box rule for the candidates the search weighs."""
    shape = tuple(shape)
    if storage_offsets(layout.inner if isinstance(layout, SwizzledLayout) else layout, shape) != list(range(prod(shape))):
        return False
    if not isinstance(layout, SwizzledLayout):
        return shape[-1] * elem_bytes % 16 == 0 and shape[-1] <= 256
    sw = layout.swizzle
    if not (1 <= sw.bits <= 3 and sw.base == _log2(16 // elem_bytes) and sw.shift == 3):
        return False
    return shape[-1] % ((16 << sw.bits) // elem_bytes) == 0


def search_swizzle(shape: Sequence[int], elem_bytes: int, write: Sequence[Access], read: Sequence[Access],
                   pad: bool = True) -> list[Candidate]:
    """All :func:`candidates` that every access can use, best first: fewest conflicts (writes and
    reads together), then least storage, then the plainest (no swizzle, then fewer swizzle bits).

    Law: ``result[0].conflicts ≤ c.conflicts`` for every candidate c, and each candidate's costs
    equal :func:`cost` of the accesses under its offsets (computed here a whole pattern at once)."""
    shape = tuple(shape)
    vectors = {a.vector for a in list(write) + list(read)} or {1}
    groups = [_Pattern(write, elem_bytes), _Pattern(read, elem_bytes)]
    ranked = []
    for L, offs in candidates(shape, elem_bytes, sorted(vectors), pad):
        costs = [g.cost(offs) for g in groups]
        if None in costs:
            continue
        ranked.append(Candidate(L, costs[0], costs[1], int(offs.max()) + 1))
    bits = lambda c: c.layout.swizzle.bits if isinstance(c.layout, SwizzledLayout) else 0   # noqa: E731
    ranked.sort(key=lambda c: (c.conflicts, c.storage, bits(c), str(c.layout)))
    return ranked


class _Pattern:
    """A pattern's instructions as arrays, grouped by vector width: :func:`cost` for many offset
    lists at the price of a few array operations each."""

    def __init__(self, accesses, elem_bytes):
        import numpy as np
        self.np, self.eb, self.groups = np, elem_bytes, []
        for v in sorted({a.vector for a in accesses}):
            lanes = np.array([[-1 if x is None else x for x in a.lanes] + [-1] * (32 - len(a.lanes))
                              for a in accesses if a.vector == v], dtype=np.int64)
            self.groups.append((v, lanes))

    def cost(self, offs) -> Cost | None:
        """:func:`cost` under ``offs``; None when a vector is not contiguous and aligned."""
        np = self.np
        offs = np.asarray(offs, dtype=np.int64)
        total = NO_COST
        for v, lanes in self.groups:
            on = lanes >= 0
            idx = np.where(on, lanes, 0)
            start = offs[idx]
            if v > 1:
                if (on & (start % v != 0)).any():
                    return None
                for j in range(1, v):
                    if (on & (offs[np.minimum(idx + j, len(offs) - 1)] != start + j)).any():
                        return None
            width = v * self.eb
            per = BANKS if width <= BANK_BYTES else PHASE_BYTES // width
            wpl = max(1, width // BANK_BYTES)
            word = (start * self.eb) // BANK_BYTES
            words = word[..., None] + np.arange(wpl)                   # (instr, 32, wpl)
            words = np.where(on[..., None], words, -1).reshape(len(lanes), 32 // per, per * wpl)
            words = np.sort(words, axis=-1)
            fresh = np.ones(words.shape, dtype=bool)
            fresh[..., 1:] = words[..., 1:] != words[..., :-1]
            fresh &= words >= 0
            banks = np.zeros(words.shape[:2] + (BANKS,), dtype=np.int64)
            i, p, k = np.nonzero(fresh)
            np.add.at(banks, (i, p, words[i, p, k] % BANKS), 1)
            worst = banks.max(axis=-1)
            distinct = fresh.sum(axis=-1)
            used = distinct > 0
            total = total + Cost(int(worst[used].sum()), int((-(-distinct[used] // BANKS)).sum()),
                                 int(worst.max()) if used.any() else 0)
        return total
