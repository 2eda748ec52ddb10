"""axe as an installed wheel, away from the checkout: ``pip wheel`` builds it (``--no-deps
--no-build-isolation --no-index``: nothing is downloaded), a fresh virtual environment outside
the checkout installs it with ``--no-deps`` and sees this environment's torch, TVM and numpy
through a ``.pth`` file (what ``--system-site-packages`` does for a system interpreter), and a
script run there from a temporary folder, with the checkout nowhere on ``sys.path``, checks:

- ``axe`` and its ``kernels`` come from the installed wheel (``axe/_kernels/kernels``), and the
  ops' cache keys are the checkout's, digest for digest (same kernel sources, same axe
  fingerprint: a checkout's builds serve the wheel's ops);
- every ``torch.ops.axe`` op resolves; the GEMM's bucket choice (``kernels.gemm_select``) and the
  TP ops' shape rules (``kernels.tp_shapes``) import from the wheel; fake tensors give shapes
  without a kernel lookup;
- rmsnorm and softmax build for real (TVM + nvcc) from the installed kernel modules, launched
  by a CPU stand-in (the runtime's ``bind_arguments`` against the artifact's ``launch.json``,
  then torch), under ``torch.library.opcheck`` and ``torch.compile(fullgraph=True)`` (CPU and
  meta tensors);
- a second process without TVM (``import tvm`` fails) runs the ops from those artifacts as a
  shipped folder (``$AXE_SHIPPED_DIRS``), and a missing specialization names the build command;
- another package named ``kernels`` ahead on ``sys.path`` is refused with both locations named.
"""

import json
import os
import shutil
import subprocess
import sys
import sysconfig
from pathlib import Path

import pytest

pytest.importorskip("tvm")

CHECKOUT = Path(__file__).resolve().parents[1]
#: what the wheel is built from (pyproject.toml and setup.py say what goes in)
SOURCES = ("pyproject.toml", "setup.py", "README.md", "axe", "kernels")
SPECS = {"rmsnorm": {"n": 1024, "dtype": "bfloat16"}, "softmax": {"n": 2048, "dtype": "float16"}}

