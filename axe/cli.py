"""The ``axe`` command line (also ``python -m axe``).

Each subcommand lives in the module that owns its subject; a module joins the command line
by defining ``add_commands(subparsers)`` and being listed in ``_COMMAND_MODULES``.
"""

from __future__ import annotations

import argparse
import importlib
import sys

_COMMAND_MODULES = [
    "axe.layout.cli",   # axe layout ...
    "axe.lang.cli",     # axe build / axe explain
    "axe.demo",         # axe demo (the README's main job)
]


def main(argv=None) -> int:
    """Run the axe command line; returns the exit status."""
    parser = argparse.ArgumentParser(prog="axe", description=__doc__.splitlines()[0])
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
    return int(args.func(args) or 0)


if __name__ == "__main__":
    sys.exit(main())
