"""The built form of a CUDA kernel: source, PTX, cubin and launch metadata.

An :class:`Artifact` is what ``axe.build`` returns and what ``axe.runtime`` launches.  It is
plain data — this module imports neither TVM nor torch — so artifacts built on a CPU machine
can be saved, copied to a GPU machine and loaded there without the compiler.

On disk an artifact is a folder::

    launch.json    launch metadata (schema below, ``SCHEMA``)
    kernel.cu      the CUDA source TVM generated
    kernel.ptx     PTX for the target (for instruction checks)
    kernel.cubin   the cubin nvcc/ptxas produced
    build.log      nvcc/ptxas output (resource usage)

``launch.json`` (``"schema": "axe.cuda.artifact/1"``)::

    name, arch, kernel          artifact name, "sm_90a"/"sm_100a", kernel symbol in the cubin
    grid, block, cluster        3 entries each (cluster may be null); each entry an int or an
                                expression string over symbols (see below)
    dynamic_smem                bytes of dynamic shared memory per CTA (int or expression)
    cooperative                 launch with cuLaunchCooperativeKernel
    programmatic                (optional) launch with programmatic stream serialization: the
                                kernel may start before its predecessor ends and waits for it
                                itself (Ax.cuda.programmatic_launch / grid_wait)
    args                        the call signature, in order: tensors and scalars
                                  {"name", "kind": "tensor", "dtype", "shape", "strides",
                                   "alignment"}  shape/strides entries: int or expression;
                                   strides null = contiguous row-major; alignment in bytes
                                  {"name", "kind": "scalar", "dtype"}
    params                      the kernel's parameters in order, each
                                  {"name", "kind": "tensor", "arg", dtype/shape/strides/alignment}
                                  {"name", "kind": "scalar", "dtype", "value": expression}
                                  {"name", "kind": "tensormap", "tensormap": index into tensormaps}
    symbols                     {"M": {"arg": "A", "dim": 0[, "max": 128]}}: shape variables read off
                                tensors (at most ``max`` where the kernel was built for a bounded range)
    shape_vars                  {"M": "int32"}: their dtypes (the runtime range-checks them)
    tensormaps                  TMA descriptor specs, encoded at launch:
                                  {"param", "tensor", "dtype", "shape" (innermost first or null:
                                   from the tensor), "strides_bytes" (dims 1..rank-1 or null),
                                   "box" (innermost first), "elem_strides", "swizzle":
                                   0|32|64|128, "interleave": 0, "l2_promotion": 0|64|128|256,
                                   "oob_fill": "zero"|"nan"}
    resources                   {"registers", "static_smem", "spill_stores", "spill_loads",
                                 "stack"} from ptxas, where it reported them
    cubin_sha256                hash of kernel.cubin (module-cache key; checked on load)
    distributed                 (optional) a multi-GPU kernel's signature (axe.runtime.distributed):
                                  {"world": int, "mesh": {"shape": [int], "names": [str]},
                                   "runtime": {"peers", "signals", "errors", "rank", "epoch",
                                               "timeout"[, "multicast"]: argument names},
                                   "params": {arg name: {"shape", "local_shape", "buffer_shape":
                                              [int], "layout", "dtype": str, "placements": str
                                              or null, "symmetric", "scratch": bool
                                              [, "partial_dim": int]}},
                                   "signals_used": int, "signal_owners": [[int, str]],
                                   "features": [str][, "multicast": bool][, "nvshmem": bool,
                                   "nvshmem_version": "major.minor.patch" of the device library linked in]
                                   [, "copies": [{"src", "dst": argument names, "rows", "signal": int}]:
                                   the copy-engine staging before each launch, Mesh.copy_before_launch]}

Expressions are Python integer expressions over argument and symbol names using only
``+ - * // %``, unary minus, parentheses, ``min`` and ``max`` (at least one argument);
:func:`eval_expr` evaluates them and raises :class:`ArtifactError` for every failure (outside
the grammar, an unknown name, division by zero).

:meth:`Artifact.load` checks launch.json with :func:`check_launch`: every key above present
(``cluster`` may be null; ``resources`` entries, ``cubin_sha256``, an argument's ``scratch`` and
``distributed`` are optional), every type right, every expression in the grammar
(:func:`check_expr`) and over scalar arguments and symbols only, every cross-reference
resolved; an :class:`ArtifactError` names the field (``launch.json: args[2].shape[0]: ...``).
Keys the schema does not name are ignored.
"""

