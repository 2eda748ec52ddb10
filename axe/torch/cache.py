"""An on-disk cache of built artifacts, shared by processes and machines.

An entry is an artifact folder (:meth:`axe.backends.cuda.artifact.Artifact.save`) plus
``key.json``, at ``ROOT/<kernel>/<digest>/``.  ``digest`` is the sha256 of the key's fields
(:class:`CacheKey`): the kernel's reference (``module:function``), the sha256 of its source
text (its module and the modules it imports from its own package), the axe version (with a
fingerprint of axe's sources, so a changed compiler never serves a stale artifact), the TVM
version, the target and the specialization (the factory's keyword arguments).

- ``ROOT`` is ``$AXE_CACHE_DIR`` or ``~/.cache/axe``; ``$AXE_SHIPPED_DIRS`` (``os.pathsep``
  separated) names read-only folders of prebuilt entries, searched after it.
- Concurrent builders are safe: a builder takes ``fcntl.flock`` on ``<digest>.lock``, looks
  again (a process that waited finds the other's entry), builds into a temporary folder beside
  the entry and ``os.rename``\\ s it into place, so an entry is either absent or whole.
- Where TVM is not installed its version is unknown (``tvm=None``): a lookup then accepts the
  newest entry built by any TVM from any source state of the same axe release (a serving
  machine cannot rebuild, and need not carry the builder's exact tree), and a miss raises :class:`ArtifactMissing` naming the key, the folders
  searched and the ``axe cache build`` command that makes the entry.

Neither TVM nor torch is imported here.
"""

from __future__ import annotations

import ast
import contextlib
import fcntl
import functools
import hashlib
import importlib.metadata
import importlib.util
import json
import os
import shutil
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

__all__ = ["ArtifactCache", "ArtifactMissing", "CacheKey", "Entry", "axe_version", "cache_root",
           "kernel_source_digest", "kernels_on_path", "kernels_root", "parse_spec", "shipped_dirs", "tvm_version"]

ENV_DIR, ENV_SHIPPED = "AXE_CACHE_DIR", "AXE_SHIPPED_DIRS"
KEY_FILE = "key.json"


class ArtifactMissing(LookupError):
    """No cached or shipped artifact for a key, and no TVM here to build one."""


def cache_root() -> Path:
    """``$AXE_CACHE_DIR`` if set, else ``~/.cache/axe``."""
    return Path(os.environ.get(ENV_DIR) or Path.home() / ".cache" / "axe")


def shipped_dirs() -> list[Path]:
    """The folders of ``$AXE_SHIPPED_DIRS``, in order."""
    return [Path(p) for p in os.environ.get(ENV_SHIPPED, "").split(os.pathsep) if p]


@functools.lru_cache(maxsize=None)
def tvm_version() -> str | None:
    """The installed TVM's version, read from package metadata (TVM is not imported); ``None``
    where TVM is not installed."""
    if importlib.util.find_spec("tvm") is None:
        return None
    for dist in ("apache-tvm", "tvm"):
        with contextlib.suppress(importlib.metadata.PackageNotFoundError):
            return importlib.metadata.version(dist)
    return "unknown"


@functools.lru_cache(maxsize=None)
def axe_version() -> str:
    """``axe.__version__`` + the first 16 hex digits of the sha256 of axe's Python sources
    (``axe/torch`` excluded: the cache's own code does not change what a build makes; so is an
    installed wheel's ``axe/_kernels``: kernels are hashed by :func:`kernel_source_digest`, and a
    checkout and a wheel of one tree get one fingerprint)."""
    import axe
    root = Path(axe.__file__).parent
    h = hashlib.sha256()
    for p in sorted(root.rglob("*.py")):
        rel = p.relative_to(root).as_posix()
        if rel.startswith(("torch/", "_kernels/")):
            continue
        h.update(rel.encode() + b"\0" + p.read_bytes() + b"\0")
    return f"{axe.__version__}+{h.hexdigest()[:16]}"


#: the package of axe's kernels, named ``kernels`` in a checkout and in an installed wheel alike (the
#: cache keys, which hold module names, then agree: a checkout's builds serve a wheel's ops)
KERNELS = "kernels"


