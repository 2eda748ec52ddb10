"""Build a ``tvm.tirx`` kernel into an :class:`~axe.backends.cuda.artifact.Artifact`.

The pipeline (TVM 0.27):

1. bind the CUDA target (``{"kind": "cuda", "arch": ...}``) and run the ``tirx`` TIR pipeline;
2. split host and device functions; the one device function with the kernel-launch calling
   convention is the kernel, its parameters are the kernel's parameters in order (TVM drops
   parameters the device code does not use);
3. read the launch from the host function's ``tirx.call_ffi_kernel`` call: its arguments are the
   kernel arguments followed by one value per ``launch_params`` tag (``blockIdx.*``,
   ``threadIdx.*``, ``clusterCtaIdx.*``, and last the dynamic shared memory bytes when the tag
   ``tirx.use_dyn_shared_memory`` is present); values are constants or expressions in the
   function's scalar parameters and shape variables;
4. generate CUDA source with ``target.build.cuda`` and compile it with nvcc into a cubin
   (``-gencode=arch=compute_XXa,code=sm_XXa``) and PTX.

Tensor-map (TMA) parameters are declared in TVMScript as ``A_map: T.handle("tensormap")``;
codegen makes them ``const __grid_constant__ CUtensorMap`` kernel parameters, and the caller
of ``build`` supplies one spec per such parameter (``tensormaps=``), which the runtime encodes
with ``cuTensorMapEncodeTiled`` at launch.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import tempfile

from .artifact import SCHEMA, Artifact
from .lang.grid_dependency import PDL_ATTR
from .tensormap import check_spec

#: shared memory one CTA may use on sm_90/sm_100 (227 KiB)
MAX_SMEM_PER_CTA = 232448
#: shared memory of one SM on sm_90/sm_100 (228 KiB), of which the driver reserves 1 KiB per resident CTA
SMEM_PER_SM, SMEM_RESERVED_PER_CTA = 233472, 1024

_NVCC_FLAGS = [
    "-O3",
    "-std=c++17",
    "-U__CUDA_NO_HALF_OPERATORS__",
    "-U__CUDA_NO_HALF_CONVERSIONS__",
    "-U__CUDA_NO_BFLOAT16_OPERATORS__",
    "-U__CUDA_NO_BFLOAT16_CONVERSIONS__",
    "-U__CUDA_NO_BFLOAT162_OPERATORS__",
    "-U__CUDA_NO_BFLOAT162_CONVERSIONS__",
    "--expt-relaxed-constexpr",
    "--expt-extended-lambda",
    "-diag-suppress=177",  # TVM declares unused variables and helpers
]

_TENSORMAP_KEYS = {
    "param", "tensor", "dtype", "shape", "strides_bytes", "box", "elem_strides", "swizzle",
    "interleave", "l2_promotion", "oob_fill",
}


class BuildError(RuntimeError):
    """Building a kernel failed: unsupported input, inconsistent metadata, or nvcc/ptxas errors."""


def c_identifier(name: str) -> str:
    """``name`` as a C identifier: every character but ASCII letters, digits and ``_`` replaced by
    ``_``, and ``_`` in front of a leading digit.  Law: a C identifier is returned unchanged."""
    out = re.sub(r"[^0-9A-Za-z_]", "_", name)
    return "_" + out if out[:1].isdigit() else out


def build(
    func_or_mod,
    target="sm_90a",
    name: str | None = None,
    tensormaps=(),
    dynamic_smem: int | None = None,
    scratch=(),
    *,
    distributed: dict | None = None,
    symbol_max: dict | None = None,
    fast_math: bool = True,
    nvcc_options=(),
    emit_ptx: bool = True,
) -> Artifact:
    """Compile one ``tvm.tirx`` kernel to an :class:`Artifact` (CUDA source, PTX, cubin, launch).

    ``func_or_mod`` is a ``PrimFunc`` or an ``IRModule`` holding one (``name`` picks one of
    several).  Its body is one kernel (``T.device_entry(); bx = T.cta_id([...]); ...``).
    ``target`` is ``"sm_90a"``, ``"sm_100a"`` (or any ``sm_XX[a]``), a ``tvm.target.Target`` of
    kind cuda, or its dict form.  ``tensormaps`` holds one spec dict per ``T.handle("tensormap")``
    parameter (fields in the artifact module's docstring; ``param``, ``tensor`` and ``box`` are
    required).  ``dynamic_smem`` overrides the dynamic shared memory TVM computed (it may only
    grow it).  ``scratch`` names tensor parameters the runtime supplies itself: trailing
    parameters of static shape that it allocates zero-filled once per device and passes when the
    caller leaves them out (the kernel must leave them zero-filled, or use them as workspace it
    overwrites before reading).  ``fast_math`` passes ``--use_fast_math`` to nvcc as TVM does.
    ``symbol_max``: the largest value each named shape symbol may take (``launch["symbols"][n]["max"]``;
    the runtime refuses a launch beyond it).
    ``distributed``: a distributed kernel's signature (mesh, per-parameter global shapes and
    layouts, the parameters the runtime fills), stored as ``launch["distributed"]``; every name
    in it must be a parameter.
    """
    import tvm
    from tvm.target import Target
    from tvm.tirx.build import codegen_build, split_host_device_mods

    func, fname = _pick_func(tvm, func_or_mod, name)
    if c_identifier(fname) != fname:
        # the kernel symbol is f"{fname}_kernel" in C++: anything else ends in a wall of nvcc syntax errors
        raise BuildError(f"build: kernel name {fname!r} is not a C identifier (ASCII letters, digits and _, not "
                         f"starting with a digit); e.g. {c_identifier(fname)!r}")
    func = func.with_attr("global_symbol", fname)  # the kernel symbol becomes f"{fname}_kernel"
    arch = _arch_of(target)
    args, symbols, shape_vars = _describe_args(tvm, func, fname)
    for n, hi in (symbol_max or {}).items():
        if n not in symbols:
            raise BuildError(f"build({fname}): a bound on shape symbol {n!r}, which no tensor argument has "
                             f"(symbols: {sorted(symbols)})")
        symbols[n]["max"] = int(hi)
    _mark_scratch(args, scratch, fname)
    specs = _check_tensormap_specs(_merge_attr_specs(func, tensormaps, fname), args, fname)

    tvm_target = Target({"kind": "cuda", "arch": arch})
    mod = tvm.IRModule({fname: func})
    mod = tvm.tirx.transform.BindTarget(tvm_target.with_host(Target("llvm")))(mod)
    pipeline, _finalize_host, finalize_device = tvm.tirx.get_tir_pipeline("tirx")
    with tvm_target:
        mod = pipeline(mod)
        host_mod, device_mods = split_host_device_mods(mod)
        if len(device_mods) != 1:
            raise BuildError(f"build({fname}): expected one CUDA device module, got {len(device_mods)}")
        (dev_target, dev_mod), = device_mods.items()
        dev_mod = finalize_device()(dev_mod)
        kernels = [
            (gv, f)
            for gv, f in dev_mod.functions.items()
            if int(f.attrs.get("calling_conv", 0)) == 2
        ]
        if len(kernels) != 1:
            raise BuildError(
                f"build({fname}): expected exactly one kernel (one T.device_entry() region), "
                f"found {len(kernels)}: {[str(gv.name_hint) for gv, _ in kernels]}"
            )
        kgv, kfunc = kernels[0]
        # launch-bound attributes written on the PrimFunc (e.g. ``__launch_bounds__(n, 1)``, which
        # setmaxnreg needs) do not survive the host/device split: carry them to the kernel
        carried = {k: func.attrs[k] for k in _KERNEL_ATTRS if func.attrs and k in func.attrs}
        if carried:
            kfunc = _with_attrs(kfunc, carried)
            dev_mod[kgv] = kfunc
        symbol = str(kfunc.attrs.get("global_symbol", kgv.name_hint))
        cuda_source = codegen_build(dev_mod, dev_target).inspect_source()

    call, lets = _find_launch_call(tvm, host_mod, symbol, fname)
    known = {a["name"] for a in args if a["kind"] == "scalar"} | set(symbols)
    to_expr = _ExprConverter(tvm, lets, known, fname)

    kparams = list(kfunc.params)
    call_args = list(call.args)[1:]
    tags = [str(t) for t in _launch_tags(call, kfunc)]
    if len(call_args) < len(kparams):
        raise BuildError(
            f"build({fname}): host launch call has {len(call_args)} arguments for "
            f"{len(kparams)} kernel parameters"
        )
    params = _describe_params(tvm, kparams, call_args[: len(kparams)], args, specs, to_expr, fname)
    launch_vals = call_args[len(kparams):]

    grid, block, cluster = [1, 1, 1], [1, 1, 1], None
    dyn = 0
    cooperative = False
    vi = 0
    for tag in tags:
        if tag == "tirx.use_dyn_shared_memory":
            dyn = to_expr(launch_vals[vi], "dynamic shared memory")
            vi += 1
        elif tag == "tirx.use_cooperative_launch":
            cooperative = True
        elif tag.startswith(("tirx.",)):
            continue  # launch flags without a value (PDL: read off the PrimFunc below; required block dimension)
        else:
            rank, _, axis = tag.partition(".")
            dim = "xyz".index(axis)
            value = to_expr(launch_vals[vi], tag)
            vi += 1
            if rank == "blockIdx":
                grid[dim] = value
            elif rank == "threadIdx":
                block[dim] = value
            elif rank == "clusterCtaIdx":
                cluster = cluster or [1, 1, 1]
                cluster[dim] = value
            else:
                raise BuildError(f"build({fname}): unsupported launch tag {tag!r}")
    if vi != len(launch_vals):
        raise BuildError(
            f"build({fname}): launch tags {tags} consumed {vi} of {len(launch_vals)} launch values"
        )
    if dynamic_smem is not None:
        if isinstance(dyn, int) and dynamic_smem < dyn:
            raise BuildError(
                f"build({fname}): dynamic_smem={dynamic_smem} is below the {dyn} bytes the "
                f"kernel's shared.dyn allocations need"
            )
        dyn = int(dynamic_smem)

    extra, link = list(nvcc_options), []
    if distributed and distributed.get("nvshmem"):   # device calls into NVSHMEM: relocatable code, linked
        # NVSHMEM's headers first in the unit (TVM's preamble #defines uint, which they do not survive)
        extra += ["-rdc=true", f"-I{nvshmem_include(fname)}", "-include", "nvshmem.h", "-include", "nvshmemx.h"]
        link = [nvshmem_device_library(fname)]
    # Ax.cuda.programmatic_launch() marks the PrimFunc; the launch must then wait in the kernel
    programmatic = bool(func.attrs is not None and PDL_ATTR in func.attrs)
    if programmatic and "griddepcontrol_wait" not in cuda_source:
        raise BuildError(f"build({fname}): the kernel declares Ax.cuda.programmatic_launch() but never waits "
                         "(Ax.cuda.grid_wait()): launched before its predecessor ends, it would read that "
                         "kernel's output before it is written")
    cubin, ptx, log = _nvcc(cuda_source, arch, fast_math, extra, emit_ptx, fname, link)
    resources = _ptxas_resources(log)
    if isinstance(dyn, int) and dyn + resources.get("static_smem", 0) > MAX_SMEM_PER_CTA:
        raise BuildError(
            f"build({fname}): {dyn} bytes dynamic + {resources.get('static_smem', 0)} bytes static "
            f"shared memory exceed the {MAX_SMEM_PER_CTA} bytes one CTA may use"
        )
    blocks = int(func.attrs["tirx.launch_bounds_min_blocks_per_sm"]) if (
        func.attrs is not None and "tirx.launch_bounds_min_blocks_per_sm" in func.attrs) else 1
    per_cta = (dyn if isinstance(dyn, int) else 0) + resources.get("static_smem", 0) + SMEM_RESERVED_PER_CTA
    if blocks > 1 and blocks * per_cta > SMEM_PER_SM:
        # __launch_bounds__ only bounds registers: the CTAs would silently run one at a time
        raise BuildError(
            f"build({fname}): min_blocks_per_sm({blocks}) needs {blocks} x {per_cta} bytes of shared memory "
            f"(dynamic + static + {SMEM_RESERVED_PER_CTA} reserved per CTA), more than the {SMEM_PER_SM} of one SM")
    if isinstance(block[0], int) and _prod(block) > 1024:
        raise BuildError(f"build({fname}): block {block} has more than 1024 threads")

    launch = {
        "schema": SCHEMA,
        "name": fname,
        "arch": arch,
        "kernel": symbol,
        "grid": grid,
        "block": block,
        "cluster": cluster,
        "dynamic_smem": dyn,
        "cooperative": cooperative,
        "programmatic": programmatic,
        "args": args,
        "params": params,
        "symbols": symbols,
        "tensormaps": specs,
        "resources": resources,
        "shape_vars": shape_vars,
    }
    if distributed:
        launch["distributed"] = _check_distributed(distributed, args, fname)
        if link:
            launch["distributed"]["nvshmem_version"] = nvshmem_version(fname)
    return Artifact(cuda_source=cuda_source, ptx=ptx, cubin=cubin, launch=launch, log=log)


def _mark_scratch(args, scratch, fname):
    """Mark the ``scratch`` parameters in ``args`` (``"scratch": true``); they must be tensors of
    static shape after every caller-supplied argument."""
    names = [a["name"] for a in args]
    for s in scratch:
        if s not in names:
            raise BuildError(f"build({fname}): scratch parameter {s!r} is not a parameter ({', '.join(names)})")
        a = args[names.index(s)]
        if a["kind"] != "tensor" or not all(isinstance(d, int) for d in a["shape"]):
            raise BuildError(f"build({fname}): scratch parameter {s!r} must be a tensor of static shape")
        a["scratch"] = True
    flags = [bool(a.get("scratch")) for a in args]
    if flags != sorted(flags):
        raise BuildError(f"build({fname}): scratch parameters {list(scratch)} must come after every other parameter")


def _check_distributed(dist, args, fname):
    """The distributed signature, checked against the call signature (every runtime-filled name
    and every declared parameter is an argument; the multi-device runtime fills the former)."""
    import copy
    dist = copy.deepcopy(dist)
    names = {a["name"]: a for a in args}
    for role, n in dist.get("runtime", {}).items():
        if n not in names:
            raise BuildError(f"build({fname}): the mesh's {role} {n!r} is not a kernel argument "
                             f"(TVM drops unused parameters: use it, or leave it out of Ax.mesh)")
    for n in dist.get("params", {}):
        if n not in names:
            raise BuildError(f"build({fname}): distributed parameter {n!r} is not a kernel argument")
    return dist


# --- inputs -------------------------------------------------------------------------------------


#: PrimFunc attributes that belong to the kernel (its ``__launch_bounds__`` / ``__maxnreg__``)
_KERNEL_ATTRS = ("tirx.launch_bounds_min_blocks_per_sm", "tirx.launch_bounds_max_blocks_per_cluster",
                 "tirx.max_registers")


def _with_attrs(f, attrs):
    for k, v in attrs.items():
        f = f.with_attr(k, v)
    return f


def _pick_func(tvm, func_or_mod, name):
    if isinstance(func_or_mod, tvm.tirx.PrimFunc):
        gs = func_or_mod.attrs.get("global_symbol", None) if func_or_mod.attrs else None
        return func_or_mod, str(name or gs or "kernel")
    if isinstance(func_or_mod, tvm.IRModule):
        funcs = {
            gv.name_hint: f
            for gv, f in func_or_mod.functions.items()
            if isinstance(f, tvm.tirx.PrimFunc)
        }
        if name is not None:
            if name not in funcs:
                raise BuildError(f"build: IRModule has no PrimFunc {name!r}; it has {sorted(funcs)}")
            return funcs[name], name
        if len(funcs) != 1:
            raise BuildError(
                f"build: IRModule holds {len(funcs)} PrimFuncs {sorted(funcs)}; pass name= to pick one"
            )
        (fname, f), = funcs.items()
        return f, fname
    raise BuildError(
        f"build: expected a tvm.tirx.PrimFunc or IRModule, got {type(func_or_mod).__name__}"
    )


#: the CUDA architectures nvcc 13 builds (``sm_<arch>``, ``sm_<arch>a`` arch-specific, ``sm_<arch>f`` family)
NVCC_ARCHS = (75, 80, 86, 87, 88, 89, 90, 100, 101, 103, 110, 120, 121)


def _known_arch(target: str) -> str:
    """``target`` itself if it names an architecture nvcc builds, else a :class:`BuildError` naming
    the targets axe knows (raised before nvcc runs)."""
    m = re.fullmatch(r"sm_(\d+)([af]?)", target)
    if not m or int(m.group(1)) not in NVCC_ARCHS:
        raise BuildError(f"build: unknown target {target!r}: axe builds sm_<arch>, sm_<arch>a or sm_<arch>f for "
                         f"arch in {', '.join(map(str, NVCC_ARCHS))} (sm_90a: Hopper, sm_100a: Blackwell), and trn1")
    return target


def _arch_of(target) -> str:
    if isinstance(target, str) and target.startswith("sm_"):
        return _known_arch(target)
    arch = None
    if isinstance(target, dict):
        arch = target.get("arch")
        if target.get("kind", "cuda") != "cuda":
            raise BuildError(f"build: target {target!r} is not of kind cuda")
    elif target is not None and hasattr(target, "kind"):
        if target.kind.name != "cuda":
            raise BuildError(f"build: target {target} is not of kind cuda")
        arch = target.attrs.get("arch", None)
    elif isinstance(target, str):
        import tvm

        try:
            return _arch_of(tvm.target.Target(target))
        except Exception as e:  # noqa: BLE001 - re-raised with the target named
            raise BuildError(f"build: cannot read a CUDA arch from target {target!r}: {e}") from None
    if not arch or not re.fullmatch(r"sm_\d+[a-z]?", str(arch)):
        raise BuildError(f"build: target {target!r} names no CUDA arch like 'sm_90a'")
    return _known_arch(str(arch))


def _type_kind(tvm, ty):
    """'tensor' | 'scalar' | 'tensormap' | 'pointer' for a parameter Var's type."""
    from tvm.tirx import TensorMapType

    tname = type(ty).__name__
    if tname == "BufferType":
        return "tensor"
    if tname == "PrimType":
        return "scalar"
    if tname == "PointerType":
        if isinstance(ty.element_type, TensorMapType):
            return "tensormap"
        return "pointer"
    return tname