from __future__ import annotations

import ast
import functools
import hashlib
import json
import os
from dataclasses import dataclass, field

SCHEMA = "axe.cuda.artifact/1"

_FILES = {"cuda_source": "kernel.cu", "ptx": "kernel.ptx", "cubin": "kernel.cubin", "log": "build.log"}


class ArtifactError(ValueError):
    """An artifact folder or its launch metadata is missing, malformed or inconsistent."""


@dataclass
class Artifact:
    """A built CUDA kernel: ``cuda_source``, ``ptx``, ``cubin`` (bytes) and ``launch`` (dict).

    ``launch`` follows the ``launch.json`` schema in this module's docstring.
    """

    cuda_source: str
    ptx: str
    cubin: bytes
    launch: dict
    log: str = ""
    path: str | None = field(default=None, compare=False)

    @property
    def name(self) -> str:
        """The artifact's name (also the default folder name under ``save``'s parent)."""
        return self.launch["name"]

    @property
    def kernel(self) -> str:
        """The kernel's symbol in the cubin."""
        return self.launch["kernel"]

    def save(self, directory: str | os.PathLike) -> str:
        """Write the artifact into ``directory`` (created if needed) and return its path."""
        directory = os.fspath(directory)
        os.makedirs(directory, exist_ok=True)
        launch = dict(self.launch)
        launch["cubin_sha256"] = hashlib.sha256(self.cubin).hexdigest()
        with open(os.path.join(directory, "launch.json"), "w") as f:
            json.dump(launch, f, indent=1, sort_keys=True)
            f.write("\n")
        for attr, fname in _FILES.items():
            data = getattr(self, attr)
            mode = "wb" if isinstance(data, bytes) else "w"
            with open(os.path.join(directory, fname), mode) as f:
                f.write(data)
        self.path = directory
        return directory

    @classmethod
    def load(cls, directory: str | os.PathLike) -> "Artifact":
        """Read an artifact written by :meth:`save`; checks the schema and the cubin hash."""
        directory = os.fspath(directory)
        launch_path = os.path.join(directory, "launch.json")
        if not os.path.isfile(launch_path):
            raise ArtifactError(f"Artifact.load({directory!r}): no launch.json in that folder")
        with open(launch_path) as f:
            try:
                launch = json.load(f)
            except ValueError as e:
                raise ArtifactError(f"Artifact.load({directory!r}): launch.json is not JSON: {e}") from None
        if not isinstance(launch, dict):
            raise ArtifactError(f"Artifact.load({directory!r}): launch.json holds {_jtype(launch)}, "
                                "expected an object")
        if launch.get("schema") != SCHEMA:
            raise ArtifactError(
                f"Artifact.load({directory!r}): launch.json schema is {launch.get('schema')!r}, "
                f"expected {SCHEMA!r}"
            )
        try:
            check_launch(launch)
        except ArtifactError as e:
            raise ArtifactError(f"Artifact.load({directory!r}): {e}") from None
        parts = {}
        for attr, fname in _FILES.items():
            p = os.path.join(directory, fname)
            if not os.path.isfile(p):
                if attr in ("cubin",):
                    raise ArtifactError(f"Artifact.load({directory!r}): missing {fname}")
                parts[attr] = b"" if attr == "cubin" else ""
                continue
            with open(p, "rb" if attr == "cubin" else "r") as f:
                parts[attr] = f.read()
        digest = hashlib.sha256(parts["cubin"]).hexdigest()
        if launch.get("cubin_sha256") not in (None, digest):
            raise ArtifactError(
                f"Artifact.load({directory!r}): kernel.cubin sha256 {digest[:12]}… does not match "
                f"launch.json cubin_sha256 {launch['cubin_sha256'][:12]}…"
            )
        launch["cubin_sha256"] = digest
        return cls(launch=launch, path=directory, **parts)


# --- the launch.json schema, checked on load ---------------------------------------------------


