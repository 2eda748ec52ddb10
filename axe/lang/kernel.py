"""Kernels as build recipes: a factory that parses a ``@T.prim_func`` under a build context.

Dispatch happens during parsing, so a kernel is built per target: ``build_func(k, "sm_100a")``
re-parses it with that target's schedules.  A kernel carries its torch reference and example
inputs so a GPU runner can check it.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable

from axe.ops.scope import reset_scopes
from axe.ops.tensor import reset_tensors
from axe.schedules import building, format_records

__all__ = ["Kernel", "kernel", "build_func", "compile_kernel", "explain", "kernels_of", "without_params"]


@dataclass
class Kernel:
    """``factory()`` returns the PrimFunc; ``reference(**inputs)`` (torch) the expected outputs;
    ``inputs(device)`` example inputs by parameter name; ``outputs`` the names written;
    ``grid``/``threads`` the launch shape."""

    name: str
    factory: Callable
    reference: Callable | None = None
    inputs: Callable | None = None
    outputs: tuple = ()
    meta: dict = field(default_factory=dict)


def kernel(name=None, reference=None, inputs=None, outputs=(), **meta):
    """Decorate a PrimFunc factory as an axe kernel."""
    def deco(fn):
        return Kernel(name or fn.__name__, fn, reference, inputs, tuple(outputs), meta)
    return deco


def build_func(k: Kernel, target: str = "sm_90a", features=()):
    """Parse the kernel for ``target`` (declaring ``features``, e.g. ``("multicast",)``):
    ``(PrimFunc, BuildContext)`` (records, tensormaps, the distributed signature)."""
    with building(target, features) as ctx:
        reset_scopes()
        reset_tensors()
        try:
            func = k.factory()
        finally:
            reset_scopes()
            reset_tensors()
    return func.with_attr("global_symbol", k.name), ctx


def compile_kernel(k: Kernel, target: str = "sm_90a", features=()):
    """Build the artifact (CUDA source, PTX, cubin, launch metadata) through the CUDA backend."""
    from axe.backends.cuda.build import build
    func, ctx = build_func(k, target, features)
    art = build(func, target=target, name=k.name, tensormaps=tuple(ctx.tensormaps),
                dynamic_smem=ctx.dynamic_smem, scratch=tuple(ctx.scratch),
                distributed=_signature(ctx))
    art.records = ctx.records
    return art


def _signature(ctx):
    """The distributed signature gathered while parsing (None for a one-GPU kernel), with the
    signals the kernel's operators reserved."""
    if not ctx.distributed:
        return None
    sig = dict(ctx.distributed)
    if ctx.mesh is not None:
        sig["signals_used"] = ctx.mesh.used
        sig["signal_owners"] = [[base, what] for base, what in sorted(ctx.mesh.names_of.items())]
    sig["features"] = list(ctx.features)
    return sig


def without_params(func, names):
    """``func`` without the parameters ``names`` (a kernel written once for several
    configurations declares every configuration's parameters; those a build does not use leave
    its call signature).  Raises ``ValueError`` if the body uses one of them."""
    import tvm
    names = set(names)
    used = {v.name for v in tvm.tirx.analysis.undefined_vars(func.body)}   # the body's free variables
    for p in func.params:
        if p.name in names and p.name in used:
            raise ValueError(f"without_params: {p.name} is used by the kernel")
    keep = [p for p in func.params if p.name not in names]
    return tvm.tirx.PrimFunc(keep, func.body, func.ret_type, func.attrs)


def explain(k: Kernel, target: str = "sm_90a") -> str:
    """For each operator call: the candidates, why each declined, what was chosen."""
    _, ctx = build_func(k, target)
    return f"kernel {k.name} on {target}\n\n" + format_records(ctx.records)


def kernels_of(module) -> dict:
    """The kernels a module defines (module-level :class:`Kernel` values), by name."""
    return {v.name: v for v in vars(module).values() if isinstance(v, Kernel)}
