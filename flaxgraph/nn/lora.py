"""Low-rank adaptation: ``LoRA``, ``LoRALinear`` and the ``LoRAParam`` Variable.

See the package README, "LoRA". Source: Flax NNX ``nnx.LoRA``, ``nnx.LoRALinear``,
``nnx.LoRAParam`` (0.12): signatures, parameter layout, initializers; Hu et al., "LoRA:
Low-Rank Adaptation of Large Language Models" (2021).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any, ClassVar, TypeVar

import jax
import jax.numpy as jnp

from flaxgraph.module_class import Module
from flaxgraph.nn.common import EMPTY_METADATA
from flaxgraph.nn.dtypes import promote_dtype
from flaxgraph.nn.errors import check_last_dim
from flaxgraph.nn.initializers import he_uniform, zeros
from flaxgraph.nn.linear import Array as Array
from flaxgraph.nn.linear import Axis as Axis
from flaxgraph.nn.linear import Linear
from flaxgraph.nn.linear import Size as Size
from flaxgraph.rnglib.rngs import Rngs
from flaxgraph.typing import PromoteDtypeFn as PromoteDtypeFn
from flaxgraph.variablelib.variable import Param

Dtype = Any
Initializer = Callable[..., Any]
A = TypeVar("A")

default_a_initializer = he_uniform()
default_b_initializer = zeros


class LoRAParam(Param[Any]):
    """The Variable kind of LoRA adapter matrices: a ``Param`` subclass.

    >>> import jax.numpy as jnp, flaxgraph as nnx
    >>> isinstance(nnx.LoRAParam(jnp.zeros((3, 2))), nnx.Param)
    True
    """


class LoRA(Module):
    """A standalone LoRA adapter: ``y = x @ lora_a @ lora_b`` (plus ``base_module(x)`` if given).

    Args:
      in_features: size of the inputs' last axis.
      lora_rank: the rank of the adapter.
      out_features: size of the outputs' last axis.
      base_module: a callable whose output the adapter adds to (default none).
      dtype: computation dtype (default: promoted from inputs and params).
      param_dtype: the matrices' dtype (default ``float32``).
      a_initializer: ``lora_a`` ``(in_features, lora_rank)`` initializer (``he_uniform()``).
      b_initializer: ``lora_b`` ``(lora_rank, out_features)`` initializer (``zeros``).
      lora_param_type: the matrices' Variable type (default ``LoRAParam``).
      promote_dtype: the dtype promotion function, applied to ``(x, lora_a, lora_b)``.
      rngs: ``nnx.Rngs``; ``params`` draws ``lora_a`` then ``lora_b``.
      a_metadata, b_metadata: metadata of the two Variables.

    Call: ``x`` ``(..., in_features)``; further keywords go to ``base_module``. Returns
    ``(..., out_features)``.

    Raises:
      LayerShapeError: the inputs' last axis is not ``in_features``.
      TypeError: ``base_module`` is not callable (at construction).

    >>> import jax.numpy as jnp, flaxgraph as nnx
    >>> base = nnx.Linear(3, 4, rngs=nnx.Rngs(0))
    >>> layer = nnx.LoRA(3, 2, 4, base_module=base, rngs=nnx.Rngs(1))
    >>> x = jnp.ones((5, 3))
    >>> bool(jnp.allclose(layer(x), base(x)))    # lora_b starts at zero
    True
    """

    _describe_fields: ClassVar[tuple[str, ...]] = ("in_features", "lora_rank", "out_features")

    def __init__(
        self,
        in_features: int,
        lora_rank: int,
        out_features: int,
        *,
        base_module: Module | None = None,
        dtype: Dtype | None = None,
        param_dtype: Dtype = jnp.float32,
        a_initializer: Initializer = default_a_initializer,
        b_initializer: Initializer = default_b_initializer,
        lora_param_type: type[Param[Any]] = LoRAParam,
        promote_dtype: Callable[..., Any] = promote_dtype,
        rngs: Rngs,
        a_metadata: Mapping[str, Any] = EMPTY_METADATA,
        b_metadata: Mapping[str, Any] = EMPTY_METADATA,
    ):
        if base_module is not None and not callable(base_module):
            raise TypeError(
                f"LoRA: base_module must be a callable module, got {type(base_module).__name__}."
            )
        self.in_features = in_features
        self.lora_rank = lora_rank
        self.out_features = out_features
        self.dtype = dtype
        self.param_dtype = param_dtype
        self.lora_param_type = lora_param_type
        self.base_module = base_module
        self.promote_dtype = promote_dtype
        self.lora_a = lora_param_type(
            a_initializer(rngs.params(), (in_features, lora_rank), param_dtype),
            **dict(a_metadata),
        )
        self.lora_b = lora_param_type(
            b_initializer(rngs.params(), (lora_rank, out_features), param_dtype),
            **dict(b_metadata),
        )

    def __call__(self, x: jax.Array, **kwargs: Any) -> jax.Array:
        inputs = jnp.asarray(x)
        lora_a, lora_b = self.lora_a[...], self.lora_b[...]
        check_last_dim(self, inputs, lora_a.shape[0])
        h, a, b = self.promote_dtype((inputs, lora_a, lora_b), dtype=self.dtype)
        out = (h @ a) @ b
        if self.base_module is not None:
            # the base layer gets the promoted inputs, as in Flax NNX
            out = out + self.base_module(h, **kwargs)
        return out


class LoRALinear(Linear):
    """A ``Linear`` layer with a LoRA adapter: ``y = x @ kernel + bias + x @ A @ B``.

    Its state is a ``Linear``'s plus ``lora.lora_a``/``lora.lora_b``.

    Args:
      in_features, out_features: as in ``Linear``.
      lora_rank: the adapter's rank (keyword).
      lora_dtype, lora_param_dtype, lora_promote_dtype: the adapter's ``dtype``,
        ``param_dtype``, ``promote_dtype`` (see ``LoRA``).
      a_initializer, b_initializer, lora_param_type, a_metadata, b_metadata: as in ``LoRA``.
      rngs: ``nnx.Rngs`` (the ``Linear`` Params are drawn first, then the adapter's).
      **kwargs: the other ``Linear`` arguments.

    Call: ``x`` ``(..., in_features)``, optional ``out_sharding`` (for the ``Linear``);
    returns ``(..., out_features)``.

    Raises:
      LayerShapeError: the inputs' last axis is not ``in_features``.

    >>> import jax.numpy as jnp, flaxgraph as nnx
    >>> layer = nnx.LoRALinear(3, 4, lora_rank=2, rngs=nnx.Rngs(0))
    >>> layer.kernel.shape, layer.lora.lora_a.shape, layer(jnp.ones((16, 3))).shape
    ((3, 4), (3, 2), (16, 4))
    """

    def __init__(
        self,
        in_features: int,
        out_features: int,
        *,
        lora_rank: int,
        lora_dtype: Dtype | None = None,
        lora_param_dtype: Dtype = jnp.float32,
        a_initializer: Initializer = default_a_initializer,
        b_initializer: Initializer = default_b_initializer,
        lora_param_type: type[Param[Any]] = LoRAParam,
        lora_promote_dtype: Callable[..., Any] = promote_dtype,
        rngs: Rngs,
        a_metadata: Mapping[str, Any] = EMPTY_METADATA,
        b_metadata: Mapping[str, Any] = EMPTY_METADATA,
        **kwargs: Any,
    ):
        super().__init__(in_features, out_features, rngs=rngs, **kwargs)
        self.lora = LoRA(
            in_features,
            lora_rank,
            out_features,
            dtype=lora_dtype,
            param_dtype=lora_param_dtype,
            a_initializer=a_initializer,
            b_initializer=b_initializer,
            lora_param_type=lora_param_type,
            promote_dtype=lora_promote_dtype,
            rngs=rngs,
            a_metadata=a_metadata,
            b_metadata=b_metadata,
        )

    def __call__(self, x: jax.Array, out_sharding: Any = None) -> jax.Array:
        y = super().__call__(x, out_sharding=out_sharding)
        return y + self.lora(x)


__all__ = [
    "Array",
    "Axis",
    "LoRA",
    "LoRALinear",
    "LoRAParam",
    "Size",
    "default_a_initializer",
    "default_b_initializer",
    "PromoteDtypeFn",
]