def _scalar_dtype(var) -> str:
    ty = getattr(var, "ty", None)
    if ty is not None and type(ty).__name__ == "PrimType":
        return str(ty.dtype)
    return str(var.dtype)


def _describe_args(tvm, func, fname):
    args, symbols, shape_vars = [], {}, {}
    scalar_names = set()
    for p in func.params:
        kind = _type_kind(tvm, p.ty)
        pname = str(p.name)
        if kind == "scalar":
            args.append({"name": pname, "kind": "scalar", "dtype": _scalar_dtype(p)})
            scalar_names.add(pname)
        elif kind == "tensormap":
            continue
        elif kind != "tensor":
            raise BuildError(
                f"build({fname}): parameter {pname!r} has type {p.ty}; axe kernels take "
                f"T.Buffer tensors, scalars and T.handle('tensormap') parameters"
            )
    # shape variables become symbols read off the first tensor that has them
    for p in func.params:
        if _type_kind(tvm, p.ty) != "tensor":
            continue
        for d, e in enumerate(p.shape):
            if isinstance(e, tvm.tirx.Var):
                n = str(e.name)
                if n not in scalar_names and n not in symbols:
                    symbols[n] = {"arg": str(p.name), "dim": d}
                    shape_vars[n] = _scalar_dtype(e)
    known = scalar_names | set(symbols)
    conv = _ExprConverter(tvm, {}, known, fname)
    for p in func.params:
        if _type_kind(tvm, p.ty) != "tensor":
            continue
        pname = str(p.name)
        scope = p.scope()
        if scope not in ("global", ""):
            raise BuildError(f"build({fname}): tensor parameter {pname!r} is in scope {scope!r}, not global")
        eo = p.elem_offset
        if not (isinstance(eo, tvm.tirx.IntImm) and int(eo) == 0):
            raise BuildError(f"build({fname}): tensor parameter {pname!r} has elem_offset {eo}; only 0 is supported")
        strides = [conv(s, f"{pname}.strides") for s in p.strides] if len(p.strides) else None
        args.append(
            {
                "name": pname,
                "kind": "tensor",
                "dtype": str(p.dtype),
                "shape": [conv(s, f"{pname}.shape") for s in p.shape],
                "strides": strides,
                "alignment": int(p.data_alignment),
            }
        )
    # keep the call signature in parameter order
    order = {str(p.name): i for i, p in enumerate(func.params)}
    args.sort(key=lambda a: order[a["name"]])
    return args, symbols, shape_vars


