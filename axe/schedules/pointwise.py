"""Owner-computes loops shared by copy, elementwise and reduce schedules.

``distribute`` decides which thread handles which element: the thread dims of a driver
operand (a register tensor whose layout names thread axes) fix them; with no thread axes the
scope's threads split the elements round-robin (consecutive threads on consecutive chunks, so
memory accesses coalesce), or each thread does all of them in a thread scope.
"""

from __future__ import annotations

import contextlib
from dataclasses import dataclass
from math import prod

from .emit import guard, loops, thread_digits
from .plan import THREAD_AXES

__all__ = ["Distribution", "distribute", "iterate"]


def _tir():
    import tvm
    return tvm.tirx


@dataclass
class Distribution:
    """``thread_dims``: dims fixed by the thread index; ``loop_dims``: dims each thread loops
    over; ``round_robin``: the scope's threads share the loop dims in chunks of ``chunk``."""

    driver: int | None
    thread_dims: dict
    loop_dims: list
    predicate: object
    round_robin: bool = False
    chunk: int = 1

    def describe(self, dims) -> str:
        if self.round_robin:
            return f"round-robin chunks of {self.chunk} over the scope's threads"
        if self.driver is None:
            return "every thread loops over all elements"
        th = ", ".join(f"{dims[i].extent}@{dims[i].axis(self.driver)}" for i in self.thread_dims)
        return f"threads by operand {self.driver} ({th}); {len(self.loop_dims)} register loop dims"


def distribute(dims, tensors, scope, axis_values, prefer=(0,), chunk=1, shapes=None):
    """A :class:`Distribution` or a reason string.  ``tensors[k]`` is operand k.

    ``shapes[k]``: operand k's shape aligned to the common one (1 where it broadcasts); with
    them, a register operand that places a dim elsewhere than the driver (or broadcasts it) is
    still read in place when every driver thread that computes an element holds that operand's
    element too (:func:`axe.layout.broadcast.locality`: its replica brings the value there)."""
    holders = [k for k, t in enumerate(tensors) if any(d.axis(k) in THREAD_AXES for d in dims)]
    if holders:
        driver = next((k for k in prefer if k in holders), holders[0])
        digits, pred, why = thread_digits(dims, driver, tensors[driver].layout, axis_values)
        if why:
            return why
        for k in holders:
            for i, d in enumerate(dims):
                same = d.parts[k] == d.parts[driver]
                if (i in digits) != (d.axis(k) in THREAD_AXES) or (i in digits and not same):
                    why = _held_in_place(tensors, shapes, driver, k, i, d)
                    if why:
                        return why
                    break
        loop = [i for i in range(len(dims)) if i not in digits]
        return Distribution(driver, digits, loop, pred)
    if scope.threads == 1 or all(t.mem == "local" for t in tensors):
        return Distribution(None, {}, list(range(len(dims))), None)
    return Distribution(None, {}, list(range(len(dims))), None, round_robin=True, chunk=chunk)


def _held_in_place(tensors, shapes, driver, k, i, d):
    """None when operand k's elements are held by the driver's threads that compute them (its
    register is read in place), else the reason, naming the replica that would make it so."""
    c, s = tensors[driver], tensors[k]
    moved = (f"operand {k} ({s.layout}) and operand {driver} ({c.layout}) place dim {i} (extent {d.extent}) "
             "on different threads: data must move between threads")
    if shapes is None or s.mem != "local":
        return moved
    from axe.layout.broadcast import locality, with_replica
    axes = tuple(a for a in THREAD_AXES if a in set(c.thread_axes()) | set(s.thread_axes()))
    verdict = locality(c.layout, shapes[driver], s.layout, shapes[k], axes)
    if verdict.local:
        return None
    where = ", ".join(f"{v:+d}@{a}" for a, v in (verdict.witness or {}).items())
    hint = ""
    if verdict.suggestion:
        fixed = with_replica(s.layout, verdict.suggestion, axes)
        if locality(c.layout, shapes[driver], fixed, shapes[k], axes).local:
            hint = f"; as {fixed} (replicated onto those threads) it would be local"
    return (f"{moved}: a thread of operand {driver} at {where or 'a large displacement'} from operand {k}'s "
            f"holder lacks the value{hint}")


def count(dims, dist, scope, inner=()):
    """How many elements (or chunks) :func:`iterate` yields to each thread (at most)."""
    loop_dims = [i for i in dist.loop_dims if i not in inner]
    total = prod(dims[i].extent for i in loop_dims)
    return -(-total // scope.threads) if dist.round_robin else total


@contextlib.contextmanager
def iterate(dims, dist, scope, axis_values, inner=(), index=False):
    """Yield the digit map {dim index: expr} for one element (or chunk) of this thread.

    ``inner``: trailing dim indices left out of the iteration (a vector run handled by the
    caller, digit 0 in the yielded map).  ``index``: yield ``(digits, i)`` with ``i`` the
    element's position ``0 ≤ i <`` :func:`count` in this thread's sequence.
    """
    t = _tir()
    loop_dims = [i for i in dist.loop_dims if i not in inner]
    with guard(dist.predicate):
        if not dist.round_robin:
            with loops([dims[i].extent for i in loop_dims]) as vs:
                digits = dict(dist.thread_dims)
                digits.update(zip(loop_dims, vs))
                digits.update({i: 0 for i in inner})
                pos = 0
                for i, v in zip(loop_dims, vs):
                    pos = pos * dims[i].extent + v
                yield (digits, pos) if index else digits
            return
        total = prod(dims[i].extent for i in loop_dims)
        per = -(-total // scope.threads)
        with loops([per]) as (j,):
            flat = axis_values["tx"] + j * scope.threads
            cond = flat < total if total % scope.threads else None
            with guard(cond):
                digits, rest = {i: 0 for i in inner}, flat
                for i in reversed(loop_dims):
                    digits[i] = t.floormod(rest, dims[i].extent)
                    rest = t.floordiv(rest, dims[i].extent)
                yield (digits, j) if index else digits
