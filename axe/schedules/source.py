"""Where in the kernel source an operator was written (for errors and explain)."""

from __future__ import annotations

import sys

__all__ = ["call_site"]


def call_site() -> str:
    """``file:line`` of the statement TVMScript is parsing now, else the nearest user frame."""
    f = sys._getframe(1)
    while f is not None:
        parser = f.f_locals.get("self")
        node = f.f_locals.get("node")
        if type(parser).__name__ == "Parser" and node is not None and hasattr(node, "lineno"):
            src = parser.diag.source
            return f"{src.source_name}:{src.start_line + node.lineno - 1}"
        f = f.f_back
    f = sys._getframe(1)
    while f is not None and f.f_code.co_filename.startswith(__file__.rsplit("/", 2)[0]):
        f = f.f_back
    return f"{f.f_code.co_filename}:{f.f_lineno}" if f is not None else "<unknown>"