def _merge_attr_specs(func, tensormaps, fname):
    """Specs from the PrimFunc attribute ``axe.tensormaps`` (a JSON list), then ``tensormaps``.

    A schedule that emits TMA copies at parse time can record its specs on the function with
    ``T.func_attr({"axe.tensormaps": json.dumps([...])})``; an explicit spec for the same
    ``param`` replaces the attribute's.
    """
    raw = func.attrs.get("axe.tensormaps", None) if func.attrs is not None else None
    merged = {}
    if raw is not None:
        try:
            attr_specs = json.loads(str(raw))
        except ValueError as e:
            raise BuildError(f"build({fname}): function attribute axe.tensormaps is not JSON: {e}") from None
        if not isinstance(attr_specs, list):
            raise BuildError(f"build({fname}): function attribute axe.tensormaps must be a JSON list")
        for i, spec in enumerate(attr_specs):
            if not isinstance(spec, dict) or "param" not in spec:
                raise BuildError(f"build({fname}): axe.tensormaps[{i}] must be a dict with a 'param'")
            merged[spec["param"]] = spec
    explicit = list(tensormaps)
    for i, spec in enumerate(explicit):
        if isinstance(spec, dict) and "param" in spec:
            merged.pop(spec["param"], None)
    return list(merged.values()) + explicit


