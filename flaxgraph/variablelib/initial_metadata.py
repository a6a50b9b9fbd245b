"""Metadata that travels with an initial value: ``VariableMetadata`` and ``with_metadata``.

A Variable built from a ``VariableMetadata`` box unboxes the value and takes the
metadata, so a layer gets, say, ``out_sharding`` from its initializer. Flax's value
hooks are refused (flaxgraph Variables have none; subclass the Variable instead).
Source: Flax NNX 0.12 ``nnx.with_metadata`` and ``nnx.VariableMetadata``.

>>> import jax, flaxgraph as nnx
>>> init = nnx.with_metadata(nnx.initializers.ones, out_sharding=(None, 'model'))
>>> layer = nnx.Linear(2, 3, kernel_init=init, rngs=nnx.Rngs(0))
>>> layer.kernel.out_sharding
(None, 'model')
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Callable, Mapping
from typing import Any, Generic, TypeVar

from flaxgraph.variablelib.value_hooks import METADATA_HOOKS, hook_refusal

A = TypeVar("A")
F = TypeVar("F", bound=Callable[..., Any])


@dataclasses.dataclass
class VariableMetadata(Generic[A]):
    """A value boxed with the metadata a Variable made from it gets.

    Args:
      raw_value: the value (any pytree; usually a ``jax.Array``).
      metadata: metadata names to values; ``Variable(box, **more)`` gets
        ``{**box.metadata, **more}``.
      on_set_value, on_get_value, on_create_value, on_add_axis, on_remove_axis: Flax's
        hook fields, accepted only empty (``()``).

    Raises:
      TypeError: a non-empty value hook; the message shows the subclass to write instead.

    >>> import jax.numpy as jnp, flaxgraph as nnx
    >>> box = nnx.VariableMetadata(jnp.zeros(2), metadata={'note': 'bias'})
    >>> p = nnx.Param(box)
    >>> p.get_metadata('note'), p.shape
    ('bias', (2,))
    """

    raw_value: A
    on_set_value: tuple[Callable[..., Any], ...] = ()
    on_get_value: tuple[Callable[..., Any], ...] = ()
    on_create_value: tuple[Callable[..., Any], ...] = ()
    on_add_axis: tuple[Callable[..., Any], ...] = ()
    on_remove_axis: tuple[Callable[..., Any], ...] = ()
    metadata: Mapping[str, Any] = dataclasses.field(default_factory=dict)

    def __post_init__(self) -> None:
        given = [name for name in METADATA_HOOKS if getattr(self, name)]
        if given:
            raise TypeError(hook_refusal("VariableMetadata", given[0]))

    # The box protocol Variable.__init__ understands (as for nnx.Partitioned).
    def variable_metadata(self) -> dict[str, Any]:
        """The metadata a Variable made from this box gets (a new dict)."""
        return dict(self.metadata)

    def unbox(self) -> A:
        """The boxed value."""
        return self.raw_value


def with_metadata(initializer: F, **metadata: object) -> F:
    """Wraps ``initializer`` so its result carries ``metadata`` into the Variable.

    Args:
      initializer: a callable returning the initial value, e.g. ``(key, shape, dtype) -> Array``.
      **metadata: the metadata (e.g. ``out_sharding=('data', None)``).

    Returns:
      A callable with ``initializer``'s signature and name returning
      ``VariableMetadata(initializer(...), metadata)``.

    Raises:
      TypeError: a Flax value hook (``on_set_value``…) is given.

    >>> import jax, flaxgraph as nnx
    >>> init = nnx.with_metadata(jax.nn.initializers.zeros, note='hi')
    >>> nnx.Param(init(jax.random.key(0), (2, 3))).note
    'hi'
    """
    hooks = [k for k in METADATA_HOOKS if k in metadata]
    if hooks:
        raise TypeError(hook_refusal("with_metadata", hooks[0]))

    @functools.wraps(initializer)
    def wrapped(*args: object, **kwargs: object) -> VariableMetadata[Any]:
        return VariableMetadata(initializer(*args, **kwargs), metadata=dict(metadata))

    return wrapped  # type: ignore[return-value]
