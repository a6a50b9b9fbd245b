"""Module: an Object with a layer's walks over sub-modules, ``sow``, ``perturb`` and mode
switches (Flax's ``nnx.module`` path gathers it with ``view``, ``capture``…)::

  >>> import jax.numpy as jnp, flaxgraph as nnx
  >>> class Block(nnx.Module):
  ...   def __init__(self):
  ...     self.w = nnx.Param(jnp.ones((2, 2))); self.deterministic = False
  ...   def __call__(self, x):
  ...     y = x @ self.w
  ...     self.sow(nnx.Intermediate, 'y', y)
  ...     return y
  >>> block = Block()
  >>> _ = block(jnp.ones((1, 2)))
  >>> block.y.value[0].shape          # sown values are kept in a tuple
  (1, 2)
  >>> block.eval().deterministic
  True

Source: Flax NNX 0.12 ``nnx.Module`` (its methods) and ``nnx.iter_modules``."""

from __future__ import annotations

from collections.abc import Callable, Hashable, Iterator
from typing import Any, TypeVar

import jax.numpy as jnp

from flaxgraph.filterlib import Filter, to_predicate
from flaxgraph.graphlib.descendants import iter_graph
from flaxgraph.pytreelib.objects import Pytree
from flaxgraph.typing import PathParts
from flaxgraph.variablelib.variable import Perturbation, Variable, is_variable

M = TypeVar("M", bound="Module")


def _append(accumulated: tuple[Any, ...], value: Any) -> tuple[Any, ...]:
    return (*accumulated, value)


def has_attribute(module: Any, name: str) -> bool:
    # Not `hasattr`: a `__getattr__` fallback (Rngs answers any name with its default
    # stream) must not make a module look as if it had every attribute.
    return name in module.__dict__ or any(name in vars(c) for c in type(module).__mro__)


CAPTURES = "_flaxgraph_captures"
"""The attribute ``nnx.capture`` gives each module during a call: one Variable per captured
kind, mapping names to what was sown (``capturing.py``); plain data, so it crosses
transforms."""

_NOT_CAPTURED: Any = object()


def _capture_slot(module: Any, variable_type: type) -> Any:
    """``None`` outside ``nnx.capture``; else the capture's Variable of ``variable_type``, or
    ``_NOT_CAPTURED`` (the value is dropped, as in Flax)."""
    slots = module.__dict__.get(CAPTURES)
    if slots is None:
        return None
    for slot in slots:
        if type(slot) is variable_type:
            return slot
    return _NOT_CAPTURED


