"""axe: named-axis (Axe) layouts and layout-dispatched tile operators for Apache TVM's TensorIR."""

__version__ = "0.1.0"
