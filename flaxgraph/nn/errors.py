"""Errors raised by layers when a call gets inputs of the wrong shape or dtype.

The message names the layer with its configuration, what it expected and what it got
(see the package README). Source: ``docs/design.md``, "Errors".
"""

from __future__ import annotations

from typing import Any

from flaxgraph.errors import FlaxgraphError


class LayerInputError(FlaxgraphError, ValueError):
    """Base class of the errors a layer raises for bad call inputs.

    Attributes:
      module: the layer that raised (``None`` from a free function).
    """

    def __init__(self, message: str, module: Any = None):
        super().__init__(message)
        self.module = module


class LayerShapeError(LayerInputError):
    """A layer was called on inputs whose shape does not fit its configuration.

    >>> import jax.numpy as jnp, flaxgraph as nnx
    >>> layer = nnx.Linear(64, 10, rngs=nnx.Rngs(0))
    >>> try:
    ...     layer(jnp.ones((8, 32)))
    ... except nnx.nn.LayerShapeError as e:
    ...     print(e, e.module is layer)
    Linear(in_features=64, out_features=10) expected inputs with last dimension 64, got shape (8, 32). True
    """


class LayerDtypeError(LayerInputError, TypeError):
    """A layer was called on inputs of a dtype it cannot take (e.g. float ids to ``Embed``)."""


def describe(module: Any) -> str:
    """``Name(field=value, ...)`` for a layer, from its class's ``_describe_fields``."""
    fields = getattr(type(module), "_describe_fields", ())
    parts = []
    for name in fields:
        value = module.__dict__.get(name)
        text = describe(value) if hasattr(type(value), "_describe_fields") else repr(value)
        parts.append(f"{name}={text}")
    return f"{type(module).__name__}({', '.join(parts)})"


def shape_error(module: Any, expected: str, shape: Any, who: str | None = None) -> LayerShapeError:
    """A ``LayerShapeError`` "<layer> expected <expected>, got shape <shape>." (``who`` names a function)."""
    if who is None:
        who = describe(module) if module is not None else "this function"
    return LayerShapeError(f"{who} expected {expected}, got shape {tuple(shape)}.", module)


def check_last_dim(module: Any, x: Any, expected: int, what: str = "inputs") -> None:
    """Raises ``LayerShapeError`` unless ``x.shape[-1] == expected``."""
    shape = tuple(x.shape)
    if not shape or shape[-1] != expected:
        raise shape_error(module, f"{what} with last dimension {expected}", shape)


def check_min_rank(module: Any, x: Any, rank: int, layout: str, what: str = "inputs") -> None:
    """Raises ``LayerShapeError`` unless ``x.ndim >= rank``; ``layout`` describes the axes."""
    if x.ndim < rank:
        raise shape_error(module, f"{what} of rank >= {rank} ({layout})", x.shape)


def normalize_axis(module: Any, axis: int, ndim: int, shape: Any, what: str = "axis") -> int:
    """``axis`` as a non-negative index for rank ``ndim`` (``LayerShapeError`` if out of range)."""
    if not -ndim <= axis < ndim:
        raise shape_error(module, f"inputs with a dimension at {what} {axis}", shape)
    return axis % ndim


__all__ = [
    "LayerDtypeError",
    "LayerInputError",
    "LayerShapeError",
    "check_last_dim",
    "check_min_rank",
    "describe",
    "normalize_axis",
    "shape_error",
]
