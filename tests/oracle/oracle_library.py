"""The user classes of oracle programs, defined once per library from one source.

``LIBRARIES['flax']`` and ``LIBRARIES['flaxgraph']`` hold the same classes made on
``flax.nnx`` and on flaxgraph: a plain ``Module`` (``Box``), a subclass that
overrides ``__setattr__`` and ``__call__`` (``HookBox``), a Module that is not a
JAX pytree (``OpaqueBox``, ``pytree=False``), a ``Pytree`` that is not a Module
(``Record``), a subclass of ``Param`` (``Tagged``), a ``Variable`` whose
documented value hooks are overridden (``Hooked``: ``on_create_value``,
``on_get_value``, ``on_set_value``) and one that overrides ``get_value`` /
``set_value`` (``Stored``). Each class is a module global (``FlaxBox``,
``FlaxgraphBox``…) so that pickle finds it; its ``__name__`` is the same in both
libraries, so GraphDef and State type names compare equal.
"""

from __future__ import annotations

from typing import Any, NamedTuple

import flax.nnx as flax_nnx

import flaxgraph


class Library(NamedTuple):
    """One library's ``nnx`` namespace and the oracle's classes made on it."""

    name: str
    nnx: Any
    modules: dict[str, type]
    variables: dict[str, type]


def _define(name: str, nnx: Any) -> Library:
    class Box(nnx.Module):
        pass

    class HookBox(Box):
        def __setattr__(self, key: str, value: Any) -> None:
            if key.startswith("forbidden_"):
                raise AttributeError(key)
            super().__setattr__(key, value)

        def __call__(self, x: Any) -> Any:
            return x

    class OpaqueBox(Box, pytree=False):
        pass

    class Record(nnx.Pytree):
        pass

    class Tagged(nnx.Param):
        pass

    class Hooked(nnx.Variable):
        def on_create_value(self, value: Any) -> Any:
            return value

        def on_get_value(self, value: Any) -> Any:
            return value

        def on_set_value(self, value: Any) -> Any:
            return value

    class Stored(nnx.Variable):
        def get_value(self, **kwargs: Any) -> Any:
            return super().get_value(**kwargs)

        def set_value(self, value: Any, **kwargs: Any) -> None:
            super().set_value(value, **kwargs)

    modules = {"box": Box, "hook": HookBox, "opaque": OpaqueBox, "record": Record}
    variables = {
        "param": nnx.Param,
        "batch_stat": nnx.BatchStat,
        "variable": nnx.Variable,
        "tagged": Tagged,
        "hooked": Hooked,
        "stored": Stored,
    }
    prefix = "Flax" if name == "flax" else "Flaxgraph"
    for cls in (*modules.values(), Tagged, Hooked, Stored):
        cls.__qualname__ = prefix + cls.__name__
        cls.__module__ = __name__
        for member in vars(cls).values():  # hooks are kept in metadata: pickled by name
            if callable(member) and hasattr(member, "__qualname__"):
                member.__qualname__ = f"{cls.__qualname__}.{member.__name__}"
                member.__module__ = __name__
        globals()[cls.__qualname__] = cls
    return Library(name, nnx, modules, variables)


LIBRARIES = {"flax": _define("flax", flax_nnx), "flaxgraph": _define("flaxgraph", flaxgraph)}
"""The two libraries an oracle program runs on, reference first."""