class _Checker:
    """Checks a launch dict against the schema; every error names the field path."""

    def __init__(self, launch):
        self.launch = launch

    def fail(self, path, msg):
        raise ArtifactError(f"launch.json: {path}: {msg}" if path else f"launch.json: {msg}")

    # generic shapes
    def obj(self, v, path):
        if not isinstance(v, dict):
            self.fail(path, f"is {_jtype(v)}, expected an object")
        return v

    def key(self, d, k, path, check, optional=False):
        p = f"{path}.{k}" if path else k
        if k not in d:
            if optional:
                return None
            self.fail(p, "required key is missing")
        return check(d[k], p)

    def str_(self, v, path):
        if not isinstance(v, str):
            self.fail(path, f"is {_jtype(v)}, expected a string")
        return v

    def int_(self, v, path):
        if isinstance(v, bool) or not isinstance(v, int):
            self.fail(path, f"is {_jtype(v)}, expected an integer")
        return v

    def bool_(self, v, path):
        if not isinstance(v, bool):
            self.fail(path, f"is {_jtype(v)}, expected true or false")
        return v

    def list_(self, v, path, item=None, length=None):
        if not isinstance(v, list):
            self.fail(path, f"is {_jtype(v)}, expected a list")
        if length is not None and len(v) != length:
            self.fail(path, f"has {len(v)} entries, expected {length}")
        if item is not None:
            for i, x in enumerate(v):
                item(x, f"{path}[{i}]")
        return v

    def or_null(self, check):
        return lambda v, path: None if v is None else check(v, path)

    def ints(self, v, path):
        return self.list_(v, path, self.int_)

    def expr(self, v, path):
        try:
            names = check_expr(v)
        except ArtifactError as e:
            self.fail(path, str(e))
        unknown = sorted(names - self.known)
        if unknown:
            self.fail(path, f"expression {_quote(v)} uses {unknown[0]!r}, which is neither a scalar "
                            f"argument nor a shape symbol ({sorted(self.known)})")
        return v

    def exprs(self, v, path, length=None):
        return self.list_(v, path, self.expr, length)

    # the schema
    def run(self):
        L = self.obj(self.launch, "")
        for k in ("schema", "name", "arch", "kernel"):
            self.key(L, k, "", self.str_)
        self.key(L, "cooperative", "", self.bool_)
        self.key(L, "programmatic", "", self.bool_, optional=True)
        self.key(L, "cubin_sha256", "", self.str_, optional=True)
        args = self.key(L, "args", "", self.list_)
        for i, a in enumerate(args):
            self.arg(a, f"args[{i}]")
        names = [a["name"] for a in args]
        dup = sorted({n for n in names if names.count(n) > 1})
        if dup:
            self.fail("args", f"argument {dup[0]!r} appears more than once")
        self.args = {a["name"]: a for a in args}
        shape_vars = self.obj(self.key(L, "shape_vars", "", lambda v, p: v), "shape_vars")
        for n, dt in shape_vars.items():
            self.str_(dt, f"shape_vars.{n}")
        symbols = self.obj(self.key(L, "symbols", "", lambda v, p: v), "symbols")
        for n, src in symbols.items():
            p = f"symbols.{n}"
            self.obj(src, p)
            arg = self.key(src, "arg", p, self.str_)
            dim = self.key(src, "dim", p, self.int_)
            if "max" in src:
                self.int_(src["max"], f"{p}.max")
            a = self.args.get(arg)
            if a is None or a["kind"] != "tensor":
                self.fail(f"{p}.arg", f"{arg!r} is not a tensor argument")
            if not 0 <= dim < len(a["shape"]):
                self.fail(f"{p}.dim", f"{dim} is not a dimension of {arg!r} (rank {len(a['shape'])})")
        self.known = {n for n, a in self.args.items() if a["kind"] == "scalar"} | set(symbols)
        for i, a in enumerate(args):
            if a["kind"] == "tensor":
                self.tensor_shape(a, f"args[{i}]")
        for k in ("grid", "block"):
            self.key(L, k, "", lambda v, p: self.exprs(v, p, 3))
        self.key(L, "cluster", "", self.or_null(lambda v, p: self.exprs(v, p, 3)))
        self.key(L, "dynamic_smem", "", self.expr)
        tensormaps = self.key(L, "tensormaps", "", self.list_)
        for i, t in enumerate(tensormaps):
            self.tensormap(t, f"tensormaps[{i}]")
        params = self.key(L, "params", "", self.list_)
        for i, prm in enumerate(params):
            self.param(prm, f"params[{i}]", len(tensormaps))
        resources = self.obj(self.key(L, "resources", "", lambda v, p: v), "resources")
        for k, v in resources.items():
            self.int_(v, f"resources.{k}")
        self.key(L, "distributed", "", self.distributed, optional=True)

    def arg(self, a, path):
        self.obj(a, path)
        self.key(a, "name", path, self.str_)
        kind = self.key(a, "kind", path, self.str_)
        self.key(a, "dtype", path, self.str_)
        if kind == "tensor":
            self.key(a, "shape", path, self.list_)
            self.key(a, "strides", path, self.or_null(self.list_))
            self.key(a, "alignment", path, self.int_)
            self.key(a, "scratch", path, self.bool_, optional=True)
        elif kind != "scalar":
            self.fail(f"{path}.kind", f"is {kind!r}, expected \"tensor\" or \"scalar\"")

    def tensor_shape(self, a, path):
        shape = self.key(a, "shape", path, self.exprs)
        strides = a.get("strides")
        if strides is not None:
            self.exprs(strides, f"{path}.strides", len(shape))

    def param(self, prm, path, n_tensormaps):
        self.obj(prm, path)
        self.key(prm, "name", path, self.str_)
        kind = self.key(prm, "kind", path, self.str_)
        if kind == "tensor":
            arg = self.key(prm, "arg", path, self.str_)
            a = self.args.get(arg)
            if a is None or a["kind"] != "tensor":
                self.fail(f"{path}.arg", f"{arg!r} is not a tensor argument")
            self.key(prm, "dtype", path, self.str_)
            self.key(prm, "shape", path, self.list_)
            self.key(prm, "strides", path, self.or_null(self.list_))
            self.key(prm, "alignment", path, self.int_)
            self.tensor_shape(prm, path)
        elif kind == "scalar":
            self.key(prm, "dtype", path, self.str_)
            self.key(prm, "value", path, self.expr)
        elif kind == "tensormap":
            i = self.key(prm, "tensormap", path, self.int_)
            if not 0 <= i < n_tensormaps:
                self.fail(f"{path}.tensormap", f"index {i} is outside tensormaps (it has {n_tensormaps})")
        else:
            self.fail(f"{path}.kind", f"is {kind!r}, expected \"tensor\", \"scalar\" or \"tensormap\"")

    def tensormap(self, t, path):
        self.obj(t, path)
        for k in ("param", "tensor", "dtype", "oob_fill"):
            self.key(t, k, path, self.str_)
        for k in ("shape", "strides_bytes"):
            self.key(t, k, path, self.or_null(self.ints))
        for k in ("box", "elem_strides"):
            self.key(t, k, path, self.ints)
        for k in ("swizzle", "interleave", "l2_promotion"):
            self.key(t, k, path, self.int_)
        a = self.args.get(t["tensor"])
        if a is None or a["kind"] != "tensor":
            self.fail(f"{path}.tensor", f"{t['tensor']!r} is not a tensor argument")

    def distributed(self, d, path):
        self.obj(d, path)
        self.key(d, "world", path, self.int_)
        mesh = self.obj(self.key(d, "mesh", path, lambda v, p: v), f"{path}.mesh")
        self.key(mesh, "shape", f"{path}.mesh", self.ints)
        self.key(mesh, "names", f"{path}.mesh", lambda v, p: self.list_(v, p, self.str_))
        rt = self.obj(self.key(d, "runtime", path, lambda v, p: v), f"{path}.runtime")
        for k in ("peers", "signals", "errors", "rank", "epoch", "timeout"):
            self.key(rt, k, f"{path}.runtime", self.arg_name)
        self.key(rt, "multicast", f"{path}.runtime", self.arg_name, optional=True)
        params = self.obj(self.key(d, "params", path, lambda v, p: v), f"{path}.params")
        for n, decl in params.items():
            p = f"{path}.params.{n}"
            self.arg_name(n, p)
            self.obj(decl, p)
            for k in ("shape", "local_shape", "buffer_shape"):
                self.key(decl, k, p, self.ints)
            for k in ("layout", "dtype"):
                self.key(decl, k, p, self.str_)
            self.key(decl, "placements", p, self.or_null(self.str_))
            for k in ("symmetric", "scratch"):
                self.key(decl, k, p, self.bool_)
            self.key(decl, "partial_dim", p, self.int_, optional=True)
        self.key(d, "signals_used", path, self.int_)
        self.key(d, "signal_owners", path, lambda v, p: self.list_(v, p, self.signal_owner))
        self.key(d, "features", path, lambda v, p: self.list_(v, p, self.str_))
        for k in ("multicast", "nvshmem"):
            self.key(d, k, path, self.bool_, optional=True)
        self.key(d, "nvshmem_version", path, self.str_, optional=True)
        self.key(d, "copies", path, lambda v, p: self.list_(v, p, self.staged_copy), optional=True)

    def staged_copy(self, v, path):
        self.obj(v, path)
        for k in ("src", "dst"):
            self.key(v, k, path, self.arg_name)
        for k in ("rows", "signal"):
            self.key(v, k, path, self.int_)

    def arg_name(self, v, path):
        self.str_(v, path)
        if v not in self.args:
            self.fail(path, f"{v!r} is not an argument ({', '.join(self.args)})")
        return v

    def signal_owner(self, v, path):
        self.list_(v, path, length=2)
        self.int_(v[0], f"{path}[0]")
        self.str_(v[1], f"{path}[1]")


