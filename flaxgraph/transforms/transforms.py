"""Flax NNX's ``transforms.transforms``: the other transforms at Flax's path, and their helpers.

``CheckifyFn`` and the tree-mode ``Simple*`` classes are stand-ins (``flaxgraph.stand_ins``).

Source: Flax NNX 0.12.8 ``flax.nnx.transforms.transforms``.
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Callable, Hashable
from typing import Any, Generic, TypeVar, overload

import jax

from flaxgraph.module_class import Module
from flaxgraph.proxy_caller import CallableProxy, DelayedAccessor
from flaxgraph.stand_ins import internal_class
from flaxgraph.transforms.checkify import checkify
from flaxgraph.transforms.control import cond, eval_shape, switch
from flaxgraph.transforms.general import resolve_kwargs as _bind_positions
from flaxgraph.transforms.make_jaxpr import make_jaxpr
from flaxgraph.variablelib import Variable

__all__ = [
    "AxisName",
    "CheckifyFn",
    "Index",
    "Leaves",
    "LiftedModule",
    "SimpleCheckifyFn",
    "SimpleCondFn",
    "SimpleEvalShapeFn",
    "SimpleMakeJaxprFn",
    "ValueMetadata",
    "checkify",
    "cond",
    "eval_shape",
    "make_jaxpr",
    "resolve_kwargs",
    "switch",
]

F = TypeVar("F", bound=Callable[..., Any])
M = TypeVar("M", bound=Module)

AxisName = Hashable
"""A mesh or mapped axis name."""
Leaves = list[Any]
"""A list of pytree leaves."""
Index = int
"""A position (an axis, an argument)."""


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

      >>> from flaxgraph.transforms.transforms import resolve_kwargs
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

CheckifyFn = internal_class(__name__, "CheckifyFn", "nnx.checkify")
SimpleCheckifyFn = internal_class(__name__, "SimpleCheckifyFn", "nnx.checkify(..., graph=False)")
SimpleCondFn = internal_class(__name__, "SimpleCondFn", "nnx.cond(..., graph=False)")
SimpleEvalShapeFn = internal_class(
    __name__, "SimpleEvalShapeFn", "nnx.eval_shape(..., graph=False)"
)
SimpleMakeJaxprFn = internal_class(
    __name__, "SimpleMakeJaxprFn", "nnx.make_jaxpr(..., graph=False)"
)
