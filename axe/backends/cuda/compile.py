"""The CUDA backend's build hook: a kernel parsed for an ``sm_*`` target becomes an
:class:`~axe.backends.cuda.artifact.Artifact` (CUDA source, PTX, cubin, launch.json).

``axe.lang.compile_kernel`` parses the kernel with this target's schedules and hands the PrimFunc
and the build context here (the package's ``HOOKS["build_kernel"]``)."""

from __future__ import annotations

__all__ = ["build_kernel", "signature"]


def build_kernel(k, func, ctx, target: str):
    """The artifact of kernel ``k`` parsed for ``target``: what the parse gathered in ``ctx``
    (tensor maps, dynamic shared memory, scratch parameters, the distributed signature) goes to
    :func:`axe.backends.cuda.build.build`; the dispatch records ride along for ``axe demo``."""
    from .build import build
    art = build(func, target=target, name=k.name, tensormaps=tuple(ctx.tensormaps),
                dynamic_smem=ctx.dynamic_smem, scratch=tuple(ctx.scratch),
                distributed=signature(ctx), symbol_max=dict(ctx.symbol_max))
    art.records = ctx.records
    return art


def signature(ctx):
    """The distributed signature gathered while parsing (None for a one-GPU kernel), with the
    signals the kernel's operators reserved."""
    if not ctx.distributed:
        return None
    sig = dict(ctx.distributed)
    if ctx.mesh is not None:
        sig["signals_used"] = ctx.mesh.used
        sig["signal_owners"] = [[base, what] for base, what in sorted(ctx.mesh.names_of.items())]
        if ctx.mesh.copies:
            sig["copies"] = [dict(c) for c in ctx.mesh.copies]
    sig["features"] = list(ctx.features)
    return sig
