"""Kernels that span GPUs: the device mesh, distributed tensor parameters and the multi-device scope.

A distributed kernel runs once per rank of a mesh.  It declares

- the mesh and what the runtime passes to reach it (:func:`mesh`): the table of peer deltas
  (``local address + peers[g]`` is the same symmetric element on GPU ``g``), the signal flags,
  the error record, this rank, the launch epoch and the wait timeout;
- per distributed parameter its **global** shape and an Axe layout over ``gpuid`` — or DTensor
  placements on the mesh, which :func:`axe.layout.interop.dtensor.to_layout` converts
  (:func:`dtensor`).  The signature goes into the artifact's ``launch.json``, and the runtime
  checks every argument against it before launching.

Operators whose operands name ``gpuid`` (a distributed tensor, or a slice of one at a device
index: ``P[g, ...]`` is the part of ``P`` held by GPU ``g``) dispatch to schedules that address
peer memory; collectives run at the multi-device scope (``with Ax.devices():``).
"""

from __future__ import annotations

import contextlib
from dataclasses import dataclass, field
from math import prod

from axe.layout import SwizzledLayout
from axe.ops.scope import ExecScope, pop_scope, push_scope
from axe.ops.tensor import Tensor, register_tensor
from axe.schedules.context import current_context

from .scopes import scope_or_cta
from .targets import backend_hook
from .tensors import as_layout

__all__ = ["Mesh", "mesh", "current_mesh", "dtensor", "devices", "signal", "wait", "fence_system",
           "device_rank"]


@dataclass
class Mesh:
    """The mesh a distributed kernel runs on, as the kernel sees it (TIR buffers and scalars).

    ``shape``/``names``: the mesh dimensions (their product is ``world``); ``peers`` int64[world],
    ``signals`` int32[n] (symmetric), ``errors`` int32[8]; ``rank``, ``epoch`` int32 and
    ``timeout`` int64 (ns) scalars.  ``used`` counts the signals handed out by :meth:`alloc`.
    """

    _is_meta_class = True   # TVMScript binds it by name instead of making a TIR value

    world: int
    shape: tuple
    names: tuple
    peers: object
    signals: object
    errors: object
    rank: object
    epoch: object
    timeout: object
    multicast: object = None
    used: int = 0
    names_of: dict = field(default_factory=dict)
    copies: list = field(default_factory=list)

    @property
    def capacity(self) -> int:
        return int(self.signals.shape[0])

    def alloc(self, n: int, what: str) -> int:
        """Reserve ``n`` signals for ``what``; returns the first index.  Raises ``ValueError``
        when the kernel's signal buffer is too small (it names the need and the size)."""
        base = self.used
        if base + n > self.capacity:
            raise ValueError(f"mesh: {what} needs signals [{base}, {base + n}) but the signal buffer "
                             f"{self.signals.name} holds {self.capacity}; declare it with at least {base + n}")
        self.used += n
        self.names_of[base] = what
        return base


    def copy_before_launch(self, src, dst, rows: int, what: str) -> int:
        """Ask the runtime to stage this rank's ``src`` (a contiguous buffer of ``rows`` rows) into
        every peer's symmetric ``dst`` with the copy engine before each launch, on a stream beside
        the caller's: peers in the order ``rank − 1, rank − 2, …``, into ``dst``'s rows from
        ``((epoch mod 2) · world + rank) · rows`` (two halves: a launch never overwrites the rows a
        peer may still read in the previous one), each copy followed by setting the peer's signal
        ``base + rank`` to the epoch.  Reserves ``world`` signals; returns ``base`` (wait on
        ``base + g`` for rank g's rows)."""
        base = self.alloc(self.world, what)
        self.copies.append({"src": src.name, "dst": dst.name, "rows": int(rows), "signal": base})
        return base


def current_mesh() -> Mesh | None:
    """The mesh the kernel being built declared, or None."""
    return current_context("Ax.current_mesh").mesh


def mesh(world: int, peers, signals, errors, rank, epoch, timeout, shape=None, names=None,
         multicast=None) -> Mesh:
    """Declare the device mesh: ``world`` GPUs (``shape``/``names`` for a multi-dimensional mesh,
    default ``(world,)`` named ``("gpus",)``), and the kernel parameters the runtime fills:
    ``peers`` (int64[world] buffer), ``signals`` (int32 buffer, symmetric), ``errors`` (int32[8]),
    ``rank``/``epoch`` (int32) and ``timeout`` (int64, ns).  ``multicast``: an int64 scalar, the
    offset from a local symmetric address to its NVLink multicast address, used only when the
    target declares multicast (``features=("multicast",)``); elsewhere it is ignored."""
    shape = tuple(shape or (world,))
    names = tuple(names or ("gpus",) if len(shape) == 1 else names)
    if prod(shape) != world:
        raise ValueError(f"mesh: shape {shape} has {prod(shape)} devices, world is {world}")
    if len(names) != len(shape):
        raise ValueError(f"mesh: names {names} do not match shape {shape}")
    for what, buf, dtype, n in (("peers", peers, "int64", world), ("errors", errors, "int32", 8)):
        if str(buf.dtype) != dtype or [int(s) for s in buf.shape] != [n]:
            raise ValueError(f"mesh: {what} must be a {dtype}[{n}] buffer, got {buf.name} "
                             f"{buf.dtype}{[int(s) for s in buf.shape]}")
    if str(signals.dtype) != "int32" or len(signals.shape) != 1:
        raise ValueError(f"mesh: signals must be an int32 vector, got {signals.name} {signals.dtype}")
    ctx = current_context("Ax.mesh")
    if "multicast" not in ctx.features:
        multicast = None
    m = Mesh(world, shape, names, peers, signals, errors, rank, epoch, timeout, multicast)
    ctx.mesh = m
    ctx.distributed.update({
        "world": world, "mesh": {"shape": list(shape), "names": list(names)},
        "runtime": {"peers": peers.name, "signals": signals.name, "errors": errors.name,
                    "rank": str(rank), "epoch": str(epoch), "timeout": str(timeout)},
        "params": ctx.distributed.get("params", {}),
    })
    if multicast is not None:
        ctx.distributed["runtime"]["multicast"] = str(multicast)
    return m