def _jtype(v) -> str:
    """``v``'s JSON type, in words."""
    if v is None:
        return "null"
    if isinstance(v, bool):
        return f"a boolean ({json.dumps(v)})"
    if isinstance(v, (int, float)):
        return f"a number ({v!r})"
    if isinstance(v, str):
        return f"a string ({json.dumps(v)[:60]})"
    if isinstance(v, list):
        return "a list"
    if isinstance(v, dict):
        return "an object"
    return type(v).__name__


def check_launch(launch) -> None:
    """Check a launch dict against the ``launch.json`` schema (this module's docstring): every
    required key present, every type right, every expression in :func:`eval_expr`'s grammar and
    over known names, every cross-reference (a param's ``arg``, a symbol's tensor, a tensor map
    index, the distributed runtime's arguments) resolved.  Raises :class:`ArtifactError`
    naming the field, e.g. ``launch.json: args[2].shape[0]: expression "M +* 2" is not in the
    grammar (...)``.  Keys the schema does not name are ignored."""
    _Checker(launch).run()


# --- integer expressions in launch.json -------------------------------------------------------

_BINOPS = {
    ast.Add: lambda a, b: a + b,
    ast.Sub: lambda a, b: a - b,
    ast.Mult: lambda a, b: a * b,
    ast.FloorDiv: lambda a, b: a // b,
    ast.Mod: lambda a, b: a % b,
}