class Module(Pytree):
    """Base class of layers and models (see the module docstring)."""

    def iter_modules(self, *, graph: bool | None = None) -> Iterator[tuple[PathParts, Module]]:
        """``nnx.iter_modules(self, graph=graph)``."""
        return iter_modules(self, graph=graph)

    def iter_children(self, *, graph: bool | None = None) -> Iterator[tuple[Hashable, Module]]:
        """Yields ``(name, module)`` for the direct sub-module attributes."""
        for name, value in sorted(self.__dict__.items()):
            if isinstance(value, Module):
                yield name, value

    def sow(
        self,
        variable_type: type[Variable[Any]] | str,
        name: str,
        value: Any,
        reduce_fn: Callable[[Any, Any], Any] = _append,
        init_fn: Callable[[], Any] = tuple,
    ) -> None:
        """Stores ``value`` in the Variable ``self.<name>`` of kind ``variable_type``.

        The first call creates ``variable_type(reduce_fn(init_fn(), value))``; later
        calls replace its value by ``reduce_fn(current, value)``. By default values
        are collected in a tuple. Pop them with ``nnx.pop(model, nnx.Intermediate)``.
        Inside ``nnx.capture`` the value goes to the capture instead (and is dropped
        if ``variable_type`` is not captured); the module is not changed.

        Raises:
          ValueError: ``self.<name>`` exists and is not a Variable of that kind.
        """
        if isinstance(variable_type, str):
            from flaxgraph.variablelib.names import variable_type_from_name

            variable_type = variable_type_from_name(variable_type, allow_register=True)
        slot = _capture_slot(self, variable_type)
        if slot is not None:  # inside nnx.capture: the value goes to the capture
            if slot is not _NOT_CAPTURED:
                held = slot.value
                previous = held[name] if name in held else init_fn()
                slot.value = {**held, name: reduce_fn(previous, value)}
            return
        current = self.__dict__.get(name)
        if current is None:
            setattr(self, name, variable_type(reduce_fn(init_fn(), value)))
        elif isinstance(current, variable_type):
            current.value = reduce_fn(current.value, value)
        else:
            if is_variable(current):
                expected = f"to be of type '{variable_type.__name__}'"
                fix = f"sow under another name, or pass variable_type={type(current).__name__}"
            else:
                expected, fix = "to be a Variable", "sow under another name"
            raise ValueError(
                f"Cannot sow into {type(self).__name__}.{name}: expected {name!r} {expected}, "
                f"got {type(current).__name__}.\nFix: {fix}."
            )

    def perturb(
        self, name: str, value: Any, variable_type: type[Variable[Any]] = Perturbation
    ) -> Any:
        """Returns ``value + self.<name>``, creating ``self.<name>`` as a zero-valued
        ``Perturbation`` the first time. The gradient with respect to that Variable
        is the gradient with respect to the intermediate ``value``. Inside
        ``nnx.capture`` the perturbation is held by the capture (``init=`` gives its
        values) and the module is not changed."""
        slot = _capture_slot(self, variable_type)
        if slot is not None:  # inside nnx.capture: the perturbation lives in the capture
            if slot is _NOT_CAPTURED:
                return value
            if name not in slot.value:
                slot.value = {**slot.value, name: jnp.zeros_like(value)}
            return value + slot.value[name]
        if name not in self.__dict__:
            setattr(self, name, variable_type(jnp.zeros_like(value)))
        return value + getattr(self, name).value

    def set_attributes(
        self,
        *filters: Filter,
        raise_if_not_found: bool = True,
        graph: bool | None = None,
        **attributes: Any,
    ) -> None:
        """Sets ``attributes`` on every sub-module (this one included) that has them and matches
        ``filters`` (all modules if none are given).

        Args:
          *filters: which modules to change (``nnx.Linear``, a path filter...).
          raise_if_not_found: raise if an attribute exists on no selected module.
          graph: traversal mode of the walk (``None``: ``nnx.set_graph_mode``'s default).
          **attributes: ``name=value`` to set.

        Raises:
          ValueError: ``raise_if_not_found`` and an attribute was found on no selected
            module; nothing is changed then.

        Example::

          >>> import flaxgraph as nnx
          >>> model = nnx.Sequential(nnx.Linear(2, 2, rngs=nnx.Rngs(0)), nnx.Dropout(0.5))
          >>> model.set_attributes(deterministic=True)
          >>> model.layers[1].deterministic
          True
        """
        predicates = [to_predicate(f) for f in filters]
        writes: list[tuple[Module, str, Any]] = []
        for path, module in self.iter_modules(graph=graph):
            if predicates and not any(p(path, module) for p in predicates):
                continue
            for name, value in attributes.items():
                if has_attribute(module, name):
                    writes.append((module, name, value))
        missing = set(attributes) - {name for _, name, _ in writes}
        if raise_if_not_found and missing:
            raise ValueError(
                f"{type(self).__name__}.set_attributes: Could not find at least one instance "
                f"of the following attributes: {sorted(missing)} (no selected sub-module "
                "has them).\nFix: check the spelling, or pass raise_if_not_found=False."
            )
        for module, name, value in writes:
            setattr(module, name, value)

    def train(self: M, **attributes: Any) -> M:
        """Training mode: ``deterministic=False`` and ``use_running_average=False`` on
        every sub-module that has them (plus ``attributes``). Returns ``self``."""
        self.set_attributes(
            deterministic=False, use_running_average=False, raise_if_not_found=False
        )
        if attributes:
            self.set_attributes(**attributes)
        return self

    def eval(self: M, **attributes: Any) -> M:
        """Evaluation mode: ``deterministic=True`` and ``use_running_average=True`` on
        every sub-module that has them (plus ``attributes``). Returns ``self``."""
        self.set_attributes(deterministic=True, use_running_average=True, raise_if_not_found=False)
        if attributes:
            self.set_attributes(**attributes)
        return self


def iter_modules(
    module: Any, /, *, graph: bool | None = None
) -> Iterator[tuple[PathParts, Module]]:
    """Yields ``(path, module)`` for ``module`` and every sub-module, children first, the root
    last with path ``()``.

    Args:
      module: a Module (or any graph holding Modules).
      graph: graph mode (each shared module once, at its first path) or tree mode
        (``False``: a shared Variable raises ``SharedReferenceError``); ``None``:
        ``nnx.set_graph_mode``'s default.

    Example::

      >>> import flaxgraph as nnx
      >>> class Pair(nnx.Module):
      ...   def __init__(self):
      ...     self.a = nnx.Linear(1, 1, rngs=nnx.Rngs(0)); self.b = self.a
      >>> [p for p, _ in nnx.iter_modules(Pair())]
      [('a',), ()]
    """
    for path, value in iter_graph(module, graph=graph):
        if isinstance(value, Module):
            yield path, value


__all__ = ["Module", "iter_modules"]
