"""Symmetric memory: buffers that every rank of a torch.distributed process group can address.

A :class:`SymmetricHeap` owns **one pool** per process group: ``pool_bytes`` of device memory on
every rank, allocated collectively once, through NVSHMEM (``nvshmem4py``: ``import nvshmem.core``)
or through PyTorch's ``torch.distributed._symmetric_memory``.  Every rank maps the pools of the
other ranks on its host (over NVLink), so for each rank ``g`` there is one number,
``deltas[g] = (address of g's pool as mapped here) - (address of the local pool)``.

Buffers are sub-allocated from the pool by a bump allocator (:class:`PoolAllocator`, 256-byte
aligned, no GPU needed).  **Allocation order rule**: every rank must call :meth:`~SymmetricHeap.empty`
/ :meth:`~SymmetricHeap.zeros` with the same sizes in the same order; then every buffer sits at
the same ``offset`` in every rank's pool, and ``local_ptr + deltas[g]`` is the same buffer on
rank ``g`` — for every buffer of the heap, with one delta table.  ``empty`` stays local and cheap
(no communication); :meth:`~SymmetricHeap.verify_allocations` checks the rule collectively when
wanted.  Memory goes back only when the heap is closed.

Multicast safety: NVLink multicast (NVLS, ``multimem``) is never enabled.  On import of this
module and again before a backend is initialised, :func:`disable_multicast_env` sets
``NVSHMEM_DISABLE_NVLS=1``, ``TORCH_SYMM_MEM_DISABLE_MULTICAST=1`` and ``NCCL_NVLS_ENABLE=0``
where they are unset; a value already set is never changed, and a heap refuses to start
(:class:`SymmetricError`) when any of them is set to a value that enables multicast.

Nothing heavy is imported at module import: torch, ``torch.distributed._symmetric_memory``,
``nvshmem`` and ``cuda.core`` are imported when a heap is built.
"""

from __future__ import annotations

import contextlib
import inspect
import logging
import os
import re
import socket
import warnings
from math import prod

__all__ = [
    "SymmetricError", "SymmetricHeap", "SymmetricTensor", "PoolAllocator",
    "ALIGNMENT", "DEFAULT_POOL_BYTES", "POOL_ENV", "MULTICAST_ENV",
    "align_up", "parse_bytes", "resolve_pool_bytes", "compose_deltas", "reachable_ranks",
    "describe_mismatch", "disable_multicast_env", "multicast_env_problems",
]

log = logging.getLogger("axe.runtime.symmetric")

#: every buffer's offset in the pool (and so its address, the pool being at least this aligned)
ALIGNMENT = 256
#: the pool size when neither ``pool_bytes`` nor :data:`POOL_ENV` is given (2 GiB)
DEFAULT_POOL_BYTES = 2 << 30
#: environment variable giving the pool size when ``pool_bytes`` is not passed
POOL_ENV = "AXE_SYMM_POOL_BYTES"
#: NVSHMEM's own symmetric heap is set (if unset) to the pool plus this much, for its internals
NVSHMEM_SLACK_BYTES = 256 << 20


class SymmetricError(RuntimeError):
    """Symmetric memory cannot be set up or used as asked (the message names rank and condition)."""


# --- multicast safety -----------------------------------------------------------------------------

def _nvshmem_bool_true(v: str) -> bool:
    # NVSHMEM (nvshmemi_getenv_bool): set and first character not one of 0 N n F f -> true
    return not (v[:1] in ("0", "N", "n", "F", "f"))


def _c10_bool_true(v: str) -> bool:
    # c10::utils::check_env: exactly "1" is true, "0" false, anything else ignored (-> default)
    return v == "1"


def _nccl_int_zero(v: str) -> bool:
    try:
        return int(v.strip(), 0) == 0
    except ValueError:
        return False


#: name -> (the value that disables multicast, predicate "this set value disables multicast")
MULTICAST_ENV = {
    "NVSHMEM_DISABLE_NVLS": ("1", _nvshmem_bool_true),
    "TORCH_SYMM_MEM_DISABLE_MULTICAST": ("1", _c10_bool_true),
    "NCCL_NVLS_ENABLE": ("0", _nccl_int_zero),
}


def disable_multicast_env(environ=None) -> dict:
    """Make NVSHMEM, PyTorch symmetric memory and NCCL leave NVLink multicast off.

    For each of ``NVSHMEM_DISABLE_NVLS``, ``TORCH_SYMM_MEM_DISABLE_MULTICAST`` and
    ``NCCL_NVLS_ENABLE``: if unset (or empty), set it to the disabling value (``1``, ``1``,
    ``0``).  A value already set is **never changed** — in particular never to one that enables
    multicast.  Returns ``{name: "set" | "kept" | "unsafe"}``: ``"unsafe"`` marks a value that
    was already set and enables multicast (left alone; :class:`SymmetricHeap` refuses to start
    then).  ``environ`` defaults to ``os.environ``.
    """
    env = os.environ if environ is None else environ
    report = {}
    for name, (safe, disables) in MULTICAST_ENV.items():
        cur = env.get(name)
        if cur is None or cur == "":
            env[name] = safe
            report[name] = "set"
        else:
            report[name] = "kept" if disables(cur) else "unsafe"
    return report


