"""``RNNCellBase``: the base class of the recurrent cells, in its own file so cells and ``RNN`` both import it.

Source: Flax NNX ``flax.nnx.nn.recurrent.RNNCellBase`` (0.12).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, ClassVar

import jax

from flaxgraph.module_class import Module
from flaxgraph.nn.errors import LayerShapeError, describe
from flaxgraph.nn.initializers import zeros
from flaxgraph.nn.stochastic import own_stream
from flaxgraph.rnglib.rngs import Rngs, RngStream

Initializer = Callable[..., Any]


def check_carry(cell: Any, inputs: jax.Array, *parts: jax.Array) -> None:
    """Raises ``LayerShapeError`` unless each carry part has the inputs' batch shape and all one shape."""
    batch = tuple(inputs.shape[:-1])
    first = tuple(parts[0].shape)
    for part in parts:
        shape = tuple(part.shape)
        if shape[:-1] != batch or shape != first:
            raise LayerShapeError(
                f"{describe(cell)} expected a carry of shape {(*batch, first[-1])} "
                f"for inputs of shape {tuple(inputs.shape)}, got shape {shape}.",
                cell,
            )


class RNNCellBase(Module):
    """Base class of recurrent cells.

    Subclasses define ``__call__(carry, inputs)`` and ``initialize_carry(input_shape,
    rngs=None)`` and have ``in_features`` and ``hidden_features``.
    """

    _describe_fields: ClassVar[tuple[str, ...]] = ("in_features", "hidden_features")

    def __call__(self, carry: Any, inputs: jax.Array) -> tuple[Any, jax.Array]:
        """One step: ``(carry, inputs (*batch, in_features)) -> (new_carry, outputs)``.

        Raises:
          NotImplementedError: a subclass must define it.
        """
        raise NotImplementedError(
            f"{type(self).__name__} derives from RNNCellBase and must define "
            "__call__(self, carry, inputs) -> (new_carry, outputs)."
        )

    def initialize_carry(
        self,
        input_shape: tuple[int, ...],
        rngs: Rngs | RngStream | None = None,
        carry_init: Initializer | None = None,
    ) -> Any:
        """The first carry for inputs of shape ``input_shape`` (``(*batch, in_features)``).

        Raises:
          NotImplementedError: a subclass must define it.
        """
        raise NotImplementedError(
            f"{type(self).__name__} derives from RNNCellBase and must define "
            "initialize_carry(self, input_shape, rngs=None, carry_init=None)."
        )

    @property
    def num_feature_axes(self) -> int:
        """How many trailing axes of an input are features (1)."""
        return 1

    def _init_carry_part(
        self,
        input_shape: tuple[int, ...],
        rngs: Rngs | RngStream | None,
        carry_init: Initializer | None,
    ) -> jax.Array:
        batch = tuple(input_shape)[: len(input_shape) - self.num_feature_axes]
        init = carry_init if carry_init is not None else self.carry_init
        if isinstance(rngs, Rngs):
            key = rngs["carry"]()
        elif isinstance(rngs, RngStream):
            key = rngs()
        elif self.rngs is not None:
            key = self.rngs()
        else:
            key = jax.random.key(0)  # the default zeros init ignores it
        return init(key, (*batch, self.hidden_features), self.param_dtype)

    def _store_common(
        self,
        in_features: int,
        hidden_features: int,
        gate_fn: Callable[..., Any],
        activation_fn: Callable[..., Any],
        dtype: Any,
        param_dtype: Any,
        carry_init: Initializer | None,
        keep_rngs: bool,
        rngs: Rngs,
    ) -> None:
        self.in_features = in_features
        self.hidden_features = hidden_features
        self.gate_fn = gate_fn
        self.activation_fn = activation_fn
        self.dtype = dtype
        self.param_dtype = param_dtype
        self.carry_init = zeros if carry_init is None else carry_init
        self.rngs = own_stream(rngs, "carry") if keep_rngs else None


__all__ = ["RNNCellBase"]