@functools.lru_cache(maxsize=None)
def kernels_root() -> Path:
    """The folder that holds axe's ``kernels`` package: ``axe/_kernels`` inside an installed axe
    (where the wheel ships it: a top-level ``kernels`` in site-packages would collide with other
    distributions of that name), else the parent of the ``axe`` package (a checkout: ``kernels/``
    beside ``axe/``)."""
    import axe
    pkg = Path(axe.__file__).resolve().parent
    shipped = pkg / "_kernels"
    return shipped if (shipped / KERNELS / "__init__.py").is_file() else pkg.parent


def kernels_on_path() -> Path:
    """Append :func:`kernels_root` to ``sys.path`` (appended: it shadows nothing) and check that
    ``import kernels`` finds axe's own package there; returns the root.  Another package named
    ``kernels`` earlier on ``sys.path`` is an ``ImportError`` naming both (hashing or building
    its modules would serve the wrong kernels)."""
    root = kernels_root()
    if str(root) not in sys.path:
        sys.path.append(str(root))
    want = (root / KERNELS / "__init__.py").resolve()
    spec = importlib.util.find_spec(KERNELS)
    got = Path(spec.origin).resolve() if spec is not None and spec.origin else None
    if got == want:
        return root
    if not want.is_file():
        raise ImportError(f"axe's kernels are missing: no {want} (a checkout has kernels/ beside axe/, an "
                          "installed wheel axe/_kernels/kernels)")
    raise ImportError(f"axe's kernels are {want.parent}, but 'import {KERNELS}' finds "
                      f"{got.parent if got else 'a namespace package'}: another package of that name comes first "
                      "on sys.path (remove it from sys.path, or run elsewhere)")


def _module_file(module: str) -> Path:
    if module.split(".")[0] == KERNELS:
        kernels_on_path()
    spec = importlib.util.find_spec(module)
    if spec is None or not spec.origin or not spec.origin.endswith(".py"):
        raise ArtifactMissing(f"kernel module {module!r} is not found on sys.path (run from the repository "
                              "root, or add the folder that holds it to PYTHONPATH)")
    return Path(spec.origin)


def _same_package_imports(module: str, source: str) -> set[str]:
    """The modules of ``module``'s top-level package that ``source`` imports (absolute or
    relative ``import`` / ``from ... import``)."""
    top, parts = module.split(".")[0], module.split(".")
    found = set()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                base = ".".join(parts[:-node.level] + ([base] if base else []))
            names = [base]
        else:
            continue
        found |= {n for n in names if n.split(".")[0] == top and n != top and n != module}
    return found


@functools.lru_cache(maxsize=None)
def kernel_source_digest(module: str) -> str:
    """sha256 over the source text of ``module`` and, transitively, of the modules of its own
    package it imports — found with ``importlib.util.find_spec`` and read as text, never
    executed (a kernel module imports TVM)."""
    seen, todo, h = set(), [module], hashlib.sha256()
    while todo:
        m = todo.pop()
        if m in seen:
            continue
        seen.add(m)
        text = _module_file(m).read_text()
        todo += sorted(_same_package_imports(m, text) - seen)
    for m in sorted(seen):
        h.update(m.encode() + b"\0" + _module_file(m).read_bytes() + b"\0")
    return h.hexdigest()


def parse_spec(items) -> dict:
    """``["n=1024", "dtype=float16", "cluster=true"]`` -> ``{"n": 1024, "dtype": "float16",
    "cluster": True}`` (ints, ``true``/``false``, else strings): the inverse of
    :meth:`CacheKey.spec_words`."""
    out = {}
    for item in items:
        name, eq, text = item.partition("=")
        if not eq or not name:
            raise ValueError(f"specialization {item!r} is not NAME=VALUE")
        try:
            value = json.loads(text)
        except ValueError:
            value = text
        if not isinstance(value, (int, str, bool)) or isinstance(value, float):
            value = text
        out[name] = value
    return out


