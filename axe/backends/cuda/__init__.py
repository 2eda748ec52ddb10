"""CUDA backend: build a ``tvm.tirx`` kernel into a TVM-free :class:`Artifact`.

``axe.backends.cuda.build`` (the submodule; it imports TVM) holds ``build``.  This package
itself imports only :mod:`.artifact`, so ``Artifact`` — and through it ``axe.runtime`` —
works on machines without TVM.
"""

from .artifact import Artifact, ArtifactError

__all__ = ["Artifact", "ArtifactError"]