SCRIPT = r'''
import json, os, sys
from pathlib import Path

NO_TVM = sys.argv[1] == "no-tvm"
if NO_TVM:
    sys.modules["tvm"] = None            # import tvm fails; importlib.util.find_spec("tvm") is None
want = json.loads(Path(sys.argv[2]).read_text())
venv, checkout = Path(sys.prefix).resolve(), Path(want["checkout"])

import torch
import axe
import axe.torch.ops as ops
from axe.backends.cuda.artifact import Artifact
from axe.runtime.launcher import bind_arguments
from axe.torch.cache import ArtifactCache, ArtifactMissing, kernels_root
from axe.torch.jit import JitKernel


def inside(p, root):
    return Path(p).resolve().is_relative_to(root)


assert inside(axe.__file__, venv), axe.__file__
assert kernels_root() == Path(axe.__file__).resolve().parent / "_kernels", kernels_root()
assert not any(p and Path(p).resolve() == checkout for p in sys.path), sys.path
for name in ("rmsnorm", "fused_add_rmsnorm", "softmax", "silu_and_mul", "rotary_embedding", "gemm"):
    getattr(torch.ops.axe, name).default

def rms_ref(x, w, eps):
    xf = x.float()
    return (xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + eps) * w.float()).to(x.dtype)


REFS = {
    "rmsnorm_dyn": lambda t, env: t["Y_"].copy_(rms_ref(t["X_"], t["W_"], env["eps"])),
    "softmax_dyn": lambda t, env: t["Y_"].copy_(torch.softmax(t["X_"].float(), -1).to(t["X_"].dtype)),
}


class CpuLaunch:
    """The launcher's stand-in: the runtime's argument checks against launch.json, then torch."""
    def __init__(self, path):
        self.launch = Artifact.load(path).launch

    def __call__(self, *args, stream=None):
        b = bind_arguments(self.launch, args, device_type="cpu")
        REFS[self.launch["name"]](b.tensors, b.env)


cache = ArtifactCache(os.environ["AXE_CACHE_DIR"])
for name in want["specs"]:
    k = ops.KERNELS[name]
    ops.KERNELS[name] = JitKernel(k.kernel, k.spec, path=k.path, cache=cache, loader=CpuLaunch, target="sm_90a",
                                  progress=False)
x, w = torch.randn(5, 1024, dtype=torch.bfloat16), torch.randn(1024, dtype=torch.bfloat16)
x2 = torch.randn(3, 7, 2048, dtype=torch.float16)
rms = rms_ref(x, w, 1e-6)

if NO_TVM:
    assert "tvm" not in [m.split(".")[0] for m in sys.modules if sys.modules[m] is not None]
    torch.testing.assert_close(torch.ops.axe.rmsnorm(x, w, 1e-6), rms)
    torch.testing.assert_close(torch.ops.axe.softmax(x2), torch.softmax(x2.float(), -1).half())
    assert all(e.shipped for e in cache.entries()), "served from the shipped folder"
    try:
        torch.ops.axe.rmsnorm(torch.randn(2, 512, dtype=torch.float16), torch.randn(512, dtype=torch.float16))
        raise AssertionError("a specialization nobody built ran without TVM")
    except ArtifactMissing as e:
        assert "axe cache build kernels.rmsnorm:dynamic" in str(e), e
    assert "tvm" not in [m.split(".")[0] for m in sys.modules if sys.modules[m] is not None]
    print("wheel ok: no TVM, shipped artifacts")
    sys.exit(0)

# the cache keys are the checkout's: same module names, kernel sources and axe fingerprint
for name, spec in want["specs"].items():
    assert ops.KERNELS[name].key("sm_90a", spec).digest == want["digests"][name], name
import kernels.rmsnorm
from axe.torch import tp, tune
for m in (kernels.rmsnorm, tune.select(), tp._shapes()):      # the ops', the GEMM buckets' and the TP shape rules
    assert inside(m.__file__, Path(axe.__file__).resolve().parent), m.__file__

from torch._subclasses.fake_tensor import FakeTensorMode
with FakeTensorMode():
    bf = torch.bfloat16
    assert torch.ops.axe.rmsnorm(torch.empty(9, 4096, dtype=bf), torch.empty(4096, dtype=bf)).shape == (9, 4096)
    assert torch.ops.axe.silu_and_mul(torch.empty(2, 3, 5760, dtype=torch.bfloat16)).shape == (2, 3, 2880)
    assert torch.ops.axe.gemm(torch.empty(37, 1024, dtype=torch.float16), torch.empty(512, 1024, dtype=torch.float16),
                              True).shape == (37, 512)
    q, k = torch.empty(5, 2560, dtype=torch.bfloat16), torch.empty(5, 512, dtype=torch.bfloat16)
    assert torch.ops.axe.rotary_embedding(torch.empty(5, dtype=torch.int64), q, k, 128,
                                          torch.empty(64, 128, dtype=torch.bfloat16), True) is None
assert not any(k._memo for k in ops.KERNELS.values()), "fake tensors looked a kernel up"

for op, args in ((torch.ops.axe.rmsnorm.default, (x, w, 1e-6)), (torch.ops.axe.softmax.default, (x2,))):
    torch.library.opcheck(op, args, test_utils=("test_schema", "test_faketensor", "test_aot_dispatch_dynamic"))
assert cache.entries() and all(not e.shipped for e in cache.entries())      # built here, from the wheel's kernels


def f(x, w):
    return torch.ops.axe.softmax(torch.ops.axe.rmsnorm(x, w, 1e-6) * 2)


g = torch.compile(f, fullgraph=True, backend="aot_eager")
torch.testing.assert_close(g(x, w), torch.softmax((rms * 2).float(), -1).bfloat16())
assert g(x.to("meta"), w.to("meta")).shape == x.shape
print("wheel ok:", len(cache.entries()), "artifacts built from", kernels_root())
'''


def _run(cmd, **kw):
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=300, **kw)
    assert r.returncode == 0, (f"{' '.join(map(str, cmd))} failed ({r.returncode}):\n"
                               f"{r.stdout[-3000:]}\n{r.stderr[-6000:]}")
    return r


