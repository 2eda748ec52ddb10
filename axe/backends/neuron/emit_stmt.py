"""How schedules place NKI statements in the TIR being parsed, and how the emitter reads them back.

A statement is ``T.call_extern("int32", "axe_nki", <NKI source line>)`` evaluated in place: the
kernel's loops stay TIR loops around it, and its loop variables appear by name in the line.
"""

from __future__ import annotations

__all__ = ["nki_stmt", "MARK", "statement_text"]

MARK = "axe_nki"


def nki_stmt(line: str) -> None:
    """Emit one NKI source line at the current point of the kernel body."""
    import tvm
    from tvm.script.ir_builder import tirx as IRB
    IRB.evaluate(tvm.tirx.call_extern("int32", MARK, line))


def statement_text(stmt) -> str | None:
    """The NKI line of an ``Evaluate`` made by :func:`nki_stmt` (None for any other statement)."""
    import tvm
    tx = tvm.tirx
    if not isinstance(stmt, tx.Evaluate) or not isinstance(stmt.value, tvm.ir.Call):
        return None
    call = stmt.value
    if call.op.name != "tirx.call_extern" or len(call.args) != 2:
        return None
    name, line = call.args
    if not (isinstance(name, tvm.ir.StringImm) and name.value == MARK and isinstance(line, tvm.ir.StringImm)):
        return None
    return line.value
