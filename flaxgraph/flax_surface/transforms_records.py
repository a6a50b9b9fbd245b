"""Flax's ``transforms`` helpers flaxgraph's lifting does not use, for ``table.py`` to place.

``resolve_kwargs``, ``LiftedModule`` and ``ValueMetadata`` (``transforms.transforms``),
``Broadcasted`` and ``AxisFn`` (``transforms.iteration``), ``Stage`` (``transforms.compilation``).
Source: Flax NNX 0.12.8 ``flax.nnx.transforms`` (its public source).
"""

from __future__ import annotations

import abc
import dataclasses
import functools
from collections.abc import Callable, Mapping
from typing import Any, Generic, TypeVar, overload

import jax

from flaxgraph.module_class import Module
from flaxgraph.proxy_caller import CallableProxy, DelayedAccessor
from flaxgraph.statelib import State
from flaxgraph.transforms.compiled import AotCompiled, Lowered, TracedJit
from flaxgraph.transforms.general import resolve_kwargs as _bind_positions
from flaxgraph.variablelib import Variable

F = TypeVar("F", bound=Callable[..., Any])
M = TypeVar("M", bound=Module)

AxisFn = Callable[[State | Variable[Any], int, Mapping[Any, Any]], State | Variable[Any]]
"""A function ``(state_or_variable, axis, metadata) -> same`` that adds or removes an axis."""


@overload
def resolve_kwargs(
    fun: Callable[..., object], args: tuple[object, ...], kwargs: dict[str, object]
) -> tuple[object, ...]: ...
@overload
def resolve_kwargs() -> Callable[[F], F]: ...
def resolve_kwargs(
    fun: Callable[..., object] | None = None,
    args: tuple[object, ...] | None = None,
    kwargs: dict[str, object] | None = None,
) -> object:
    """Binds a call's keyword arguments to their positions (defaults filled in).

    Returns every argument of ``fun(*args, **kwargs)`` by position; with no
    arguments, a decorator whose wrapper calls the function positionally.

    Raises:
      ValueError: ``fun`` is given without ``args`` or ``kwargs``.
      TypeError: the arguments do not fit ``fun``'s signature, or one is keyword-only
        (any keyword argument to a ``functools.partial``).

    Example::

      >>> from flaxgraph.transforms.transforms import resolve_kwargs  # Flax's path
      >>> resolve_kwargs(lambda a, b, c=3: None, (1,), {'b': 2})
      (1, 2, 3)
    """
    if fun is None:

        def decorator(f: F) -> F:
            @functools.wraps(f)
            def positional(*call_args: object, **call_kwargs: object) -> object:
                return f(*resolve_kwargs(f, call_args, call_kwargs))

            return positional  # type: ignore[return-value]

        return decorator
    if args is None:
        raise ValueError("resolve_kwargs: args must be provided")
    if kwargs is None:
        raise ValueError("resolve_kwargs: kwargs must be provided")
    if isinstance(fun, functools.partial):  # a partial's own signature is opaque

        def fun(*args: object, **kwargs: object) -> None:
            return None

    positional, rest = _bind_positions(fun, args, kwargs)
    if rest:
        raise TypeError(
            f"keyword arguments could not be resolved to positions: {sorted(rest)} are "
            "keyword-only (or a **kwargs) in the function's signature"
        )
    return positional


class LiftedModule(Module, Generic[M]):
    """Base of a Module that runs a wrapped submodule through a transform.

    A subclass defines ``_submodule`` (a property) and ``_call(accessor, *args,
    **kwargs)``; ``lifted.call.method(...)`` reaches any method of the innermost
    submodule through a ``CallableProxy``.
    """

    def _call(self, accessor: DelayedAccessor, *args: object, **kwargs: object) -> object:
        raise NotImplementedError(f"{type(self).__name__} must define _call")

    @property
    def _submodule(self) -> M:
        raise NotImplementedError(f"{type(self).__name__} must define _submodule")

    def __call__(self, *args: object, **kwargs: object) -> object:
        return self.call(*args, **kwargs)

    @property
    def call(self) -> Any:
        """A proxy: ``self.call.method(*args)`` runs ``method`` of the innermost submodule."""
        module: Any = self

        def check_and_call(accessor: DelayedAccessor, *args: object, **kwargs: object) -> object:
            return self._call(accessor, *args, **kwargs)

        proxy: Any = CallableProxy(check_and_call)
        while isinstance(module._submodule, LiftedModule):
            module = module._submodule
            proxy = proxy.call
        return proxy


@dataclasses.dataclass(frozen=True)
class ValueMetadata:
    """A Variable's type, value and metadata as a pytree whose one leaf is ``value``."""

    var_type: type[Variable[object]]
    value: object
    metadata: dict[str, object]


jax.tree_util.register_pytree_node(
    ValueMetadata,
    lambda v: ((v.value,), (v.var_type, tuple(sorted(v.metadata.items())))),
    lambda aux, children: ValueMetadata(aux[0], children[0], dict(aux[1])),
)


@jax.tree_util.register_dataclass
@dataclasses.dataclass(frozen=True)
class Broadcasted:
    """A pytree node holding ``data`` a ``scan`` broadcasts to every step (leaves as children).

    Example::

      >>> import jax
      >>> jax.tree.leaves(Broadcasted(data={'a': 1, 'b': 2}))
      [1, 2]
    """

    data: object


class Stage(abc.ABC):  # noqa: B024 (a virtual base: nothing to implement)
    """The stages of ahead-of-time compilation (``Traced``, ``Lowered``, ``Compiled``)."""


Stage.register(AotCompiled)
Stage.register(Lowered)
Stage.register(TracedJit)
