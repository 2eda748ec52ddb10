"""DTensor placements on a device mesh, as Axe layouts over ``gpuid`` and ``m``.

A PyTorch DTensor of global shape G lives on a device mesh (named dimensions of sizes M_k,
each device of the mesh has an id) with one placement per mesh dimension:

* ``Shard(d)``: tensor dimension d is cut into M_k equal contiguous chunks, chunk c on the
  devices whose mesh coordinate k is c;
* ``Replicate()``: every device along mesh dimension k holds the same values;
* ``Partial(op)``: every device along mesh dimension k holds a full-size tensor, and the
  logical value is their reduction by ``op``.

The Axe layout of a DTensor maps each global element to the set of ``(gpuid, m)`` coordinates
holding it: ``gpuid`` is the device id, ``m`` the offset in that device's local tensor.  The
mesh gives every mesh dimension a gpuid stride (:class:`DeviceMesh`: row-major ids by
default, any affine id grid allowed).  Laws of :func:`to_layout`:

* tensor dimension d becomes the iters ``(M_k1 : σ_k1@gpuid), …, (M_kj : σ_kj@gpuid),
  (n_d : μ_d)`` where k1 < … < kj are the mesh dimensions sharding d (torch's order: the
  lower mesh dimension outer), ``n_d = G_d / ∏M_k`` the local extent and μ_d the local
  memory stride (row-major in the local shard by default);
* each Replicate or Partial mesh dimension k adds the replica ``R[M_k : σ_k@gpuid]``;
* the offset is the id of the mesh's first device (``first@gpuid``).

So for element u, ``f(u) = { (device holding u's chunk, offset of u in that device's local
tensor) }``.  **Partial has no Axe counterpart**: a partial value is not held by any device, so
its layout is the Replicate layout, and :class:`DistributedLayout` carries the partial mesh
dimensions beside it (``partial``); every conversion reads and writes that annotation.

Axe needs equal shards: a dimension not divisible by the devices sharding it (DTensor pads
the last chunks, as ``torch.chunk`` does) is an error, as is ``_StridedShard``.  The paper's
Figure 2 numbers use a column-major id grid ``[[0, 2], [1, 3]]`` and the *global* row pitch
as the memory stride (``memory=(128, 1)``); a DTensor's local shard is its own row-major
tensor (``memory="local"``, the default), e.g. S0S1 on 64×128 is
``S[(2,32,2,64):(1@gpuid,64,2@gpuid,1)]`` on that grid.

torch is imported lazily, only by the functions that take torch objects.
"""

from __future__ import annotations

from dataclasses import dataclass
from itertools import product as _cartesian
from math import prod
from typing import Mapping, NamedTuple, Sequence, Union

from ..canonical import equivalent, merge_chain
from ..coord import MEMORY, Coord, canonical_axis
from ..group import LayoutError, group_blocks
from ..iters import Iter
from ..layout import Layout
from ..syntax import parse

__all__ = [
    "DeviceMesh", "Shard", "Replicate", "Partial", "Placement", "DistributedLayout",
    "LayoutMismatch", "as_placement", "to_layout", "to_placements", "mesh_of", "layout_of",
    "check_layout", "format_placements",
]


# --- placements -----------------------------------------------------------------------------
@dataclass(frozen=True)
class Shard:
    """Tensor dimension ``dim`` split into equal contiguous chunks along one mesh dimension."""

    dim: int

    def __repr__(self) -> str:
        return f"Shard({self.dim})"


@dataclass(frozen=True)
class Replicate:
    """Every device along the mesh dimension holds the same values."""

    def __repr__(self) -> str:
        return "Replicate()"


@dataclass(frozen=True)
class Partial:
    """Devices along the mesh dimension hold full-size partial values, reduced by ``reduce_op``."""

    reduce_op: str = "sum"

    def __repr__(self) -> str:
        return f"Partial({self.reduce_op!r})"


Placement = Union[Shard, Replicate, Partial]


