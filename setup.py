"""The wheel's packages (the metadata is in pyproject.toml): axe's, and the repository's ``kernels/``
shipped inside axe as ``axe/_kernels/kernels`` — a folder put on ``sys.path`` when a kernel is
needed (:func:`axe.torch.cache.kernels_root`), not a top-level ``kernels`` in site-packages, where
another distribution of that name would collide with it.  The package keeps its name, so cache keys
(which hold module names and hash the sources) agree between a checkout and an installed wheel."""

from setuptools import find_packages, setup

setup(packages=find_packages(include=["axe", "axe.*"])
      + [f"axe._kernels.{p}" for p in find_packages(include=["kernels", "kernels.*"])],
      package_dir={"axe._kernels.kernels": "kernels"},
      package_data={"axe.torch": ["csrc/*.cpp"]})      # the compiled launcher, built where it is used
