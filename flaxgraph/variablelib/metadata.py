"""Metadata that travels with an initial value: ``VariableMetadata`` and ``with_metadata``.

An initializer wrapped by ``with_metadata(init, **metadata)`` returns its value
boxed in a ``VariableMetadata``; a Variable built from such a box unboxes the
value and takes the metadata, so a layer that does ``Param(kernel_init(key,
shape))`` gets, say, ``sharding=('data', None)`` without knowing about it::

  >>> import jax, flaxgraph as nnx
  >>> init = nnx.with_metadata(nnx.initializers.ones, sharding=(None, 'model'))
  >>> layer = nnx.Linear(2, 3, kernel_init=init, rngs=nnx.Rngs(0))
  >>> layer.kernel.sharding
  (None, 'model')

Flax's ``VariableMetadata`` also carries value hooks (``on_set_value``…);
flaxgraph Variables have no hooks, so the box holds only the value and the
metadata, and ``with_metadata`` rejects hook arguments.

Source: Flax NNX 0.12 ``nnx.with_metadata`` and ``nnx.VariableMetadata``.
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Callable, Mapping
from typing import Any, Generic, TypeVar

A = TypeVar("A")
F = TypeVar("F", bound=Callable[..., Any])

_HOOKS = ("on_set_value", "on_get_value", "on_create_value", "on_add_axis", "on_remove_axis")


@dataclasses.dataclass
class VariableMetadata(Generic[A]):
    """A value boxed with the metadata a Variable made from it should get.

    Args:
      raw_value: the value (any pytree; usually a ``jax.Array`` of any shape/dtype).
      metadata: a mapping of metadata names to values.

    ``Variable(box, **more)`` holds ``box.raw_value`` with metadata
    ``{**box.metadata, **more}`` (the keywords win).

    Example::

      >>> import jax.numpy as jnp, flaxgraph as nnx
      >>> box = nnx.VariableMetadata(jnp.zeros(2), metadata={'note': 'bias'})
      >>> p = nnx.Param(box)
      >>> p.get_metadata('note'), p.shape
      ('bias', (2,))

    Source: Flax NNX 0.12 ``nnx.VariableMetadata`` (without the value hooks).
    """

    raw_value: A
    metadata: Mapping[str, Any] = dataclasses.field(default_factory=dict)

    # The box protocol Variable.__init__ understands (as for nnx.Partitioned).
    def variable_metadata(self) -> dict[str, Any]:
        """The metadata a Variable made from this box gets (a new dict)."""
        return dict(self.metadata)

    def unbox(self) -> A:
        """The boxed value."""
        return self.raw_value


def with_metadata(initializer: F, **metadata: Any) -> F:
    """Wraps ``initializer`` so its result carries ``metadata`` into the Variable.

    Args:
      initializer: any callable returning the initial value, e.g. a
        ``jax.nn.initializers`` function ``(key, shape, dtype) -> Array``.
      **metadata: the metadata (e.g. ``sharding=('data', None)``).

    Returns:
      A callable with ``initializer``'s signature (and name) that returns
      ``VariableMetadata(initializer(...), metadata)``; a Variable built from it
      unboxes the value (same shape and dtype as ``initializer``'s).

    Raises:
      TypeError: a Flax value hook (``on_set_value``, ``on_get_value``,
        ``on_create_value``, ``on_add_axis``, ``on_remove_axis``) is given:
        flaxgraph Variables have no hooks (subclass ``Variable`` instead).

    Example::

      >>> import jax, flaxgraph as nnx
      >>> init = nnx.with_metadata(jax.nn.initializers.zeros, note='hi')
      >>> nnx.Param(init(jax.random.key(0), (2, 3))).note
      'hi'

    Source: Flax NNX 0.12 ``nnx.with_metadata``.
    """
    hooks = [k for k in _HOOKS if k in metadata]
    if hooks:
        raise TypeError(
            f"with_metadata got the value hook {hooks[0]!r}; flaxgraph Variables have no "
            "value hooks.\nFix: subclass nnx.Variable and override set_value / add_axis "
            "instead, or pass only plain metadata."
        )

    @functools.wraps(initializer)
    def wrapped(*args: Any, **kwargs: Any) -> VariableMetadata[Any]:
        return VariableMetadata(initializer(*args, **kwargs), dict(metadata))

    return wrapped  # type: ignore[return-value]