def _check_tensormap_specs(tensormaps, args, fname):
    by_name = {a["name"]: a for a in args}
    specs = []
    for i, spec in enumerate(tensormaps):
        if not isinstance(spec, dict):
            raise BuildError(f"build({fname}): tensormaps[{i}] is {type(spec).__name__}, expected a dict")
        unknown = set(spec) - _TENSORMAP_KEYS
        if unknown:
            raise BuildError(f"build({fname}): tensormaps[{i}] has unknown keys {sorted(unknown)}")
        for key in ("param", "tensor", "box"):
            if key not in spec:
                raise BuildError(f"build({fname}): tensormaps[{i}] lacks {key!r}")
        t = by_name.get(spec["tensor"])
        if t is None or t["kind"] != "tensor":
            raise BuildError(
                f"build({fname}): tensormaps[{i}] describes tensor {spec['tensor']!r}, which is "
                f"not a tensor parameter of the kernel"
            )
        rank = len(spec["box"])
        s = {
            "param": str(spec["param"]),
            "tensor": str(spec["tensor"]),
            "dtype": str(spec.get("dtype") or t["dtype"]),
            "shape": None if spec.get("shape") is None else [int(x) for x in spec["shape"]],
            "strides_bytes": None
            if spec.get("strides_bytes") is None
            else [int(x) for x in spec["strides_bytes"]],
            "box": [int(x) for x in spec["box"]],
            "elem_strides": [int(x) for x in spec.get("elem_strides") or [1] * rank],
            "swizzle": int(spec.get("swizzle", 0)),
            "interleave": int(spec.get("interleave", 0)),
            "l2_promotion": int(spec.get("l2_promotion", 0)),
            "oob_fill": str(spec.get("oob_fill", "zero")),
        }
        # the runtime's checks, run once here so bad specs fail at build time
        try:
            check_spec(s)
        except ValueError as e:
            raise BuildError(f"build({fname}): tensormaps[{i}]: {e}") from None
        specs.append(s)
    params = [s["param"] for s in specs]
    dup = {p for p in params if params.count(p) > 1}
    if dup:
        raise BuildError(f"build({fname}): more than one tensormap spec for {sorted(dup)}")
    return specs