@dataclass(frozen=True)
class CacheKey:
    """What an artifact depends on.  ``spec`` holds ``(name, value)`` pairs sorted by name;
    values are ints, bools or strings (JSON-exact).  ``tvm=None``: TVM is not installed here,
    and any entry matching every other field serves."""

    kernel: str
    source: str
    axe: str
    tvm: str | None
    target: str
    spec: tuple

    @classmethod
    def make(cls, kernel: str, target: str, spec: dict, tvm: str | None | bool = True) -> "CacheKey":
        """The key of ``kernel`` (``"module:function"``) for ``target`` and ``spec`` with this
        machine's sources and versions (``tvm=True``: the installed TVM's version)."""
        module = kernel.partition(":")[0]
        for name, value in spec.items():
            if isinstance(value, float) or not isinstance(value, (int, str, bool)):
                raise TypeError(f"cache key of {kernel}: specialization {name}={value!r} must be an int, "
                                "bool or string")
        return cls(kernel, kernel_source_digest(module), axe_version(),
                   tvm_version() if tvm is True else tvm, target, tuple(sorted(spec.items())))

    def fields(self) -> dict:
        """The key's fields as a JSON-ready dict (what :attr:`digest` hashes and ``key.json`` holds)."""
        return {"kernel": self.kernel, "source": self.source, "axe": self.axe, "tvm": self.tvm,
                "target": self.target, "spec": dict(self.spec)}

    @property
    def digest(self) -> str:
        """sha256 of the fields as canonical JSON."""
        return hashlib.sha256(json.dumps(self.fields(), sort_keys=True).encode()).hexdigest()

    def matches(self, fields: dict) -> bool:
        """Whether an entry's ``key.json`` fields serve this key.  Where TVM is absent
        (``tvm=None``) nothing can be built here, so the builder's TVM version and axe source
        fingerprint are not compared: any entry of the same axe release, kernel source, target
        and specialization serves (:meth:`ArtifactCache.find` takes the newest)."""
        mine = self.fields()
        if self.tvm is None:
            mine.pop("tvm")
            if str(fields.get("axe", "")).split("+")[0] != self.axe.split("+")[0]:
                return False
            mine.pop("axe")
        return all(fields.get(k) == v for k, v in mine.items())   # key.json also notes the build time

    def spec_words(self) -> list[str]:
        """The specialization as ``name=value`` words, the form ``axe cache build`` takes."""
        return [f"{k}={json.dumps(v) if isinstance(v, bool) else v}" for k, v in self.spec]

    def describe(self) -> str:
        """One line for messages: ``kernel(spec words) for target``."""
        return f"{self.kernel}({', '.join(self.spec_words())}) for {self.target}"

    def build_command(self) -> str:
        """The command that builds this entry where TVM is installed."""
        return f"AXE_CACHE_DIR=<dir> axe cache build {' '.join([self.kernel, *self.spec_words()])} --target {self.target}"


def _slug(kernel: str) -> str:
    return "".join(c if c.isalnum() or c in "._-" else "." for c in kernel)


@dataclass
class Entry:
    """A cache entry on disk: its folder, ``key.json`` fields, size and whether it lies in a
    shipped (read-only) folder."""

    path: Path
    fields: dict
    bytes: int
    mtime: float
    shipped: bool


