"""Operator semantics: tensors with layouts, execution scopes, operator signatures and call records.

Target-independent.  ``axe.schedules`` chooses how a call runs; ``axe.lang`` is the surface
kernel writers use.
"""

from .scope import ExecScope, current_scope, push_scope, pop_scope, thread_axis_values
from .tensor import Tensor, as_operand, register_tensor, lookup_tensor
from .call import OpCall, OpError
from .copy import copy
from .reduce import reduce
from .elementwise import elementwise, unary, binary, cast

__all__ = ["ExecScope", "current_scope", "push_scope", "pop_scope", "thread_axis_values", "Tensor",
           "as_operand", "register_tensor", "lookup_tensor", "OpCall", "OpError", "copy", "reduce",
           "elementwise", "unary", "binary", "cast"]
