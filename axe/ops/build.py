"""The kernel build that is open while a kernel body is parsed, as the operator layer sees it.

An operator written in a kernel body reads two things that belong to the build it is parsed in:
the execution scopes the body has entered, and what the body's TIR buffers stand for (the axe
tensors registered for kernel parameters and allocations).  Both live on the open build, never in
module globals, so that each build starts empty and a build opened inside another (a kernel
factory that builds a second kernel) leaves the outer one's state untouched.

The one process-wide fact is which builds are open (a stack: the innermost is current).  The
schedule layer's :class:`~axe.schedules.context.BuildContext` extends :class:`BuildState` with
what dispatch and launch need; it lives above this layer, which must not know about schedules,
so the stack lives here and both layers reach the same open build through it.
"""

from __future__ import annotations

import contextlib
from dataclasses import dataclass, field

__all__ = ["BuildState", "OutsideBuildError", "open_build", "current_build", "innermost_build"]


class OutsideBuildError(RuntimeError):
    """A construct that exists only while a kernel is built was used with no build open."""


@dataclass
class BuildState:
    """What one kernel build holds for the operator layer.

    ``scopes``: the execution scopes entered, innermost last; ``tensors``: the axe tensor each TIR
    buffer stands for, by the buffer's object identity (the one registered last wins).
    """

    scopes: list = field(default_factory=list, kw_only=True)
    tensors: dict = field(default_factory=dict, kw_only=True)


_OPEN: list[BuildState] = []


@contextlib.contextmanager
def open_build(build: BuildState):
    """Make ``build`` the current build for the duration of the ``with`` block."""
    _OPEN.append(build)
    try:
        yield build
    finally:   # by identity: two builds may hold equal values
        del _OPEN[next(i for i in range(len(_OPEN) - 1, -1, -1) if _OPEN[i] is build)]


def innermost_build() -> BuildState | None:
    """The current build, or None when no build is open."""
    return _OPEN[-1] if _OPEN else None


def current_build(what: str) -> BuildState:
    """The current build; ``what`` (the construct that needs one) used with no build open is an
    :class:`OutsideBuildError` naming it."""
    if not _OPEN:
        raise OutsideBuildError(f"{what} outside a kernel build: it exists only while a kernel is parsed "
                                "(axe.lang.build_func or compile_kernel; axe.schedules.building to open one)")
    return _OPEN[-1]
