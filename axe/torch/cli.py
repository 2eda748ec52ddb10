"""``axe cache list|clear|build|dir``: the on-disk artifact cache (:mod:`axe.torch.cache`).

``axe cache build MODULE:FUNCTION NAME=VALUE ... --target sm_90a`` builds one entry (the
command an :class:`~axe.torch.cache.ArtifactMissing` error names); ``--spec-file`` builds
many, one line ``MODULE:FUNCTION TARGET NAME=VALUE ...`` each, with a progress display.
"""

from __future__ import annotations

import sys

__all__ = ["add_commands"]


def _cache(args):
    from .cache import ArtifactCache
    return ArtifactCache(args.dir) if args.dir else ArtifactCache()


def _list(args) -> int:
    cache = _cache(args)
    entries = cache.entries(args.kernel)
    print(f"cache {cache.root}" + "".join(f"; shipped {p}" for p in cache.shipped))
    for e in sorted(entries, key=lambda e: (e.fields.get("kernel", ""), str(e.path))):
        f = e.fields
        spec = " ".join(f"{k}={v}" for k, v in sorted(f.get("spec", {}).items()))
        print(f"{f.get('kernel', '?'):28s} {f.get('target', '?'):8s} {spec:40s} {e.bytes / 1024:8.1f} KiB  "
              f"tvm {f.get('tvm')}  {'shipped ' if e.shipped else ''}{e.path}")
    print(f"{len(entries)} entries, {sum(e.bytes for e in entries) / 1024:.1f} KiB")
    return 0


def _clear(args) -> int:
    cache = _cache(args)
    n, size = cache.clear(args.kernel)
    print(f"removed {n} entries ({size / 1024:.1f} KiB) from {cache.root}")
    return 0


def _build(args) -> int:
    from axe.progress import Progress
    from .cache import CacheKey, parse_spec
    from .jit import JitKernel
    jobs = [(args.kernel, args.target, parse_spec(args.spec))] if args.kernel else []
    if args.spec_file:
        with open(args.spec_file) as f:
            for line in f:
                words = line.split("#", 1)[0].split()
                if words:
                    jobs.append((words[0], words[1], parse_spec(words[2:])))
    if not jobs:
        raise SystemExit("axe cache build: name a kernel (MODULE:FUNCTION) or --spec-file")
    cache, failed = _cache(args), 0
    with Progress(len(jobs), "build") as p:
        cache.progress = None
        for kernel, target, spec in jobs:
            jk = JitKernel(kernel, lambda *a: spec, path=args.path, cache=cache, progress=False)
            key = jk.key(target, spec)
            try:
                with p.step(key.describe()):
                    path = jk.artifact_path(target, spec)
            except Exception as err:  # noqa: BLE001 - report every failing build, then fail
                failed += 1
                p.note(f"  {type(err).__name__}: {err}")
                continue
            p.note(f"  -> {path}")
    return 1 if failed else 0


def _dir(args) -> int:
    print(_cache(args).root)
    return 0


def add_commands(subparsers) -> None:
    """``axe cache {list, clear, dir, build}``, added to the CLI's ``subparsers``."""
    c = subparsers.add_parser("cache", help="list, clear or fill the on-disk artifact cache")
    sub = c.add_subparsers(dest="cache_command", required=True)
    for name, fn, help_ in (("list", _list, "list the cache's and shipped folders' entries"),
                            ("clear", _clear, "remove the cache's entries (shipped folders stay)"),
                            ("dir", _dir, "print the cache folder")):
        s = sub.add_parser(name, help=help_)
        s.add_argument("--dir", help="the cache folder (default $AXE_CACHE_DIR or ~/.cache/axe)")
        if name != "dir":
            s.add_argument("--kernel", help="only this kernel (MODULE:FUNCTION)")
        s.set_defaults(func=fn)
    b = sub.add_parser("build", help="build cache entries (needs TVM)")
    b.add_argument("kernel", nargs="?", help="MODULE:FUNCTION of a kernel factory, e.g. kernels.rmsnorm:dynamic")
    b.add_argument("spec", nargs="*", help="the factory's keyword arguments, NAME=VALUE")
    b.add_argument("--target", default="sm_90a", help="sm_90a or sm_100a")
    b.add_argument("--spec-file", help="a file of lines 'MODULE:FUNCTION TARGET NAME=VALUE ...'")
    b.add_argument("--path", default=".", help="a folder put on sys.path to find the module (default: .)")
    b.add_argument("--dir", help="the cache folder (default $AXE_CACHE_DIR or ~/.cache/axe)")
    b.set_defaults(func=_build)


if __name__ == "__main__":  # pragma: no cover
    sys.exit(0)