def dtensor(buf, shape, layout=None, placements=None, symmetric=False, scratch=False, partial_dim=None,
            name=None) -> Tensor:
    """A distributed kernel parameter: ``buf`` is this rank's local part of a tensor of global
    ``shape`` laid out by ``layout`` (an Axe layout over ``gpuid`` and memory) or by DTensor
    ``placements`` on the declared mesh (``Shard(d)``, ``Replicate()``).  Returns the tensor in
    its global view (slicing a ``gpuid`` dimension at a device index gives that device's part).

    ``symmetric``: the buffer must come from the runtime's symmetric heap (peers address it);
    ``scratch``: the runtime supplies it (symmetric scratch is allocated once per heap);
    ``partial_dim``: dimension ``partial_dim`` of ``shape`` indexes the mesh and the tensor is
    summed over it by the kernel — the runtime then also accepts a torch DTensor placed
    ``Partial("sum")`` whose global shape is ``shape`` without that dimension.
    Raises ``ValueError`` naming the parameter when the local buffer is not the layout's shard.
    """
    from axe.layout.devices import device_sharding
    from axe.layout.interop.dtensor import DeviceMesh, format_placements, to_layout
    m = current_mesh()
    if m is None:
        raise ValueError(f"dtensor {buf.name}: declare the mesh first (Ax.mesh(...))")
    shape = tuple(int(s) for s in shape)
    if (layout is None) == (placements is None):
        raise ValueError(f"dtensor {buf.name}: give exactly one of layout= and placements=")
    if placements is not None:
        dl = to_layout(shape, DeviceMesh(m.shape, m.names), placements)
        L, placed = dl.layout, format_placements(placements)
    else:
        L, placed = as_layout(layout, shape), None
    local = tuple(int(s) for s in buf.shape)
    try:    # a swizzle permutes a device's memory only: the sharding is its inner layout's
        sh = device_sharding(L.inner if isinstance(L, SwizzledLayout) else L, shape)
    except ValueError as err:
        raise ValueError(f"dtensor {buf.name}: layout {L} over shape {shape}: {err}") from None
    if sh.world > m.world:
        raise ValueError(f"dtensor {buf.name}: layout {L} places data on gpuid {sh.world - 1}, the mesh has {m.world}")
    if prod(sh.local_shape()) != prod(local):   # the buffer may be a reshaped view of the shard
        raise ValueError(f"dtensor {buf.name}: local buffer {list(local)} does not hold one shard "
                         f"{list(sh.local_shape())} of global {list(shape)} under {L}")
    entry = {"shape": list(shape), "layout": str(L), "placements": placed,
             "local_shape": list(sh.local_shape()), "buffer_shape": list(local),
             "symmetric": bool(symmetric or scratch), "scratch": bool(scratch), "dtype": str(buf.dtype)}
    if partial_dim is not None:
        entry["partial_dim"] = int(partial_dim)
    current_context("Ax.dtensor").distributed.setdefault("params", {})[buf.name] = entry
    t = Tensor(buf, L, shape, str(buf.dtype), "global", name=name or buf.name)
    return register_tensor(t)


@contextlib.contextmanager
def devices():
    """The multi-device scope: operators inside run on every CTA of every GPU of the mesh
    together (collectives: reduce-scatter, all-reduce, all-gather, put/get of whole tensors)."""
    ctx = current_context("Ax.devices")
    if ctx.mesh is None:
        raise ValueError("Ax.devices(): declare the mesh first (Ax.mesh(...))")
    if not ctx.grid:
        raise ValueError("Ax.devices(): launch the kernel first (Ax.launch(...))")
    outer = scope_or_cta()
    push_scope(ExecScope("devices", outer.tx, outer.cta_threads, extra={"cta": ctx.grid[0], "grid": ctx.grid[1]}))
    try:
        yield
    finally:
        pop_scope()


def _backend():
    """The target's mesh signalling (its backend's ``"mesh"`` hook)."""
    ctx = current_context("signals between devices")
    return backend_hook(ctx.family, "mesh", f"signals between devices (target {ctx.target})")


def _need_mesh(what):
    m = current_mesh()
    if m is None:
        raise ValueError(f"{what}: declare the mesh first (Ax.mesh(...))")
    return m


def signal(index, gpu):
    """One thread sets signal ``index`` on GPU ``gpu`` to this launch's epoch, after a
    system-scope fence (guard it to one thread; publish other threads' writes with a barrier
    and :func:`fence_system` in each first)."""
    _backend().signal_peer(_need_mesh("signal"), index, gpu)


def wait(index, src):
    """One thread waits until its own signal ``index`` (set by GPU ``src``) reaches this
    launch's epoch, or the mesh's timeout passes (then the error record names ``src`` and
    ``index``, and the runtime raises after the launch)."""
    _backend().wait_signal(_need_mesh("wait"), index, src)


def fence_system():
    """``fence.acq_rel.sys`` in every calling thread."""
    _backend().fence_sys()


def device_rank():
    """This GPU's rank in the mesh (a TIR value)."""
    return _need_mesh("device_rank").rank
