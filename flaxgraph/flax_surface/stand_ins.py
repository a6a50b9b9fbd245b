"""Stand-ins for Flax-internal names that have no counterpart in flaxgraph's design.

Flax NNX's modules also define its own machinery (the wrappers its transforms build,
``JitFn``…; its hijax primitives; private contexts). Code that only *names* one
(``import``, an annotation, ``isinstance``) works at the same dotted path; code that
*uses* one gets a :class:`~flaxgraph.errors.FlaxInternalError` saying what to use
instead. ``guides/from_flax.md``, "Flax-internal names at their dotted paths", lists
each with its reason.

Example::

  >>> from flaxgraph.flax_surface.stand_ins import internal_class
  >>> JitFn = internal_class("flaxgraph.transforms.compilation", "JitFn", "nnx.jit")
  >>> isinstance(object(), JitFn)
  False
  >>> JitFn(lambda x: x)
  Traceback (most recent call last):
    ...
  flaxgraph.errors.FlaxInternalError: flax.nnx.transforms.compilation.JitFn is ...

Source: the module map of Flax NNX 0.12.8 (its public source, read for the names only).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, NoReturn

from flaxgraph.errors import FlaxInternalError

__all__ = [
    "flax_name",
    "internal_class",
    "internal_error",
    "internal_function",
    "internal_object",
    "stands_for",
]


def stands_for(value: object) -> str | None:
    """The Flax name a stand-in made here stands for, or ``None`` for any other value.

    Example::

      >>> from flaxgraph.transforms.iteration import VmapFn, vmap
      >>> stands_for(VmapFn), stands_for(vmap)
      ('flax.nnx.transforms.iteration.VmapFn', None)
    """
    dotted = getattr(
        type(value) if not isinstance(value, type) else value, "__flax_internal__", None
    )
    if dotted is None and callable(value):
        dotted = getattr(value, "__flax_internal__", None)
    return dotted if isinstance(dotted, str) else None


def internal_error(dotted: str, instead: str) -> FlaxInternalError:
    """The :class:`~flaxgraph.errors.FlaxInternalError` for using the Flax name ``dotted``,
    naming ``instead``.
    """
    return FlaxInternalError(
        f"{dotted} is Flax-internal machinery with no counterpart in flaxgraph's design "
        f"(guides/from_flax.md, 'Flax-internal names at their dotted paths'); use {instead} "
        "instead."
    )


def flax_name(module: str, name: str) -> str:
    """``('flaxgraph.a', 'B')`` -> ``'flax.nnx.a.B'``: the Flax name of ``module.name``."""
    return "flax.nnx" + module.removeprefix("flaxgraph") + "." + name


def internal_class(module: str, name: str, instead: str) -> type[Any]:
    """A class standing for Flax's ``module.name`` (``module`` is the flaxgraph module's
    ``__name__``): importable, subscriptable, usable in ``isinstance``; constructing it
    raises :class:`~flaxgraph.errors.FlaxInternalError` naming ``instead``.
    """
    dotted = flax_name(module, name)

    def __new__(cls: type[Any], *args: Any, **kwargs: Any) -> NoReturn:
        raise internal_error(dotted, instead)

    def __class_getitem__(cls: type[Any], item: Any) -> type[Any]:
        return cls

    namespace = {
        "__new__": __new__,
        "__class_getitem__": classmethod(__class_getitem__),
        "__doc__": f"Stands for Flax's ``{dotted}``, which flaxgraph does not need; "
        f"use {instead}. Constructing it raises ``FlaxInternalError``.",
        "__slots__": (),
        "__module__": module,
        "__flax_internal__": dotted,
    }
    return type(name, (), namespace)


def internal_function(module: str, name: str, instead: str) -> Callable[..., NoReturn]:
    """A function standing for Flax's ``module.name``; calling it raises
    :class:`~flaxgraph.errors.FlaxInternalError` naming ``instead``.
    """

    dotted = flax_name(module, name)

    def stand_in(*args: Any, **kwargs: Any) -> NoReturn:
        raise internal_error(dotted, instead)

    stand_in.__name__ = stand_in.__qualname__ = name
    stand_in.__module__ = module
    stand_in.__flax_internal__ = dotted  # type: ignore[attr-defined]
    stand_in.__doc__ = (
        f"Stands for Flax's ``{dotted}``, which flaxgraph does not need; use {instead}. "
        "Calling it raises ``FlaxInternalError``."
    )
    return stand_in


def internal_object(module: str, name: str, instead: str) -> Any:
    """An object standing for Flax's module-level ``module.name`` (a context, a registry):
    importable; reading an attribute (other than ``__dunder__`` lookups) or calling it raises
    :class:`~flaxgraph.errors.FlaxInternalError`.
    """
    dotted = flax_name(module, name)

    def __getattr__(self: Any, attr: str) -> NoReturn:
        if attr.startswith("__"):  # introspection (copy, inspect, doctest) sees a plain object
            raise AttributeError(attr)
        raise internal_error(dotted, instead)

    def __call__(self: Any, *args: Any, **kwargs: Any) -> NoReturn:
        raise internal_error(dotted, instead)

    def __repr__(self: Any) -> str:
        return f"<stand-in for {dotted}>"

    namespace = {
        "__getattr__": __getattr__,
        "__call__": __call__,
        "__repr__": __repr__,
        "__doc__": f"Stands for Flax's ``{dotted}``, which flaxgraph does not need; use "
        f"{instead}. Reading its attributes or calling it raises ``FlaxInternalError``.",
        "__slots__": (),
        "__module__": module,
        "__flax_internal__": dotted,
    }
    return type(name, (), namespace)()