def multicast_env_problems(environ=None) -> list:
    """The multicast variables whose current value enables multicast, as ``"NAME=value (needs
    NAME=safe)"`` strings; an unset variable is not a problem here (it is set by
    :func:`disable_multicast_env`).  Guarantees: empty exactly when none enables multicast."""
    env = os.environ if environ is None else environ
    out = []
    for name, (safe, disables) in MULTICAST_ENV.items():
        cur = env.get(name)
        if cur not in (None, "") and not disables(cur):
            out.append(f"{name}={cur!r} (needs {name}={safe})")
    return out


disable_multicast_env()     # as early as possible: before any NCCL communicator or NVSHMEM init


# --- pure helpers: sizes, the pool allocator, deltas, reachability --------------------------------

def align_up(n: int, alignment: int = ALIGNMENT) -> int:
    """The smallest multiple of ``alignment`` (> 0) that is >= ``n`` (>= 0)."""
    if alignment <= 0:
        raise ValueError(f"alignment must be positive, got {alignment}")
    if n < 0:
        raise ValueError(f"cannot align a negative size {n}")
    return -(-n // alignment) * alignment


_SIZE_RE = re.compile(r"^\s*(\d+(?:\.\d*)?|\.\d+)\s*([kmgt]?)(i?b)?\s*$", re.IGNORECASE)


def parse_bytes(text) -> int:
    """Parse a byte count: an int, or a string such as ``"2147483648"``, ``"512M"``, ``"2G"``,
    ``"1.5GiB"`` (K/M/G/T are binary: 2**10, 2**20, 2**30, 2**40, as NVSHMEM reads them).
    Returns a positive int (rounded up); raises ``ValueError`` naming the text otherwise."""
    if isinstance(text, bool):
        raise ValueError(f"not a byte count: {text!r}")
    if isinstance(text, int):
        n = text
    else:
        m = _SIZE_RE.match(str(text))
        if not m:
            raise ValueError(f"not a byte count: {text!r} (use e.g. 2147483648, 512M, 2G, 2GiB)")
        scale = {"": 0, "k": 10, "m": 20, "g": 30, "t": 40}[m.group(2).lower()]
        num = m.group(1)
        n = int(num) << scale if num.isdigit() else -int(-float(num) * (1 << scale) // 1)
    if n <= 0:
        raise ValueError(f"a byte count must be positive, got {text!r}")
    return n


def resolve_pool_bytes(pool_bytes=None, environ=None) -> int:
    """The pool size: ``pool_bytes`` if given, else :data:`POOL_ENV` if set, else
    :data:`DEFAULT_POOL_BYTES` (2 GiB).  Raises :class:`SymmetricError` naming the source of
    a value that is not a positive byte count."""
    env = os.environ if environ is None else environ
    if pool_bytes is not None:
        src, val = "pool_bytes", pool_bytes
    elif env.get(POOL_ENV):
        src, val = POOL_ENV, env[POOL_ENV]
    else:
        return DEFAULT_POOL_BYTES
    try:
        return parse_bytes(val)
    except ValueError as e:
        raise SymmetricError(f"symmetric pool size from {src}: {e}") from None


class PoolAllocator:
    """Offsets of buffers in one pool of ``pool_bytes``: a bump allocator, no memory touched.

    Guarantees: every offset is a multiple of ``alignment``; buffers never overlap and end within
    the pool; the same sequence of :meth:`allocate` calls gives the same offsets (which is what
    makes the pools of all ranks line up).  Nothing is freed individually (a freed hole would
    have to be freed on every rank in the same order); :meth:`reset` forgets everything.
    """

    def __init__(self, pool_bytes: int, alignment: int = ALIGNMENT, *, rank=None, world=None):
        if pool_bytes <= 0:
            raise SymmetricError(f"pool size must be positive, got {pool_bytes}")
        if alignment <= 0 or alignment & (alignment - 1):
            raise SymmetricError(f"alignment must be a power of two, got {alignment}")
        self.pool_bytes, self.alignment = int(pool_bytes), int(alignment)
        self.rank, self.world = rank, world
        self.cursor = 0
        self.log = []       # (offset, nbytes, what) per allocation, in order

    @property
    def used(self) -> int:
        """Bytes from the start of the pool to the end of the last buffer."""
        return self.cursor

    @property
    def free(self) -> int:
        """Bytes after the last buffer (the next buffer may lose up to alignment-1 of them)."""
        return self.pool_bytes - self.cursor

    def allocate(self, nbytes: int, what: str = "") -> int:
        """Reserve ``nbytes`` (>= 0) and return the buffer's byte offset in the pool.

        Raises :class:`SymmetricError` naming the rank, the requested bytes, the free bytes, the
        pool size and :data:`POOL_ENV` when the pool is exhausted (the allocator is unchanged
        then)."""
        nbytes = int(nbytes)
        if nbytes < 0:
            raise SymmetricError(f"{self._who()}cannot allocate a negative size ({nbytes} bytes)")
        off = align_up(self.cursor, self.alignment)
        if off + nbytes > self.pool_bytes:
            raise SymmetricError(
                f"{self._who()}symmetric pool exhausted: requested {nbytes} bytes"
                f"{' for ' + what if what else ''} at {self.alignment}-byte alignment, but only "
                f"{max(0, self.pool_bytes - off)} bytes are free ({self.free} before alignment) of "
                f"the {self.pool_bytes}-byte pool ({self.cursor} used by {len(self.log)} buffers); "
                f"make the pool larger with SymmetricHeap(pool_bytes=...) or the environment "
                f"variable {POOL_ENV} (e.g. {POOL_ENV}={_suggest(self.cursor, nbytes, self.alignment)}),"
                f" the same value on every rank")
        self.cursor = off + nbytes
        self.log.append((off, nbytes, what))
        return off

    def reset(self):
        """Forget every allocation (the next one is at offset 0)."""
        self.cursor = 0
        self.log = []

    def _who(self):
        if self.rank is None:
            return ""
        return f"rank {self.rank}" + (f"/{self.world}" if self.world is not None else "") + ": "


def _suggest(used: int, nbytes: int, alignment: int) -> str:
    need = align_up(used, alignment) + nbytes
    g = 1 << 30
    return f"{-(-need * 2 // g)}G" if need >= g // 2 else str(align_up(need * 2, 1 << 20))


_INT64_MAX = (1 << 63) - 1


def compose_deltas(pool_addresses, rank: int) -> list:
    """The delta table from the pools' addresses as mapped in this process.

    ``pool_addresses[g]``: where rank ``g``'s pool is mapped here (an int), or ``None``/``0``
    when it is not load/store reachable.  Returns ``deltas`` with ``deltas[rank] == 0`` and, for
    a mapped ``g``, ``deltas[g] = pool_addresses[g] - pool_addresses[rank]``, so that
    ``local_ptr + deltas[g]`` is the same buffer on ``g``.  For an unmapped ``g`` the delta is
    ``-pool_addresses[rank]``: ``local_ptr + delta`` is then the buffer's offset in the pool, a
    small address a kernel faults on (as ``nvshmem_ptr`` returning null) instead of silently
    using its own copy.  Every delta fits int64.  Raises :class:`SymmetricError` if the local
    address is missing or the table does not fit int64.
    """
    addrs = list(pool_addresses)
    if not 0 <= rank < len(addrs):
        raise SymmetricError(f"rank {rank} outside a group of {len(addrs)}")
    base = addrs[rank]
    if not base:
        raise SymmetricError(f"rank {rank}: the local pool has no address (got {base!r})")
    out = []
    for g, a in enumerate(addrs):
        d = 0 if g == rank else (int(a) - int(base) if a else -int(base))
        if not -_INT64_MAX - 1 <= d <= _INT64_MAX:
            raise SymmetricError(f"rank {rank}: delta to rank {g} ({d}) does not fit int64")
        out.append(d)
    return out


def reachable_ranks(hostnames, rank: int, mapped=None) -> list:
    """Which ranks this rank can load from and store to: ``[bool] * world``.

    A rank is reachable when it reports the same hostname as this rank (one NVLink domain is
    taken to be one host) and, if ``mapped`` is given, its pool is mapped here (``mapped[g]``
    true).  The rank itself is always reachable; on a single host (all hostnames equal) with
    every pool mapped, every rank is."""
    hosts = list(hostnames)
    if not 0 <= rank < len(hosts):
        raise SymmetricError(f"rank {rank} outside a group of {len(hosts)}")
    me = hosts[rank]
    return [g == rank or (h == me and (mapped is None or bool(mapped[g]))) for g, h in enumerate(hosts)]


def describe_mismatch(infos, key: str, what: str = None):
    """``None`` when ``infos[r][key]`` is equal for every rank ``r``; else one line naming each
    distinct value and the ranks holding it, e.g. ``"pool_bytes differs across the group: 1024 on
    ranks [0, 1]; 2048 on rank [2]"``."""
    groups = {}
    for r, info in enumerate(infos):
        groups.setdefault(repr(info.get(key)), []).append(r)
    if len(groups) <= 1:
        return None
    parts = [f"{v} on rank{'s' if len(rs) > 1 else ''} {rs}" for v, rs in groups.items()]
    return f"{what or key} differs across the group: " + "; ".join(parts)


def _hostname() -> str:
    return socket.gethostname()


# --- backends -------------------------------------------------------------------------------------

def _torch_version():
    import torch
    m = re.match(r"(\d+)\.(\d+)", torch.__version__)
    return (int(m.group(1)), int(m.group(2))) if m else (0, 0)


def _probe_nvshmem():
    """(importable, reason if not)."""
    try:
        import nvshmem.core  # noqa: F401
        from nvshmem.core.interop import torch as _t  # noqa: F401
        return True, None
    except Exception as e:   # ImportError, or a missing CUDA library behind it
        return False, f"import nvshmem.core failed: {type(e).__name__}: {e}"


def _nvshmem_size_env():
    v = os.environ.get("NVSHMEM_SYMMETRIC_SIZE")
    if v in (None, ""):
        return None
    try:
        return parse_bytes(v)
    except ValueError:
        return -1


class _TorchBackend:
    """``torch.distributed._symmetric_memory``: ``empty`` + ``rendezvous``; peers through the
    handle's ``buffer_ptrs`` and ``get_buffer``."""

    name = "torch"

    def open(self, heap):
        import torch
        import torch.distributed._symmetric_memory as symm_mem
        group_name = heap.group.group_name
        if _torch_version() < (2, 11) and hasattr(symm_mem, "enable_symm_mem_for_group"):
            # needed before 2.11; deprecated (a no-op need) from 2.11 on
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                symm_mem.enable_symm_mem_for_group(group_name)
        with heap._device_ctx():
            pool = symm_mem.empty(heap.pool_bytes, dtype=torch.uint8, device=heap.device)
            handle = symm_mem.rendezvous(pool, group_name)
        self.pool, self.handle = pool, handle
        ptrs = [int(p or 0) for p in handle.buffer_ptrs]
        if len(ptrs) != heap.world:
            raise SymmetricError(f"rank {heap.rank}: rendezvous returned {len(ptrs)} buffer pointers "
                                 f"for a group of {heap.world}")
        # buffer_ptrs are the bases of the allocation blocks; the pool may start inside its block
        # (torch's symmetric MemPool), at an offset that must be the same on every rank
        off = pool.data_ptr() - ptrs[heap.rank]
        size = int(getattr(handle, "buffer_size", 0) or 0) or (off + heap.pool_bytes)
        if ptrs[heap.rank] == 0 or not 0 <= off <= size - heap.pool_bytes:
            off = None      # reported below, after the collective, so that no rank hangs
        offs = heap._all_gather(off)
        if any(o is None for o in offs):
            raise SymmetricError(
                f"rank {heap.rank}: the pool does not lie inside its symmetric block on ranks "
                f"{[r for r, o in enumerate(offs) if o is None]} (buffer_ptrs / buffer_size mismatch)")
        msg = describe_mismatch([{"o": o} for o in offs], "o", "the pool's offset in its symmetric block")
        if msg:
            raise SymmetricError(f"rank {heap.rank}: {msg}; cannot address peers' pools")
        peers = []
        for g in range(heap.world):
            if g == heap.rank:
                peers.append(pool)
            elif ptrs[g] and heap._same_host[g]:
                peers.append(handle.get_buffer(g, (heap.pool_bytes,), torch.uint8, off))
            else:
                peers.append(None)
        return pool, peers

    def close(self, heap, collective: bool):
        if collective:
            heap.barrier()      # no rank frees while a peer may still be using the pools
        self.pool = self.handle = None


#: process-wide NVSHMEM state: NVSHMEM binds a process to one device and one world
_NVSHMEM = {"axe_initialized": False, "heaps": 0, "rank": None, "world": None, "device": None, "members": None}


def _nvshmem_is_initialized() -> bool:
    try:
        from nvshmem.core._internal_tracking import InternalInitStatus, _is_initialized
        return _is_initialized["status"] == InternalInitStatus.INITIALIZED
    except Exception:
        return _NVSHMEM["axe_initialized"]


class _NvshmemBackend:
    """nvshmem4py: UID bootstrap over the process group, one ``nvshmem_malloc``'d pool
    (``nvshmem.core.interop.torch.tensor``), peers through ``get_peer_tensor`` (``nvshmem_ptr``)."""

    name = "nvshmem"

    def open(self, heap):
        import numpy as np
        import torch
        import torch.distributed as dist
        import nvshmem.core as nvcore
        from nvshmem.core.interop import torch as nvtorch
        try:
            from cuda.core import Device
        except ImportError:
            from cuda.core.experimental import Device
        rank, world, index = heap.rank, heap.world, heap.device.index
        members = list(dist.get_process_group_ranks(heap.group))
        self.initialized_here = False
        if not _nvshmem_is_initialized():
            if heap.device.type == "cuda":
                torch.cuda.set_device(index)    # NVSHMEM allocates on the current device
                Device(index).set_current()
            if rank == 0:
                uid = nvcore.get_unique_id()
                payload = [bytes(uid._data.view(np.int8).tobytes())]
            else:
                uid = nvcore.get_unique_id(empty=True)
                payload = [None]
            with heap._device_ctx():
                dist.broadcast_object_list(payload, src=dist.get_global_rank(heap.group, 0), group=heap.group)
            if rank != 0:
                uid._data.view(np.int8)[:] = np.frombuffer(payload[0], dtype=np.int8)
            nvcore.init(device=Device(index), uid=uid, rank=rank, nranks=world, initializer_method="uid")
            _NVSHMEM.update(axe_initialized=True, rank=rank, world=world, device=index, members=members)
            self.initialized_here = True
        else:
            pe, npes = int(nvcore.my_pe()), int(nvcore.n_pes())
            was = _NVSHMEM.get("members") if _NVSHMEM["axe_initialized"] else None
            if (pe, npes) != (rank, world) or (was is not None and was != members) or (
                    _NVSHMEM["axe_initialized"] and _NVSHMEM["device"] != index):
                problem = (f"NVSHMEM is already initialised in this process as PE {pe} of {npes}"
                           + (f" for global ranks {was} on device {_NVSHMEM['device']}" if was else "")
                           + f", not for this group (global ranks {members}, device {index})")
            else:
                problem = None
            problems = heap._all_gather(problem)     # before the collective malloc: all raise or none
            bad = [r for r, p in enumerate(problems) if p]
            if bad:
                raise SymmetricError(
                    f"rank {rank}/{world}: on rank{'s' if len(bad) > 1 else ''} {bad}: {problems[bad[0]]}; one "
                    f"process has one NVSHMEM world — build heaps on that group, or use backend='torch'")
        _NVSHMEM["heaps"] += 1
        self.counted = True
        with heap._device_ctx():
            kw = {"except_on_del": False} if "except_on_del" in inspect.signature(nvtorch.tensor).parameters else {}
            pool = nvtorch.tensor((heap.pool_bytes,), dtype=torch.uint8, **kw)   # collective (nvshmem_malloc)
            if pool is None:
                raise SymmetricError(f"rank {rank}: nvshmem4py returned no tensor (torch interop disabled)")
            self.pool, self.nvtorch = pool, nvtorch
            peers = []
            for g in range(world):
                if g == rank:
                    peers.append(pool)
                elif not heap._same_host[g]:
                    peers.append(None)      # off-host: nvshmem_ptr is null; put/get only
                else:
                    try:
                        peers.append(nvtorch.get_peer_tensor(pool, g))
                    except Exception as e:  # nvshmem_ptr returned null: not P2P reachable
                        log.warning("rank %d: NVSHMEM peer %d not load/store reachable: %s", rank, g, e)
                        peers.append(None)
        return pool, peers

    def close(self, heap, collective: bool):
        pool, self.pool = getattr(self, "pool", None), None
        if collective and pool is not None:
            with heap._device_ctx():
                self.nvtorch.free_tensor(pool)      # collective (nvshmem_free)
        if getattr(self, "counted", False):
            self.counted = False
            _NVSHMEM["heaps"] -= 1
            if collective and _NVSHMEM["heaps"] == 0 and _NVSHMEM["axe_initialized"]:
                import nvshmem.core as nvcore
                nvcore.finalize()                   # collective
                _NVSHMEM.update(axe_initialized=False, rank=None, world=None, device=None, members=None)


_BACKENDS = {"nvshmem": _NvshmemBackend, "torch": _TorchBackend}


# --- the heap -------------------------------------------------------------------------------------

class SymmetricHeap:
    """One pool of symmetric memory per process group.

    ``SymmetricHeap(group=None, backend="auto", pool_bytes=None, device=None)`` is collective:
    every rank of ``group`` (``None``: the default group, which must be initialised) calls it
    with the same arguments.  ``backend``: ``"nvshmem"`` (nvshmem4py), ``"torch"``
    (``torch.distributed._symmetric_memory``) or ``"auto"`` (nvshmem when it imports on every
    rank and initialises, else torch; :attr:`fallback_reason` says why nvshmem was not used).
    ``pool_bytes``: the one pool's size (default 2 GiB; :data:`POOL_ENV` overrides the default).
    ``device``: a ``torch.device``, index or string (default ``torch.cuda.current_device()``).

    Guarantees once built: every rank has a pool of ``pool_bytes`` on its device; all ranks use
    the same backend and pool size (checked with an ``all_gather_object``; a difference raises
    :class:`SymmetricError` naming the ranks); no NVLink multicast is set up.  Attributes:
    ``rank``, ``world``, ``device``, ``backend`` (``"nvshmem"`` or ``"torch"``), ``pool_bytes``,
    ``hosts`` (each rank's hostname), ``fallback_reason``.
    """

    def __init__(self, group=None, backend="auto", pool_bytes=None, device=None):
        self._closed = True
        self._impl = None
        disable_multicast_env()
        if backend not in ("auto", "nvshmem", "torch"):
            raise SymmetricError(f"backend must be 'auto', 'nvshmem' or 'torch', got {backend!r}")
        import torch
        import torch.distributed as dist
        if not (dist.is_available() and dist.is_initialized()):
            raise SymmetricError("torch.distributed is not initialised: call dist.init_process_group(...) "
                                 "on every rank before building a SymmetricHeap")
        self.group = group if group is not None else dist.group.WORLD
        self.rank = dist.get_rank(self.group)
        self.world = dist.get_world_size(self.group)
        if self.rank < 0:
            raise SymmetricError(f"global rank {dist.get_rank()} is not a member of the given group")
        self.pool_bytes = resolve_pool_bytes(pool_bytes)
        self.device = self._resolve_device(device)
        self.requested_backend = backend
        self.fallback_reason = None

        # 1. local facts, gathered: backend and pool size must agree; multicast must be off
        can_nvshmem, why_not = (_probe_nvshmem() if backend in ("auto", "nvshmem") else (False, None))
        if can_nvshmem:
            want = self.pool_bytes + NVSHMEM_SLACK_BYTES
            os.environ.setdefault("NVSHMEM_SYMMETRIC_SIZE", str(want))
        info = {"backend": backend, "pool_bytes": self.pool_bytes, "host": _hostname(),
                "device": str(self.device), "pid": os.getpid(), "nvshmem": can_nvshmem,
                "nvshmem_error": why_not, "nvshmem_size": _nvshmem_size_env() if can_nvshmem else None,
                "multicast": multicast_env_problems(), "torch": torch.__version__}
        infos = self._all_gather(info)
        self.hosts = [i["host"] for i in infos]
        self._same_host = [h == info["host"] for h in self.hosts]
        for key, what in (("backend", "the requested backend"), ("pool_bytes", "pool_bytes")):
            msg = describe_mismatch(infos, key, what)
            if msg:
                raise SymmetricError(f"rank {self.rank}/{self.world}: {msg}; every rank must build the heap "
                                     f"with the same backend and pool size ({POOL_ENV} too)")
        bad = [(r, i["multicast"]) for r, i in enumerate(infos) if i["multicast"]]
        if bad:
            raise SymmetricError(
                f"rank {self.rank}/{self.world}: NVLink multicast would be enabled — "
                + "; ".join(f"rank {r}: {', '.join(p)}" for r, p in bad)
                + ". axe never uses multicast; unset these or set the disabling values")
        seen = {}
        for r, i in enumerate(infos):
            if i["device"].startswith("cuda"):
                seen.setdefault((i["host"], i["device"]), []).append(r)
        dup = {k: v for k, v in seen.items() if len(v) > 1}
        if dup:
            raise SymmetricError(f"rank {self.rank}/{self.world}: ranks share a device: " + "; ".join(
                f"ranks {v} on {k[1]} of host {k[0]}" for k, v in dup.items()))

        # 2. choose the backend
        chosen = backend
        no_nv = [r for r, i in enumerate(infos) if not i["nvshmem"]]
        if backend in ("auto", "nvshmem") and no_nv:
            first = infos[no_nv[0]]["nvshmem_error"]
            reason = f"nvshmem4py is not importable on rank{'s' if len(no_nv) > 1 else ''} {no_nv} ({first})"
            if backend == "nvshmem":
                raise SymmetricError(f"rank {self.rank}/{self.world}: backend='nvshmem' but {reason}")
            chosen, self.fallback_reason = "torch", reason
        if chosen in ("auto", "nvshmem"):
            sizes = [i["nvshmem_size"] for i in infos]
            small = [r for r, s in enumerate(sizes) if s is not None and s < self.pool_bytes]
            msg = describe_mismatch(infos, "nvshmem_size", "NVSHMEM_SYMMETRIC_SIZE")
            if small or msg:
                reason = (msg or "") + ("; " if msg and small else "") + (
                    f"NVSHMEM_SYMMETRIC_SIZE on ranks {small} ({sizes[small[0]]} bytes) is smaller than the "
                    f"{self.pool_bytes}-byte pool" if small else "")
                if backend == "nvshmem":
                    raise SymmetricError(f"rank {self.rank}/{self.world}: {reason}; set NVSHMEM_SYMMETRIC_SIZE "
                                         f">= pool + {NVSHMEM_SLACK_BYTES} bytes on every rank, or unset it")
                chosen, self.fallback_reason = "torch", reason

        # 3. open it (nvshmem first when chosen; on failure everywhere "auto" falls back to torch)
        if chosen in ("auto", "nvshmem"):
            err = None
            try:
                self._open("nvshmem")
            except Exception as e:
                err = f"{type(e).__name__}: {e}"
                self._abandon_impl()
            errs = self._all_gather(err)
            failed = [r for r, e in enumerate(errs) if e]
            if failed:
                reason = f"nvshmem failed on rank{'s' if len(failed) > 1 else ''} {failed}: {errs[failed[0]]}"
                if self._impl is not None:          # it worked here but not everywhere
                    self._abandon_impl()
                if backend == "nvshmem":
                    raise SymmetricError(f"rank {self.rank}/{self.world}: {reason}")
                chosen, self.fallback_reason = "torch", reason
            else:
                chosen = "nvshmem"
        if chosen == "torch":
            try:
                self._open("torch")
            except SymmetricError:
                raise
            except Exception as e:
                raise SymmetricError(f"rank {self.rank}/{self.world}: torch symmetric memory failed on "
                                     f"{self.device}: {type(e).__name__}: {e}") from e
        self.backend = chosen
        if self.fallback_reason:
            log.info("rank %d: symmetric heap uses torch: %s", self.rank, self.fallback_reason)

        # 4. final agreement: same backend, same pool size, everywhere
        final = self._all_gather({"backend": self.backend, "pool_bytes": self.pool_bytes})
        for key in ("backend", "pool_bytes"):
            msg = describe_mismatch(final, key)
            if msg:
                self._abandon_impl()
                raise SymmetricError(f"rank {self.rank}/{self.world}: after initialisation {msg}")
        self._closed = False

    # -- internals

    def _open(self, name):
        impl = _BACKENDS[name]()
        self._impl = impl
        pool, peers = impl.open(self)
        if pool.numel() * pool.element_size() < self.pool_bytes:
            raise SymmetricError(f"rank {self.rank}: the {name} pool has {pool.numel()} bytes, "
                                 f"asked for {self.pool_bytes}")
        self._pool = pool
        self._peer_pools = list(peers)
        addrs = [p.data_ptr() if p is not None else None for p in self._peer_pools]
        self._reachable = reachable_ranks(self.hosts, self.rank, [a is not None for a in addrs])
        self._delta_list = compose_deltas(
            [a if self._reachable[g] else None for g, a in enumerate(addrs)], self.rank)
        self._deltas = None
        self._alloc = PoolAllocator(self.pool_bytes, ALIGNMENT, rank=self.rank, world=self.world)

    def _abandon_impl(self):
        impl, self._impl = self._impl, None
        self._pool = None
        self._peer_pools = []
        if impl is not None:
            try:
                impl.close(self, collective=False)
            except Exception as e:      # pragma: no cover - best effort
                log.warning("rank %d: releasing the %s pool: %s", self.rank, impl.name, e)

    def _resolve_device(self, device):
        import torch
        if device is None:
            if not torch.cuda.is_available():
                raise SymmetricError(f"rank {self.rank}: no CUDA device (pass device=...)")
            return torch.device("cuda", torch.cuda.current_device())
        if isinstance(device, int):
            return torch.device("cuda", device)
        dev = torch.device(device)
        if dev.type == "cuda" and dev.index is None:
            dev = torch.device("cuda", torch.cuda.current_device())
        return dev

    def _device_ctx(self):
        import torch
        if self.device.type == "cuda":
            return torch.cuda.device(self.device)
        return contextlib.nullcontext()

    def _all_gather(self, obj) -> list:
        import torch.distributed as dist
        out = [None] * self.world
        with self._device_ctx():
            dist.all_gather_object(out, obj, group=self.group)
        return out

    def _check_open(self, what):
        if self._closed:
            raise SymmetricError(f"rank {self.rank}: {what} on a closed symmetric heap")

    # -- public API

    @property
    def used_bytes(self) -> int:
        """Bytes of the pool taken by buffers so far (including alignment padding)."""
        return self._alloc.used if not self._closed else 0

    @property
    def free_bytes(self) -> int:
        """Bytes of the pool after the last buffer."""
        return self._alloc.free if not self._closed else 0

    def empty(self, shape, dtype) -> "SymmetricTensor":
        """A new buffer of ``shape`` and ``dtype``, uninitialised, sub-allocated from the pool.

        Local and cheap (no communication).  Guarantees: its offset in the pool is a multiple of
        256 bytes and is the same on every rank **provided every rank allocates the same sizes in
        the same order**; ``.local`` is a contiguous view of the pool.  Raises
        :class:`SymmetricError` naming the requested, free and pool bytes and :data:`POOL_ENV`
        when the pool is exhausted."""
        import torch
        self._check_open("empty()")
        shape = (int(shape),) if isinstance(shape, int) else tuple(int(s) for s in shape)
        if any(s < 0 for s in shape):
            raise SymmetricError(f"rank {self.rank}: negative extent in shape {shape}")
        if not isinstance(dtype, torch.dtype):
            raise SymmetricError(f"rank {self.rank}: dtype must be a torch.dtype, got {dtype!r}")
        itemsize = getattr(dtype, "itemsize", None) or torch.empty((), dtype=dtype).element_size()
        nbytes = prod(shape) * itemsize
        off = self._alloc.allocate(nbytes, what=f"shape {shape} {str(dtype).replace('torch.', '')}")
        local = self._view(self._pool, off, nbytes, shape, dtype)
        return SymmetricTensor(self, local, off, shape, dtype, nbytes)

    def zeros(self, shape, dtype) -> "SymmetricTensor":
        """:meth:`empty`, then the **local** copy set to zero (on the device's current stream).
        Peers see the zeros only after a synchronisation (e.g. :meth:`barrier` after a device
        synchronize, or a kernel-side signal)."""
        t = self.empty(shape, dtype)
        t.local.zero_()
        return t

    def deltas(self):
        """int64 tensor ``[world]`` on the device: ``deltas[g]`` = (address of rank ``g``'s pool as
        mapped in this process) - (address of the local pool); ``0`` for this rank.

        Every buffer is at the same offset in every rank's pool, so ``local_ptr + deltas[g]`` is
        the same buffer on rank ``g`` for every buffer of this heap.  For a rank that is not
        :meth:`reachable` the delta is ``-(local pool address)`` (the sum is a null-page address a
        kernel faults on).  The same tensor is returned on every call; do not modify it."""
        import torch
        self._check_open("deltas()")
        if self._deltas is None:
            self._deltas = torch.tensor(self._delta_list, dtype=torch.int64, device=self.device)
        return self._deltas

    def reachable(self, g: int) -> bool:
        """Whether rank ``g``'s pool is load/store addressable from this rank (``peer(g)`` and
        ``deltas()[g]`` valid).  True for every rank when the group is on one host (all ranks
        reported the same hostname at init) and the backend mapped every pool; False for ranks on
        other hosts (NVSHMEM's ``nvshmem_ptr`` is null there: use put/get, not loads/stores)."""
        if not 0 <= g < self.world:
            raise SymmetricError(f"rank {self.rank}: peer rank {g} outside the group of {self.world}")
        return bool(self._reachable[g]) if not self._closed else g == self.rank

    def barrier(self):
        """Host barrier over the group (``torch.distributed.barrier(group)``); returns when every
        rank has entered it.  It does not order device work: synchronize streams first."""
        import torch.distributed as dist
        with self._device_ctx():
            dist.barrier(group=self.group)

    def verify_allocations(self):
        """Collective check of the allocation order rule: raises :class:`SymmetricError` naming the
        ranks whose buffer list (offsets and sizes, in order) differs from rank 0's, and the first
        buffer that differs."""
        self._check_open("verify_allocations()")
        logs = self._all_gather([(o, n) for o, n, _ in self._alloc.log])
        bad = [r for r, lg in enumerate(logs) if lg != logs[0]]
        if bad:
            r = bad[0]
            k = next((i for i, (a, b) in enumerate(zip(logs[0], logs[r])) if a != b), min(len(logs[0]), len(logs[r])))
            a = logs[0][k] if k < len(logs[0]) else "none"
            b = logs[r][k] if k < len(logs[r]) else "none"
            raise SymmetricError(
                f"rank {self.rank}/{self.world}: allocation order differs from rank 0 on ranks {bad}: "
                f"buffer #{k} is (offset, bytes) {a} on rank 0 but {b} on rank {r} "
                f"({len(logs[0])} vs {len(logs[r])} buffers); allocate the same sizes in the same order everywhere")

    def close(self):
        """Free the pool (and ``nvshmem.core.finalize()`` if axe initialised NVSHMEM and this was its
        last heap).  Collective: every rank calls it; synchronizes the device first.  Idempotent.
        Tensors of this heap must not be used afterwards."""
        if self._closed:
            return
        self._closed = True
        import torch
        if self.device.type == "cuda":
            torch.cuda.synchronize(self.device)
        impl, self._impl = self._impl, None
        self._pool, self._peer_pools, self._deltas = None, [], None
        if impl is not None:
            impl.close(self, collective=True)

    def _abandon(self):
        """Drop this rank's references without any collective call (used when leaving a ``with``
        block by an exception, where peers may not reach a collective)."""
        if self._closed:
            return
        self._closed = True
        self._deltas = None
        self._abandon_impl()

    def __enter__(self):
        """The heap itself."""
        return self

    def __exit__(self, exc_type, exc, tb):
        """:meth:`close` on a normal exit.  On an exception only this rank's references are dropped
        (no barrier, no collective free), since the other ranks may never reach a collective; the
        exception propagates."""
        if exc_type is None:
            self.close()
        else:
            self._abandon()
        return False

    @staticmethod
    def _view(pool, off, nbytes, shape, dtype):
        return pool[off:off + nbytes].view(dtype).view(shape)

    def __repr__(self):
        state = "closed" if self._closed else f"{self.used_bytes}/{self.pool_bytes} bytes used"
        return (f"SymmetricHeap(rank={self.rank}, world={self.world}, backend={getattr(self, 'backend', None)!r}, "
                f"device={self.device}, {state})")


class SymmetricTensor:
    """A buffer of a :class:`SymmetricHeap`: the same ``offset`` in every rank's pool.

    ``local``: this rank's copy (a contiguous torch view into the pool); ``heap``; ``offset``
    (bytes, a multiple of 256, equal on every rank under the allocation order rule); ``shape``,
    ``dtype``, ``nbytes``."""

    __slots__ = ("heap", "local", "offset", "shape", "dtype", "nbytes")

    def __init__(self, heap, local, offset, shape, dtype, nbytes):
        self.heap, self.local, self.offset = heap, local, int(offset)
        self.shape, self.dtype, self.nbytes = tuple(shape), dtype, int(nbytes)

    def peer(self, g: int):
        """A torch view of rank ``g``'s copy (reads and writes go over NVLink); ``peer(rank)`` is
        :attr:`local`.  Raises :class:`SymmetricError` when ``g`` is outside the group or not
        :meth:`SymmetricHeap.reachable` (another host), or when the heap is closed."""
        h = self.heap
        h._check_open(f"peer({g})")
        if not 0 <= g < h.world:
            raise SymmetricError(f"rank {h.rank}: peer rank {g} outside the group of {h.world}")
        if g == h.rank:
            return self.local
        pool = h._peer_pools[g] if h._reachable[g] else None
        if pool is None:
            raise SymmetricError(
                f"rank {h.rank} (host {h.hosts[h.rank]}): rank {g} (host {h.hosts[g]}) is not load/store "
                f"reachable; its copy of this buffer can only be reached by put/get (see heap.reachable)")
        return SymmetricHeap._view(pool, self.offset, self.nbytes, self.shape, self.dtype)

    def data_ptr(self) -> int:
        """Address of the local copy (``local.data_ptr()``)."""
        return self.local.data_ptr()

    def __repr__(self):
        return (f"SymmetricTensor(shape={self.shape}, dtype={self.dtype}, offset={self.offset}, "
                f"rank={self.heap.rank}/{self.heap.world})")
