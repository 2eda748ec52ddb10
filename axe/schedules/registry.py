"""The registry of schedules per (operator, target family)."""

from __future__ import annotations

import functools
from dataclasses import dataclass
from typing import Callable

from axe.layout import LayoutError

__all__ = ["Schedule", "register", "add_schedule", "candidates", "all_schedules", "families", "declining",
           "refusal"]


@dataclass(frozen=True)
class Schedule:
    """``check(call, ctx) -> plan | str`` (a str is the reason it declines; a check declines by
    returning, and anything it raises is a :class:`~axe.schedules.dispatch.ScheduleBug`);
    ``emit(call, plan, ctx)``.

    ``requires`` is a one-line statement of what the schedule needs of the layouts (for docs
    and explain); ``priority``: higher is tried first.  ``devices``: the schedule addresses memory
    of other GPUs (operands whose layouts name ``gpuid``, or views of a peer's memory); dispatch
    offers such operands to these schedules only.  ``broadcasts``: the schedule serves a call
    marked ``attrs["broadcast"]`` (a source right-aligned to a higher rank, numpy's rule);
    dispatch offers such calls to these schedules only.
    """

    op: str
    name: str
    family: str
    priority: int
    check: Callable
    emit: Callable
    requires: str = ""
    devices: bool = False
    broadcasts: bool = False


_REGISTRY: list[Schedule] = []


def refusal(err: Exception) -> str:
    """The reason a check returns for a refusal it caught (``"LayoutError: <message>"``)."""
    return f"{type(err).__name__}: {err}"


def declining(*refusals: type):
    """Decorate a check whose questions to the layout algebra (or another named model) may be
    answered by raising one of ``refusals`` (default :class:`~axe.layout.LayoutError`: "no layout
    has that map", "does not group by the shape"): such an answer is returned as the check's
    reason (:func:`refusal`).  Anything else the check raises stays a bug for dispatch to report."""
    caught = refusals or (LayoutError,)

    def deco(check):
        @functools.wraps(check)
        def run(call, ctx, *args, **kwargs):
            try:
                return check(call, ctx, *args, **kwargs)
            except caught as err:
                return refusal(err)
        return run
    return deco


def add_schedule(op: str, name: str, family: str = "*", priority: int = 0, requires: str = "", *,
                 check: Callable, emit: Callable, devices: bool = False, broadcasts: bool = False) -> Schedule:
    """Register ``check``/``emit`` as schedule ``name`` of ``op`` (replacing one of that name)."""
    sched = Schedule(op, name, family, priority, check, emit, requires, devices, broadcasts)
    for i, old in enumerate(_REGISTRY):
        if (old.op, old.name, old.family) == (op, name, family):
            _REGISTRY[i] = sched
            break
    else:
        _REGISTRY.append(sched)
    return sched


def register(op: str, name: str, family: str = "*", priority: int = 0, requires: str = "",
             devices: bool = False, broadcasts: bool = False):
    """Decorate a class with static ``check`` and ``emit`` to register it as a schedule."""
    def deco(cls):
        cls.schedule = add_schedule(op, name, family, priority,
                                    requires or (cls.__doc__ or "").strip().split("\n")[0],
                                    check=cls.check, emit=cls.emit, devices=devices, broadcasts=broadcasts)
        return cls
    return deco


_NO_GENERIC: set = set()     # families whose backend declares GENERIC = False
#: the modules of target-independent schedules (family "*"), loaded with any backend
_TARGET_INDEPENDENT = ("axe.schedules.generic", "axe.schedules.block_scale")


def _load_backends(family: str) -> None:
    """Import the target-independent schedules and the family's backend, found by convention as
    ``axe.backends.<family>.schedules`` (a new target adds a folder, not a line here).  A backend
    module with ``GENERIC = False`` opts out of the target-independent schedules."""
    import importlib
    for shared in _TARGET_INDEPENDENT:
        importlib.import_module(shared)
    name = f"axe.backends.{family}.schedules"
    try:
        mod = importlib.import_module(name)
    except ModuleNotFoundError as err:
        if err.name not in (name, f"axe.backends.{family}"):
            raise
        return
    if getattr(mod, "GENERIC", True) is False:
        _NO_GENERIC.add(family)


def _applies(s: Schedule, family: str) -> bool:
    return s.family == family or (s.family == "*" and family not in _NO_GENERIC)


def candidates(op: str, family: str) -> list[Schedule]:
    """Schedules for ``op`` on a target family, most preferred first."""
    _load_backends(family)
    found = [s for s in _REGISTRY if s.op == op and _applies(s, family)]
    return sorted(found, key=lambda s: -s.priority)


def families() -> list[str]:
    """The target families that have a backend: the packages under ``axe.backends`` (found, not
    listed, so that a new target is a new folder)."""
    import pkgutil
    import axe.backends
    return sorted(info.name for info in pkgutil.iter_modules(axe.backends.__path__) if info.ispkg)


def all_schedules(family: str | None = None) -> list[Schedule]:
    """The schedules that apply to ``family``; None: every schedule of every backend (each loaded)."""
    for f in [family] if family else families():
        _load_backends(f)
    return [s for s in _REGISTRY if family is None or _applies(s, family)]
