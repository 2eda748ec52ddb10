"""Schedule registry and dispatcher, plus the target-independent schedules.

A schedule is registered per (operator, target family) with a ``check`` that reads the
operand layouts with the layout algebra and either returns a plan or a sentence saying why it
declines (never raises: what a check raises is a :class:`ScheduleBug`), and an ``emit`` that
writes TIR through TVM's IRBuilder.  Dispatch happens at the
operator's call site while TVMScript parses the kernel.
"""

from .context import BuildContext, building, current_context
from .registry import Schedule, register, candidates, all_schedules
from .dispatch import DispatchError, DispatchRecord, ScheduleBug, dispatch, format_records

__all__ = ["BuildContext", "building", "current_context", "Schedule", "register", "candidates",
           "all_schedules", "DispatchError", "DispatchRecord", "ScheduleBug", "dispatch", "format_records"]
