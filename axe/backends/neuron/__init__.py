"""The Trainium backend (trn1: ``neuronxcc.nki`` on NeuronCore-v2; trn2: ``nki.*`` on
NeuronCore-v3): NKI schedules, the NKI emitter and build, and an executable NumPy model of the NKI
subset axe emits (:mod:`.sim`) with each core's rules and a cost model.

Importing this package registers nothing with TVM; :mod:`.schedules` registers the neuron
schedules with axe's registry when the registry loads the ``neuron`` family.  :data:`HOOKS` is
how the backend registers with the shared layers (:mod:`axe.lang.targets`; ``"module:attribute"``
paths resolved on first use): its language (``Ax.neuron``), its build and its user errors.
"""

__all__ = ["HOOKS"]

HOOKS = {
    "targets": ("trn",),                                            # trn1, trn2
    "language": "axe.backends.neuron.lang",                       # Ax.neuron
    "build_kernel": "axe.backends.neuron.build:build_kernel",     # compile_kernel for trn1 and trn2
    "user_errors": ("axe.backends.neuron.emit:TargetError",),
}

# what the neuron schedules propose to layout inference (Ax.neuron.sbuf/psum with layout=Ax.INFER)
from . import proposals  # noqa: E402,F401