def as_placement(p) -> Placement:
    """An axe placement from an axe or torch placement (``Shard``, ``Replicate``, ``Partial``).

    torch's ``_StridedShard`` (a shard of a shard, from uneven nesting) has no equal-chunk
    form and is refused.
    """
    if isinstance(p, (Shard, Replicate, Partial)):
        return p
    kind = type(p).__name__
    if kind == "_StridedShard":
        raise LayoutError(f"placement {p!r}: _StridedShard (a strided shard of a shard) has no "
                          "Axe form here; use Shard placements")
    if kind == "Shard":
        return Shard(int(p.dim))
    if kind == "Replicate":
        return Replicate()
    if kind in ("Partial", "_Partial"):
        return Partial(str(getattr(p, "reduce_op", "sum")))
    raise LayoutError(f"placement {p!r} ({kind}) is not Shard, Replicate or Partial")


def format_placements(placements: Sequence) -> str:
    """``(Shard(0), Replicate())`` style text."""
    return "(" + ", ".join(repr(as_placement(p)) for p in placements) + ")"


# --- the mesh -------------------------------------------------------------------------------
class DeviceMesh:
    """A device mesh: named dimensions of sizes ``shape`` and an affine grid of device ids.

    Law: the device at mesh coordinate c is ``first + Σ_k c_k·strides[k]`` (on the layout axis
    ``axis``, ``gpuid`` by default).  Without ``strides`` the ids are laid row-major (the last
    mesh dimension fastest), as ``torch.arange(n).reshape(shape)`` in a torch DeviceMesh.
    Ids must be distinct.
    """

    __slots__ = ("shape", "names", "strides", "first", "axis")

    def __init__(self, shape: Sequence[int], names: Sequence[str] | None = None,
                 strides: Sequence[int] | None = None, first: int = 0, axis: str = "gpuid"):
        shape = tuple(int(s) for s in shape)
        if not shape or any(s < 1 for s in shape):
            raise ValueError(f"DeviceMesh: shape {shape} needs at least one dimension, sizes >= 1")
        names = tuple(names) if names is not None else tuple(f"d{k}" for k in range(len(shape)))
        if len(names) != len(shape) or len(set(names)) != len(names):
            raise ValueError(f"DeviceMesh: names {names} must be {len(shape)} distinct names for shape {shape}")
        if strides is None:
            strides, acc = [], 1
            for s in reversed(shape):
                strides.insert(0, acc)
                acc *= s
        strides = tuple(int(s) for s in strides)
        if len(strides) != len(shape):
            raise ValueError(f"DeviceMesh: strides {strides} and shape {shape} differ in rank")
        # a size-1 dimension's stride never enters an id: fix it so equal grids compare equal
        strides = tuple(prod(shape[k + 1:]) if n == 1 else s for k, (n, s) in enumerate(zip(shape, strides)))
        self.shape, self.names, self.strides, self.first = shape, names, strides, int(first)
        self.axis = canonical_axis(axis)
        ids = [self.device(c) for c in _cartesian(*(range(s) for s in shape))]
        if len(set(ids)) != len(ids):
            raise ValueError(f"DeviceMesh: strides {strides} over shape {shape} give repeated device ids")

    @classmethod
    def from_ids(cls, ids, names: Sequence[str] | None = None, axis: str = "gpuid") -> "DeviceMesh":
        """The mesh whose id grid is ``ids`` (nested lists or an array); the grid must be affine.

        Law: ``from_ids(m.ids(), m.names) == m``.
        """
        grid = _nested(ids)
        shape = _grid_shape(grid)
        at = lambda c: _grid_get(grid, c)  # noqa: E731
        zero = (0,) * len(shape)
        first = at(zero)
        strides = []
        for k, n in enumerate(shape):
            unit = tuple(1 if j == k else 0 for j in range(len(shape)))
            strides.append(at(unit) - first if n > 1 else 1)
        mesh = cls(shape, names, strides, first, axis)
        for c in _cartesian(*(range(s) for s in shape)):
            if at(c) != mesh.device(c):
                raise LayoutError(f"device mesh ids {grid} are not affine in the mesh coordinates "
                                  f"(at {c}: id {at(c)}, the affine grid gives {mesh.device(c)}); "
                                  f"no layout over {axis} expresses it")
        return mesh

    @property
    def size(self) -> int:
        return prod(self.shape)

    @property
    def ndim(self) -> int:
        return len(self.shape)

    def device(self, coord: Sequence[int]) -> int:
        """The id of the device at mesh coordinate ``coord``."""
        return self.first + sum(c * s for c, s in zip(coord, self.strides))

    def coordinate(self, device: int) -> tuple[int, ...]:
        """The mesh coordinate of device ``device`` (inverse of :meth:`device`)."""
        for c in _cartesian(*(range(s) for s in self.shape)):
            if self.device(c) == device:
                return c
        raise ValueError(f"{self}: no device with id {device}")

    def ids(self) -> list:
        """The id grid as nested lists."""
        def build(prefix):
            k = len(prefix)
            if k == self.ndim:
                return self.device(prefix)
            return [build(prefix + (i,)) for i in range(self.shape[k])]
        return build(())

    def index(self, name_or_dim) -> int:
        """The mesh dimension named ``name_or_dim`` (a name or an index)."""
        if isinstance(name_or_dim, int):
            if not 0 <= name_or_dim < self.ndim:
                raise ValueError(f"{self}: no mesh dimension {name_or_dim}")
            return name_or_dim
        if name_or_dim not in self.names:
            raise ValueError(f"{self}: no mesh dimension named {name_or_dim!r}")
        return self.names.index(name_or_dim)

    def _key(self):
        return (self.shape, self.names, self.strides, self.first, self.axis)

    def __eq__(self, other) -> bool:
        return isinstance(other, DeviceMesh) and self._key() == other._key()

    def __hash__(self) -> int:
        return hash(self._key())

    def __repr__(self) -> str:
        return (f"DeviceMesh(shape={self.shape}, names={self.names}, ids={self.ids()}"
                + (f", axis={self.axis!r}" if self.axis != "gpuid" else "") + ")")


