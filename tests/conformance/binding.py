"""How the rewritten Flax test files import: ``flax.nnx`` is flaxgraph, the rest of flax stays flax.

``rewrite.py`` turns every ``import flax…`` / ``from flax… import …`` statement of
Flax's ``tests/nnx`` into calls of this module (it is copied next to the tests as
``_flaxgraph_binding.py``). The rules:

* ``flax.nnx`` is ``flaxgraph``, and ``flax.nnx.a.b`` is ``flaxgraph.a.b`` (a module or
  an attribute path), so the tests exercise flaxgraph's own module map;
* any other piece ``flax.X`` (``linen``, ``core``, ``typing``, ``struct``…) is the real
  Flax, which the tests use as an oracle; where flaxgraph has a module of the same
  name (``errors``, ``config``), a name is looked up in flaxgraph's first and then in
  Flax's, so ``errors.TraceContextError`` is the exception flaxgraph raises while
  ``errors.ScopeParamNotFoundError`` is still Linen's;
* a name flaxgraph lacks does not kill the whole file at import: it becomes a
  stand-in that raises ``MissingInFlaxgraph`` when a test really uses it, so only
  the tests that need it fail (and are reported).
"""

from __future__ import annotations

import importlib
import types
from typing import Any


class MissingInFlaxgraph(AttributeError):
    """A test used a name that flaxgraph does not provide."""


class _StandInMeta(type):
    def __getattr__(cls, name: str) -> Any:
        if name.startswith("__") and name.endswith("__"):
            raise AttributeError(name)
        raise MissingInFlaxgraph(
            f"{cls.__qualname__}.{name}: {cls.__qualname__} is not provided by flaxgraph"
        )

    def __call__(cls, *args: Any, **kwargs: Any) -> Any:
        raise MissingInFlaxgraph(f"{cls.__qualname__} is not provided by flaxgraph")


def stand_in(dotted: str) -> type:
    """A class standing for the missing ``dotted`` name: subclassable, unusable."""
    return _StandInMeta(dotted, (), {"__qualname__": dotted, "__module__": "flaxgraph"})


class _Merged(types.ModuleType):
    """``flax.X`` where flaxgraph has ``X`` too: flaxgraph's names first, then Flax's."""

    def __init__(self, name: str, ours: types.ModuleType, theirs: types.ModuleType | None):
        super().__init__(name)
        self._ours, self._theirs = ours, theirs

    def __getattr__(self, name: str) -> Any:
        for source in (self._ours, self._theirs):
            if source is not None and hasattr(source, name):
                return getattr(source, name)
        raise AttributeError(f"neither flaxgraph nor flax has {self.__name__}.{name}")


def _import(name: str) -> types.ModuleType | None:
    try:
        return importlib.import_module(name)
    except ImportError:
        return None


def _resolve_attr_path(root: Any, parts: list[str]) -> Any:
    value = root
    for part in parts:
        value = getattr(value, part)
    return value


class _FlaxRoot(types.ModuleType):
    """What ``import flax`` binds: ``flax.nnx`` is flaxgraph, ``flax.X`` as ``module('flax.X')``."""

    def __getattr__(self, name: str) -> Any:
        return module(f"flax.{name}")


_ROOT = _FlaxRoot("flax")


def module(dotted: str) -> Any:
    """The object ``import dotted`` should give a rewritten Flax test (``dotted`` starts with ``flax``)."""
    parts = dotted.split(".")
    if parts == ["flax"]:
        return _ROOT
    if parts[1] == "nnx":
        rest = parts[2:]
        found = _import(".".join(["flaxgraph", *rest]))
        if found is not None:
            return found
        try:
            return _resolve_attr_path(importlib.import_module("flaxgraph"), rest)
        except AttributeError:
            return stand_in("flaxgraph." + ".".join(rest))
    theirs = _import(dotted)
    ours = _import("flaxgraph." + ".".join(parts[1:]))
    if ours is None:
        return theirs if theirs is not None else stand_in(dotted)
    return _Merged(dotted, ours, theirs)


def attr(dotted: str, name: str) -> Any:
    """The object ``from dotted import name`` should give a rewritten Flax test."""
    try:
        return getattr(module(dotted), name)
    except AttributeError:
        return module(f"{dotted}.{name}")
