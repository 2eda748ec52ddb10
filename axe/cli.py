"""The ``axe`` command line (also ``python -m axe``).

Each subcommand lives in the module that owns its subject; a module joins the command line
by defining ``add_commands(subparsers)`` and being listed in ``_COMMAND_MODULES``.
"""

from __future__ import annotations

import argparse
import importlib
import os
import sys

_COMMAND_MODULES = [
    "axe.layout.cli",   # axe layout ...
    "axe.lang.cli",     # axe build / axe explain
    "axe.demo",         # axe demo (the README's main job)
    "axe.torch.cli",    # axe cache list / clear / build
    "axe.torch.tune",   # axe tune gemm plan / run
    "axe.torch.tp",     # axe tp OP M N K: the tensor-parallel ops' choice
]


def main(argv=None) -> int:
    """Run the axe command line; returns the exit status."""
    parser = argparse.ArgumentParser(prog="axe", description=__doc__.splitlines()[0].replace("``", ""))
    sub = parser.add_subparsers(dest="command", required=True)
    for name in _COMMAND_MODULES:
        try:
            module = importlib.import_module(name)
        except ModuleNotFoundError as err:
            if err.name != name:
                raise
            continue  # a subject not built yet
        module.add_commands(sub)
    args = parser.parse_args(argv)
    try:
        return int(args.func(args) or 0)
    except BrokenPipeError:
        # the reader went away (`axe layout ... | head`): stop quietly, as Unix tools do; stdout is
        # pointed at /dev/null so that the interpreter's final flush does not raise again
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 0
    except Exception as err:
        if not _is_user_error(err):
            raise
        sys.stdout.flush()
        print(f"axe {args.command}: {err}", file=sys.stderr, flush=True)
        return 1


def _is_user_error(err) -> bool:
    """Whether ``err``'s message says what to fix (a kernel body's, a backend's build or artifact
    error): then it is printed whole to stderr, without a Python traceback.  Only classes whose
    modules are imported already are consulted (``err`` cannot be of another), so that
    ``axe layout`` stays TVM-free."""
    kernel, targets = sys.modules.get("axe.lang.kernel"), sys.modules.get("axe.lang.targets")
    if kernel is not None and isinstance(err, kernel.KernelError):
        return True
    if targets is not None and isinstance(err, targets.TargetError):
        return True
    if not type(err).__module__.startswith("axe.backends."):
        return False
    from axe.lang.targets import user_errors
    return isinstance(err, user_errors(loaded_only=True))


if __name__ == "__main__":
    sys.exit(main())
