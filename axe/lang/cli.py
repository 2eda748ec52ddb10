"""``axe build FILE[::KERNEL] --target sm_90a|sm_100a|trn1|trn2 -o DIR`` and ``axe explain FILE[::KERNEL]``."""

from __future__ import annotations

import importlib.util
import os
import sys

__all__ = ["add_commands", "load_kernels"]


def load_kernels(spec: str, required: bool = True) -> dict:
    """The kernels of a Python file (``path.py`` or ``path.py::name``), by name; ``required``: a
    file that defines none is an error (``False``: an empty dict, e.g. a kernel's helper module)."""
    from .kernel import kernels_of
    path, _, name = spec.partition("::")
    if not os.path.exists(path):
        raise SystemExit(f"axe: no such file {path}")
    root = os.path.dirname(os.path.abspath(path))
    for p in (root, os.path.dirname(root)):
        if p not in sys.path:
            sys.path.insert(0, p)
    mod_name = "_axe_cli_" + os.path.splitext(os.path.basename(path))[0]
    spec_ = importlib.util.spec_from_file_location(mod_name, path)
    module = importlib.util.module_from_spec(spec_)
    spec_.loader.exec_module(module)
    found = kernels_of(module)
    if name:
        if name not in found:
            raise SystemExit(f"axe: {path} has no kernel {name!r} (it has {sorted(found)})")
        return {name: found[name]}
    if not found and required:
        raise SystemExit(f"axe: {path} defines no axe kernels")
    return found


def _report(command: str, err: Exception) -> None:
    """An error that is the user's to fix, on stderr, whole and without a Python traceback."""
    sys.stdout.flush()
    print(f"axe {command}: {err}", file=sys.stderr, flush=True)


def _user_errors() -> tuple:
    """Errors a kernel's author fixes (reported, not raised): the kernel body's, and those every
    backend declares (its ``"user_errors"`` hook: the CUDA build's, the NKI emitter's, ...)."""
    from .kernel import KernelError
    from .targets import TargetError, user_errors
    return (KernelError, TargetError) + user_errors()


def _build(args) -> int:
    """Build every kernel of the file; a kernel that fails is reported and the others still
    build.  Exit status 1 if any failed."""
    from .kernel import compile_kernel
    errors, failed = _user_errors(), 0
    for name, k in load_kernels(args.file).items():
        try:
            art = compile_kernel(k, args.target)
        except errors as err:
            _report("build", err)
            failed += 1
            continue
        out = os.path.join(args.output, args.target, name)     # one folder per target: builds never mix
        art.save(out)
        print(f"{name}: {args.target} -> {out}")
    return 1 if failed else 0


def _explain(args) -> int:
    from .kernel import explain
    errors, failed = _user_errors(), 0
    for k in load_kernels(args.file).values():
        try:
            text = explain(k, args.target, brief=args.brief)
        except errors as err:
            _report("explain", err)
            failed += 1
            continue
        print(text)
        print()
    return 1 if failed else 0


def add_commands(subparsers) -> None:
    """``axe build`` and ``axe explain``, added to the CLI's ``subparsers``."""
    b = subparsers.add_parser("build", help="build the kernels of a file into artifacts",
                              description="Build every kernel of FILE (or FILE::KERNEL) for one target into "
                                          "OUTPUT/TARGET/KERNEL/: CUDA source, PTX, cubin and launch.json for sm_*, "
                                          "NKI source and a manifest for trn1 and trn2.")
    b.add_argument("file", help="FILE.py or FILE.py::KERNEL")
    b.add_argument("--target", default="sm_90a", help="sm_90a (default), sm_100a, trn1 or trn2")
    b.add_argument("-o", "--output", default="build", help="output folder (default: build); artifacts go to "
                                                          "OUTPUT/TARGET/KERNEL")
    b.set_defaults(func=_build)
    e = subparsers.add_parser("explain", help="show each operator call's schedule candidates")
    e.add_argument("file", help="FILE.py or FILE.py::KERNEL")
    e.add_argument("--target", default="sm_90a", help="sm_90a (default), sm_100a, trn1 or trn2")
    e.add_argument("--brief", action="store_true", help="per call only the chosen schedule and the names of the "
                                                       "candidates declined before it (not their reasons)")
    e.set_defaults(func=_explain)
