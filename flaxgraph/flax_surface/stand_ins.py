"""Stand-ins for Flax-internal names that have no counterpart in flaxgraph's design.

Code that only *names* one (``import``, an annotation, ``isinstance``) works at Flax's
dotted path; code that *uses* one (builds, calls, reads an attribute) gets a
:class:`~flaxgraph.errors.FlaxInternalError` saying what to use instead.
``guides/from_flax.md``, "Flax-internal names at their dotted paths", gives each reason.

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

__all__ = ["internal_class", "internal_function", "internal_object", "stands_for"]


def stands_for(value: object) -> str | None:
    """The Flax name a stand-in made here stands for, or ``None`` for any other value.

    Example::

      >>> from flaxgraph.transforms.iteration import VmapFn, vmap
      >>> stands_for(VmapFn), stands_for(vmap)
      ('flax.nnx.transforms.iteration.VmapFn', None)
    """
    dotted = getattr(value if isinstance(value, type) else type(value), "__flax_internal__", None)
    if dotted is None and callable(value):
        dotted = getattr(value, "__flax_internal__", None)
    return dotted if isinstance(dotted, str) else None


def _parts(
    module: str, name: str, instead: str, raises: str
) -> tuple[str, Callable[..., NoReturn], dict[str, Any]]:
    """The Flax name of ``module.name``, a function raising for it, and a stand-in's attributes."""
    dotted = "flax.nnx" + module.removeprefix("flaxgraph") + "." + name

    def fail(*args: Any, **kwargs: Any) -> NoReturn:
        raise FlaxInternalError(
            f"{dotted} is Flax-internal machinery with no counterpart in flaxgraph's design "
            f"(guides/from_flax.md, 'Flax-internal names at their dotted paths'); use {instead} "
            "instead."
        )

    doc = (
        f"Stands for Flax's ``{dotted}``, which flaxgraph does not need; use {instead}. "
        f"{raises} raises ``FlaxInternalError``."
    )
    return dotted, fail, {"__doc__": doc, "__module__": module, "__flax_internal__": dotted}


def internal_class(module: str, name: str, instead: str) -> type[Any]:
    """A class standing for Flax's ``module.name`` (``module``: the flaxgraph module's name):
    importable, subscriptable, usable in ``isinstance``; constructing it raises
    :class:`~flaxgraph.errors.FlaxInternalError` naming ``instead``."""
    _, fail, attributes = _parts(module, name, instead, "Constructing it")

    def __new__(cls: type[Any], *args: Any, **kwargs: Any) -> NoReturn:
        fail()

    def __class_getitem__(cls: type[Any], item: Any) -> type[Any]:
        return cls

    namespace = {"__new__": __new__, "__class_getitem__": classmethod(__class_getitem__)}
    return type(name, (), {**namespace, **attributes, "__slots__": ()})


def internal_function(module: str, name: str, instead: str) -> Callable[..., NoReturn]:
    """A function standing for Flax's ``module.name``; calling it raises
    :class:`~flaxgraph.errors.FlaxInternalError` naming ``instead``."""
    _, fail, attributes = _parts(module, name, instead, "Calling it")
    fail.__name__ = fail.__qualname__ = name
    for key, value in attributes.items():
        setattr(fail, key, value)
    return fail


def internal_object(module: str, name: str, instead: str) -> Any:
    """An object standing for Flax's module-level ``module.name`` (a context, a registry):
    importable; reading an attribute (other than ``__dunder__`` lookups) or calling it raises
    :class:`~flaxgraph.errors.FlaxInternalError`."""
    dotted, fail, attributes = _parts(module, name, instead, "Reading its attributes or calling it")

    def __getattr__(self: Any, attr: str) -> NoReturn:
        if attr.startswith("__"):  # introspection (copy, inspect, doctest) sees a plain object
            raise AttributeError(attr)
        fail()

    def __call__(self: Any, *args: Any, **kwargs: Any) -> NoReturn:
        fail()

    def __repr__(self: Any) -> str:
        return f"<stand-in for {dotted}>"

    namespace = {"__getattr__": __getattr__, "__call__": __call__, "__repr__": __repr__}
    return type(name, (), {**namespace, **attributes, "__slots__": ()})()
