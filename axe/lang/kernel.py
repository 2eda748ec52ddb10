"""Kernels as build recipes: a factory that parses a ``@T.prim_func`` under a build context.

Dispatch happens during parsing, so a kernel is built per target: ``build_func(k, "sm_100a")``
re-parses it with that target's schedules.  A kernel may carry a torch reference and example
inputs for the tools that check it (``axe demo`` reads them for the Trainium example); the build
itself reads only its name and, for trn1, its ``outputs``.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass, field
from typing import Callable

from axe.schedules import ScheduleBug, building, format_records
from axe.schedules.context import target_family

from .targets import backend_hook

__all__ = ["Kernel", "KernelError", "kernel", "build_func", "compile_kernel", "explain", "kernels_of", "without_params"]


@dataclass
class Kernel:
    """``factory()`` returns the PrimFunc; ``reference(**inputs)`` (torch) the expected outputs;
    ``inputs(device)`` example inputs by parameter name; ``outputs`` the names written (parameter
    names without a trailing ``_``; on trn1 they decide the NKI kernel's returned tensors);
    ``meta``: any other keywords, kept for the caller and not read by the build (the launch
    grid and block come from ``Ax.launch`` in the body)."""

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


class KernelError(ValueError):
    """An error raised inside a kernel body (a ``DispatchError``, ``LayoutError``, ``OpError``,
    an argument check's ``ValueError``, ...), as :func:`build_func` reports it:
    ``kernel NAME at FILE:LINE: <the original message, whole>``.

    TVMScript's parser wraps such errors in a ``DiagnosticError`` that keeps only the message's
    last line; this error carries the original instead.  The raised object is also an instance
    of the original exception's class where Python allows it (``except DispatchError`` still
    catches a dispatch failure).  Attributes: ``kernel``, ``file``, ``line`` (``None`` when
    unknown), ``message`` (the original message) and ``cause`` (the original exception).
    """

    def __init__(self, kernel: str, file, line, message: str, cause: BaseException | None = None):
        self.kernel, self.file, self.line, self.message, self.cause = kernel, file, line, message, cause
        where = f" at {file}:{line}" if file and line else (f" in {file}" if file else "")
        self.text = f"kernel {kernel}{where}: {message}"
        ValueError.__init__(self, self.text)

    def __str__(self):
        return self.text

    def __reduce__(self):   # picklable as a plain KernelError (the combined classes are made at runtime)
        return (KernelError, (self.kernel, self.file, self.line, self.message))


_COMBINED: dict = {}


def _kernel_error_class(cause):
    """``KernelError`` combined with the class of ``cause`` when Python allows it."""
    base = type(cause)
    if cause is None or base is ValueError or issubclass(base, KernelError) or not issubclass(base, Exception):
        return KernelError
    if base not in _COMBINED:
        try:
            _COMBINED[base] = type("KernelError", (KernelError, base),
                                   {"__module__": __name__, "__qualname__": "KernelError",
                                    "__doc__": KernelError.__doc__})
        except TypeError:          # a layout conflict (OSError, ...) or a final class
            _COMBINED[base] = KernelError
    return _COMBINED[base]


def _is_diagnostic(err) -> bool:
    """TVM's ``DiagnosticError`` (checked by name and module: importing tvm here is not needed)."""
    return type(err).__name__ == "DiagnosticError" and type(err).__module__.startswith("tvm")


_LOCATION = re.compile(r"^ --> (.+):(\d+):\d+\s*$", re.M)


def _causes(err: BaseException):
    """``err`` and the exceptions it was raised from or while handling, outermost first."""
    seen = set()
    while err is not None and id(err) not in seen:
        seen.add(id(err))
        yield err
        err = err.__cause__ or err.__context__


def _schedule_bug(err: BaseException) -> ScheduleBug | None:
    """The :class:`ScheduleBug` behind ``err`` (TVMScript's parser wraps what a statement raises)."""
    return next((e for e in _causes(err) if isinstance(e, ScheduleBug)), None)


def _kernel_error(k: Kernel, err: BaseException) -> KernelError:
    """The :class:`KernelError` for ``err`` raised while parsing ``k``."""
    diag, cause, seen = None, err, set()
    while cause is not None and _is_diagnostic(cause) and id(cause) not in seen:
        seen.add(id(cause))
        diag = diag or cause
        cause = cause.__cause__ or cause.__context__
    if cause is not None and _is_diagnostic(cause):
        cause = None
    file = line = None
    if diag is not None:                       # the parser's " --> FILE:LINE:COL"
        m = _LOCATION.search(str(diag))
        if m:
            file, line = m.group(1), int(m.group(2))
    if file is None:                           # not parsed yet: the deepest frame of the factory's file
        src = getattr(getattr(k.factory, "__code__", None), "co_filename", None)
        tb = err.__traceback__
        while tb is not None:
            if tb.tb_frame.f_code.co_filename == src:
                file, line = src, tb.tb_lineno
            tb = tb.tb_next
    if cause is not None:
        message = str(cause)
        if not isinstance(cause, ValueError) or not message:   # axe's errors are ValueErrors:
            name = type(cause).__name__                         # name any other class
            message = f"{name}: {message}" if message else name
    else:                                      # TVM's own parse error: its message, less the location
        text = str(diag)
        message = text.split("\n --> ", 1)[0]
        message = message[len("error: "):] if message.startswith("error: ") else message
    if file:
        file = _short_path(file)
    return _kernel_error_class(cause)(k.name, file, line, message, cause)


def _short_path(path: str) -> str:
    """``path`` relative to the working directory when it lies below it."""
    try:
        rel = os.path.relpath(path)
    except ValueError:
        return path
    return path if rel.startswith("..") else rel


def build_func(k: Kernel, target: str = "sm_90a", features=()):
    """Parse the kernel for ``target`` (declaring ``features``, e.g. ``("multicast",)``):
    ``(PrimFunc, BuildContext)`` (records, tensormaps, the distributed signature).

    An error raised inside the kernel body reaches the caller as a :class:`KernelError`
    (``kernel NAME at FILE:LINE: <the original message>``), not as TVM's diagnostic; a
    :class:`~axe.schedules.dispatch.ScheduleBug` (a schedule's check raised) reaches it as itself,
    chained to what the check raised.  A kernel that declares a tile without a layout is parsed
    twice (:mod:`axe.schedules.infer`): once recording its operator calls, once with the inferred
    layouts, which ``ctx.infer.fixed`` keeps (by declaration) for ``explain``."""
    try:
        return _parse(k, target, features, None)
    except _Infer:
        pass
    from axe.schedules.infer import InferenceError, InferState, solve
    _, rec = _parse(k, target, features, InferState(recording=True))
    try:
        fixed = solve(rec.infer, rec)
    except InferenceError as err:
        raise KernelError(k.name, None, None, f"layout inference: {err}", err) from None
    func, ctx = _parse(k, target, features, InferState(fixed=fixed))
    ctx.infer.tiles = {v.index: v for v in rec.infer.tiles.values()}
    return func, ctx


class _Infer(Exception):
    """The kernel declares a tile whose layout must be inferred (``NeedsInference`` inside)."""


def _parse(k: Kernel, target, features, infer):
    from .tensors import NeedsInference
    with building(target, features) as ctx:      # a fresh context: no scopes, no tensors yet
        ctx.infer = infer
        try:
            func = k.factory()
        except KernelError:
            raise
        except Exception as err:
            if infer is None and any(isinstance(e, NeedsInference) for e in _causes(err)):
                raise _Infer() from None
            bug = _schedule_bug(err)
            if bug is not None:     # not the kernel author's to fix: whole, with its traceback
                raise bug
            raise _kernel_error(k, err) from None
    return func.with_attr("global_symbol", k.name), ctx


def compile_kernel(k: Kernel, target: str = "sm_90a", features=()):
    """Build the artifact through the target's backend (its ``build_kernel`` hook, see
    :mod:`axe.lang.targets`): for ``sm_*`` CUDA source, PTX, cubin and launch metadata; for trn1
    NKI source and a manifest.  A target no backend builds is a :class:`~axe.lang.targets.TargetError`."""
    builder = backend_hook(target_family(target), "build_kernel", f"building for {target}")
    func, ctx = build_func(k, target, features)
    return builder(k, func, ctx, target)


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


def explain(k: Kernel, target: str = "sm_90a", brief: bool = False) -> str:
    """For each operator call: the candidates, why each declined, what was chosen (``brief``: the
    chosen schedule and the names of those declined, see :meth:`DispatchRecord.format`); first, the
    layouts inference gave the tiles declared without one, and what fixed each."""
    _, ctx = build_func(k, target)
    head = f"kernel {k.name} on {target}\n\n"
    if ctx.infer is not None and ctx.infer.fixed:
        lines = ["inferred layouts"]
        for i, fix in sorted(ctx.infer.fixed.items()):
            v = ctx.infer.tiles.get(i)
            what = f"{v.name}{list(v.shape)} {v.dtype} {v.mem}" if v else f"tile {i}"
            lines.append(f"  {what}: {fix.describe()}")
        head += "\n".join(lines) + "\n\n"
    return head + format_records(ctx.records, brief)


def kernels_of(module) -> dict:
    """The kernels a module defines (module-level :class:`Kernel` values), by name."""
    return {v.name: v for v in vars(module).values() if isinstance(v, Kernel)}
