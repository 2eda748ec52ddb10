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
    args                        the call signature, in order: tensors and scalars
                                  {"name", "kind": "tensor", "dtype", "shape", "strides",
                                   "alignment"}  shape/strides entries: int or expression;
                                   strides null = contiguous row-major; alignment in bytes
                                  {"name", "kind": "scalar", "dtype"}
    params                      the kernel's parameters in order, each
                                  {"name", "kind": "tensor", "arg", dtype/shape/strides/alignment}
                                  {"name", "kind": "scalar", "dtype", "value": expression}
                                  {"name", "kind": "tensormap", "tensormap": index into tensormaps}
    symbols                     {"M": {"arg": "A", "dim": 0}}: shape variables read off tensors
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

Expressions are Python integer expressions over argument and symbol names using only
``+ - * // %``, parentheses, ``min`` and ``max``; :func:`eval_expr` evaluates them.
"""

from __future__ import annotations

import ast
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
            launch = json.load(f)
        if launch.get("schema") != SCHEMA:
            raise ArtifactError(
                f"Artifact.load({directory!r}): launch.json schema is {launch.get('schema')!r}, "
                f"expected {SCHEMA!r}"
            )
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


# --- integer expressions in launch.json -------------------------------------------------------

_BINOPS = {
    ast.Add: lambda a, b: a + b,
    ast.Sub: lambda a, b: a - b,
    ast.Mult: lambda a, b: a * b,
    ast.FloorDiv: lambda a, b: a // b,
    ast.Mod: lambda a, b: a % b,
}


def eval_expr(expr, env: dict) -> int:
    """Evaluate a launch.json integer expression (int, or string over names in ``env``).

    Only ``+ - * // %``, unary minus, parentheses, ``min`` and ``max`` are accepted, so a
    launch.json from elsewhere cannot run arbitrary code.
    """
    if isinstance(expr, bool):
        raise ArtifactError(f"launch expression {expr!r} is a bool, expected an integer")
    if isinstance(expr, int):
        return expr
    if not isinstance(expr, str):
        raise ArtifactError(f"launch expression {expr!r} is neither an int nor a string")

    def ev(node):
        if isinstance(node, ast.Expression):
            return ev(node.body)
        if isinstance(node, ast.Constant) and isinstance(node.value, int):
            return node.value
        if isinstance(node, ast.Name):
            if node.id not in env:
                raise ArtifactError(
                    f"launch expression {expr!r} uses {node.id!r}, which is not among the "
                    f"known arguments and symbols {sorted(env)}"
                )
            return int(env[node.id])
        if isinstance(node, ast.BinOp) and type(node.op) in _BINOPS:
            return _BINOPS[type(node.op)](ev(node.left), ev(node.right))
        if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub):
            return -ev(node.operand)
        if (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Name)
            and node.func.id in ("min", "max")
            and not node.keywords
        ):
            vals = [ev(a) for a in node.args]
            return min(vals) if node.func.id == "min" else max(vals)
        raise ArtifactError(f"launch expression {expr!r}: unsupported syntax {ast.dump(node)}")

    try:
        tree = ast.parse(expr, mode="eval")
    except SyntaxError as e:
        raise ArtifactError(f"launch expression {expr!r} does not parse: {e}") from None
    return ev(tree)
