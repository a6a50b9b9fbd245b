"""Activation functions: ``jax.nn``'s, re-exported as plain functions, plus the ``PReLU`` layer.

Source: ``jax.nn``; Flax NNX ``nnx.PReLU``.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import jax
import jax.numpy as jnp
from jax.nn import celu as celu
from jax.nn import elu as elu
from jax.nn import gelu as gelu
from jax.nn import glu as glu
from jax.nn import hard_sigmoid as hard_sigmoid
from jax.nn import hard_silu as hard_silu
from jax.nn import hard_swish as hard_swish
from jax.nn import hard_tanh as hard_tanh
from jax.nn import identity as identity
from jax.nn import leaky_relu as leaky_relu
from jax.nn import log_sigmoid as log_sigmoid
from jax.nn import log_softmax as log_softmax
from jax.nn import logsumexp as logsumexp
from jax.nn import mish as mish
from jax.nn import one_hot as one_hot
from jax.nn import relu as relu
from jax.nn import relu6 as relu6
from jax.nn import selu as selu
from jax.nn import sigmoid as sigmoid
from jax.nn import silu as silu
from jax.nn import soft_sign as soft_sign
from jax.nn import softmax as softmax
from jax.nn import softplus as softplus
from jax.nn import standardize as standardize
from jax.nn import swish as swish
from jax.nn import tanh as tanh

from flaxgraph.module_class import Module
from flaxgraph.nn.common import EMPTY_METADATA
from flaxgraph.nn.dtypes import promote_dtype
from flaxgraph.typing import Array as Array
from flaxgraph.typing import Dtype as Dtype
from flaxgraph.typing import PromoteDtypeFn as PromoteDtypeFn
from flaxgraph.variablelib.variable import Param


class PReLU(Module):
    """Parametric ReLU: ``where(x >= 0, x, negative_slope * x)`` with a learned scalar slope.

    Args:
      negative_slope_init: the initial slope (a float).
      dtype: computation dtype (default: the inputs'; the slope is cast to it).
      param_dtype: the slope's dtype (default ``float32``).
      promote_dtype: the dtype promotion function.
      negative_slope_metadata: metadata for the ``negative_slope`` Param.

    Call: ``inputs`` of any shape; returns the same shape.

    >>> import jax.numpy as jnp, flaxgraph as nnx
    >>> nnx.PReLU(0.1)(jnp.array([-1.0, 2.0]))
    Array([-0.1,  2. ], dtype=float32)
    """

    def __init__(
        self,
        negative_slope_init: float = 0.01,
        *,
        dtype: Any = None,
        param_dtype: Any = jnp.float32,
        promote_dtype: Any = promote_dtype,
        negative_slope_metadata: Mapping[str, Any] = EMPTY_METADATA,
    ):
        self.negative_slope = Param(
            jnp.asarray(negative_slope_init, dtype=param_dtype), **dict(negative_slope_metadata)
        )
        self.dtype = dtype
        self.param_dtype = param_dtype
        self.promote_dtype = promote_dtype

    def __call__(self, inputs: jax.Array) -> jax.Array:
        x = jnp.asarray(inputs)
        slope = self.negative_slope[...]
        if self.dtype is None:
            # as Linen and Flax NNX: without a dtype the slope follows the inputs' dtype
            slope = jnp.asarray(slope, x.dtype)
        else:
            x, slope = self.promote_dtype((x, slope), dtype=self.dtype)
        return jnp.where(x >= 0, x, slope * x)


# the names Flax NNX 0.12.8's ``flax.nnx.nn.activations`` lists in its ``__all__``
__all__ = [
    "celu",
    "elu",
    "gelu",
    "glu",
    "hard_sigmoid",
    "hard_silu",
    "hard_swish",
    "hard_tanh",
    "leaky_relu",
    "log_sigmoid",
    "log_softmax",
    "logsumexp",
    "one_hot",
    "relu",
    "identity",
    "relu6",
    "selu",
    "sigmoid",
    "silu",
    "soft_sign",
    "softmax",
    "softplus",
    "standardize",
    "swish",
    "tanh",
    "PReLU",
]
