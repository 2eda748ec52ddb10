"""Distributed kernels return DTensors placed as their signature says (axe/torch/distributed.py):
placements read off the real signatures of the collectives, and DTensors built on a one-process
gloo group through a stand-in kernel with such a signature."""

import os

import pytest
import torch

from axe.layout.interop.dtensor import DeviceMesh, Partial, Replicate, Shard, format_placements, to_layout
from axe.torch.distributed import DTensorKernel, as_dtensor, parse_placements, signature_placements

os.environ.setdefault("CUDA_PATH", "/usr/local/cuda")


@pytest.fixture(scope="module")
def signatures():
    """The distributed signatures the collectives declare for 4 GPUs (parsing only: no nvcc)."""
    pytest.importorskip("tvm")
    import axe.lang as Ax
    from axe.backends.cuda.compile import signature as _signature
    from kernels import collectives
    out = {}
    for kind in ("reduce_scatter", "all_gather", "all_reduce"):
        _, ctx = Ax.build_func(collectives.make(kind, 256, 64, 4))
        out[kind] = {"name": kind, "distributed": _signature(ctx)}
    return out


# what each collective means: (input, output) as DTensor placements on a 1-D mesh of 4
EXPECTED = {
    "reduce_scatter": {"X_": ((256, 64), (Partial("sum"),)), "Y_": ((256, 64), (Shard(0),))},
    "all_gather": {"X_": ((256, 64), (Shard(0),)), "Y_": ((256, 64), (Replicate(),))},
    "all_reduce": {"X_": ((256, 64), (Partial("sum"),)), "Y_": ((256, 64), (Replicate(),))},
}


@pytest.mark.parametrize("kind", sorted(EXPECTED))
def test_signature_decides_placements(signatures, kind):
    for name, want in EXPECTED[kind].items():
        assert signature_placements(signatures[kind], name) == want, (kind, name)
    with pytest.raises(KeyError, match="'Z_' is not a distributed parameter"):
        signature_placements(signatures[kind], "Z_")


@pytest.mark.parametrize("placements", [(Shard(1), Replicate()), (Shard(0), Shard(1)), (Replicate(), Shard(0))])
def test_two_dim_mesh_placements_round_trip(placements):
    mesh = DeviceMesh((2, 2), ("dp", "tp"))
    layout = to_layout((64, 128), mesh, placements).layout
    launch = {"name": "k", "distributed": {"mesh": {"shape": [2, 2], "names": ["dp", "tp"]},
                                           "params": {"Y_": {"shape": [64, 128], "layout": str(layout)}}}}
    assert signature_placements(launch, "Y_") == ((64, 128), placements)


class StandIn:
    """A DistKernel's interface (``launch``, ``user_args``, call) over a one-device signature;
    the call writes ``2 * X`` into ``Y``."""

    def __init__(self, placements_y, declared=True):
        mesh = DeviceMesh((1,), ("gpus",))
        places = {"X_": (Shard(0),), "Y_": placements_y}
        self.launch = {"name": "stand_in", "distributed": {"world": 1, "mesh": {"shape": [1], "names": ["gpus"]},
                       "params": {n: {"shape": [8, 16], "layout": str(to_layout((8, 16), mesh, p).layout),
                                      "placements": format_placements(p) if declared else None,
                                      "local_shape": [8, 16]} for n, p in places.items()}}}
        self.user_args = [{"name": "X_"}, {"name": "Y_"}]

    def __call__(self, x, y, stream=None):
        local = y.to_local() if hasattr(y, "to_local") else y
        local.copy_(2 * (x.to_local() if hasattr(x, "to_local") else x))


@pytest.mark.parametrize("placements", [(Shard(0),), (Replicate(),)])
def test_outputs_come_back_as_dtensors(mesh1, placements):
    from torch.distributed.tensor import DTensor, Replicate as TReplicate, Shard as TShard
    k = DTensorKernel(StandIn(placements), mesh1, "Y_")
    x = DTensor.from_local(torch.randn(8, 16), mesh1, [TShard(0)])
    y = k(x, torch.zeros(8, 16))
    assert isinstance(y, DTensor) and y.device_mesh == mesh1 and tuple(y.shape) == (8, 16)
    assert tuple(y.placements) == ((TShard(0),) if placements == (Shard(0),) else (TReplicate(),))
    torch.testing.assert_close(y.full_tensor(), 2 * x.full_tensor())


def test_an_undeclared_size_one_mesh_dimension_reads_as_replicate(mesh1):
    from torch.distributed.tensor import Replicate as TReplicate
    y = DTensorKernel(StandIn((Shard(0),), declared=False), mesh1, "Y_")(torch.ones(8, 16), torch.zeros(8, 16))
    assert tuple(y.placements) == (TReplicate(),)     # Shard(0) over one device is the same layout


@pytest.mark.parametrize("placements", [(Shard(1), Replicate()), (Partial("sum"),), (Replicate(), Shard(0), Shard(2))])
def test_parse_placements_inverts_format(placements):
    assert parse_placements(format_placements(placements)) == placements
    with pytest.raises(ValueError, match="cannot read"):
        parse_placements("(Shard(x))")


def test_refusals_name_the_parameter(mesh1, signatures):
    with pytest.raises(ValueError, match=r"output 'Z_' is not an argument \(X_, Y_\)"):
        DTensorKernel(StandIn((Shard(0),)), mesh1, "Z_")
    with pytest.raises(ValueError, match=r"device mesh of shape \(1,\); the kernel was built for mesh \(4,\)"):
        as_dtensor(torch.zeros(64, 64), signatures["reduce_scatter"], "Y_", mesh1)
