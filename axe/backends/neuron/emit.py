"""The NKI emitter: a parsed trn1 kernel (TIR whose statements are the schedules' NKI lines) as
NKI Python source for ``neuronxcc.nki``.

Law: loops print as loops (``T.parallel`` -> ``nl.affine_range``, ``T.serial`` ->
``nl.sequential_range``), each schedule statement prints as its line, parameters become the
kernel's arguments except the outputs, which the kernel allocates in HBM and returns.  Any other
TIR construct is a CUDA-side construct in a trn1 build and raises :class:`TargetError` naming it.
"""

from __future__ import annotations

from .emit_stmt import statement_text

__all__ = ["TargetError", "emit_nki", "HEADER"]

HEADER = ("import neuronxcc.nki as nki\n"
          "import neuronxcc.nki.language as nl\n"
          "import neuronxcc.nki.isa as nisa\n")

_NL_DTYPE = {"float16": "nl.float16", "bfloat16": "nl.bfloat16", "float32": "nl.float32"}


class TargetError(ValueError):
    """A construct of another target (a GPU thread binding, shared memory, a PTX instruction) used
    in a build for this one."""


def _construct(stmt) -> str:
    """A name for the CUDA-side construct ``stmt`` is (for the error)."""
    import tvm
    tx = tvm.tirx
    if isinstance(stmt, tx.AttrStmt):
        if stmt.attr_key in ("thread_extent", "virtual_thread", "tirx.device_entry") or "cta" in stmt.attr_key:
            return f"a GPU thread/CTA binding ({stmt.attr_key}: Ax.launch, T.cta_id, T.thread_binding)"
        return f"the TIR attribute {stmt.attr_key}"
    if isinstance(stmt, tx.Evaluate) and isinstance(stmt.value, tvm.ir.Call):
        return f"the GPU instruction {stmt.value.op.name}"
    if isinstance(stmt, tx.BufferStore):
        return f"a scalar store to {stmt.buffer.name} (scope {stmt.buffer.scope()}: Ax.shared/Ax.registers)"
    return type(stmt).__name__


def _body_lines(stmt, indent, out, target):
    import tvm
    tx = tvm.tirx
    pad = "    " * indent
    if isinstance(stmt, tx.SeqStmt):
        for s in stmt.seq:
            _body_lines(s, indent, out, target)
        return
    text = statement_text(stmt)
    if text is not None:
        out.append(pad + text)
        return
    if isinstance(stmt, tx.For):
        kind = {tx.ForKind.PARALLEL: "nl.affine_range({n})", tx.ForKind.SERIAL: "nl.sequential_range(0, {n}, 1)",
                tx.ForKind.UNROLLED: "nl.affine_range({n})"}.get(stmt.kind)
        if kind is None:
            raise TargetError(f"loop {stmt.loop_var.name}: kind {stmt.kind} has no NKI form on {target} "
                              "(T.parallel or T.serial)")
        if not (isinstance(stmt.min, tx.IntImm) and int(stmt.min) == 0):
            raise TargetError(f"loop {stmt.loop_var.name}: NKI ranges start at 0 (got {stmt.min})")
        out.append(f"{pad}for {stmt.loop_var.name} in {kind.format(n=int(stmt.extent))}:")
        before = len(out)
        _body_lines(stmt.body, indent + 1, out, target)
        if len(out) == before:
            out.append(pad + "    pass")
        return
    if isinstance(stmt, (tx.DeclBuffer, tx.AllocBuffer)) if hasattr(tx, "AllocBuffer") else isinstance(stmt, tx.DeclBuffer):
        scope = stmt.buffer.scope()
        if scope.startswith("shared") or scope.startswith("local"):
            raise TargetError(f"buffer {stmt.buffer.name} in GPU {scope} memory (Ax.shared/Ax.registers) "
                              f"is a CUDA-only construct; on {target} use axe.backends.neuron.lang.sbuf/psum")
        if hasattr(stmt, "body"):
            _body_lines(stmt.body, indent, out, target)
        return
    if isinstance(stmt, tx.Evaluate) and isinstance(stmt.value, tx.IntImm):
        return
    raise TargetError(f"{_construct(stmt)} is a CUDA-only construct: it has no meaning on {target}")


def emit_nki(func, name: str, params: dict, outputs, target: str = "trn1") -> str:
    """NKI source of kernel ``name``.  ``params``: parameter name -> (shape, dtype), in order;
    ``outputs``: the names the kernel writes (allocated in HBM and returned)."""
    outs = [p for p in params if p in outputs]
    ins = [p for p in params if p not in outputs]
    lines = [HEADER, "", "@nki.jit", f"def {name}({', '.join(ins)}):"]
    for o in outs:
        shape, dtype = params[o]
        lines.append(f"    {o} = nl.ndarray({tuple(shape)}, dtype={_NL_DTYPE[dtype]}, buffer=nl.shared_hbm)")
    body: list = []
    _body_lines(func.body, 1, body, target)
    lines += body
    lines.append(f"    return {', '.join(outs)}" if outs else "    return None")
    return "\n".join(lines) + "\n"
