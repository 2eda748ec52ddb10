"""Launch a distributed artifact on every rank of a process group.

A distributed kernel (built with ``Ax.mesh`` / ``Ax.dtensor``) carries its signature in
``launch["distributed"]``: the mesh, each distributed parameter's global shape and Axe layout
(or DTensor placements), which parameters are symmetric, and which parameters the runtime fills
(the peer delta table, the signal flags, the error record, rank, epoch, timeout).
:class:`DistKernel` checks the caller's arguments against that signature **before** launching —
a mismatch names the parameter, the mesh dimension and both layouts — fills the runtime
parameters, counts launches (the epoch every signal carries; all ranks must launch the same
kernel the same number of times), launches each call signature through one launch plan (checked
once, its epoch rewritten per launch), and turns a wait that timed out on the GPU into a
:class:`PeerTimeoutError` naming the rank that did not arrive and the signal.

Only torch and ``cuda.bindings`` are imported, lazily; TVM never is.
"""

from __future__ import annotations

from math import prod

from .launcher import Kernel, LaunchError

__all__ = ["DistKernel", "PeerTimeoutError", "DistributedSignatureError", "check_argument"]

_ERROR_WORDS = 8


class PeerTimeoutError(RuntimeError):
    """A wait on another GPU passed its timeout: a peer died, or launched something else."""


class DistributedSignatureError(LaunchError):
    """An argument does not fit the kernel's distributed signature (layout, mesh, world size)."""


def _is_dtensor(v) -> bool:
    return type(v).__name__ == "DTensor" and hasattr(v, "placements") and hasattr(v, "to_local")


def check_argument(kname: str, name: str, decl: dict, value, mesh: dict):
    """Check one distributed argument against its declaration; return the local torch tensor.

    ``value``: a torch DTensor (its mesh, placements and global shape are compared with the
    declared layout through :func:`axe.layout.interop.dtensor.check_layout`; a
    ``Partial("sum")`` DTensor matches a declaration with ``partial_dim``), a
    :class:`~axe.runtime.symmetric.SymmetricTensor`, or a plain per-rank tensor (its shape must be
    the declared local shard).  Raises :class:`DistributedSignatureError` naming the parameter.
    """
    from axe.layout import parse
    local_shape = tuple(decl["local_shape"])
    if _is_dtensor(value):
        from axe.layout.interop.dtensor import LayoutMismatch, check_layout, mesh_of
        shape = tuple(decl["shape"])
        L = parse(decl["layout"])
        got = mesh_of(value.device_mesh)
        if tuple(got.shape) != tuple(mesh["shape"]):
            raise DistributedSignatureError(
                f"{kname}: argument {name!r} is a DTensor on a mesh of shape {tuple(got.shape)}; the "
                f"kernel was built for mesh {tuple(mesh['shape'])} {tuple(mesh['names'])}")
        pdim = decl.get("partial_dim")
        try:
            if pdim is not None and tuple(value.shape) == shape[:pdim] + shape[pdim + 1:]:
                _check_partial(kname, name, value, decl)
            else:
                check_layout(value, L)
        except LayoutMismatch as err:
            raise DistributedSignatureError(f"{kname}: argument {name!r}: {err}") from None
        value = value.to_local()
    elif hasattr(value, "local") and hasattr(value, "heap"):
        value = value.local
    buffer_shape = tuple(decl.get("buffer_shape", local_shape))
    if tuple(value.shape) not in (local_shape, buffer_shape):
        raise DistributedSignatureError(
            f"{kname}: argument {name!r} has local shape {tuple(value.shape)}, expected the shard "
            f"{local_shape} of global {tuple(decl['shape'])} under {decl['layout']}"
            + (f" (or its view {buffer_shape})" if buffer_shape != local_shape else "")
            + (" (unequal shards are not supported)" if prod(value.shape) != prod(local_shape) else ""))
    if tuple(value.shape) != buffer_shape:      # the kernel reads the shard through another row-major shape
        if not value.is_contiguous():
            raise DistributedSignatureError(f"{kname}: argument {name!r} must be contiguous (call .contiguous())")
        value = value.view(buffer_shape)
    return value


