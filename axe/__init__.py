"""axe: named-axis (Axe) layouts and layout-dispatched tile operators for Apache TVM's TensorIR."""

__version__ = "0.1.0"


def __getattr__(name):
    # ``axe.build`` imports TVM; keep ``import axe`` free of it.
    if name == "build":
        from axe.backends.cuda.build import build

        return build
    raise AttributeError(f"module 'axe' has no attribute {name!r}")