def _site_packages(python: Path) -> Path:
    out = _run([python, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"]).stdout
    return Path(out.strip())


#: the cache keys of SPECS in a checkout-shaped tree (``kernels/`` beside ``axe/``): argv[1]
KEYS = """
import json, sys
from pathlib import Path
sys.path.insert(0, sys.argv[1])
import axe
from axe.torch import ops
assert Path(axe.__file__).resolve().is_relative_to(Path(sys.argv[1]).resolve()), axe.__file__
print(json.dumps({n: ops.KERNELS[n].key("sm_90a", s).digest for n, s in json.loads(sys.argv[2]).items()}))
"""


def test_installed_wheel_runs_the_ops_without_the_checkout(tmp_path):
    # 1. the wheel, built from a copy of the sources (an in-tree build would leave build/ and
    #    *.egg-info in the checkout and could pick up stale files from an earlier build/lib)
    src = tmp_path / "src"
    src.mkdir()
    for name in SOURCES:
        p = CHECKOUT / name
        if p.is_dir():
            shutil.copytree(p, src / name, ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
        else:
            shutil.copy2(p, src / name)
    # the keys a checkout of this tree gives (from the copy: others may change the checkout meanwhile)
    keys = _run([sys.executable, "-c", KEYS, str(src), json.dumps(SPECS)], cwd=src).stdout
    want = {"checkout": str(CHECKOUT), "specs": SPECS, "digests": json.loads(keys)}
    dist = tmp_path / "dist"
    _run([sys.executable, "-m", "pip", "wheel", str(src), "--no-deps", "--no-build-isolation", "--no-index",
          "-w", str(dist)], cwd=tmp_path)
    (wheel,) = dist.glob("axe-*.whl")

    # 2. a fresh environment outside the checkout: the wheel alone (pip sees nothing else), then
    #    this environment's packages behind it
    venv = tmp_path / "venv"
    _run([sys.executable, "-m", "venv", "--without-pip", str(venv)])
    python = venv / "bin" / "python"
    _run([sys.executable, "-m", "pip", "--python", str(python), "install", "--no-deps", "--no-index", str(wheel)])
    site = _site_packages(python)
    here = {sysconfig.get_paths()["purelib"], sysconfig.get_paths()["platlib"]}
    (site / "_axe_test_environment.pth").write_text("".join(f"{p}\n" for p in sorted(here)))
    assert (site / "axe" / "_kernels" / "kernels" / "rmsnorm.py").is_file()
    assert not (site / "kernels").exists()                 # no top-level kernels package in site-packages
    inside = site / "axe" / "_kernels"
    shipped = sorted(p.relative_to(inside).as_posix() for p in inside.rglob("*.py"))
    assert shipped == sorted(p.relative_to(src).as_posix() for p in (src / "kernels").rglob("*.py"))

    # 3. the script, from a folder outside the checkout, with nothing of the checkout on sys.path
    run = tmp_path / "run"
    run.mkdir()
    (run / "check.py").write_text(SCRIPT)
    (run / "want.json").write_text(json.dumps(want))
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYTHONHOME", "VIRTUAL_ENV")}
    env.update(AXE_CACHE_DIR=str(tmp_path / "cache"), AXE_SHIPPED_DIRS="", PYTHONDONTWRITEBYTECODE="1")
    env.setdefault("CUDA_PATH", "/usr/local/cuda")
    out = _run([python, "check.py", "tvm", "want.json"], cwd=run, env=env).stdout
    assert "wheel ok" in out, out

    # 4. a machine that only runs shipped artifacts: no TVM, the first run's cache as a shipped folder
    env.update(AXE_CACHE_DIR=str(tmp_path / "empty"), AXE_SHIPPED_DIRS=str(tmp_path / "cache"))
    out = _run([python, "check.py", "no-tvm", "want.json"], cwd=run, env=env).stdout
    assert "wheel ok: no TVM" in out, out

    # 5. another package named kernels first on sys.path: refused, naming both, never hashed or built
    foreign = tmp_path / "elsewhere" / "kernels"
    foreign.mkdir(parents=True)
    (foreign / "__init__.py").write_text("")
    r = subprocess.run([python, "-c", "import sys; sys.path.insert(0, sys.argv[1])\n"
                        "from axe.torch.cache import kernel_source_digest; kernel_source_digest('kernels.rmsnorm')",
                        str(foreign.parent)], cwd=run, env=env, capture_output=True, text=True, timeout=60)
    assert r.returncode and "another package of that name comes first on sys.path" in r.stderr, r.stderr
    assert str(foreign) in r.stderr and str(site / "axe" / "_kernels" / "kernels") in r.stderr, r.stderr
