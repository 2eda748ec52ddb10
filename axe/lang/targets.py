"""Targets reach the language through their backends, which register themselves.

A backend is a package ``axe.backends.<family>`` (``sm_90a``, ``sm_100a`` → ``cuda``; ``trn1`` →
``neuron``) whose ``HOOKS`` dict says what it adds, each entry a ``"module:attribute"`` path (or a
module path) resolved on first use so that importing a backend package stays light:

- ``"targets"``: the target-name prefixes it builds (``("sm_",)``), which
  :func:`~axe.schedules.context.target_family` maps to it;
- ``"language"``: its kernel-language module, reached as ``Ax.<family>`` (``Ax.cuda.mbarrier``,
  ``Ax.neuron.sbuf``);
- ``"build_kernel"``: ``build_kernel(k, func, ctx, target)`` → the artifact :func:`compile_kernel`
  returns for the family's targets;
- ``"user_errors"``: error classes ``axe build``/``explain`` report as the kernel author's to fix;
- ``"mesh"`` (optional): ``signal_peer``, ``wait_signal``, ``fence_sys`` for the device mesh's
  signals.

Nothing here names a backend: a third target adds a folder with such a package.  Every
construct reached through ``Ax.<family>`` checks when it is called that the build's target is of
that family, so a CUDA construct in a trn1 build is a :class:`TargetError`
naming the construct and the target.
"""

from __future__ import annotations

import functools
import importlib
import inspect

from axe.schedules.context import current_context
from axe.schedules.registry import families

__all__ = ["TargetError", "TargetLanguage", "backend_hook", "language", "owners", "user_errors", "families"]


class TargetError(ValueError):
    """A kernel's configuration that its target cannot build (a feature this generation's form of
    the kernel does not have yet, a resource limit of the target, a construct of another target's
    backend): a limit of the target, not a bug; ``axe demo`` reports it as "not built" with the
    reason, like a dispatch failure."""


def _resolve(path: str):
    """``"module:attribute"`` → the attribute; ``"module"`` → the module."""
    mod, _, attr = path.partition(":")
    m = importlib.import_module(mod)
    return getattr(m, attr) if attr else m


def _hooks(family: str) -> dict:
    try:
        pkg = importlib.import_module(f"axe.backends.{family}")
    except ModuleNotFoundError as err:
        if err.name != f"axe.backends.{family}":
            raise
        raise TargetError(f"no backend for target family {family!r}: axe.backends.{family} does not exist "
                          f"(backends: {families()})") from None
    return getattr(pkg, "HOOKS", {})


def backend_hook(family: str, name: str, what: str):
    """The ``name`` hook of ``family``'s backend; ``what`` (the language feature that needs it)
    names the failure when the backend declares none."""
    path = _hooks(family).get(name)
    if path is None:
        raise TargetError(f"{what} is not implemented for target family {family!r} (axe.backends.{family} "
                          f"declares no {name!r} hook)")
    return _resolve(path)


class TargetLanguage:
    """``Ax.<family>``: the constructs of one backend's language module.  Attribute law:
    ``Ax.<family>.<name>`` is the module's ``<name>``; a function is wrapped so that calling it in a
    build whose target is of another family raises :class:`TargetError` naming
    ``Ax.<family>.<name>`` and the target (classes and constants pass through unchanged)."""

    def __init__(self, family: str, module):
        self._family, self._module = family, module

    def __repr__(self):
        return f"<Ax.{self._family}: {self._module.__name__}>"

    def __dir__(self):
        return list(getattr(self._module, "__all__", ()))

    def __getattr__(self, name: str):
        if name.startswith("_"):
            raise AttributeError(name)
        try:
            value = getattr(self._module, name)
        except AttributeError:
            raise AttributeError(f"Ax.{self._family} has no construct {name!r} ({self._module.__name__} "
                                 f"defines {sorted(dir(self))})") from None
        if inspect.isfunction(value):
            value = _checked(f"Ax.{self._family}.{name}", self._family, value)
        setattr(self, name, value)      # later lookups skip __getattr__
        return value


def _checked(construct: str, family: str, fn):
    """``fn`` that first checks the build's target is of ``family``."""
    @functools.wraps(fn)
    def call(*args, **kwargs):
        ctx = current_context(construct)
        if ctx.family != family:
            raise TargetError(f"{construct} is a construct of the {family} backend; this build is for "
                              f"{ctx.target} (target family {ctx.family})")
        return fn(*args, **kwargs)
    return call


@functools.lru_cache(maxsize=None)
def language(family: str) -> TargetLanguage:
    """``Ax.<family>``: the backend's language module behind the target check."""
    return TargetLanguage(family, backend_hook(family, "language", f"Ax.{family}"))


def owners(name: str) -> list:
    """The families whose language defines the construct ``name`` (for an error's hint)."""
    return [f for f in families() if "language" in _hooks(f) and name in dir(language(f))]


def user_errors(loaded_only: bool = False) -> tuple:
    """The error classes every backend declares as its users' to fix.  ``loaded_only``: only
    those whose module is imported already (an error of any other class cannot have been
    raised), so that asking imports nothing heavy."""
    import sys
    found = []
    for family in families():
        for path in _hooks(family).get("user_errors", ()):
            mod = path.partition(":")[0]
            if not loaded_only or mod in sys.modules:
                found.append(_resolve(path))
    return tuple(found)
