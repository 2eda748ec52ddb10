"""The build context: everything one kernel build gathers while its body is parsed.

A :class:`BuildContext` is the operator layer's :class:`~axe.ops.build.BuildState` (scopes entered,
tensors registered) plus what dispatch and launch need: the target, the dispatch records, the TMA
descriptor specs, the launch.  It exists only inside :func:`building`; asking for it outside one
is an error naming what asked, never a made-up default build.
"""

from __future__ import annotations

import contextlib
import functools
import importlib
import sys
from dataclasses import dataclass, field

from axe.ops.build import BuildState, OutsideBuildError, current_build, open_build

__all__ = ["BuildContext", "building", "current_context", "target_family", "target_arch"]


def target_family(target: str) -> str:
    """The backend family whose ``HOOKS["targets"]`` prefixes ``target`` starts with (``sm_90a`` →
    ``cuda``, ``trn1`` → ``neuron``); else the target's own name (a backend folder named after it)."""
    for prefix, family in _target_prefixes():
        if target.startswith(prefix):
            return family
    return target


@functools.cache
def _target_prefixes() -> tuple:
    """``(prefix, family)`` of every backend (packages under ``axe.backends``, found by folder; a
    backend package's import is light: its ``HOOKS`` name modules without importing them)."""
    from .registry import families
    out = []
    for family in families():
        hooks = getattr(importlib.import_module(f"axe.backends.{family}"), "HOOKS", {})
        out.extend((prefix, family) for prefix in hooks.get("targets", ()))
    return tuple(sorted(out, key=lambda pf: -len(pf[0])))       # the longest prefix wins


def target_arch(target: str) -> int:
    """The SM number of a CUDA target (``sm_90a`` → 90); 0 for other targets."""
    if not target.startswith("sm_"):
        return 0
    return int("".join(ch for ch in target[3:] if ch.isdigit()))


@dataclass
class BuildContext(BuildState):
    """State gathered while one kernel is parsed: what dispatch chose and what launch needs.

    ``tensormaps``: one spec dict per CUtensorMap parameter (the runtime encodes them at
    launch); ``records``: one :class:`~axe.schedules.dispatch.DispatchRecord` per operator call.
    """

    target: str = "sm_90a"
    records: list = field(default_factory=list)
    tensormaps: list = field(default_factory=list)
    scratch: list = field(default_factory=list)     # parameters the runtime supplies (zero-filled)
    dynamic_smem: int | None = None
    counter: int = 0
    grid: tuple = ()                # the launch: CTA index expression and grid extents (Ax.launch)
    mesh: object = None             # the device mesh a distributed kernel declared (Ax.mesh)
    distributed: dict = field(default_factory=dict)   # its signature, for launch.json
    features: tuple = ()            # what the target declares beyond its arch ("multicast", "nvshmem")
    #: the largest value a shape symbol may take at launch (a kernel built for a bounded range of M)
    symbol_max: dict = field(default_factory=dict)
    #: layout inference (:class:`~axe.schedules.infer.InferState`): open tiles, recorded calls, fixes
    infer: object = None

    @property
    def family(self) -> str:
        return target_family(self.target)

    @property
    def arch(self) -> int:
        return target_arch(self.target)

    def fresh(self, stem: str) -> str:
        self.counter += 1
        return f"{stem}{self.counter}"

    def add_tensormap(self, spec: dict) -> None:
        """Record a TMA descriptor; one parameter may take one spec only."""
        for old in self.tensormaps:
            if old["param"] == spec["param"]:
                if old != spec:
                    raise ValueError(f"tensor map {spec['param']}: two different descriptors requested "
                                     f"({old} and {spec}); declare one tensormap parameter per box")
                return
        self.tensormaps.append(spec)


def current_context(what: str | None = None) -> BuildContext:
    """The innermost open build context.  Outside :func:`building` this is an
    :class:`~axe.ops.build.OutsideBuildError` naming ``what`` asked (by default the calling
    function): a construct that needs the build's target or records has no meaning outside one."""
    what = what or f"{sys._getframe(1).f_code.co_qualname}() (asking for the build context)"
    ctx = current_build(what)
    if not isinstance(ctx, BuildContext):
        raise OutsideBuildError(f"{what}: the open build is an operator-level {type(ctx).__name__}, "
                                "not a BuildContext (open it with axe.schedules.building)")
    return ctx


@contextlib.contextmanager
def building(target: str = "sm_90a", features=()):
    """Open a fresh build context for ``target`` (declaring ``features``); operator dispatch,
    scopes and tensors inside use it."""
    with open_build(BuildContext(target=target, features=tuple(features))) as ctx:
        yield ctx