# --- lowered IR ---------------------------------------------------------------------------------


def _walk(root, visit):
    """Visit every TVM object reachable from ``root`` through reflected fields (no spans)."""
    import tvm_ffi

    seen = set()
    stack = [root]
    while stack:
        obj = stack.pop()
        if isinstance(obj, (list, tuple)) or type(obj).__name__ == "Array":
            stack.extend(reversed(list(obj)))
            continue
        if type(obj).__name__ == "Map":
            stack.extend(list(obj.values()))
            continue
        if not isinstance(obj, tvm_ffi.core.Object):
            continue
        key = obj.__chandle__() if hasattr(obj, "__chandle__") else id(obj)
        if key in seen:
            continue
        seen.add(key)
        visit(obj)
        info = getattr(type(obj), "__tvm_ffi_type_info__", None)
        children = []
        while info is not None:
            for fl in info.fields:
                if fl.name in ("span",):
                    continue
                try:
                    children.append(getattr(obj, fl.name))
                except Exception:  # noqa: BLE001 - fields without a Python getter are skipped
                    pass
            info = info.parent_type_info
        stack.extend(reversed(children))


def _find_launch_call(tvm, host_mod, symbol, fname):
    calls, lets = [], {}

    def visit(n):
        op = getattr(n, "op", None)
        if isinstance(n, tvm.ir.Call) and getattr(op, "name", "") == "tirx.call_ffi_kernel":
            calls.append(n)
        elif type(n).__name__ in ("Bind", "LetStmt", "Let") and hasattr(n, "var") and hasattr(n, "value"):
            lets[str(n.var.name)] = n.value

    for _gv, f in host_mod.functions.items():
        _walk(f.body, visit)
    mine = [c for c in calls if str(getattr(c.args[0], "value", c.args[0])) == symbol]
    if len(mine) != 1:
        raise BuildError(
            f"build({fname}): expected one host launch of kernel {symbol!r}, found {len(mine)}"
        )
    return mine[0], lets


