"""The execution scope a CUDA construct acts in (the language's scope stack, :mod:`axe.ops.scope`)."""

from __future__ import annotations

from axe.ops.scope import ExecScope, current_scope

__all__ = ["scope_or_cta"]


def scope_or_cta() -> ExecScope:
    """The innermost scope; a construct written before the kernel's launch is an error."""
    s = current_scope()
    if s is None:
        raise RuntimeError("axe operator outside a kernel: call axe.lang.launch(grid, threads) first")
    return s