def _check_partial(kname, name, value, decl):
    from axe.layout.interop.dtensor import as_placement, format_placements
    places = [as_placement(p) for p in value.placements]
    if len(places) != 1 or type(places[0]).__name__ != "Partial" or places[0].reduce_op not in ("sum", "RedOpType.SUM"):
        raise DistributedSignatureError(
            f"{kname}: argument {name!r} has placements {format_placements(places)}; the kernel sums dim "
            f"{decl['partial_dim']} of {decl['layout']}, which takes a DTensor placed [Partial('sum')]")


class DistKernel:
    """A distributed artifact bound to a :class:`~axe.runtime.symmetric.SymmetricHeap`.

    ``k(*args)`` takes the kernel's own arguments in order (everything but the parameters the
    runtime fills and scratch parameters), as torch DTensors, SymmetricTensors or per-rank
    tensors; checks them; launches on the current stream.  ``k.synchronize()`` waits for the
    GPU and raises :class:`PeerTimeoutError` if any wait timed out.  ``timeout`` (seconds)
    bounds every wait on another GPU.
    """

    def __init__(self, artifact, heap, timeout: float = 10.0):
        import torch
        self.kernel = artifact if isinstance(artifact, Kernel) else Kernel(artifact)
        self.launch = self.kernel.launch
        self.name = self.launch["name"]
        dist = self.launch.get("distributed")
        if not dist or "runtime" not in dist:
            raise DistributedSignatureError(f"{self.name}: not a distributed kernel (no mesh in launch.json)")
        if dist.get("multicast"):
            _refuse_multicast(self.name)
        if dist.get("nvshmem") and getattr(heap, "backend", None) != "nvshmem":
            raise DistributedSignatureError(
                f"{self.name} calls NVSHMEM on the device (put-with-signal): it needs a heap on NVSHMEM "
                f"(SymmetricHeap(backend='nvshmem')), whose symmetric addresses and PE numbers it uses; this heap "
                f"is on {getattr(heap, 'backend', type(heap).__name__)!r}")
        self.dist, self.heap, self.timeout = dist, heap, float(timeout)
        if heap.world != dist["world"]:
            raise DistributedSignatureError(
                f"{self.name}: built for a mesh of {dist['world']} GPUs {tuple(dist['mesh']['shape'])}, but the "
                f"process group has {heap.world}; rebuild it for world={heap.world}")
        self.device = heap.device
        if dist.get("nvshmem"):
            self._nvshmem_module_init()
        sig = {a["name"]: a for a in self.launch["args"]}
        rt = dist["runtime"]
        symmetric = {rt["signals"]: heap.zeros(tuple(sig[rt["signals"]]["shape"]), torch.int32)}
        for n, d in dist.get("params", {}).items():
            if d.get("scratch"):
                symmetric[n] = heap.zeros(tuple(sig[n]["shape"]), getattr(torch, sig[n]["dtype"]))
        self._fill = {rt["peers"]: heap.deltas(),
                      rt["errors"]: torch.zeros(_ERROR_WORDS, dtype=torch.int32, device=self.device)}
        self._fill.update({n: t.local for n, t in symmetric.items()})
        self._stage = None
        if dist.get("copies"):
            from .staging import CopyStage
            self._stage = CopyStage(self.name, dist["copies"], heap, symmetric, rt["signals"])
        # every rank's zero-filled signals and scratch are in place before any rank can launch: a peer's
        # first signal must not land before this rank's zero-fill, which would erase it
        if torch.device(self.device).type == "cuda":
            torch.cuda.synchronize(self.device)
        heap.barrier()
        self._scalars = {rt["rank"]: "rank", rt["epoch"]: "epoch", rt["timeout"]: "timeout"}
        self.user_args = [a for a in self.launch["args"] if a["name"] not in self._fill
                          and a["name"] not in self._scalars and not a.get("scratch")]
        self.epoch = 0
        self.failed = None
        self._stream = None     # the CUstream handle of the first launch; every later one must match
        #: the kernel parameters that carry the epoch (a scalar passed as is: rewritable in a plan)
        self._epoch_params = [i for i, p in enumerate(self.launch["params"])
                              if p["kind"] == "scalar" and p.get("value") == rt["epoch"]]
        self._epoch_at = next(i for i, a in enumerate(self.launch["args"]) if a["name"] == rt["epoch"])
        self._plans = {}        # signature key (epoch left out) -> (LaunchPlan, the ctypes values of its epoch)

    def _nvshmem_module_init(self):
        """Load the cubin (linked with NVSHMEM's device library at build) and let NVSHMEM set up
        the module's device state (``nvshmemx_cumodule_init``) before any launch; the module then
        lives as long as the process, like every module the runtime loads."""
        import torch
        import nvshmem.core as nvcore
        from nvshmem import bindings
        built = self.dist.get("nvshmem_version")
        here = nvcore.get_version().libnvshmem_version
        if built and built != here:
            raise DistributedSignatureError(
                f"{self.name} was linked with NVSHMEM {built}'s device library, but this machine's NVSHMEM host "
                f"library is {here}; NVSHMEM needs both from one release: rebuild it with NVSHMEM_HOME (or the "
                f"nvidia-nvshmem-cu13 wheel) at {here}")
        index = torch.device(self.device).index
        module = self.kernel.module(torch.cuda.current_device() if index is None else index)
        status = bindings.cumodule_init(int(module))
        if status not in (None, 0):
            raise DistributedSignatureError(f"{self.name}: nvshmemx_cumodule_init failed (status {status})")

    def __repr__(self):
        return (f"DistKernel {self.name}({', '.join(a['name'] for a in self.user_args)}) on "
                f"{self.heap.world} GPUs, rank {self.heap.rank}")

    def arguments(self, *args) -> tuple:
        """The full argument tuple for the launch (checks the distributed signature)."""
        if len(args) != len(self.user_args):
            raise DistributedSignatureError(
                f"{self.name}({', '.join(a['name'] for a in self.user_args)}): expected {len(self.user_args)} "
                f"arguments, got {len(args)}")
        params = self.dist.get("params", {})
        given = {}
        for a, v in zip(self.user_args, args):
            n = a["name"]
            if n in params:
                decl = params[n]
                if decl.get("symmetric"):
                    if not (hasattr(v, "heap") and hasattr(v, "local")):
                        raise DistributedSignatureError(
                            f"{self.name}: argument {n!r} must be a SymmetricTensor of this heap (peers read "
                            f"it over NVLink); got {type(v).__name__} — allocate it with heap.empty(...)")
                    if v.heap is not self.heap:
                        raise DistributedSignatureError(f"{self.name}: argument {n!r} comes from another heap")
                v = check_argument(self.name, n, decl, v, self.dist["mesh"])
            given[n] = v
        values = {"rank": self.heap.rank, "epoch": self.epoch + 1, "timeout": int(self.timeout * 1e9)}
        out = []
        for a in self.launch["args"]:
            n = a["name"]
            if n in given:
                out.append(given[n])
            elif n in self._fill:
                out.append(self._fill[n])
            elif n in self._scalars:
                out.append(values[self._scalars[n]])
        return tuple(out)

    def __call__(self, *args, stream=None, check: bool = False):
        """Check and launch (through the signature's launch plan: :meth:`_launch`); ``check=True``
        also synchronizes and raises on a timed-out wait.  Returns the plan launched through."""
        if self.failed:
            raise PeerTimeoutError(f"{self.name}: an earlier launch failed ({self.failed}); the ranks' launch "
                                   "counts no longer agree — recreate the kernel on every rank")
        self._check_stream(stream)
        full = self.arguments(*args)
        if self.epoch + 1 >= 2**31 - 1:
            raise LaunchError(f"{self.name}: launch count overflows the int32 epoch")
        if self._stage is not None:
            import torch
            caller = (torch.cuda.current_stream(self.device) if stream is None else stream
                      if isinstance(stream, torch.cuda.Stream)
                      else torch.cuda.ExternalStream(int(getattr(stream, "cuda_stream", stream)), device=self.device))
            self._stage.before({a["name"]: v for a, v in zip(self.launch["args"], full)}, self.epoch + 1, caller)
        plan = self._launch(full, stream)
        if self._stage is not None:
            self._stage.after(caller)
        self.epoch += 1
        if check:
            self.synchronize()
        return plan

    def _launch(self, full, stream):
        """Launch ``full`` (:meth:`arguments`' tuple) through the :class:`~axe.runtime.plan.LaunchPlan`
        of its signature with the epoch slot rewritten; returns the plan.

        The epoch changes at every launch, and the kernel's checked path keys its plans by every
        scalar, so a launch through it would re-run every check, re-encode every tensor map and make
        a new plan each time.  Law: the launch is the one ``self.kernel(*full)`` makes — the plan
        was made by that path from a call of the same signature (tensors' dtypes, shapes, strides,
        devices; scalars other than the epoch equal) with epoch 0, a value no launch passes (epochs
        count from 1), and only the epoch's parameter bytes are written anew (the driver copies the
        parameters at launch, so rewriting them after a launch returns cannot change it).  An
        artifact that passes the epoch through an expression takes the checked path every time."""
        import torch
        raw = None if stream is None else int(getattr(stream, "cuda_stream", stream))
        if not self._epoch_params:
            self.kernel(*full, stream=raw)
            return None
        key = tuple((v.dtype, tuple(v.shape), v.stride(), v.device) if isinstance(v, torch.Tensor) else (type(v), v)
                    for i, v in enumerate(full) if i != self._epoch_at)
        got = self._plans.get(key)
        if got is None:
            fixed = full[:self._epoch_at] + (0,) + full[self._epoch_at + 1:]
            plan = self.kernel.plan(*fixed, stream=raw)
            got = self._plans[key] = (plan, [plan.pack.scalar(i) for i in self._epoch_params])
        plan, slots = got
        for c in slots:
            c.value = full[self._epoch_at]
        plan(tuple(int(v.data_ptr()) for v in full if isinstance(v, torch.Tensor)), raw)
        return plan

    def _check_stream(self, stream):
        """Launches of one DistKernel share its signals, epochs and symmetric scratch, which are
        right only for launches in order: every launch goes to the stream of the first one."""
        import torch
        if stream is None:
            stream = torch.cuda.current_stream(self.device)
        handle = int(getattr(stream, "cuda_stream", stream))
        if self._stream is None:
            self._stream = handle
        elif handle != self._stream:
            raise LaunchError(
                f"{self.name}: launched on stream {handle:#x}, but its earlier launches went to stream "
                f"{self._stream:#x}; one DistKernel's launches share signal flags, launch epochs and symmetric "
                "scratch, so they must run in order on one stream — create another DistKernel (on every rank) "
                "for another stream")

    def synchronize(self):
        """Wait for this device, then raise :class:`PeerTimeoutError` if a wait on another GPU
        timed out (a wait on another CTA that timed out raises
        :class:`~axe.runtime.report.WaitTimeoutError` from the synchronize itself)."""
        from .launcher import synchronize
        synchronize(self.device)
        rec = self._fill[self.dist["runtime"]["errors"]].tolist()
        if rec[0] == 0:
            return
        me, src, index, want, seen, cta = rec[1:7]
        owner = "?"
        for base, what in self.dist.get("signal_owners", []):
            if base <= index:
                owner = what
        self.failed = (f"rank {me} waited {self.timeout:g} s for signal {index} ({owner}) from rank {src} "
                       f"in CTA {cta}: wanted launch {want}, saw {seen}")
        raise PeerTimeoutError(f"{self.name}: {self.failed}; rank {src} did not arrive (it died, or did not "
                               f"launch {self.name} as often as rank {me})")


def _refuse_multicast(name):
    """Artifacts that execute NVLink multicast never run where multicast is switched off."""
    import os
    off = (os.environ.get("NCCL_NVLS_ENABLE") == "0" or os.environ.get("TORCH_SYMM_MEM_DISABLE_MULTICAST") == "1"
           or os.environ.get("NVSHMEM_DISABLE_NVLS") == "1")
    raise DistributedSignatureError(
        f"{name} executes NVLink multicast (multimem); axe does not launch multicast kernels"
        + (" and this machine keeps multicast off" if off else "") + ": it is verified by compilation only")
