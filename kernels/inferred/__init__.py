"""Kernels written once more with inferred layouts (issue 27 item 4): every tile the hand-written
kernel lays out by hand is declared here with ``layout=None`` (registers) or ``Ax.INFER``
(shared) and gets its layout from :mod:`axe.schedules.infer`.  ``benchmarks/inferred.py`` times
each beside its hand-written twin; ``tests/gpu/cases_inferred.py`` checks them on the GPU."""
