"""Distributed kernels that take and return torch DTensors.

A distributed artifact's signature (``launch["distributed"]["params"]``, written by
``Ax.dtensor``) gives each distributed parameter its global shape and Axe layout over the
kernel's mesh.  :class:`DTensorKernel` wraps a :class:`axe.runtime.distributed.DistKernel`:
arguments may be DTensors (the DistKernel checks each against its declared layout), and the
outputs come back as DTensors whose mesh is the caller's ``device_mesh`` and whose placements
are **read from the signature** (:func:`signature_placements`): the declared placements, or
those the declared layout reads as (a mesh dimension of size 1 reads as ``Replicate``), not
the caller's.  A parameter declared with ``partial_dim`` (summed over a mesh dimension by the kernel's
readers) comes back as ``Partial("sum")`` over its shape without that dimension.
"""

from __future__ import annotations

import re

__all__ = ["DTensorKernel", "signature_placements", "parse_placements", "to_torch_placements", "as_dtensor"]


def signature_placements(launch: dict, name: str):
    """``(global shape, axe placements)`` of parameter ``name`` in ``launch``'s distributed
    signature.  Law: ``to_layout(shape, mesh, placements)`` has the declared layout's map
    (checked by :func:`axe.layout.interop.dtensor.to_placements`, which raises ``LayoutError``
    naming the dimension when the layout is not a DTensor placement)."""
    from axe.layout.interop.dtensor import DeviceMesh, Partial, to_placements
    dist = launch.get("distributed") or {}
    params = dist.get("params", {})
    if name not in params:
        raise KeyError(f"{launch.get('name', 'kernel')}: {name!r} is not a distributed parameter "
                       f"({', '.join(params) or 'none'})")
    decl, mesh = params[name], dist["mesh"]
    shape = tuple(decl["shape"])
    pdim = decl.get("partial_dim")
    if pdim is not None:          # one full-size partial per device of the (one-dimensional) mesh
        if len(mesh["shape"]) != 1:
            raise ValueError(f"{launch.get('name')}: partial parameter {name!r} on a {len(mesh['shape'])}-d mesh")
        return shape[:pdim] + shape[pdim + 1:], (Partial("sum"),)
    if decl.get("placements"):    # declared with placements (Ax.dtensor(placements=...)): those
        return shape, parse_placements(decl["placements"])
    return shape, tuple(to_placements(decl["layout"], shape, DeviceMesh(mesh["shape"], mesh["names"])))


_PLACEMENT = re.compile(r"\s*(?:Shard\((\d+)\)|(Replicate)\(\)|Partial\('(\w+)'\))\s*(?:,|$)")


def parse_placements(text: str) -> tuple:
    """``"(Shard(1), Replicate())"`` (as :func:`~axe.layout.interop.dtensor.format_placements`
    writes it) -> axe placements; raises ``ValueError`` naming the text otherwise."""
    from axe.layout.interop.dtensor import Partial, Replicate, Shard
    body = text.strip()
    if not (body.startswith("(") and body.endswith(")")):
        raise ValueError(f"placements {text!r} are not a parenthesized list")
    body, out, pos = body[1:-1], [], 0
    while pos < len(body):
        m = _PLACEMENT.match(body, pos)
        if m is None:
            raise ValueError(f"placements {text!r}: cannot read {body[pos:]!r}")
        out.append(Shard(int(m.group(1))) if m.group(1) else Replicate() if m.group(2) else Partial(m.group(3)))
        pos = m.end()
    return tuple(out)


def to_torch_placements(placements) -> tuple:
    """torch's ``Shard``/``Replicate``/``Partial`` for axe's."""
    from torch.distributed.tensor import Partial, Replicate, Shard
    out = []
    for p in placements:
        kind = type(p).__name__
        out.append(Shard(p.dim) if kind == "Shard" else Replicate() if kind == "Replicate" else Partial(p.reduce_op))
    return tuple(out)


def as_dtensor(local, launch: dict, name: str, device_mesh):
    """``local`` (this rank's part of parameter ``name``) as a DTensor on ``device_mesh`` with the
    signature's global shape and placements; the mesh's shape must be the signature's."""
    from torch.distributed.tensor import DTensor
    want = tuple(launch["distributed"]["mesh"]["shape"])
    if tuple(device_mesh.shape) != want:
        raise ValueError(f"{launch.get('name')}: device mesh of shape {tuple(device_mesh.shape)}; the kernel "
                         f"was built for mesh {want}")
    import torch
    shape, places = signature_placements(launch, name)
    decl = launch["distributed"]["params"][name]
    if decl.get("partial_dim") is None:        # the kernel may see its shard through another shape
        local = local.reshape(tuple(decl["local_shape"]))
    stride = torch.empty(shape, device="meta").stride()
    return DTensor.from_local(local, device_mesh, to_torch_placements(places), run_check=False,
                              shape=torch.Size(shape), stride=stride)


class DTensorKernel:
    """``DTensorKernel(dist_kernel, device_mesh, outputs)(*args)``: launch ``dist_kernel`` (a
    :class:`~axe.runtime.distributed.DistKernel`, or anything with its ``launch``,
    ``user_args`` and call) on ``args`` — DTensors, SymmetricTensors or per-rank tensors — and
    return the arguments named in ``outputs`` as DTensors (one value for one name, else a
    tuple) placed as the signature says."""

    def __init__(self, dist_kernel, device_mesh, outputs):
        self.kernel, self.mesh = dist_kernel, device_mesh
        self.outputs = (outputs,) if isinstance(outputs, str) else tuple(outputs)
        names = [a["name"] for a in dist_kernel.user_args]
        for o in self.outputs:
            if o not in names:
                raise ValueError(f"{dist_kernel.launch['name']}: output {o!r} is not an argument ({', '.join(names)})")
            signature_placements(dist_kernel.launch, o)      # a layout with no DTensor form fails here, early
        self._index = [names.index(o) for o in self.outputs]

    def __call__(self, *args, **kw):
        self.kernel(*args, **kw)
        outs = [as_dtensor(_local(args[i]), self.kernel.launch, o, self.mesh) for i, o in zip(self._index, self.outputs)]
        return outs[0] if len(outs) == 1 else tuple(outs)


def _local(v):
    """A SymmetricTensor's or DTensor's local tensor; a tensor itself."""
    if hasattr(v, "local") and hasattr(v, "heap"):
        return v.local
    return v.to_local() if hasattr(v, "to_local") else v
