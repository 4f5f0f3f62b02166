"""Model families as flat-parameter functions: ``logits = model.logits(w, x)`` with ``w`` a 1-D tensor.

Every method works on the flat vector ``w`` (the approximator vectors a^{-u} of the Hessian-free method
live in the same space), so a family only says how to build its module and how to initialise it.
"""

from unlearning.models.families import family_names
from unlearning.models.flat import FlatModel, build_model
from unlearning.models.spec import ModelSpec

__all__ = ["FlatModel", "ModelSpec", "build_model", "family_names"]
