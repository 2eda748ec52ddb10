"""The API reference of axe's public packages, generated from the docstrings with pdoc.

    .venv/bin/python scripts/api_docs.py               # HTML into build/api (open build/api/index.html)
    .venv/bin/python scripts/api_docs.py -o DIR        # elsewhere
    .venv/bin/python scripts/api_docs.py --check       # only the checks, nothing written

The reference covers :data:`PACKAGES` and every submodule whose dotted name has no part starting
with ``_``.  It fails (exit status 1, one line per problem) when a module does not import, when a
name in a module's ``__all__`` does not resolve, or when a public function, class or method
defined in axe has no docstring.
``tests/test_api_docs.py`` runs the whole build on every CI run.
"""

from __future__ import annotations

import argparse
import importlib
import pkgutil
import sys
import warnings
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PACKAGES = ("axe.layout", "axe.lang", "axe.runtime", "axe.torch", "axe.ops")


def module_names(packages=PACKAGES) -> list[str]:
    """Every module the reference documents: each package, then its public submodules, in order.
    A submodule that fails to import raises (``pkgutil`` imports packages to walk them)."""
    names = []
    for package in packages:
        names.append(package)
        path = importlib.import_module(package).__path__

        def fail(name):
            raise ImportError(f"{name} does not import while walking {package}")

        for info in pkgutil.walk_packages(path, package + ".", onerror=fail):
            if not any(part.startswith("_") for part in info.name.split(".")):
                names.append(info.name)
    return names


def import_all(names) -> list[str]:
    """Import every module and resolve the names of its ``__all__`` that a module ``__getattr__``
    provides lazily (``axe.runtime.Kernel``), so pdoc documents them; the problems, one line each."""
    problems = []
    for name in names:
        try:
            module = importlib.import_module(name)
        except Exception as e:                          # noqa: BLE001 -- any failure is a finding
            problems.append(f"{name}: does not import: {type(e).__name__}: {e}")
            continue
        for attr in getattr(module, "__all__", ()):
            if attr in vars(module):
                continue
            try:
                setattr(module, attr, getattr(module, attr))
            except Exception as e:                      # noqa: BLE001
                problems.append(f"{name}.__all__ names {attr!r}, which does not resolve: {e}")
    return problems


def _public(doc) -> bool:
    return not doc.name.startswith("_")


def undocumented(modules) -> set[str]:
    """Public functions, classes and methods defined in axe, reached from ``modules`` (pdoc
    ``Module`` objects), that have no docstring, by the dotted name of where they are defined."""
    import pdoc.doc

    found = set()

    def visit(doc):
        where = ".".join(doc.taken_from)
        if where.startswith("axe.") and not doc.docstring.strip():
            found.add(where)

    for module in modules:
        for doc in module.members.values():
            if not _public(doc) or not isinstance(doc, (pdoc.doc.Function, pdoc.doc.Class)):
                continue
            visit(doc)
            if isinstance(doc, pdoc.doc.Class):
                for member in doc.own_members:
                    if _public(member) and isinstance(member, pdoc.doc.Function):
                        visit(member)
    return found


def write_html(modules, output: Path) -> None:
    """pdoc's own output loop (``pdoc.pdoc``) over exactly ``modules``: pdoc's walk would follow
    ``__all__``, where a function named like its module (``axe.layout.group``) hides the rest."""
    import pdoc.render

    pdoc.render.configure(docformat="restructuredtext", show_source=False,
                          footer_text=f"axe {importlib.import_module('axe').__version__}")
    for name, module in modules.items():
        path = output / f"{name.replace('.', '/')}.html"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(pdoc.render.html_module(module, modules), encoding="utf-8")
    (output / "index.html").write_text(pdoc.render.html_index(modules), encoding="utf-8")
    (output / "search.js").write_text(pdoc.render.search_index(modules), encoding="utf-8")


def build(output: Path | None) -> list[str]:
    """Check the reference and, unless ``output`` is None, write its HTML there; the problems."""
    import pdoc.doc

    names = module_names()
    problems = import_all(names)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        modules = {n: pdoc.doc.Module(sys.modules[n]) for n in names if n in sys.modules}
        missing = undocumented(modules.values())
        if output is not None:
            write_html(modules, output)
    # pdoc's other warnings (a type annotation naming a TYPE_CHECKING-only import) cost nothing
    problems += [f"pdoc: {w.message}" for w in caught if "does not resolve" in str(w.message)]
    problems += [f"{n}: public, but no docstring" for n in sorted(missing)]
    return problems


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("-o", "--output", type=Path, default=ROOT / "build" / "api", help="HTML folder (build/api)")
    p.add_argument("--check", action="store_true", help="check only, write nothing")
    args = p.parse_args(argv)
    problems = build(None if args.check else args.output)
    for line in problems:
        print(f"api_docs: {line}", file=sys.stderr)
    if problems:
        return 1
    if not args.check:
        print(f"api_docs: reference written to {args.output}/index.html")
    return 0


if __name__ == "__main__":
    sys.path.insert(0, str(ROOT))
    sys.exit(main())
