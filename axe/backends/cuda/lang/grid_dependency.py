"""Programmatic dependent launch (sm_90+): a kernel that may start while the kernel before it in
its stream is still running, so that its launch, its CTAs' scheduling and its set-up (barrier
initialisation, register reallocation) overlap the previous kernel's tail instead of following
its drain.

A kernel opts in with :func:`programmatic_launch` at its top (before ``Ax.launch``, like
``min_blocks_per_sm``): the build marks it (``launch.json`` ``"programmatic": true``) and the
runtime launches it with CUDA's programmatic stream serialization attribute (also inside CUDA
graphs).  It then calls :func:`grid_wait` (``griddepcontrol.wait``: blocks until the previous
grid has completed and its memory is visible) before it reads anything the previous kernel
writes or writes anything it reads; the build refuses a marked kernel without that wait.
:func:`launch_dependents` lets the *next* kernel begin its launch early; where a CTA does not
call it, its exit does the same.  Launched without the attribute (``AXE_PROGRAMMATIC_LAUNCH=0``,
or a runtime that does not set it) the wait is a no-op.
"""

from __future__ import annotations

__all__ = ["programmatic_launch", "grid_wait", "launch_dependents", "PDL_ATTR"]

#: TVM's PrimFunc attribute and launch tag for programmatic dependent launch (its spelling)
PDL_ATTR = "tirx.use_programtic_dependent_launch"


def programmatic_launch():
    """Declare the kernel launchable before its predecessor in the stream ends (call at the top
    of the kernel, before ``Ax.launch``; the kernel must then :func:`grid_wait`)."""
    from tvm.script import tirx as T
    T.func_attr({PDL_ATTR: 1})


def grid_wait():
    """``griddepcontrol.wait``: block until the previous kernel in the stream has completed and
    its memory operations are visible."""
    from tvm.script import tirx as T
    T.evaluate(T.ptx.griddepcontrol.wait())


def launch_dependents():
    """``griddepcontrol.launch_dependents``: this CTA no longer holds back the launch of the next
    kernel in the stream (which still waits for this whole grid before using its results)."""
    from tvm.script import tirx as T
    T.evaluate(T.ptx.griddepcontrol.launch_dependents())
