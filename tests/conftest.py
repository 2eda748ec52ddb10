"""Test configuration: CI draws hypothesis examples deterministically (a fixed, repeatable
set), so a submission's CI outcome does not depend on the draw; local runs explore new random
examples every time and keep failures in the example database."""

import os

import pytest
from hypothesis import settings

settings.register_profile("ci", derandomize=True, print_blob=True)
if os.environ.get("CI"):
    settings.load_profile("ci")


@pytest.fixture(scope="module")
def mesh1(tmp_path_factory):
    """A one-dimensional device mesh of one CPU process (a gloo group of one rank), for the DTensor tests."""
    import torch.distributed as dist
    from torch.distributed.device_mesh import init_device_mesh
    if not dist.is_initialized():
        dist.init_process_group("gloo", init_method=f"file://{tmp_path_factory.mktemp('pg')}/store", rank=0,
                                world_size=1)
    yield init_device_mesh("cpu", (1,), mesh_dim_names=("gpus",))
    dist.destroy_process_group()
