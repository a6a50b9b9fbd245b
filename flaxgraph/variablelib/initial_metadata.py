"""Metadata that travels with an initial value: ``VariableMetadata`` and ``with_metadata``.

An initializer wrapped by ``with_metadata(init, **metadata)`` returns its value
boxed in a ``VariableMetadata``; a Variable built from such a box unboxes the
value and takes the metadata, so a layer that does ``Param(kernel_init(key,
shape))`` gets, say, ``out_sharding=('data', None)`` without knowing about it::

  >>> import jax, flaxgraph as nnx
  >>> init = nnx.with_metadata(nnx.initializers.ones, out_sharding=(None, 'model'))
  >>> layer = nnx.Linear(2, 3, kernel_init=init, rngs=nnx.Rngs(0))
  >>> layer.kernel.out_sharding
  (None, 'model')

Flax's ``VariableMetadata`` also carries value hooks (``on_set_value``…);
flaxgraph Variables have no hooks: the box has the hook fields (always empty),
and both it and ``with_metadata`` reject a hook with a ``TypeError`` that shows
the Variable subclass to write instead.

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

    The value-hook fields of Flax (``on_set_value``, ``on_get_value``,
    ``on_create_value``, ``on_add_axis``, ``on_remove_axis``, tuples of
    ``hook(variable, value)`` callables) exist with the same names, order and
    default ``()``, so Flax code that reads or passes them empty works; a
    non-empty one raises, as in ``with_metadata``: flaxgraph Variables have no
    value hooks (Flax 0.12 deprecates them too, in favour of a Variable subclass).

    Raises:
      TypeError: a value hook is given (non-empty); the message names it and shows
        the subclass to write instead.

    Source: Flax NNX 0.12 ``nnx.VariableMetadata`` (its hook fields are always empty
    here).
    """

    raw_value: A
    on_set_value: tuple[Callable[..., Any], ...] = ()
    on_get_value: tuple[Callable[..., Any], ...] = ()
    on_create_value: tuple[Callable[..., Any], ...] = ()
    on_add_axis: tuple[Callable[..., Any], ...] = ()
    on_remove_axis: tuple[Callable[..., Any], ...] = ()
    metadata: Mapping[str, Any] = dataclasses.field(default_factory=dict)

    def __post_init__(self) -> None:
        given = [name for name in _HOOKS if getattr(self, name)]
        if given:
            raise TypeError(_hook_message(f"VariableMetadata got the value hook {given[0]!r}"))

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
      initializer: any callable returning the initial value, e.g. a
        ``jax.nn.initializers`` function ``(key, shape, dtype) -> Array``.
      **metadata: the metadata (e.g. ``out_sharding=('data', None)``).

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
        raise TypeError(_hook_message(f"with_metadata got the value hook {hooks[0]!r}"))

    @functools.wraps(initializer)
    def wrapped(*args: object, **kwargs: object) -> VariableMetadata[Any]:
        return VariableMetadata(initializer(*args, **kwargs), metadata=dict(metadata))

    return wrapped  # type: ignore[return-value]


def _hook_message(what: str) -> str:
    return (
        f"{what}; flaxgraph Variables have no value hooks (Flax 0.12 deprecates them).\n"
        "Fix: subclass the Variable and override the method instead, e.g.\n"
        "  class Scaled(nnx.Param):\n"
        "    def get_value(self, **kw):\n"
        "      return super().get_value(**kw) * 2\n"
        "(set_value / add_axis / remove_axis likewise), or pass only plain metadata."
    )
