"""Execution scopes: who runs an operator (devices, kernel, cluster, cta, warpgroup, warp, thread).

``devices`` is the multi-device scope: every CTA of the kernel on every GPU of the mesh.

A scope is a kind plus the slice of its parent it covers, e.g. warps [4, 8) of a CTA.  The
threads of a scope see the thread axes (``tx``, ``lane``, ``warp``, ``warpgroup``) relative to
the scope's first thread, so a layout written for "a warpgroup" works in any warpgroup slice.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from .build import current_build, innermost_build

__all__ = ["ExecScope", "KINDS", "THREADS_PER", "current_scope", "scope_or_cta", "enter_launch", "push_scope",
           "pop_scope", "thread_axis_values"]

KINDS = ("devices", "kernel", "cluster", "cta", "warpgroup", "warp", "thread")
WHOLE_CTA = ("devices", "kernel", "cluster", "cta")   # scopes whose threads are the whole CTA
THREADS_PER = {"thread": 1, "warp": 32, "warpgroup": 128}
THREAD_AXES = ("tx", "lane", "warp", "warpgroup")


@dataclass(frozen=True)
class ExecScope:
    """``kind`` over units ``[lo, hi)`` of that kind inside the CTA (cta and above: all of it).

    ``tx`` is the CTA thread index (a TIR expression) and ``cta_threads`` the CTA size.
    ``count`` units of ``kind`` run the operator collectively; for warp and warpgroup scopes
    an operator runs per unit unless ``collective`` (a sliced scope such as warps 0–3 acting
    as one producer group).
    """

    kind: str
    tx: object = None
    cta_threads: int = 1
    lo: int = 0
    hi: int | None = None
    collective: bool = True
    extra: dict = field(default_factory=dict, compare=False)

    def __post_init__(self):
        if self.kind not in KINDS:
            raise ValueError(f"execution scope kind {self.kind!r} is not one of {KINDS}")

    @property
    def unit_threads(self) -> int:
        return THREADS_PER.get(self.kind, self.cta_threads)

    @property
    def threads(self) -> int:
        """Threads that run the operator together."""
        if self.kind in WHOLE_CTA:
            return self.cta_threads
        n = (self.hi - self.lo) if (self.hi is not None and self.collective) else 1
        return n * self.unit_threads

    @property
    def first_thread(self) -> int:
        return self.lo * self.unit_threads if self.kind not in WHOLE_CTA else 0

    def local_tx(self):
        """The thread index relative to the group of threads running the operator."""
        if self.kind in WHOLE_CTA:
            return self.tx
        if self.collective and self.hi is not None:
            return self.tx - self.first_thread
        return self.tx % self.unit_threads

    def describe(self) -> str:
        """One line for messages: the scope's kind, its range of threads/warps and how many threads it has."""
        if self.kind in WHOLE_CTA:
            return f"{self.kind} ({self.cta_threads} threads)"
        rng = f"[{self.lo}, {self.hi})" if self.hi is not None else "each"
        return f"{self.kind}s {rng} ({self.threads} threads{' together' if self.collective else ' each'})"


def current_scope() -> ExecScope | None:
    """The innermost scope the kernel body is in (None outside a kernel, or before its launch)."""
    build = innermost_build()
    return build.scopes[-1] if build is not None and build.scopes else None


def scope_or_cta(what: str = "axe operator") -> ExecScope:
    """The innermost scope; ``what`` (an operator or construct) written before the kernel's
    launch, where there is no scope, is an error naming it."""
    s = current_scope()
    if s is None:
        raise RuntimeError(f"{what} outside a kernel: call axe.lang.launch(grid, threads) first")
    return s


def enter_launch(scope: ExecScope) -> None:
    """The kernel's launch: the current build's scopes start over at ``scope`` (the CTA of a GPU
    kernel, the NeuronCore of a Trainium one), whatever the body entered before."""
    build = current_build(f"the kernel launch (entering its {scope.kind} scope)")
    build.scopes[:] = [scope]


def push_scope(scope: ExecScope) -> None:
    """Enter ``scope`` in the current build (the scope's kind names the construct outside one)."""
    current_build(f"entering a {scope.kind} scope").scopes.append(scope)


def pop_scope() -> ExecScope:
    """Leave the current build's innermost scope."""
    return current_build("leaving an execution scope").scopes.pop()


def thread_axis_values(scope: ExecScope) -> dict:
    """TIR expressions for each thread axis, relative to the scope's thread group."""
    t = scope.local_tx()
    n = scope.threads
    sizes = {"tx": n, "lane": min(n, 32), "warp": max(n // 32, 1), "warpgroup": max(n // 128, 1)}
    return {"tx": t, "lane": t % 32, "warp": t // 32, "warpgroup": t // 128, "_sizes": sizes}