def _nested(ids):
    if hasattr(ids, "tolist"):
        ids = ids.tolist()
    return ids


def _grid_shape(grid) -> tuple[int, ...]:
    shape, g = [], grid
    while isinstance(g, (list, tuple)):
        shape.append(len(g))
        g = g[0]
    return tuple(shape)


def _grid_get(grid, c):
    for i in c:
        grid = grid[i]
    return int(grid)


# --- the distributed layout ------------------------------------------------------------------
class DistributedLayout(NamedTuple):
    """An Axe layout of a distributed tensor, with the annotation Axe cannot express.

    ``layout`` admits the global ``shape``; ``partial`` lists ``(mesh dimension name,
    reduce op)`` for the mesh dimensions whose replicas hold partial values (the layout shows
    them as replicas).  With ``partial`` empty the layout says everything.
    """

    layout: Layout
    shape: tuple[int, ...]
    partial: tuple[tuple[str, str], ...] = ()

    def __str__(self) -> str:
        text = str(self.layout)
        if self.partial:
            text += "  [partial: " + ", ".join(f"{op} over {n}" for n, op in self.partial) + "]"
        return text


class LayoutMismatch(LayoutError):
    """A declared layout that disagrees with a distributed tensor; the message says where."""


def _row_major(shape: Sequence[int]) -> tuple[int, ...]:
    out, acc = [], 1
    for n in reversed(shape):
        out.insert(0, acc)
        acc *= n
    return tuple(out)


def _memory_strides(memory, shape, local) -> tuple[int, ...] | None:
    if memory == "local":
        return _row_major(local)
    if memory == "global":
        return _row_major(shape)
    if memory == "any":
        return None
    strides = tuple(int(s) for s in memory)
    if len(strides) != len(shape):
        raise ValueError(f"memory strides {strides} and shape {tuple(shape)} differ in rank")
    return strides


