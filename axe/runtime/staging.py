"""The copy-engine staging a distributed kernel asks for (``launch["distributed"]["copies"]``,
declared with :meth:`axe.lang.Mesh.copy_before_launch`): before each launch, this rank's rows go
into every peer's symmetric buffer by ``cudaMemcpyAsync`` over NVLink, each copy followed by a
signal on the peer, on a stream beside the caller's — so the kernel computes while the copy
engines move the rows, and waits (bounded, like every wait on a peer) only for rows it reaches.

Law, per launch of epoch ``e`` on rank ``r`` of ``w``, for each declared copy: each peer
``p = (r − s) mod w``, ``s = 1 … w − 1``, receives ``src`` (``rows`` contiguous rows) at ``dst``'s rows
``((e mod 2)·w + r)·rows …``, and then its signal ``signal + r`` becomes ``e`` — each peer on a side
stream of its own (``s``), so the copies to different peers run on different copy engines at once.
The side streams start after the caller's stream has reached the launch (the source is ready, and
this rank's previous launch — hence every peer's read of the half written now — has finished); the
caller's stream waits for them after the launch, so nothing the caller enqueues later can
overwrite the source before it is copied.  Only torch and ``cuda.bindings`` are used.
"""

from __future__ import annotations

from .driver import LaunchError, check_result, cuda_driver

__all__ = ["CopyStage"]


class CopyStage:
    """The staging of one :class:`~axe.runtime.distributed.DistKernel`: ``decls`` (the artifact's
    ``copies``), ``symmetric`` (argument name → :class:`~axe.runtime.symmetric.SymmetricTensor` of
    the runtime-filled destinations and signals) and the name of the signal argument."""

    def __init__(self, kname, decls, heap, symmetric, signals):
        import torch
        self.kname, self.decls, self.heap, self.sym, self.signals = kname, decls, heap, symmetric, signals
        for d in decls:
            if d["dst"] not in symmetric:
                raise LaunchError(f"{kname}: the staged copy's destination {d['dst']!r} is not a symmetric "
                                  "buffer the runtime fills")
        self.streams = [torch.cuda.Stream(device=heap.device) for _ in range(heap.world - 1)]
        self.driver = cuda_driver()

    def before(self, tensors, epoch, caller):
        """Enqueue launch ``epoch``'s copies and signals on the side streams (the module's law);
        ``tensors``: the launch's arguments by name; ``caller``: the torch stream of the launch."""
        import torch
        w, r = self.heap.world, self.heap.rank
        drv = self.driver
        for d in self.decls:
            src = tensors[d["src"]]
            if not src.is_contiguous() or src.shape[0] != d["rows"]:
                raise LaunchError(f"{self.kname}: argument {d['src']!r} is staged to the peers as "
                                  f"{d['rows']} contiguous rows; got shape {tuple(src.shape)}"
                                  f"{'' if src.is_contiguous() else ', not contiguous'}")
        for s, stream in enumerate(self.streams, 1):
            p = (r - s) % w
            stream.wait_stream(caller)
            with torch.cuda.stream(stream):
                for d in self.decls:
                    src = tensors[d["src"]]
                    flat, n = src.reshape(-1), src.numel()
                    at = ((epoch % 2) * w + r) * n
                    self.sym[d["dst"]].peer(p).reshape(-1)[at:at + n].copy_(flat, non_blocking=True)
                    flag = self.sym[self.signals].peer(p).data_ptr() + 4 * (d["signal"] + r)
                    check_result(drv, drv.cuStreamWriteValue32(drv.CUstream(stream.cuda_stream),
                                                                drv.CUdeviceptr(flag), epoch, 0),
                                 f"{self.kname}: cuStreamWriteValue32 (the signal to rank {p})")

    def after(self, caller):
        """The caller's stream waits for this launch's copies."""
        for stream in self.streams:
            caller.wait_stream(stream)
