"""Layout inference: tiles declared without a layout get one from the operators that touch them.

A kernel with such tiles is parsed twice.  The first parse *records*: each open tile stands in
with a provisional layout, and operator calls are recorded instead of dispatched.  :func:`solve`
then fixes every open tile from the recorded calls, and the second parse builds the kernel with
the inferred layouts (tiles are matched by their order of declaration).

The rules, strongest first (each fix names the operator and rule that made it):

1. *follow*: a copy or elementwise whose register dst is open takes the layout of a register
   source of dst's shape that is fixed; an open register source of dst's shape takes dst's.
2. *replicate*: an open register source that broadcasts to a fixed register dst takes
   :func:`~axe.layout.infer.replicated_for` (dst's threads each hold what they read: per_thread
   reads it in place).
3. *instruction* (only when 1–2 fix nothing more): a call whose schedules proposed layouts for
   its open tiles (:func:`add_proposal`: a backend's wgmma fragments, ldmatrix/stmatrix atoms,
   the TMA-swizzled shared tiles they read) takes the first combination under which the call
   *dispatches* to one of those schedules, and under which every copy between a proposed shared
   tile and global memory still dispatches (one with ``barrier=`` to TMA or a bulk copy).
   Proposals are tried by priority (wgmma before ldmatrix: a fragment has one schedule), calls in
   program order.  An ``every_call`` proposal (Trainium's SBUF/PSUM tiles) is also refused where
   another call touching a proposed tile, its tiles then all known, would not dispatch.  A call whose tiles an earlier proposal fixed, and which does not dispatch to
   its own proposal's schedules under them but would under its own proposal, is a conflict.
4. *vector* (only when 1–3 fix nothing more): an open register tile copied to or from memory
   takes :func:`~axe.layout.infer.vector_layout` over the scope's threads (16-byte runs).
5. *swizzle*: an open shared tile takes the layout :func:`~axe.layout.swizzle_search.search_swizzle`
   ranks first for its writes and reads (the first warp's accesses of each copy, from the other
   operand's layout, or from the 16-byte vector rule for global memory).

A tile that two rules would fix differently is an error naming both operators and both layouts;
a tile no operator fixes is an error naming it.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from itertools import permutations, product
from typing import Callable

from axe.layout import Layout, LayoutError, S, SwizzledLayout, group
from axe.layout.iters import Iter
from axe.layout.broadcast import aligned_shape
from axe.layout.infer import replicated_for, vector_layout
from axe.ops.tensor import register_tensor

from .context import current_context

__all__ = ["InferenceError", "InferState", "OpenTile", "Fix", "Proposal", "add_proposal", "solve", "INFER",
           "NeedsInference", "open_tile", "open_view", "register_open"]


#: ``layout=INFER`` (or ``"infer"``): the tile's layout is inferred from the operators that touch
#: it; a register tile with ``layout=None`` is inferred too (:mod:`axe.lang.tensors`)
INFER = "infer"


class NeedsInference(Exception):
    """Raised by the first tile declared without a layout in a build that has not inferred yet;
    :func:`axe.lang.build_func` catches it and parses the kernel twice (record, then build)."""


def open_tile(shape, dtype, mem, name):
    """``(layout, record)`` for a tile whose layout is inferred, declared in any target's language:
    in the recording parse a provisional row-major layout and the :class:`OpenTile` to file under its
    buffer (:func:`register_open`); in the final parse the inferred layout and None."""
    ctx = current_context(f"{name}: a tile with an inferred layout")
    st = ctx.infer
    if st is None:
        raise NeedsInference(name)
    index = st.next_index()
    if st.recording:
        return S[tuple(shape)], OpenTile(index, name, tuple(shape), dtype, mem)
    if index not in st.fixed:
        raise NeedsInference(name)
    return st.fixed[index].layout, None


def open_view(pool, shape, name):
    """``(layout, buffer)`` of ``Ax.view(pool, INFER, shape, name=name)``: an *open view*, a tile
    carved out of the memory tile ``pool`` whose layout is inferred.

    Law of identity: every open view of one ``pool`` with one ``name`` (its role, e.g. the A
    operand of every pipeline stage, at bases ``a_at + s · stage``) is one unknown, whose layout
    each operator touching any of them constrains (the producer's TMA write into stage s and the
    consumers' wgmma read of stage s constrain the same layout); the views differ only in their
    bases.  In the recording parse the role stands in with a buffer of its own that aliases the
    pool's storage (so the recorded calls name the role) and the provisional row-major layout; in
    the final parse the view is the pool's buffer through the inferred layout, as a view declared
    with that layout would be.  One role has one shape (a ValueError names both otherwise)."""
    ctx = current_context(f"{name}: a view with an inferred layout")
    st = ctx.infer
    if st is None:
        raise NeedsInference(name)
    key, shape = (pool.name, name), tuple(shape)
    if key not in st.views:
        v = OpenTile(st.next_index(), name, shape, pool.dtype, pool.mem)
        buf = None
        if st.recording:
            import tvm
            b = pool.buffer
            buf = tvm.tirx.decl_buffer(b.shape, b.dtype, name=f"{b.name}_{name}", data=b.data, scope=b.scope())
            st.tiles[buf.__chandle__()] = v
        st.views[key] = (v, buf)
    v, buf = st.views[key]
    if v.shape != shape:
        raise ValueError(f"Ax.view({pool.name}, INFER, name={name!r}): shape {list(shape)}, but the role was "
                         f"declared {list(v.shape)}; one role (one unknown layout) has one shape")
    if st.recording:
        return S[shape], buf
    if v.index not in st.fixed:
        raise NeedsInference(name)
    return st.fixed[v.index].layout, pool.buffer


def register_open(t, record):
    """Register tensor ``t``; in the recording parse (``record`` not None) file its open tile's
    record under its buffer first, so the recorded calls name it."""
    if record is not None:
        current_context().infer.tiles[t.buffer.__chandle__()] = record
    return register_tensor(t)


class InferenceError(ValueError):
    """The operators of a kernel fix a tile's layout in two ways, or in none."""


@dataclass
class OpenTile:
    """A tile declared without a layout: its declaration ``index``, name, shape, dtype, memory."""

    index: int
    name: str
    shape: tuple
    dtype: str
    mem: str


@dataclass(frozen=True)
class Fix:
    """``layout`` of a tile and why: the ``rule``, the operator ``call`` (op and where) and the
    ``source`` it came from."""

    layout: object
    rule: str
    op: str
    where: str
    source: str
    instruction: bool = False      # fixed by a schedule's proposal (rule 3)

    def describe(self) -> str:
        return f"{self.layout}   ({self.rule}: {self.op} at {self.where}{', ' + self.source if self.source else ''})"


@dataclass(frozen=True)
class Proposal:
    """Layouts that ``schedules`` (of ``op`` on target ``family``) would serve: ``propose(call,
    key, shape, elem_bytes, mem)`` lists candidate layouts, best first, for the whole open tile
    (of ``shape``, in its own coordinates) that operand ``key`` stands for; ``label(plan, key)``
    names the instruction a chosen plan gives that operand (for ``explain``).  ``every_call``: a
    proposal is accepted only where every other recorded call touching a proposed tile, whose
    tiles are then all known, still dispatches (Trainium tiles, whose partition dim every engine
    reads)."""

    op: str
    family: str
    schedules: tuple
    propose: Callable
    label: Callable
    priority: int = 0
    every_call: bool = False


_PROPOSALS: list = []


def add_proposal(op: str, family: str, schedules, propose: Callable, label: Callable, priority: int = 0,
                 every_call: bool = False) -> Proposal:
    """Register what ``schedules`` propose to inference (a backend does, beside its schedules)."""
    p = Proposal(op, family, tuple(schedules), propose, label, priority, every_call)
    _PROPOSALS[:] = [q for q in _PROPOSALS if (q.op, q.family, q.schedules) != (op, family, p.schedules)] + [p]
    return p


def _proposals(family: str) -> list:
    from axe.schedules.registry import _load_backends
    _load_backends(family)          # a backend registers its proposals beside its schedules
    return sorted((p for p in _PROPOSALS if p.family == family), key=lambda p: -p.priority)


@dataclass
class InferState:
    """One kernel build's inference: ``recording`` (first parse) collects ``tiles`` (by buffer
    handle) and ``calls``; the second parse reads ``fixed`` (by declaration index).  ``views``:
    the open views' roles, ``(pool name, role) → (OpenTile, stand-in buffer)``, each declared (and
    given its index) where it first appears, in both parses alike."""

    recording: bool = False
    tiles: dict = field(default_factory=dict)
    calls: list = field(default_factory=list)
    fixed: dict = field(default_factory=dict)
    declared: int = 0
    views: dict = field(default_factory=dict)

    def next_index(self) -> int:
        self.declared += 1
        return self.declared - 1


def _elem_bytes(dtype: str) -> int:
    import tvm
    return tvm.DataType(dtype).bits // 8


class _Solver:
    def __init__(self, state: InferState, ctx=None):
        self.state = state
        self.ctx = ctx
        self.fixed: dict[int, Fix] = {}
        self.blocked: dict[int, str] = {}     # why a proposal for a tile was refused (every_call)

    def tile(self, t):
        """The open tile a whole-tile operand stands for, else None (not for a box of one, see
        :meth:`box`, nor a permuted view, see :meth:`view`)."""
        v, dims = self.view(t)
        return v if v is not None and dims == tuple(range(len(v.shape))) else None

    def view(self, t):
        """``(open tile, dims)`` when operand ``t`` is the whole open tile seen through
        ``permute(tile, dims)`` (the tile itself: dims in order), else ``(None, None)``.  In the
        recording parse an open tile is row-major, so a permuted view is recognised by its layout;
        an operand of the tile's shape that is no such view is the tile."""
        v = self.state.tiles.get(t.buffer.__chandle__()) if t.buffer is not None else None
        if v is None or t.root is not None or len(t.shape) != len(v.shape):
            return None, None
        ident = tuple(range(len(v.shape)))
        if tuple(t.shape) == v.shape and t.layout == S[v.shape]:
            return v, ident
        for dims in permutations(ident):
            if dims != ident and tuple(v.shape[d] for d in dims) == tuple(t.shape) \
                    and _permuted(S[v.shape], v.shape, dims) == t.layout:
                return v, dims
        return (v, ident) if tuple(t.shape) == v.shape else (None, None)

    def box(self, t):
        """``(open tile, lows)`` when operand ``t`` is a box of a whole open tile (``tile[a:b, c:d]``,
        e.g. one consumer's rows of a stage's A tile), ``lows`` its corner in the tile's
        coordinates; else ``(None, None)``.  A box constrains its tile: a proposal is for the whole
        tile, and the call is tried with the box of each proposed layout (:meth:`with_layouts`)."""
        if t.root is None or t.buffer is None:
            return None, None
        v = self.tile(t.root)
        return (v, tuple(a - b for a, b in zip(t.starts, t.root.starts))) if v is not None else (None, None)

    def layout(self, t):
        """Operand t's layout when known: its own, or its open tile's once fixed; else None."""
        v = self.state.tiles.get(t.buffer.__chandle__()) if t.buffer is not None else None
        if v is None:
            return t.layout
        f = self.fixed.get(v.index) if self.tile(t) is v else None
        return f.layout if f else None

    def fix(self, v: OpenTile, layout, rule, call, source, instruction=False) -> bool:
        new = Fix(layout, rule, call.op, call.where, source, instruction)
        old = self.fixed.get(v.index)
        if old is None:
            self.fixed[v.index] = new
            return True
        if old.layout != layout:
            raise InferenceError(f"tile {v.name}{list(v.shape)}: {old.op} at {old.where} fixes {old.layout} "
                                 f"({old.rule}{', ' + old.source if old.source else ''}) but {call.op} at "
                                 f"{call.where} fixes {layout} ({rule}{', ' + source if source else ''})")
        return False

    def strong(self) -> bool:
        """Rules 1 and 2 over every recorded copy and elementwise; whether any tile was fixed."""
        changed = False
        for call in self.state.calls:
            if call.op not in ("copy", "elementwise"):
                continue
            (dname, dst), *srcs = call.operands.items()
            n, dv = tuple(dst.shape), self.tile(dst)
            full = [(k, t) for k, t in srcs if t.mem == "local" and _same(t.shape, n)]
            if dv is not None and dv.mem == "local":
                known = [(k, t) for k, t in full if self.layout(t) is not None]
                if known:
                    k, t = known[0]
                    changed |= self.fix(dv, self.layout(t), "follows its source", call, f"{k} {t.name}")
            dl = self.layout(dst)
            if dl is None or dst.mem != "local":
                continue
            for k, t in srcs:
                sv = self.tile(t)
                if sv is None or sv.mem != "local":
                    continue
                if _same(t.shape, n):
                    changed |= self.fix(sv, dl, "follows its destination", call, f"{dname} {dst.name}")
                    continue
                try:
                    rep = replicated_for(dl, n, t.shape)
                except LayoutError:
                    continue
                changed |= self.fix(sv, rep, "replicated onto the threads that read it", call, f"{dname} {dst.name}")
        return changed

    def with_layouts(self, call, assign: dict):
        """``call`` with each operand that is a whole open tile (or its permuted view) seen
        through its layout in ``assign`` (by declaration index) or its inferred one, and each box
        of such a tile as the same box of the tile seen so (its base moved by that layout, as the
        final parse will slice it); None when such a box has no Axe layout, or when an assigned
        tile is also an operand in another form (its layout there is not checked here)."""
        ops = {}
        for k, t in call.operands.items():
            v, dims = self.view(t)
            if v is None:
                b, lows = self.box(t)
                L = self.known(b, assign) if b is not None else None
                if L is not None:
                    try:
                        ops[k] = replace(t.root, layout=L).region(lows, t.shape)
                    except LayoutError:
                        return None
                    continue
                tv = self.state.tiles.get(t.buffer.__chandle__()) if t.buffer is not None else None
                if tv is not None and tv.index in assign:
                    return None
                ops[k] = t
                continue
            L = self.known(v, assign)
            ops[k] = t if L is None else replace(t, layout=_view_layout(L, v.shape, dims))
        return replace(call, operands=ops)

    def known(self, v, assign):
        """Open tile v's layout in ``assign``, else its inferred one, else None."""
        return assign.get(v.index) or (self.fixed[v.index].layout if v.index in self.fixed else None)

    def open_operands(self, call, every: bool = False):
        """``(key, tile)`` for each operand that is a whole open tile or a box of one, not fixed yet (``every``:
        fixed or not, but only those fixed by a proposal count), first appearance only."""
        out, seen = [], set()
        for k, t in call.operands.items():
            v = self.view(t)[0] or self.box(t)[0]
            if v is None or v.index in seen:
                continue
            f = self.fixed.get(v.index)
            if f is None or (every and f.instruction):
                out.append((k, v))
                seen.add(v.index)
        return out

    def accepts(self, p, call, assign):
        """The plan when ``call`` under ``assign`` dispatches to one of ``p``'s schedules and every
        copy between an assigned shared tile and global memory still dispatches (one with
        ``barrier=`` to a copy that arrives on it: :func:`~axe.schedules.dispatch.choose` declines
        the others); else None."""
        from axe.schedules.dispatch import choose
        c = self.with_layouts(call, assign)
        if c is None:
            return None
        _, sched, plan = choose(c, self.ctx)
        if sched is None or sched.name not in p.schedules:
            return None
        for other in self.state.calls:
            if other is call or other.op != "copy":
                continue
            dst, src = other.operands["dst"], other.operands["src"]
            if not any(t.mem == "shared" and u.mem == "global" and getattr(self.view(t)[0], "index", None) in assign
                       for t, u in ((dst, src), (src, dst))):
                continue
            o = self.with_layouts(other, assign)
            if o is None or choose(o, self.ctx)[1] is None:
                return None
        if p.every_call and not self.others_dispatch(call, assign):
            return None
        return plan

    def others_dispatch(self, call, assign) -> bool:
        """Whether every recorded call but ``call`` that has a whole tile of ``assign`` as an
        operand, and no operand whose layout is still open, dispatches under ``assign``.  When
        one does not, :attr:`blocked` keeps why for each assigned tile (the error if none is fixed)."""
        from axe.schedules.dispatch import choose
        for other in self.state.calls:
            if other is call:
                continue
            views = [self.view(t)[0] for t in other.operands.values()]
            if not any(v is not None and v.index in assign for v in views):
                continue
            if any(self.state.tiles.get(t.buffer.__chandle__()) is not None and (v is None or (
                    v.index not in assign and v.index not in self.fixed))
                    for t, v in zip(other.operands.values(), views) if t.buffer is not None):
                continue
            o = self.with_layouts(other, assign)
            if o is not None and choose(o, self.ctx)[1] is None:
                fixes = "; ".join(f"{t.name} {f.layout} fixed by {f.op} at {f.where}" for t, v in
                                  zip(other.operands.values(), views) if v is not None and v.index not in assign
                                  for f in [self.fixed[v.index]])
                for i, L in assign.items():
                    self.blocked.setdefault(i, f"{call.op} at {call.where} dispatches with it {L}, but then "
                                               f"{other.op} at {other.where} does not" + (f" ({fixes})" if fixes else ""))
                return False
        return True

    def instructions(self) -> bool:
        """Rule 3: fix the open tiles of the first call (by proposal priority, then program order)
        that a proposal serves; raise on a conflict with an earlier proposal."""
        if self.ctx is None:
            return False
        for p in _proposals(self.ctx.family):
            for call in self.state.calls:
                if call.op != p.op:
                    continue
                opens = self.open_operands(call)
                if not opens:
                    self.conflict(p, call)
                    continue
                for assign, plan in self.combinations(p, call, opens):
                    for k, v in opens:
                        self.fix(v, assign[v.index], p.label(plan, k), call, _source(call, k), instruction=True)
                    return True
        return False

    def combinations(self, p, call, opens):
        """Each assignment of proposed layouts to ``opens`` (best first) the call accepts, with its plan."""
        choices = [p.propose(call, k, v.shape, _elem_bytes(v.dtype), v.mem) for k, v in opens]
        if not all(choices):
            return
        for combo in product(*choices):
            assign = {v.index: L for (_, v), L in zip(opens, combo)}
            plan = self.accepts(p, call, assign)
            if plan is not None:
                yield assign, plan

    def conflict(self, p, call):
        """A call whose tiles are all fixed, some by another call's proposal: when it does not
        dispatch to ``p``'s schedules as fixed but would under its own proposal, the two proposals
        conflict (:meth:`fix` raises, naming both operators and both layouts)."""
        mine = self.open_operands(call, every=True)
        if not mine or self.accepts(p, call, {}) is not None:
            return
        saved = {v.index: self.fixed.pop(v.index) for _, v in mine}
        try:
            found = next(self.combinations(p, call, mine), None)
        finally:
            self.fixed.update(saved)
        if found is None:
            return
        assign, plan = found
        for k, v in mine:
            self.fix(v, assign[v.index], p.label(plan, k), call, _source(call, k), instruction=True)

    def vector(self) -> bool:
        """Fix the first open register tile a copy moves to or from memory (program order)."""
        for call in self.state.calls:
            if call.op != "copy":
                continue
            for t, other in ((call.operands["dst"], call.operands["src"]), (call.operands["src"], call.operands["dst"])):
                v = self.tile(t)
                if v is None or v.mem != "local" or v.index in self.fixed or other.mem not in ("global", "shared"):
                    continue
                L = vector_layout(v.shape, _elem_bytes(v.dtype), call.scope.threads)
                return self.fix(v, L, "16-byte vectors over the scope's threads", call,
                                f"{call.scope.threads} threads")
        return False

    def swizzle(self):
        from axe.layout.swizzle_search import search_swizzle, tma_expressible
        for v in self.state.tiles.values():
            if v.mem != "shared" or v.index in self.fixed:
                continue
            eb = _elem_bytes(v.dtype)
            write, read, first, tma = [], [], None, None
            for call in self.state.calls:
                if call.op != "copy":
                    continue
                dst, src = call.operands["dst"], call.operands["src"]
                if tma is None and src.mem == "global" and self.view(dst)[0] is v \
                        and call.config.get("barrier") is not None:
                    tma = call
                for t, other, into in ((dst, src, write), (src, dst, read)):
                    tv, dims = self.view(t)
                    if tv is not v:
                        continue
                    L = self.layout(other)
                    if L is not None and dims != tuple(range(len(dims))):
                        # other's layout is over the view's shape: put it over the tile's
                        inv = tuple(sorted(range(len(dims)), key=lambda i: dims[i]))
                        L = _permuted(_plain(L), t.shape, inv)
                    into.extend(_first_warp_accesses(L, other, v, eb, call))
                    first = first or call
            if first is None:
                continue
            ranked = search_swizzle(v.shape, eb, write, read)
            if not ranked:
                raise InferenceError(f"tile {v.name}{list(v.shape)}: no candidate layout serves its copies")
            why = "fewest bank conflicts for its copies"
            if tma is not None:
                # A load with barrier= completes on the mbarrier, and only TMA (or a bulk copy)
                # arrives on it: a layout TMA cannot write sends the load to cp.async, which
                # ignores barrier=, and the kernel's wait on the barrier never returns (the
                # inferred transpose hung so on an H100, 2026-11-27).
                ranked = [c for c in ranked if tma_expressible(c.layout, v.shape, eb)]
                if not ranked:
                    raise InferenceError(
                        f"tile {v.name}{list(v.shape)}: loaded with barrier= at {tma.where} (a TMA load, "
                        "which completes on the mbarrier), but no candidate layout is one TMA can write "
                        "(plain rows, or its 32/64/128-byte swizzle); declare the layout")
                why = "fewest bank conflicts among the layouts TMA can write (it is loaded with barrier=)"
            best = ranked[0]
            self.fix(v, best.layout, why, first,
                     f"write {best.write.conflicts} / read {best.read.conflicts} conflicts")


def _source(call, key) -> str:
    """What a proposal served, for ``explain``: the operand and the other operands' names."""
    others = ", ".join(f"{k} {t.name}" for k, t in call.operands.items() if k != key)
    return f"as {key}, with {others}" if others else f"as {key}"


def _view_layout(L, shape, dims):
    """A tile's layout ``L`` (over ``shape``) as its view ``permute(tile, dims)`` sees it, swizzle kept."""
    if dims == tuple(range(len(dims))):
        return L
    if isinstance(L, SwizzledLayout):
        return L.with_inner(_permuted(L.inner, shape, dims))
    return _permuted(L, shape, dims)


def _plain(L):
    return L.inner if isinstance(L, SwizzledLayout) else L


def _permuted(L, shape, dims):
    """``L`` (over ``shape``) with its dims reordered as ``permute(t, dims)`` reorders a tensor's:
    dim j of the result is dim ``dims[j]`` of ``L``.  Law: element u of the result is held where
    ``L`` holds the element w with ``w[dims[j]] = u[j]``."""
    g = group(L, tuple(shape))
    shard = tuple(i for d in dims for i in (g.blocks[d] or (Iter(1, 1, "m"),)))
    return Layout(shard, L.replica, L.offset)


def _same(shape, n) -> bool:
    """Whether ``shape`` is ``n`` (up to extent-1 dims: a copy's row of a 2-D tile is a 1-D tile)."""
    return tuple(e for e in shape if e != 1) == tuple(e for e in n if e != 1)


def _first_warp_accesses(L, t, v, eb, call):
    """The first warp's accesses of the shared tile ``v`` in a copy whose other operand ``t`` has
    layout ``L`` (a register tile's thread map; memory operands move in 16-byte vectors)."""
    from axe.layout.swizzle_search import warp_accesses
    if isinstance(L, SwizzledLayout):
        L = L.inner
    if L is None or t.mem != "local" or not any(a in ("tx", "lane") for a in L.axes()):
        L = vector_layout(v.shape, eb, call.scope.threads)
    v_max = max(1, 16 // eb)
    while v_max >= 1:
        try:
            return warp_accesses(L, v.shape, v_max, first_warp=True)
        except LayoutError:
            v_max //= 2
    return []


def solve(state: InferState, ctx=None) -> dict:
    """``{declaration index: Fix}`` for every open tile of a recorded build (see the module);
    ``ctx``, the recording parse's build context, lets rule 3 ask dispatch (without it, rule 3
    proposes nothing)."""
    s = _Solver(state, ctx)
    while True:
        while s.strong():
            pass
        if s.instructions():
            continue
        if not s.vector():
            break
    s.swizzle()
    for v in state.tiles.values():
        if v.index in s.fixed:
            continue
        if v.index in s.blocked:
            raise InferenceError(f"tile {v.name}{list(v.shape)} ({v.mem}): no operator fixes its layout: "
                                 f"{s.blocked[v.index]}")
        raise InferenceError(f"tile {v.name}{list(v.shape)} ({v.mem}): no operator fixes its layout "
                             "(declare one, or copy it to or from memory or another register tile)")
    return s.fixed
