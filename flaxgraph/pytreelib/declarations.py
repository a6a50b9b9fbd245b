"""``nnx.dataclass`` and ``nnx.check_pytree``: declaring and checking ``Pytree`` classes.

Source: Flax NNX 0.12 ``nnx.dataclass`` and ``nnx.check_pytree``.
"""

from __future__ import annotations

import dataclasses
from typing import Any, TypeVar

from flaxgraph.pytreelib.attribute_kinds import STATIC, class_kinds, has_data
from flaxgraph.pytreelib.objects import Pytree, sorted_items

T = TypeVar("T")


def check_pytree(pytree: Any) -> None:
    """Checks that no static-marked attribute of ``pytree`` holds data (arrays, Variables, nodes).

    Assignment already refuses such values; this catches attributes stored without
    ``__setattr__`` (``vars(obj).update(...)``).

    Raises:
      TypeError: ``pytree`` is not a ``Pytree``.
      ValueError: a static attribute holds data; the message names it and the fixes.

    >>> import jax.numpy as jnp, flaxgraph as nnx
    >>> class Bad(nnx.Pytree):
    ...   table: list = nnx.static()
    >>> bad = Bad()
    >>> vars(bad).update(table=[jnp.ones(1)])
    >>> try:
    ...   nnx.check_pytree(bad)
    ... except ValueError as e:
    ...   print(str(e).splitlines()[0])
    The static attribute Bad.table holds data (ArrayImpl).
    """
    if not isinstance(pytree, Pytree):
        raise TypeError(f"check_pytree expects an nnx.Pytree, got a {type(pytree).__name__}.")
    forced = dict(pytree._obj_kinds)
    for name, value in sorted_items(pytree):
        if forced.get(name) != STATIC:
            continue
        found = has_data(value)
        if found:
            kinds = ", ".join(sorted({type(x).__name__ for x in found}))
            raise ValueError(
                f"The static attribute {type(pytree).__name__}.{name} holds data ({kinds}).\n"
                f"Fix: 1. if it is meant to be data, assign it with nnx.data(...) (or "
                f"declare `{name}: ... = nnx.data()` on the class); 2. if it is meant to "
                "be static, remove the arrays/Variables from it."
            )


def dataclass(
    cls: type[T] | None = None,
    /,
    *,
    init: bool = True,
    eq: bool = True,
    order: bool = False,
    unsafe_hash: bool = False,
    match_args: bool = True,
    kw_only: bool = False,
    slots: bool = False,
    weakref_slot: bool = False,
) -> Any:
    """``dataclasses.dataclass`` for ``Pytree`` subclasses; ``nnx.data()``/``nnx.static()`` fields.

    Args:
      cls: the class (``None`` when used as ``@nnx.dataclass(...)``).
      init, eq, order, unsafe_hash, match_args, kw_only, slots, weakref_slot: as for
        ``dataclasses.dataclass``.

    Raises:
      TypeError: ``cls`` is not a ``Pytree`` subclass.

    >>> import jax, jax.numpy as jnp, flaxgraph as nnx
    >>> @nnx.dataclass
    ... class Point(nnx.Pytree):
    ...   x: jax.Array
    ...   label: str = nnx.static(default='p')
    ...   steps: int = nnx.data(default=0)
    >>> jax.tree.leaves(Point(jnp.zeros(2)))      # attributes in name order
    [0, Array([0., 0.], dtype=float32)]
    """
    options = dict(init=init, eq=eq, order=order, unsafe_hash=unsafe_hash, match_args=match_args)
    options.update(kw_only=kw_only, slots=slots, weakref_slot=weakref_slot)

    def wrap(klass: type[T]) -> type[T]:
        if not (isinstance(klass, type) and issubclass(klass, Pytree)):
            raise TypeError(
                f"nnx.dataclass is for nnx.Pytree subclasses, got {klass!r}.\nFix: derive "
                "the class from nnx.Pytree (or nnx.Module)."
            )
        new = dataclasses.dataclass(klass, **options)
        new._obj_class_kinds = class_kinds(new)
        return new

    return wrap if cls is None else wrap(cls)


__all__ = ["check_pytree", "dataclass"]