#: the most characters an expression may have (a launch.json from elsewhere is untrusted input)
_MAX_EXPR_CHARS = 4096


def _grammar_error(expr, what: str) -> ArtifactError:
    return ArtifactError(f"expression {_quote(expr)} is not in the grammar ({what})")


def _quote(expr) -> str:
    return '"' + expr + '"' if isinstance(expr, str) else repr(expr)


def _check_node(node, expr, names: set) -> None:
    """Raise unless ``node`` is in the grammar; collect the names it uses into ``names``."""
    if isinstance(node, ast.Constant):
        if type(node.value) is not int:
            raise _grammar_error(expr, f"constant {node.value!r} is not an integer")
        return
    if isinstance(node, ast.Name):
        names.add(node.id)
        return
    if isinstance(node, ast.BinOp):
        if type(node.op) not in _BINOPS:
            raise _grammar_error(expr, f"operator {type(node.op).__name__} is not one of + - * // %")
        _check_node(node.left, expr, names)
        _check_node(node.right, expr, names)
        return
    if isinstance(node, ast.UnaryOp):
        if not isinstance(node.op, ast.USub):
            raise _grammar_error(expr, f"unary {type(node.op).__name__} is not unary minus")
        _check_node(node.operand, expr, names)
        return
    if isinstance(node, ast.Call):
        if not (isinstance(node.func, ast.Name) and node.func.id in ("min", "max")):
            raise _grammar_error(expr, "only min(...) and max(...) may be called")
        if node.keywords or any(isinstance(a, ast.Starred) for a in node.args):
            raise _grammar_error(expr, f"{node.func.id}() takes plain arguments only")
        if not node.args:
            raise _grammar_error(expr, f"{node.func.id}() of nothing")
        for a in node.args:
            _check_node(a, expr, names)
        return
    raise _grammar_error(expr, f"unsupported syntax {type(node).__name__}")