def _checked_placements(shape, mesh: DeviceMesh, placements) -> tuple[Placement, ...]:
    placements = tuple(as_placement(p) for p in placements)
    if len(placements) != mesh.ndim:
        raise LayoutError(f"placements {format_placements(placements)}: {len(placements)} for a "
                          f"mesh of {mesh.ndim} dimensions {mesh.names}")
    for k, p in enumerate(placements):
        if isinstance(p, Shard) and not 0 <= p.dim < len(shape):
            raise LayoutError(f"placement {p} on mesh dimension {mesh.names[k]!r}: tensor of shape "
                              f"{tuple(shape)} has no dimension {p.dim}")
    return placements


def _local_shape(shape, mesh: DeviceMesh, placements) -> tuple[int, ...]:
    local = []
    for d, n in enumerate(shape):
        ks = [k for k, p in enumerate(placements) if isinstance(p, Shard) and p.dim == d]
        ways = prod(mesh.shape[k] for k in ks)
        if n % ways:
            names = ", ".join(repr(mesh.names[k]) for k in ks)
            raise LayoutError(f"tensor dimension {d} of size {n} is not divisible by the {ways} devices "
                              f"of mesh dimension(s) {names} that shard it (placements "
                              f"{format_placements(placements)}); DTensor pads uneven shards "
                              "(torch.chunk), an Axe layout needs equal shards")
        local.append(n // ways)
    return tuple(local)


def to_layout(shape: Sequence[int], mesh: DeviceMesh, placements: Sequence,
              memory="local") -> DistributedLayout:
    """The Axe layout of a tensor of global ``shape`` placed on ``mesh`` by ``placements``.

    See the module docstring for the law.  ``memory`` gives the local memory strides:
    ``"local"`` (row-major local shard, what DTensor allocates), ``"global"`` (the global
    row-major strides, the paper's Figure 2 form) or a tuple of strides, one per dimension.
    Raises :class:`LayoutError` for uneven shards or placements that do not fit the mesh.
    """
    shape = tuple(int(n) for n in shape)
    placements = _checked_placements(shape, mesh, placements)
    local = _local_shape(shape, mesh, placements)
    mu = _memory_strides(memory, shape, local)
    shard: list[Iter] = []
    for d in range(len(shape)):
        for k, p in enumerate(placements):
            if isinstance(p, Shard) and p.dim == d and mesh.shape[k] > 1:
                shard.append(Iter(mesh.shape[k], mesh.strides[k], mesh.axis))
        if local[d] > 1:
            shard.append(Iter(local[d], mu[d]))
    replica = [Iter(mesh.shape[k], mesh.strides[k], mesh.axis) for k, p in enumerate(placements)
               if not isinstance(p, Shard) and mesh.shape[k] > 1]
    partial = tuple((mesh.names[k], p.reduce_op) for k, p in enumerate(placements)
                    if isinstance(p, Partial))
    layout = Layout(shard or [Iter(1, 1)], replica, Coord.unit(mesh.axis, mesh.first))
    return DistributedLayout(layout, shape, partial)


# --- reading placements back ----------------------------------------------------------------
class _Form(NamedTuple):
    """A layout read as a DTensor layout: per mesh dimension its placement, per tensor
    dimension its local memory stride (None for local extent 1), and the memory offset."""

    placements: tuple[Placement, ...]
    strides: tuple[int | None, ...]
    local: tuple[int, ...]
    memory_offset: int


def _mesh_dims(it: Iter, mesh: DeviceMesh, where: str) -> list[int]:
    """The mesh dimensions an iter on the mesh axis enumerates, outer first."""
    e, s, _ = it
    found = []
    while e > 1:
        k = next((k for k in range(mesh.ndim)
                  if mesh.shape[k] > 1 and mesh.strides[k] == s and e % mesh.shape[k] == 0), None)
        if k is None:
            raise LayoutError(f"{where}: iter {it} does not enumerate whole mesh dimensions of {mesh} "
                              f"(no mesh dimension of stride {s}@{mesh.axis} whose size divides {e})")
        found.insert(0, k)
        e //= mesh.shape[k]
        s *= mesh.shape[k]
    return found


def _read(layout: Layout, shape, mesh: DeviceMesh, partial: Mapping[str, str]) -> _Form:
    """Decompose ``layout`` into DTensor terms, or raise naming the part that does not fit."""
    shape = tuple(int(n) for n in shape)
    name = f"layout {layout} over shape {shape} on {mesh}"
    if not isinstance(layout, Layout):
        raise LayoutError(f"{name}: a {type(layout).__name__} is not a DTensor layout (no swizzle across devices)")
    stray = [a for a in layout.axes() if a not in (mesh.axis, MEMORY)]
    if stray:
        raise LayoutError(f"{name}: axes {stray} are neither the mesh axis {mesh.axis!r} nor memory")
    blocks = group_blocks(layout.shard, shape)
    if isinstance(blocks, str):
        raise LayoutError(f"{name}: does not group by the global shape: {blocks}")
    owner: dict[int, str] = {}
    placements: dict[int, Placement] = {}
    strides, local = [], []

    def claim(k: int, p: Placement, role: str):
        if k in owner:
            raise LayoutError(f"{name}: mesh dimension {mesh.names[k]!r} is used twice "
                              f"({owner[k]} and {role})")
        owner[k] = role
        placements[k] = p

    for d, blk in enumerate(blocks):
        blk = merge_chain(blk)
        dev = [i for i in blk if i[2] == mesh.axis]
        mem = [i for i in blk if i[2] == MEMORY]
        if dev and mem and blk.index(mem[0]) < blk.index(dev[-1]):
            raise LayoutError(f"{name}: tensor dimension {d} has device iter {dev[-1]} inside memory "
                              f"iter {mem[0]}; DTensor shards cut contiguous chunks (device outer)")
        if len(mem) > 1:
            raise LayoutError(f"{name}: tensor dimension {d} has memory iters {mem}; a local shard "
                              "dimension has a single memory stride")
        ks = [k for it in dev for k in _mesh_dims(it, mesh, f"{name}: tensor dimension {d}")]
        if ks != sorted(ks):
            order = ", ".join(repr(mesh.names[k]) for k in ks)
            raise LayoutError(f"{name}: tensor dimension {d} is split by mesh dimensions {order} in "
                              "that order (outer first); DTensor's Shard puts the lower mesh dimension outer")
        for k in ks:
            claim(k, Shard(d), f"Shard({d})")
        local.append(mem[0][0] if mem else 1)
        strides.append(mem[0][1] if mem else None)
    for it in layout.replica:
        if it[2] != mesh.axis:
            raise LayoutError(f"{name}: replica {it} is on {it[2]!r}; DTensor replicates across devices only")
        for k in _mesh_dims(it, mesh, f"{name}: replica"):
            op = partial.get(mesh.names[k])
            claim(k, Partial(op) if op else Replicate(), "a replica")
    for n in partial:
        k = mesh.index(n)
        if not isinstance(placements.get(k), Partial) and mesh.shape[k] > 1:
            raise LayoutError(f"{name}: mesh dimension {n!r} is declared partial but the layout "
                              f"shards over it ({placements.get(k)})")
    for k in range(mesh.ndim):
        if k not in placements:
            if mesh.shape[k] > 1:
                raise LayoutError(f"{name}: mesh dimension {mesh.names[k]!r} (size {mesh.shape[k]}, "
                                  f"stride {mesh.strides[k]}@{mesh.axis}) is used by neither the shard "
                                  "nor the replica")
            op = partial.get(mesh.names[k])
            placements[k] = Partial(op) if op else Replicate()
    if layout.offset[mesh.axis] != mesh.first:
        raise LayoutError(f"{name}: offset {layout.offset[mesh.axis]}@{mesh.axis} differs from the "
                          f"mesh's first device {mesh.first}")
    return _Form(tuple(placements[k] for k in range(mesh.ndim)), tuple(strides), tuple(local),
                 layout.offset[MEMORY])


def _unpack(layout, shape, partial):
    if isinstance(layout, DistributedLayout):
        if shape is not None and tuple(shape) != layout.shape:
            raise ValueError(f"shape {tuple(shape)} differs from the distributed layout's {layout.shape}")
        return layout.layout, layout.shape, dict(layout.partial) if partial is None else dict(partial)
    if isinstance(layout, str):
        layout = parse(layout)
    if shape is None:
        raise ValueError(f"{layout}: the global shape is needed to read placements")
    return layout, tuple(shape), dict(partial or {})


def to_placements(layout, shape: Sequence[int] | None, mesh: DeviceMesh, partial=None,
                  memory="local") -> tuple[Placement, ...]:
    """The placements P with ``to_layout(shape, mesh, P, memory)`` equal in map to ``layout``.

    ``layout`` is a :class:`Layout`, its text, or a :class:`DistributedLayout` (which carries
    its shape and partial annotation); ``partial`` maps mesh dimension names to reduce ops
    (replicas over those dimensions read as ``Partial``).  A mesh dimension of size 1 reads as
    Replicate (or Partial when named).  Raises :class:`LayoutError` naming the tensor
    dimension, mesh dimension or stride that keeps the layout from being of that form.
    """
    L, shape, part = _unpack(layout, shape, partial)
    form = _read(L, shape, mesh, part)
    want = _memory_strides(memory, shape, form.local)
    if want is not None:
        for d, (got, w, n) in enumerate(zip(form.strides, want, form.local)):
            if n > 1 and got != w:
                raise LayoutError(f"layout {L} over shape {shape}: tensor dimension {d} has local memory "
                                  f"stride {got}, {memory!r} memory of the local shard {form.local} needs {w}")
        if form.memory_offset:
            raise LayoutError(f"layout {L}: memory offset {form.memory_offset}; a local shard starts at 0")
    back = to_layout(shape, mesh, form.placements,
                     memory=tuple(s or 1 for s in form.strides) if want is None else memory)
    if not equivalent(back.layout + Coord.unit(MEMORY, form.memory_offset), L):
        raise LayoutError(f"layout {L} over shape {shape}: read as {format_placements(form.placements)} "
                          f"but that gives {back.layout}")  # a guard: _read should make this unreachable
    return form.placements


# --- torch ----------------------------------------------------------------------------------
def mesh_of(torch_mesh, axis: str = "gpuid") -> DeviceMesh:
    """The :class:`DeviceMesh` of a ``torch.distributed.device_mesh.DeviceMesh`` (ids = ranks)."""
    names = getattr(torch_mesh, "mesh_dim_names", None)
    return DeviceMesh.from_ids(torch_mesh.mesh, names, axis)


def layout_of(dtensor, axis: str = "gpuid") -> DistributedLayout:
    """The Axe layout of a torch DTensor: its mesh, placements and local memory strides.

    The memory part is read from this rank's local tensor (``to_local().stride()`` and
    ``storage_offset()``), so a non-contiguous local shard is described as it is.
    """
    mesh = mesh_of(dtensor.device_mesh, axis)
    local = dtensor.to_local()
    shape = tuple(dtensor.shape)
    dl = to_layout(shape, mesh, dtensor.placements, memory=tuple(local.stride()))
    expect = _local_shape(shape, mesh, _checked_placements(shape, mesh, dtensor.placements))
    if tuple(local.shape) != expect:
        raise LayoutError(f"DTensor of shape {shape}, placements {format_placements(dtensor.placements)}: "
                          f"local tensor shape {tuple(local.shape)} differs from the even shard {expect}")
    if local.storage_offset():
        dl = dl._replace(layout=dl.layout + local.storage_offset())
    return dl


def _as_declared(declared, shape):
    if isinstance(declared, DistributedLayout):
        if declared.shape != shape:
            raise LayoutMismatch(f"declared shape {declared.shape} differs from the DTensor's global shape {shape}")
        return declared.layout, dict(declared.partial)
    return (parse(declared) if isinstance(declared, str) else declared), None


def check_layout(dtensor, declared, partial=None) -> DistributedLayout:
    """Check that ``declared`` (layout, text or :class:`DistributedLayout`) is the DTensor's layout.

    Returns the DTensor's :class:`DistributedLayout` when the maps are equal (and the partial
    annotations agree, where ``declared`` or ``partial`` gives one); otherwise raises
    :class:`LayoutMismatch` listing every mesh dimension and tensor dimension that disagrees.
    """
    actual = layout_of(dtensor)
    mesh = mesh_of(dtensor.device_mesh)
    L, part = _as_declared(declared, actual.shape)
    if partial is not None:
        part = dict(partial)
    same_map = equivalent(L, actual.layout)
    same_partial = part is None or part == dict(actual.partial)
    if same_map and same_partial:
        return actual
    head = (f"DTensor of shape {actual.shape} on {mesh} with placements "
            f"{format_placements(dtensor.placements)} has layout {actual}, declared {L}")
    problems = []
    if L.size != prod(actual.shape):
        problems.append(f"the declared layout has {L.size} elements, the global shape {actual.shape} has "
                        f"{prod(actual.shape)}")
    else:
        try:
            mine = _read(L, actual.shape, mesh, part or {})
        except LayoutError as err:
            problems.extend(_block_diff(L, actual, mesh))
            problems.append(f"the declared layout is not a DTensor layout on this mesh: {err}")
        else:
            theirs = _read(actual.layout, actual.shape, mesh, dict(actual.partial))
            for k in range(mesh.ndim):
                a, b = mine.placements[k], theirs.placements[k]
                if a != b and not (part is None and {type(a), type(b)} == {Replicate, Partial}):
                    problems.append(f"mesh axis {mesh.names[k]!r} (size {mesh.shape[k]}): declared {a}, "
                                    f"the DTensor has {b}")
            for d in range(len(actual.shape)):
                if (mine.local[d], mine.strides[d]) != (theirs.local[d], theirs.strides[d]):
                    problems.append(f"tensor dimension {d}: declared local extent {mine.local[d]} with "
                                    f"memory stride {mine.strides[d]}, the DTensor's local tensor has extent "
                                    f"{theirs.local[d]} with stride {theirs.strides[d]}")
            if mine.memory_offset != theirs.memory_offset:
                problems.append(f"memory offset: declared {mine.memory_offset}, the DTensor's local "
                                f"tensor starts at {theirs.memory_offset}")
    if not problems:
        problems.append("the maps differ")  # a guard; the comparisons above cover every part
    raise LayoutMismatch(head + ":\n  " + "\n  ".join(problems))


def _block_diff(L: Layout, actual: DistributedLayout, mesh: DeviceMesh) -> list[str]:
    """Per tensor dimension and replica, where a declared layout that is no DTensor layout differs."""
    out = []
    mine = group_blocks(L.shard, actual.shape)
    theirs = group_blocks(actual.layout.shard, actual.shape)
    if isinstance(mine, str):
        return [f"the declared layout does not group by {actual.shape}: {mine}"]
    for d, (a, b) in enumerate(zip(mine, theirs)):
        a, b = merge_chain(a), merge_chain(b)
        if a != b:
            out.append(f"tensor dimension {d}: declared iters {a}, the DTensor has {b}")
    ra = Layout([Iter(1, 1)], L.replica).replica_points()
    rb = actual.layout.replica_points()
    if ra != rb:
        out.append(f"replica: declared {list(L.replica)}, the DTensor has {list(actual.layout.replica)} "
                   f"(mesh axes {mesh.names})")
    return out
