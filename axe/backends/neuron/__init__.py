"""The Trainium (trn1) backend: NKI schedules, the NKI emitter and build, and an executable
NumPy model of the NKI subset axe emits (:mod:`.sim`) with trn1's rules and a cost model.

Importing this package registers nothing with TVM; :mod:`.schedules` registers the neuron
schedules with axe's registry when the registry loads the ``neuron`` family.
"""