@functools.lru_cache(maxsize=4096)
def _parse(expr: str):
    """``(tree, names)`` of a grammatical expression string (cached: the runtime evaluates the
    same few expressions at every launch); raises :class:`ArtifactError` otherwise."""
    if len(expr) > _MAX_EXPR_CHARS:
        raise _grammar_error(expr[:40] + "...", f"longer than {_MAX_EXPR_CHARS} characters")
    try:
        tree = ast.parse(expr.strip(), mode="eval")
    except (SyntaxError, ValueError, RecursionError, MemoryError) as e:
        raise _grammar_error(expr, f"does not parse: {getattr(e, 'msg', e)}") from None
    names: set = set()
    try:
        _check_node(tree.body, expr, names)
    except RecursionError:
        raise _grammar_error(expr, "nested too deeply") from None
    return tree.body, frozenset(names)


def check_expr(expr) -> frozenset:
    """Check, without evaluating, that ``expr`` is a launch.json expression: an int, or a string
    in the grammar of :func:`eval_expr`.  Returns the names it uses; raises
    :class:`ArtifactError` (``expression "..." is not in the grammar (why)``) otherwise."""
    if isinstance(expr, bool):
        raise ArtifactError(f"expression {expr!r} is a bool, expected an integer or an expression string")
    if isinstance(expr, int):
        return frozenset()
    if not isinstance(expr, str):
        raise ArtifactError(f"expression {expr!r} is a {type(expr).__name__}, expected an integer "
                            "or an expression string")
    return _parse(expr)[1]


def eval_expr(expr, env: dict) -> int:
    """Evaluate a launch.json integer expression (int, or string over names in ``env``).

    Only ``+ - * // %``, unary minus, parentheses, ``min`` and ``max`` are accepted, so a
    launch.json from elsewhere cannot run arbitrary code.  Every failure — outside the grammar,
    an unknown name, division by zero, a value that is not an integer — raises
    :class:`ArtifactError` naming the expression and the cause.
    """
    if isinstance(expr, bool):
        raise ArtifactError(f"launch expression {expr!r} is a bool, expected an integer")
    if isinstance(expr, int):
        return expr
    if not isinstance(expr, str):
        raise ArtifactError(f"launch expression {expr!r} is neither an int nor a string")
    try:
        tree, names = _parse(expr)
    except ArtifactError as e:
        raise ArtifactError(f"launch {e}") from None
    values = {}
    for n in sorted(names):
        if n not in env:
            raise ArtifactError(
                f"launch expression {expr!r} uses {n!r}, which is not among the "
                f"known arguments and symbols {sorted(env)}"
            )
        v = env[n]
        try:
            iv = int(v)
        except (TypeError, ValueError, OverflowError) as e:
            raise ArtifactError(f"launch expression {expr!r}: {n} = {v!r} is not an integer ({e})") from None
        if iv != v and not isinstance(v, int):
            raise ArtifactError(f"launch expression {expr!r}: {n} = {v!r} is not an integer")
        values[n] = iv

    def ev(node):
        if isinstance(node, ast.Constant):
            return node.value
        if isinstance(node, ast.Name):
            return values[node.id]
        if isinstance(node, ast.BinOp):
            return _BINOPS[type(node.op)](ev(node.left), ev(node.right))
        if isinstance(node, ast.UnaryOp):
            return -ev(node.operand)
        vals = [ev(a) for a in node.args]     # min/max with at least one argument (_parse)
        return min(vals) if node.func.id == "min" else max(vals)

    try:
        return ev(tree)
    except (ArithmeticError, ValueError, TypeError, RecursionError) as e:
        where = ", ".join(f"{n}={values[n]}" for n in sorted(values))
        raise ArtifactError(
            f"launch expression {expr!r} failed" + (f" with {where}" if where else "")
            + f": {type(e).__name__}: {e}"
        ) from None
