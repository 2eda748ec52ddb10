"""Tensors: a TIR buffer seen through an Axe layout, with a dtype and a memory scope.

The buffer is storage only (flat, sized by the layout's memory span); the layout says where
each logical element lives.  Sub-tensors (``T[a:b, c:d]``) are computed with the layout
algebra's ``slice``; symbolic region starts (``bx*64``) add a symbolic offset on memory.
Raw TIR buffers passed to an operator are looked up among the tensors the current build
registered (:func:`register_tensor`: kernel parameters, allocations) or read as row-major.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from math import prod

from axe.layout import Layout, LayoutError, S, SwizzledLayout, group, slice_layout
from axe.layout.slicing import slice_block

from .build import current_build, innermost_build

__all__ = ["Tensor", "as_operand", "register_tensor", "lookup_tensor", "MEMORY_SCOPES",
           "register_memory_scope"]

#: memory scopes a tensor may live in: the shared ones here, a backend's own through
#: :func:`register_memory_scope` (Trainium's SBUF and PSUM)
MEMORY_SCOPES = ("global", "shared", "local", "tmem")   # tmem: Blackwell tensor memory (TLane/TCol)


def register_memory_scope(*names: str) -> None:
    """Admit ``names`` as memory scopes (idempotent): a backend adds its memories without editing
    this module."""
    global MEMORY_SCOPES
    MEMORY_SCOPES = MEMORY_SCOPES + tuple(n for n in names if n not in MEMORY_SCOPES)


def _inner(L):
    return L.inner if isinstance(L, SwizzledLayout) else L


def _is_int(x) -> bool:
    import tvm
    import tvm.sym
    return isinstance(x, int) or isinstance(x, tvm.tirx.IntImm)


@dataclass(frozen=True)
class Tensor:
    """A (sub-)tensor: ``layout`` over the row-major ``shape``; element x of the tensor is at
    memory offset ``f_layout(x)[m] + base`` of ``buffer`` (other axes say which thread holds it).

    ``starts`` are the region's start coordinates in ``root``'s logical shape (TMA uses them);
    ``tensormap`` the CUtensorMap kernel parameter describing ``root`` (global tensors only).
    ``gpu``: for a view sliced out of a distributed tensor at a symbolic device index, the device
    (a TIR expression; its ``gpuid`` is ``gpu`` plus the layout's own ``gpuid`` part), else None.
    """

    _is_meta_class = True   # TVMScript binds it by name instead of making a TIR value

    buffer: object
    layout: object
    shape: tuple
    dtype: str
    mem: str
    base: object = 0
    starts: tuple = ()
    root: "Tensor | None" = None
    tensormap: object = None
    name: str = ""
    gpu: object = None

    def __post_init__(self):
        if self.mem not in MEMORY_SCOPES:
            raise ValueError(f"tensor {self.name}: memory scope {self.mem!r} is not one of {MEMORY_SCOPES}")
        if prod(self.shape) != _inner(self.layout).size:
            raise ValueError(f"tensor {self.name}: shape {self.shape} has {prod(self.shape)} elements but "
                             f"layout {self.layout} has {_inner(self.layout).size}")
        if not self.starts:
            object.__setattr__(self, "starts", tuple(0 for _ in self.shape))

    @property
    def origin(self) -> "Tensor":
        return self.root or self

    @property
    def rank(self) -> int:
        return len(self.shape)

    @property
    def elem_bytes(self) -> int:
        import tvm
        import tvm.sym
        return tvm.DataType(self.dtype).bits // 8

    @property
    def on_devices(self) -> bool:
        """Whether the tensor names GPUs: ``gpuid`` in its layout, or a device index of its own."""
        return self.gpu is not None or "gpuid" in _inner(self.layout).axes()

    def device(self):
        """``(gpu, layout)`` for a tensor held whole by one GPU: the device (an int or a TIR
        expression) and the layout with the ``gpuid`` offset removed; None when the layout has
        ``gpuid`` iters (its elements live on several GPUs) or the tensor names no GPU."""
        L = _inner(self.layout)
        if not self.on_devices or any(it[2] == "gpuid" and it[0] > 1 for it in tuple(L.shard) + tuple(L.replica)):
            return None
        g = L.offset["gpuid"]
        if self.gpu is not None:
            g = self.gpu + g if g else self.gpu
        off = {a: v for a, v in L.offset.items() if a != "gpuid"}
        keep = lambda its: tuple(it for it in its if it[2] != "gpuid")   # noqa: E731 - extent-1 device iters
        inner = Layout(keep(L.shard) or ((1, 1, "m"),), keep(L.replica), off)
        return g, replace_inner(self.layout, inner)

    def thread_axes(self) -> tuple:
        """The non-memory axes of the layout (who holds the elements)."""
        return tuple(a for a in _inner(self.layout).axes() if a != "m")

    def describe(self) -> str:
        """One line for messages: name, shape, dtype, memory, layout and base offset (when not 0)."""
        base = "" if _is_int(self.base) and int(self.base) == 0 else f" + ({self.base})"
        return f"{self.name or 'tensor'}{list(self.shape)} {self.dtype} {self.mem} {self.layout}{base}"

    def __getitem__(self, key) -> "Tensor":
        """The sub-tensor of a box region; int indices keep the dimension with extent 1."""
        import tvm
        import tvm.sym
        key = key if isinstance(key, tuple) else (key,)
        if len(key) != self.rank:
            raise IndexError(f"{self.name}: {len(key)} indices for a rank-{self.rank} tensor")
        lows, exts = [], []
        for d, (k, n) in enumerate(zip(key, self.shape)):
            if isinstance(k, slice):
                if k.step not in (None, 1):
                    raise IndexError(f"{self.name}: dimension {d} slice step {k.step} (only 1)")
                lo = 0 if k.start is None else k.start
                hi = n if k.stop is None else k.stop
                ext = tvm.sym.Analyzer().simplify(hi - lo) if not (_is_int(hi) and _is_int(lo)) else int(hi) - int(lo)
            else:
                lo, ext = k, 1
            if not _is_int(ext):
                raise IndexError(f"{self.name}: dimension {d} slice extent {ext} is not a constant")
            lows.append(lo)
            exts.append(int(ext))
        return self.region(lows, exts)

    def region(self, lows, exts) -> "Tensor":
        """The sub-tensor ``∏[lows[d], lows[d]+exts[d])``; lows may be symbolic (TIR exprs)."""
        import tvm
        import tvm.sym
        ana = tvm.sym.Analyzer()
        static_lo, sym_terms = [], []
        blocks = None
        for d, (lo, e) in enumerate(zip(lows, exts)):
            if _is_int(lo):
                static_lo.append(int(lo))
            else:
                blocks = blocks or group(_inner(self.layout), self.shape).blocks
                # a start that is a whole number of blocks of the extent; or any start on an affine
                # dimension (one iter: element i at i·stride), which slices to one layout everywhere
                whole = ana.can_prove(tvm.tirx.floormod(lo, e) == 0)
                if not whole and len(blocks[d]) != 1:
                    raise LayoutError(f"slice of {self.describe()}: dimension {d} start {lo} is symbolic "
                                      f"and not provably a multiple of its extent {e}")
                static_lo.append(0)
                sym_terms.append((d, lo, whole))
        region = [(lo, lo + e) for lo, e in zip(static_lo, exts)]
        L = slice_layout(self.layout, self.shape, region)
        if L is None:
            raise LayoutError(f"slice of {self.describe()} to region {region}: no Axe layout has that map")
        base, gpu = self.base, self.gpu
        if sym_terms:
            for d, lo, whole in sym_terms:
                moves = _block_value_expr(blocks[d], lo, self.name, affine=not whole)
                if "m" in moves:
                    base = base + moves["m"]
                if "gpuid" in moves:     # a symbolic device index: the view lives on that GPU
                    gpu = moves["gpuid"] if gpu is None else gpu + moves["gpuid"]
                # the start is some multiple k·T: every such block must slice to the same iters,
                # checked for each k (exact, not a probe), so one layout serves all of them
                first = slice_block(blocks[d], 0, exts[d])
                for k in range(1, self.shape[d] // exts[d]):
                    if slice_block(blocks[d], k * exts[d], exts[d]) != first:
                        raise LayoutError(f"slice of {self.describe()}: dimension {d} blocks of {exts[d]} "
                                          f"do not all have one layout (block {k} differs); use a constant start")
        base = ana.simplify(base) if not _is_int(base) else base
        starts = tuple(s + l for s, l in zip(self.starts, lows))
        return replace(self, layout=L, shape=tuple(exts), base=base, starts=starts, root=self.origin, gpu=gpu)

    def with_layout(self, layout, shape=None, base=None) -> "Tensor":
        """The same storage seen through another layout (e.g. a per-thread view)."""
        shape = tuple(shape) if shape is not None else (_inner(layout).size,)
        return replace(self, layout=layout, shape=shape, base=self.base if base is None else base,
                       starts=tuple(0 for _ in shape), root=self.origin)

    def flat(self):
        """A 1-D view of the storage, for element addressing."""
        if len(self.buffer.shape) == 1:
            return self.buffer
        return self.buffer.view(-1)


def _block_value_expr(block, lo, name, affine=False):
    """``f_blk(lo)`` on the memory and device axes for a symbolic start: ``{axis: expr}``,
    digits by floordiv/floormod, innermost last.  ``affine`` (a one-iter block, a start that need
    not be a whole number of slice extents): ``lo·stride``, also past the block's extent (a static
    stand-in for a longer tensor, whose rows TMA reads by coordinate within the tensor map's bounds)."""
    import tvm
    import tvm.sym
    if affine:
        e, s, a = block[0]
        if a not in ("m", "gpuid"):
            raise LayoutError(f"slice of {name}: a symbolic start moves along thread axis {a}")
        return {a: lo * s}
    acc, w = {}, 1
    for e, s, a in reversed(block):
        if a not in ("m", "gpuid"):
            raise LayoutError(f"slice of {name}: a symbolic start moves along thread axis {a}")
        digit = tvm.tirx.floormod(tvm.tirx.floordiv(lo, w), e) if w > 1 else tvm.tirx.floormod(lo, e)
        acc[a] = acc.get(a, 0) + digit * s
        w *= e
    return acc


def replace_inner(L, inner):
    """``L`` with its unswizzled layout replaced by ``inner`` (the swizzle kept)."""
    return L.with_inner(inner) if isinstance(L, SwizzledLayout) else inner


def register_tensor(t: Tensor) -> Tensor:
    """Remember ``t`` as the meaning of its buffer in the current build (kernel parameters passed
    raw to operators); a later registration of the same buffer replaces it."""
    current_build(f"registering tensor {t.name or t.buffer.name}").tensors[t.buffer.__chandle__()] = t
    return t


def lookup_tensor(buf) -> Tensor | None:
    """The tensor the current build registered for ``buf`` (the same TIR object), else None."""
    build = innermost_build()
    return build.tensors.get(buf.__chandle__()) if build is not None else None


def _default_tensor(buf) -> Tensor:
    shape = tuple(int(s) for s in buf.shape)
    scope = buf.scope()
    mem = "shared" if scope.startswith("shared") else ("local" if scope == "local" else "global")
    return Tensor(buf, S[shape], shape, str(buf.dtype), mem, name=buf.name)


def as_operand(x, what: str) -> Tensor:
    """Read an operator argument: an axe Tensor, a TIR Buffer or a TIR buffer region."""
    import tvm
    import tvm.sym
    if isinstance(x, Tensor):
        return x
    if isinstance(x, tvm.tirx.Buffer):
        return lookup_tensor(x) or _default_tensor(x)
    if isinstance(x, tvm.ir.TensorRegion):
        t = lookup_tensor(x.source) or _default_tensor(x.source)
        return t.region([r.min for r in x.region], [int(r.extent) for r in x.region])
    raise TypeError(f"{what}: expected an axe Tensor, a TIR Buffer or a buffer region, got {type(x).__name__}")