def _launch_tags(call, kfunc):
    attrs = getattr(call, "attrs", None)
    tags = None
    if attrs is not None:
        tags = getattr(attrs, "launch_params", None)
        if tags is None:
            try:
                tags = attrs["launch_params"]
            except Exception:  # noqa: BLE001 - fall back to the kernel's attribute
                tags = None
    if tags is None:
        tags = kfunc.attrs.get("tirx.kernel_launch_params", [])
    return list(tags)


class _ExprConverter:
    """TIR integer expression -> launch.json expression (int or string over ``known`` names)."""

    def __init__(self, tvm, lets, known, fname):
        self.tvm, self.lets, self.known, self.fname = tvm, lets, set(known), fname

    def __call__(self, e, what):
        s = self._conv(e, what, 0)
        if isinstance(s, int):
            return s
        from .artifact import eval_expr

        try:  # constant-fold expressions without names
            return eval_expr(s, {})
        except Exception:  # noqa: BLE001 - it has names: keep the string
            return s

    def _conv(self, e, what, depth):
        tir = self.tvm.tirx
        if depth > 64:
            raise BuildError(f"build({self.fname}): {what}: expression too deep: {e}")
        if isinstance(e, int):
            return e
        if isinstance(e, tir.IntImm):
            return int(e.value)
        if isinstance(e, tir.Var):
            n = str(e.name)
            if n in self.known:
                return n
            if n in self.lets:
                return self._conv(self.lets[n], what, depth + 1)
            raise BuildError(
                f"build({self.fname}): {what} depends on {n!r}, which is neither a scalar "
                f"parameter nor a tensor shape variable"
            )
        if isinstance(e, tir.Cast):
            return self._conv(e.value, what, depth + 1)
        ops = {tir.Add: "+", tir.Sub: "-", tir.Mul: "*", tir.FloorDiv: "//", tir.FloorMod: "%", tir.Div: "//"}
        for cls, sym in ops.items():
            if isinstance(e, cls):
                a = self._conv(e.a, what, depth + 1)
                b = self._conv(e.b, what, depth + 1)
                return f"({a} {sym} {b})"
        for cls, fn in ((tir.Min, "min"), (tir.Max, "max")):
            if isinstance(e, cls):
                return f"{fn}({self._conv(e.a, what, depth + 1)}, {self._conv(e.b, what, depth + 1)})"
        raise BuildError(f"build({self.fname}): {what}: unsupported expression {e} ({type(e).__name__})")


