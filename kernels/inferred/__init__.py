"""Kernels written once more with inferred layouts (issue 27 item 4): every tile the hand-written
kernel lays out by hand is declared here with ``layout=None`` (registers) or ``Ax.INFER``
(shared; SBUF and PSUM on Trainium) and gets its layout from :mod:`axe.schedules.infer`.

CUDA: ``transpose``, ``rmsnorm``, ``softmax``, ``rotary``, ``gemm`` and ``gemm_rs`` (``hand_gemm``
is the GEMM's hand-written twin), and ``pipelined_gemm``, the production GEMM of ``kernels/gemm.py``
whose stage tiles and store buffers are open views of its shared pool (its twin is ``kernels.gemm.make``
at the same configuration), ``mma_gemm`` (mma.sync fragments; twin ``hand_mma_gemm``) and
``tcgen05_gemm`` (sm_100a, TMEM accumulator; twin ``hand_tcgen05_gemm``, compile-verified);
``benchmarks/inferred.py`` times each CUDA pair beside its twin and
``tests/gpu/cases_inferred.py`` checks them on the GPU.  Trainium: ``softmax_nki``,
``rmsnorm_nki``, ``gelu_affine_nki``, run on the NKI models beside their hand-written bodies by
``tests/test_infer_neuron.py``."""
