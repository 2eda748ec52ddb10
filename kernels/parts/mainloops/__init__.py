"""mainloops of the GEMM-shaped kernels (see :mod:`kernels.parts`)."""
