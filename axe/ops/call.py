"""The operator call record a schedule receives."""

from __future__ import annotations

from dataclasses import dataclass, field

from .scope import ExecScope

__all__ = ["OpCall", "OpError"]


class OpError(ValueError):
    """An operator called with operands that break its signature (shape, dtype, scope)."""


@dataclass
class OpCall:
    """One operator call: ``op`` on named ``operands`` (axe Tensors) in ``scope``.

    ``attrs`` are the operator's own arguments (reduce kind, dims, the elementwise function);
    ``config`` the caller's keywords for schedules (``barrier=``, ``schedule=``…); ``where``
    the kernel source line ("file:line") the call was written on.
    """

    op: str
    operands: dict
    scope: ExecScope
    attrs: dict = field(default_factory=dict)
    config: dict = field(default_factory=dict)
    where: str = "<unknown>"

    @property
    def forced(self) -> str | None:
        return self.config.get("schedule")

    def describe(self) -> str:
        """One line for messages: the operator, its operands in layout syntax, its attributes, where
        it was written and its scope."""
        ops = "; ".join(f"{k} = {t.describe()}" for k, t in self.operands.items())
        attrs = "".join(f", {k}={v}" for k, v in self.attrs.items() if k != "fn")
        return f"{self.op}({ops}{attrs}) at {self.where} in {self.scope.describe()}"