def _describe_params(tvm, kparams, call_args, args, specs, to_expr, fname):
    by_name = {a["name"]: a for a in args}
    spec_index = {s["param"]: i for i, s in enumerate(specs)}
    used_specs = set()
    params = []
    for p, carg in zip(kparams, call_args):
        pname = str(p.name)
        kind = _type_kind(tvm, p.ty)
        if kind == "tensormap":
            if pname not in spec_index:
                raise BuildError(
                    f"build({fname}): kernel parameter {pname!r} is a CUtensorMap but no "
                    f"tensormaps=[{{'param': {pname!r}, ...}}] spec describes it"
                )
            used_specs.add(pname)
            params.append({"name": pname, "kind": "tensormap", "tensormap": spec_index[pname]})
        elif kind == "pointer":
            base = pname[:-4] if pname.endswith("_ptr") else pname
            a = by_name.get(base)
            if a is None or a["kind"] != "tensor":
                raise BuildError(
                    f"build({fname}): kernel pointer parameter {pname!r} matches no tensor "
                    f"parameter (looked for {base!r})"
                )
            edt = str(p.ty.element_type)
            if edt != a["dtype"] and edt not in ("void", "handle"):
                raise BuildError(
                    f"build({fname}): kernel parameter {pname!r} points to {edt} but tensor "
                    f"{base!r} is {a['dtype']}"
                )
            entry = {"name": pname, "kind": "tensor", "arg": base}
            entry.update({k: a[k] for k in ("dtype", "shape", "strides", "alignment")})
            params.append(entry)
        elif kind == "scalar":
            params.append(
                {"name": pname, "kind": "scalar", "dtype": _scalar_dtype(p), "value": to_expr(carg, pname)}
            )
        else:
            raise BuildError(f"build({fname}): kernel parameter {pname!r} has unsupported type {p.ty}")
    unused = set(spec_index) - used_specs
    if unused:
        raise BuildError(
            f"build({fname}): tensormap specs for {sorted(unused)} match no CUtensorMap kernel "
            f"parameter (TVM drops parameters the kernel does not use)"
        )
    return params


# --- nvcc ---------------------------------------------------------------------------------------


def _nvshmem_file(rel, what, fname):
    """``rel`` under ``$NVSHMEM_HOME`` or the ``nvidia-nvshmem-cu13`` wheel's folder."""
    roots = [os.environ["NVSHMEM_HOME"]] if os.environ.get("NVSHMEM_HOME") else []
    try:
        import nvidia.nvshmem as pkg
        roots += list(pkg.__path__)
    except ImportError:
        pass
    for r in roots:
        if os.path.exists(os.path.join(r, rel)):
            return os.path.join(r, rel)
    raise BuildError(f"build({fname}): the kernel calls NVSHMEM but its {what} were not found (pip install "
                     "nvidia-nvshmem-cu13, or set NVSHMEM_HOME)")


def nvshmem_include(fname="kernel"):
    """NVSHMEM's header folder: ``$NVSHMEM_HOME/include`` or the ``nvidia-nvshmem-cu13`` wheel's."""
    return os.path.dirname(_nvshmem_file(os.path.join("include", "nvshmem.h"), "headers", fname))