class ArtifactCache:
    """The cache at ``root`` (default :func:`cache_root`), with read-only ``shipped`` folders
    (default :func:`shipped_dirs`) searched after it.  ``progress``: a
    :class:`axe.progress.Progress`-like object whose ``step(label)`` wraps each build."""

    def __init__(self, root=None, shipped=None, progress=None):
        self.root = Path(root) if root is not None else cache_root()
        self.shipped = [Path(p) for p in shipped] if shipped is not None else shipped_dirs()
        self.progress = progress

    def entry_dir(self, key: CacheKey, root=None) -> Path:
        """The folder of ``key``'s entry under ``root`` (default this cache's): ``<kernel>/<digest>``."""
        return Path(root or self.root) / _slug(key.kernel) / key.digest

    def find(self, key: CacheKey) -> Path | None:
        """The folder of an entry serving ``key``: the exact digest in the cache, then in each
        shipped folder; where TVM's version is unknown, the newest entry whose other fields
        match."""
        for root in [self.root, *self.shipped]:
            p = self.entry_dir(key, root)
            if (p / KEY_FILE).is_file():
                return p
        if key.tvm is None:
            found = [e for e in self.entries(key.kernel) if key.matches(e.fields)]
            if found:
                return max(found, key=lambda e: (not e.shipped, e.mtime)).path
        return None

    def get(self, key: CacheKey, build) -> Path:
        """The entry folder for ``key``, built with ``build()`` (an :class:`Artifact`) on a miss.

        Law: whatever number of processes call ``get`` for one key at once, ``build`` runs in
        at most one of them while the entry is absent, and every caller returns the same whole
        folder."""
        found = self.find(key)
        if found is not None:
            return found
        if key.tvm is None:
            searched = ", ".join(str(p) for p in [self.root, *self.shipped])
            raise ArtifactMissing(
                f"no artifact for {key.describe()} (key {key.digest[:16]}) in {searched}, and TVM is not "
                f"installed here to build it; build it on a machine with TVM:\n    {key.build_command()}\n"
                f"and copy that cache folder here (set {ENV_DIR} to it, or name it in {ENV_SHIPPED})")
        final = self.entry_dir(key)
        final.parent.mkdir(parents=True, exist_ok=True)
        with _locked(final.parent / f"{key.digest}.lock"):
            if (final / KEY_FILE).is_file():          # built by another process while we waited
                return final
            tmp = Path(tempfile.mkdtemp(prefix=f".{key.digest[:16]}-", dir=final.parent))
            try:
                t0 = time.time()
                step = self.progress.step(key.describe()) if self.progress else contextlib.nullcontext()
                with step:
                    art = build()
                art.save(tmp)
                meta = dict(key.fields(), built=time.strftime("%Y-%m-%dT%H:%M:%S"), seconds=round(time.time() - t0, 3))
                (tmp / KEY_FILE).write_text(json.dumps(meta, indent=1, sort_keys=True) + "\n")
                if final.exists():                     # a half entry of a writer that did not lock
                    shutil.rmtree(final)
                os.rename(tmp, final)
            finally:
                if tmp.exists():
                    shutil.rmtree(tmp, ignore_errors=True)
        return final

    def entries(self, kernel: str | None = None) -> list[Entry]:
        """Every whole entry in the cache and the shipped folders (of ``kernel`` only, if
        given)."""
        out = []
        for root in [self.root, *self.shipped]:
            if not root.is_dir():
                continue
            kdirs = [root / _slug(kernel)] if kernel else sorted(p for p in root.iterdir() if p.is_dir())
            for kdir in kdirs:
                if not kdir.is_dir():
                    continue
                for p in sorted(kdir.iterdir()):
                    kf = p / KEY_FILE
                    if p.name.startswith(".") or not kf.is_file():
                        continue
                    try:
                        fields = json.loads(kf.read_text())
                    except ValueError:
                        continue
                    size = sum(f.stat().st_size for f in p.iterdir() if f.is_file())
                    out.append(Entry(p, fields, size, kf.stat().st_mtime, root != self.root))
        return out

    def clear(self, kernel: str | None = None) -> tuple[int, int]:
        """Remove the cache's entries (of ``kernel`` only, if given), their lock files and
        leftover temporary folders; shipped folders are never touched.  Returns ``(entries,
        bytes)`` removed.  Run it while no process builds into the cache: a builder holding a
        lock file that is removed could race a newcomer (at worst one extra build)."""
        n = size = 0
        if not self.root.is_dir():
            return 0, 0
        kdirs = [self.root / _slug(kernel)] if kernel else [p for p in self.root.iterdir() if p.is_dir()]
        for kdir in kdirs:
            if not kdir.is_dir():
                continue
            for p in kdir.iterdir():
                if p.is_dir():
                    if (p / KEY_FILE).is_file():
                        n += 1
                    size += sum(f.stat().st_size for f in p.rglob("*") if f.is_file())
                    shutil.rmtree(p, ignore_errors=True)
                elif p.suffix == ".lock":
                    p.unlink(missing_ok=True)
            with contextlib.suppress(OSError):
                kdir.rmdir()
        return n, size


@contextlib.contextmanager
def _locked(path: Path):
    """An exclusive ``fcntl.flock`` on ``path`` (created if needed), held for the block; the
    kernel releases it if the process dies."""
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        fcntl.flock(fd, fcntl.LOCK_UN)
        os.close(fd)
