"""axe.torch.tp's DTensor layers (all_gather_linear, linear_reduce_scatter): placements checked and
named in refusals, the local parts handed to the fused ops with the symm_mem conventions, the result
placed as the layer says.  On a one-process gloo group the fused ops are stood in for by torch's own
product (their kernels are checked on GPUs by tests/gpu/run_tp_ops.py)."""

import pytest
import torch

from axe.torch import tp


@pytest.fixture
def mesh(mesh1):
    return mesh1


@pytest.fixture
def calls(monkeypatch):
    """Stand-ins for the fused ops on one rank (A @ B); records what each was handed."""
    seen = []

    def ag(A, Bs, gather_dim, group, return_A=True):
        seen.append(("ag", A.shape, [B.shape for B in Bs], gather_dim, group, return_A))
        return (A if return_A else None), [A @ B for B in Bs]

    def rs(A, B, op, scatter_dim, group):
        seen.append(("rs", A.shape, B.shape, op, scatter_dim, group))
        return A @ B
    monkeypatch.setattr(tp, "fused_all_gather_matmul", ag)
    monkeypatch.setattr(tp, "fused_matmul_reduce_scatter", rs)
    return seen


def test_all_gather_linear_places_columns(mesh, calls):
    from torch.distributed.tensor import Shard, distribute_tensor
    x, w = torch.randn(8, 16), torch.randn(12, 16)
    y = tp.all_gather_linear(distribute_tensor(x, mesh, [Shard(0)]), distribute_tensor(w, mesh, [Shard(0)]))
    assert tuple(y.placements) == (Shard(1),) and tuple(y.shape) == (8, 12)
    torch.testing.assert_close(y.full_tensor(), x @ w.t())
    kind, a, bs, dim, group, ret = calls[0]
    assert (kind, tuple(a), tuple(bs[0]), dim, ret) == ("ag", (8, 16), (16, 12), 0, False)     # B = weightᵀ
    assert group is mesh.get_group()


def test_linear_reduce_scatter_places_rows(mesh, calls):
    from torch.distributed.tensor import Shard, distribute_tensor
    x, w = torch.randn(8, 16), torch.randn(12, 16)
    y = tp.linear_reduce_scatter(distribute_tensor(x, mesh, [Shard(1)]), distribute_tensor(w, mesh, [Shard(1)]))
    assert tuple(y.placements) == (Shard(0),) and tuple(y.shape) == (8, 12)
    torch.testing.assert_close(y.full_tensor(), x @ w.t())
    assert calls[0][:5] == ("rs", torch.Size([8, 16]), torch.Size([16, 12]), "sum", 0)


def test_refusals_name_the_argument_and_the_placement(mesh, calls):
    from torch.distributed.tensor import Replicate, Shard, distribute_tensor
    x, w = torch.randn(8, 16), torch.randn(12, 16)
    with pytest.raises(ValueError, match=r"x must be placed \(Shard\(0\),\) .* got \(Replicate\(\),\)"):
        tp.all_gather_linear(distribute_tensor(x, mesh, [Replicate()]), distribute_tensor(w, mesh, [Shard(0)]))
    with pytest.raises(ValueError, match=r"weight must be placed \(Shard\(1\),\)"):
        tp.linear_reduce_scatter(distribute_tensor(x, mesh, [Shard(1)]), distribute_tensor(w, mesh, [Shard(0)]))
    with pytest.raises(TypeError, match="x must be a DTensor"):
        tp.all_gather_linear(x, distribute_tensor(w, mesh, [Shard(0)]))
    assert not calls