def nvshmem_version(fname="kernel") -> str:
    """``"major.minor.patch"`` of the NVSHMEM whose headers and device library a build uses (its
    ``nvshmem_version.h``): the device code must match the host library where it runs."""
    text = open(_nvshmem_file(os.path.join("include", "non_abi", "nvshmem_version.h"), "version header",
                              fname)).read()
    parts = [re.search(rf"#define NVSHMEM_VENDOR_{k}_VERSION (\d+)", text) for k in ("MAJOR", "MINOR", "PATCH")]
    if not all(parts):
        raise BuildError(f"build({fname}): NVSHMEM's nvshmem_version.h names no vendor version")
    return ".".join(m.group(1) for m in parts)


def nvshmem_device_library(fname="kernel"):
    """NVSHMEM's device library (``lib/libnvshmem_device.a``), linked into cubins that call it."""
    return _nvshmem_file(os.path.join("lib", "libnvshmem_device.a"), "device library", fname)


def _nvcc_path():
    for cand in (os.environ.get("AXE_NVCC"), shutil.which("nvcc"), "/usr/local/cuda/bin/nvcc"):
        if cand and os.path.exists(cand):
            return cand
    raise BuildError("build: nvcc not found (set AXE_NVCC or put nvcc on PATH)")


def _nvcc(source, arch, fast_math, extra, emit_ptx, fname, link=()):
    """``(cubin, ptx, ptxas log)`` of ``source``; with ``link`` (device libraries) the relocatable
    cubin is device-linked with them (``nvcc -dlink -cubin``) into one loadable image."""
    nvcc = _nvcc_path()
    num = arch[3:]
    env = dict(os.environ)
    env.setdefault("CUDA_PATH", "/usr/local/cuda")
    flags = list(_NVCC_FLAGS) + (["--use_fast_math"] if fast_math else []) + extra
    with tempfile.TemporaryDirectory(prefix="axe_build_") as tmp:
        cu = os.path.join(tmp, "kernel.cu")
        with open(cu, "w") as f:
            f.write(source)
        cubin_path, ptx_path = os.path.join(tmp, "kernel.cubin"), os.path.join(tmp, "kernel.ptx")
        cmds = [
            [nvcc, "-cubin", f"-gencode=arch=compute_{num},code=sm_{num}", "--ptxas-options=-v",
             *flags, "-o", cubin_path, cu]
        ]
        if emit_ptx:
            cmds.append([nvcc, "-ptx", f"-gencode=arch=compute_{num},code=compute_{num}", *flags,
                         "-o", ptx_path, cu])
        procs = [
            subprocess.Popen(c, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, env=env, cwd=tmp)
            for c in cmds
        ]
        outs = [p.communicate()[0].decode(errors="replace") for p in procs]
        for c, p, out in zip(cmds, procs, outs):
            if p.returncode != 0:
                keep = tempfile.mkdtemp(prefix=f"axe_build_failed_{fname}_")
                shutil.copy(cu, keep)
                raise BuildError(
                    f"build({fname}): nvcc for {arch} failed (exit {p.returncode}); source kept at "
                    f"{keep}/kernel.cu\n$ {' '.join(c)}\n{out}"
                )
        if link:
            linked = os.path.join(tmp, "linked.cubin")
            cmd = [nvcc, "-dlink", "-cubin", f"-gencode=arch=compute_{num},code=sm_{num}", cubin_path, *link,
                   "-o", linked]
            p = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, env=env, cwd=tmp)
            if p.returncode != 0:
                raise BuildError(f"build({fname}): device link for {arch} failed (exit {p.returncode})\n"
                                 f"$ {' '.join(cmd)}\n{p.stdout.decode(errors='replace')}")
            cubin_path = linked
        with open(cubin_path, "rb") as f:
            cubin = f.read()
        ptx = ""
        if emit_ptx:
            with open(ptx_path) as f:
                ptx = f.read()
    return cubin, ptx, outs[0]


def _ptxas_resources(log):
    res = {}
    m = re.search(r"Used (\d+) registers", log)
    if m:
        res["registers"] = int(m.group(1))
    m = re.search(r"(\d+) bytes smem", log)
    res["static_smem"] = int(m.group(1)) if m else 0
    for key, pat in (("stack", r"(\d+) bytes stack frame"), ("spill_stores", r"(\d+) bytes spill stores"),
                     ("spill_loads", r"(\d+) bytes spill loads")):
        m = re.search(pat, log)
        if m:
            res[key] = int(m.group(1))
    return res


def _prod(xs):
    r = 1
    for x in xs:
        r *= x
    return r
