"""axe.torch.tp on the CPU: the per-shape choice (against the kernels' own shape rules, which
build or refuse), its explanation, the operand conventions and the refusals (GPU runs:
tests/gpu/run_tp_ops.py)."""

import os

import pytest

torch = pytest.importorskip("torch")
os.environ.setdefault("CUDA_PATH", "/usr/local/cuda")

from axe.torch import tp  # noqa: E402


@pytest.mark.parametrize("M,N,K,w,path", [(8192, 14336, 4096, 2, "fused"), (2048, 14336, 4096, 2, "nccl+axe"),
                                          (8192, 14336, 4096, 4, "fused"), (8192 + 64, 14336, 4096, 2, "nccl+axe"),
                                          (4096, 14336, 4000, 2, "nccl+axe")])
def test_all_gather_choice_follows_the_kernel_and_the_threshold(M, N, K, w, path):
    c = tp.choose("all_gather_matmul", M, N, K, w)
    assert c.path == path, c
    from kernels import ag_gemm
    builds = True
    try:
        ag_gemm.make(M, N, K, w)
    except ValueError:
        builds = False
    assert (c.path == "fused") == (builds and M >= tp.FUSED_MIN_ROWS)


@pytest.mark.parametrize("M,N,K,w,path", [(8192, 4096, 14336, 2, "fused"), (512, 4096, 14336, 4, "nccl+axe"),
                                          (128, 4096, 14336, 2, "nccl+axe"), (8192, 4096, 14336, 8, "fused")])
def test_reduce_scatter_choice(M, N, K, w, path):
    assert tp.choose("matmul_reduce_scatter", M, N, K, w).path == path
    if M // w < 128:
        assert "fewer than the tile's 128 rows" in tp.explain("matmul_reduce_scatter", M, N, K, w)


def test_explain_names_the_path_and_why():
    line = tp.explain("all_gather_matmul", 2048, 14336, 4096, 2)
    assert line.startswith("axe all_gather_matmul 2048x14336x4096 on 2 GPUs: nccl+axe (heuristic: M=2048 < 4096")
    with pytest.raises(ValueError, match="op must be"):
        tp.choose("all_reduce", 1, 1, 1, 2)


def test_operand_conventions_and_refusals():
    W = torch.zeros(8, 16)                      # an nn.Linear weight shard, N x K
    Bk, major = tp._b_layout(W.t(), "B")        # PyTorch passes its transpose (K x N)
    assert major == "col" and Bk.data_ptr() == W.data_ptr() and Bk.shape == (8, 16)
    Bk, major = tp._b_layout(torch.zeros(16, 8), "B")
    assert major == "row" and Bk.shape == (16, 8)
    with pytest.raises(ValueError, match="B must be contiguous or the transpose"):
        tp._b_layout(torch.zeros(16, 16)[:, ::2], "B")
    with pytest.raises(ValueError, match="gather_dim=1 is not supported"):
        tp.fused_all_gather_matmul(torch.zeros(4, 4), [torch.zeros(4, 4)], 1, "g")
    with pytest.raises(ValueError, match="reduce_op='max' is not supported"):
        tp.fused_matmul_reduce_scatter(torch.zeros(4, 4), torch.zeros(4, 4), "max", 0, "g")


def test_axe_tp_command_prints_the_choice(capsys):
    from axe.cli import main
    assert main(["tp", "matmul_reduce_scatter", "8192", "4096", "14336", "--world", "4"]) == 0
    assert capsys.readouterr().out.strip() == tp.explain("matmul_reduce_scatter", 8192, 4096, 14336, 4)
    assert "fused (heuristic: M=8192 >= 4096" in tp.explain("matmul_reduce_scatter", 8192, 4096, 14336, 4)
