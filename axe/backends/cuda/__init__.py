"""CUDA backend: build a ``tvm.tirx`` kernel into a TVM-free :class:`Artifact`.

``axe.backends.cuda.build`` (the submodule; it imports TVM) holds ``build``.  This package
itself imports only :mod:`.artifact`, so ``Artifact`` — and through it ``axe.runtime`` —
works on machines without TVM; so does :mod:`.tensormap` (the TMA map rules and encoding, pure),
which the runtime imports from here.

:data:`HOOKS` is how the backend registers with the shared layers (:mod:`axe.lang.targets` reads
it; every entry is a ``"module:attribute"`` path resolved on first use, so this stays light).
"""

from .artifact import Artifact, ArtifactError

__all__ = ["Artifact", "ArtifactError", "HOOKS"]

HOOKS = {
    "targets": ("sm_",),                                        # sm_90a, sm_100a, ...
    "language": "axe.backends.cuda.lang",                       # Ax.cuda
    "build_kernel": "axe.backends.cuda.compile:build_kernel",   # compile_kernel for sm_* targets
    "user_errors": ("axe.backends.cuda.build:BuildError", "axe.backends.cuda.artifact:ArtifactError"),
    "mesh": "axe.backends.cuda.peer",                           # Ax.signal / Ax.wait / Ax.fence_system
}
