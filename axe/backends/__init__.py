"""Code generation backends: ``axe.backends.cuda`` (Hopper/Blackwell) and, later, Neuron.

Nothing here imports TVM at package import time; the build entry points import it lazily.
"""
