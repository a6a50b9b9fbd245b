"""Collection names of Variable kinds (``'params'`` <-> ``Param``), in one registry.

Source: Flax NNX 0.12 ``nnx.register_variable_name``, ``variable_name_from_type``,
``variable_type_from_name``.

>>> import flaxgraph as nnx
>>> nnx.variable_name_from_type(nnx.BatchStat), nnx.variable_type_from_name('params')
('batch_stats', <class 'flaxgraph.variablelib.variable.Param'>)
"""

from __future__ import annotations

from types import MappingProxyType
from typing import Any

from flaxgraph.variablelib.variable import (
    BatchStat,
    Cache,
    Intermediate,
    Param,
    Perturbation,
    Variable,
)

# Written only through `register_variable_name`.
_NAME_TO_TYPE: dict[str, type[Variable[Any]]] = {}
_TYPE_TO_NAME: dict[type[Variable[Any]], str] = {}

VariableTypeCache = MappingProxyType(_NAME_TO_TYPE)
"""Flax's ``VariableTypeCache``: collection name -> Variable kind, a read-only live view."""


def register_variable_name(
    name: str, typ: type[Variable[Any]] | None = None, *, overwrite: bool = False
) -> object:
    """Associates the collection name ``name`` (e.g. ``'params'``) with a Variable kind.

    Args:
      name: a Linen-style collection name.
      typ: the Variable kind; omitted, a class decorator is returned.
      overwrite: replace an existing registration of ``name``.

    Returns:
      ``typ`` (or a decorator that registers and returns its class).

    Raises:
      ValueError: ``name`` is registered to another kind and ``overwrite`` is False.

    >>> import flaxgraph as nnx
    >>> @nnx.register_variable_name('counts_doc')
    ... class Count(nnx.Variable): pass
    >>> nnx.variable_type_from_name('counts_doc') is Count
    True
    """
    if typ is None:
        return lambda cls: register_variable_name(name, cls, overwrite=overwrite)
    if not overwrite and _NAME_TO_TYPE.get(name, typ) is not typ:
        raise ValueError(
            f"Variable name {name!r} is already registered to {_NAME_TO_TYPE[name].__name__}; "
            "pass overwrite=True to replace it."
        )
    _NAME_TO_TYPE[name] = typ
    _TYPE_TO_NAME[typ] = name
    return typ


def variable_name_from_type(typ: type[Variable[Any]], *, allow_register: bool = False) -> str:
    """Returns the collection name of a Variable kind (``Param`` -> ``'params'``).

    Raises:
      ValueError: if the kind is not registered and ``allow_register`` is False;
        with ``allow_register=True`` it is registered under its class name.
    """
    if typ in _TYPE_TO_NAME:
        return _TYPE_TO_NAME[typ]
    if allow_register:
        register_variable_name(typ.__name__, typ)
        return typ.__name__
    raise ValueError(
        f"Variable kind {typ.__name__} has no registered name; call "
        f"nnx.register_variable_name('name', {typ.__name__}) or pass allow_register=True."
    )


def variable_type_from_name(
    name: str,
    /,
    *,
    base: type[Variable[Any]] = Variable,
    allow_register: bool = False,
) -> type[Variable[Any]]:
    """The Variable kind registered under ``name`` (``'params'`` -> ``Param``).

    Args:
      name: a Linen-style collection name.
      base: the base class of a kind created with ``allow_register``.
      allow_register: create and register a new ``base`` subclass if none has that name.

    Raises:
      ValueError: no kind is registered under ``name`` and ``allow_register`` is False.
    """
    if name in _NAME_TO_TYPE:
        return _NAME_TO_TYPE[name]
    if allow_register:
        typ = type(name, (base,), {})
        register_variable_name(name, typ)
        return typ
    raise ValueError(f"No Variable kind is registered under the name {name!r}.")


for _n, _t in [
    ("params", Param),
    ("batch_stats", BatchStat),
    ("cache", Cache),
    ("intermediates", Intermediate),
    ("perturbations", Perturbation),
]:
    register_variable_name(_n, _t)
