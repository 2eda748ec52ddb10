"""Dispatch: try each candidate schedule's preconditions, emit the first that fits.

The check contract (:class:`~axe.schedules.registry.Schedule`): ``check(call, ctx)`` returns a
plan when the schedule fits, or a string, the reason it declines; dispatch records the reason and
tries the next candidate, and when none fits, :class:`DispatchError` lists every reason.  A check
never declines by raising: anything it raises is a bug of the schedule and reaches the caller as
:class:`ScheduleBug`, naming the schedule, the operator and where it was written, chained to the
original exception (its traceback included).  A check that calls the layout algebra, whose
``LayoutError`` means "no such layout", catches that refusal itself and returns it as its reason.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from .context import BuildContext, current_context
from .registry import candidates

__all__ = ["DispatchError", "ScheduleBug", "DispatchRecord", "choose", "dispatch", "run", "format_records"]


class DispatchError(ValueError):
    """No schedule fits an operator call; the message names the line, layouts and reasons."""


class ScheduleBug(RuntimeError):
    """A schedule's check raised instead of returning a plan or a reason: a bug in the schedule
    (or in what it calls), not a decline.  ``schedule`` names it; ``__cause__`` is what it raised."""

    def __init__(self, schedule: str, message: str):
        super().__init__(message)
        self.schedule = schedule

    def __reduce__(self):
        return (ScheduleBug, (self.schedule, str(self)))


@dataclass
class DispatchRecord:
    """What dispatch did for one call: each candidate with its verdict, and the chosen plan."""

    call: object
    verdicts: list = field(default_factory=list)   # (schedule name, reason or None when chosen)
    chosen: str | None = None
    plan: str = ""

    def format(self, brief: bool = False) -> str:
        """The call, its operands, and each candidate's verdict in the order tried.  ``brief``: where
        a schedule was chosen, only its line and the names of the ones declined before it (the
        reasons are ``explain``'s without ``--brief``); a call nothing fits keeps every reason."""
        c = self.call
        lines = [f"{c.op} at {c.where} in {c.scope.describe()}"]
        for k, t in c.operands.items():
            lines.append(f"  {k:5} {t.describe()}")
        extra = {k: v for k, v in c.attrs.items() if k != "fn"}
        if extra:
            lines.append("  attrs " + ", ".join(f"{k}={v}" for k, v in extra.items()))
        if brief and self.chosen is not None:
            lines.append(f"  + {self.chosen:14} chosen: {self.plan}")
            declined = [name for name, reason in self.verdicts if reason is not None]
            if declined:
                lines.append(f"    ({len(declined)} declined first: {', '.join(declined)})")
            return "\n".join(lines)
        for name, reason in self.verdicts:
            if reason is None:
                lines.append(f"  + {name:14} chosen: {self.plan}")
            else:
                lines.append(f"  - {name:14} declined: {reason}")
        return "\n".join(lines)


def format_records(records, brief: bool = False) -> str:
    """Every record's :meth:`DispatchRecord.format`, a blank line apart."""
    return "\n\n".join(r.format(brief) for r in records)


def _remote_operands(call) -> str:
    """The operands that name other GPUs, as text ("" when every operand is this GPU's)."""
    names = [f"{k} {t.name}" for k, t in call.operands.items() if t.on_devices]
    return ", ".join(names)


#: CUDA copy schedules that complete on ``barrier=`` (arrive on the mbarrier with its byte count)
BARRIER_COPIES = frozenset({"tma", "bulk"})

#: why the other copy schedules decline ``barrier=`` rather than ignore it: the caller then waits on
#: an mbarrier nothing arrives on, and the wait never returns (kernels/inferred/transpose.py's load,
#: sent to cp.async by an inferred swizzle TMA cannot write, hung so on an H100, 2026-11-27)
NO_BARRIER = ("barrier= asks for a copy that completes on the mbarrier (TMA or a bulk copy: "
              f"{sorted(BARRIER_COPIES)}); this schedule would not arrive on it and the wait on it would never return")


def choose(call, ctx: BuildContext) -> tuple:
    """``(record, schedule, plan)``: the first candidate whose check fits ``call`` (schedule and
    plan None when none does), every verdict in ``record``; nothing is emitted or recorded in
    ``ctx``, so layout inference can ask what a call with proposed layouts would dispatch to."""
    cands = candidates(call.op, ctx.family)
    record = DispatchRecord(call)
    forced = call.forced
    if forced is not None and forced not in {s.name for s in cands}:
        raise DispatchError(f"{call.op} at {call.where}: schedule={forced!r} is not registered for "
                            f"{ctx.target}; candidates: {[s.name for s in cands]}")
    for s in cands:
        if forced is not None and s.name != forced:
            record.verdicts.append((s.name, f"not tried (schedule={forced!r} forced)"))
            continue
        remote = _remote_operands(call)
        if remote and not s.devices:
            record.verdicts.append((s.name, f"{remote} on other GPUs (gpuid in its layout, or a peer's memory): "
                                            "only schedules that address peer memory apply"))
            continue
        if call.attrs.get("broadcast") and not s.broadcasts:
            record.verdicts.append((s.name, "a source broadcasts to dst's shape (numpy's rule): only schedules "
                                            "that declare broadcasts apply"))
            continue
        try:
            plan = s.check(call, ctx)
        except Exception as err:
            raise ScheduleBug(s.name, f"schedule {s.name} raised while checking {call.op} at {call.where} on "
                                      f"{ctx.target}: {type(err).__name__}: {err}") from err
        if not isinstance(plan, str) and call.op == "copy" and ctx.family == "cuda" \
                and call.config.get("barrier") is not None and s.name not in BARRIER_COPIES:
            plan = NO_BARRIER       # after the check, so a schedule's own reason comes first
        if isinstance(plan, str):
            record.verdicts.append((s.name, plan))
            continue
        record.verdicts.append((s.name, None))
        record.chosen = s.name
        record.plan = plan.describe() if hasattr(plan, "describe") else str(plan)
        return record, s, plan
    return record, None, None


def dispatch(call, ctx: BuildContext | None = None) -> DispatchRecord:
    """Choose and emit a schedule for ``call``; raises :class:`DispatchError` when none fits."""
    if ctx is None:
        ctx = current_context(f"operator {call.op}")
    record, s, plan = choose(call, ctx)
    if s is not None:
        s.emit(call, plan, ctx)
        ctx.records.append(record)
        return record
    ctx.records.append(record)
    cands = candidates(call.op, ctx.family)
    hint = ""
    if call.attrs.get("broadcast") and not any(s.broadcasts for s in cands):
        hint = (f"\nnone of {ctx.target}'s {call.op} schedules broadcasts: {call.op} the source at its own shape "
                "and let the operator that reads it broadcast (Ax.elementwise takes operands of broadcastable shapes)")
    raise DispatchError("no schedule fits " + call.op + " on " + ctx.target + "\n" + record.format() + hint)


def run(call) -> None:
    """Dispatch an operator call written in a kernel body (by the language, or by a backend's
    construct that issues operators), recording where in the kernel source it was written."""
    from .source import call_site
    call.where = call_site()
    ctx = current_context(f"operator {call.op}")
    if ctx.infer is not None and ctx.infer.recording:   # the first parse of layout inference
        ctx.infer.calls.append(call)
        return
    dispatch(call, ctx)   # statements in a kernel body must evaluate to None
