"""``ToNNX`` and ``lazy_init``: a Linen module used as a flaxgraph Module (the package README,
"Linen inside flaxgraph"). Source: Flax NNX 0.12 ``nnx.bridge.ToNNX``, ``lazy_init``."""

from __future__ import annotations

import functools
import warnings
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, TypeVar

import jax
from flax import errors as flax_errors
from flax import linen

from flaxgraph import traversals
from flaxgraph.bridge.context import current_module
from flaxgraph.bridge.variables import linen_vars_to_nnx_attrs, nnx_attrs_to_linen_vars
from flaxgraph.errors import ScopeParamNotFoundError
from flaxgraph.graphlib.descendants import iter_graph
from flaxgraph.module_class import Module
from flaxgraph.rnglib.rngs import Rngs

F = TypeVar("F")

__all__ = ["ToNNX", "lazy_init", "set_initializing"]

_PREFIX = "to_nnx__"


def set_initializing(node: Any, initializing: bool) -> None:
    """Marks every lazily initialized module in ``node``'s graph as initializing or not."""
    for _, value in iter_graph(node, graph=True):
        setter = getattr(type(value), "_set_initializing", None)
        if setter is not None:
            setter(value, initializing)


def lazy_init(fn: Any, *args: Any, **kwargs: Any) -> Any:
    """Creates the variables of every ``ToNNX`` (and bridge Module) inside a module by calling it once.

    Args:
      fn: a flaxgraph Module (called as ``fn(*args, **kwargs)``) or a bound method of one.
      *args, **kwargs: sample inputs (of the real inputs' shapes and dtypes).

    Returns:
      ``fn`` itself.

    Raises:
      ValueError: ``fn`` is neither a Module nor a method of one.

    >>> import jax.numpy as jnp, flaxgraph as nnx
    >>> from flax import linen as nn
    >>> model = nnx.bridge.lazy_init(nnx.bridge.ToNNX(nn.Dense(3), rngs=nnx.Rngs(0)), jnp.ones((1, 2)))
    >>> model.kernel.shape
    (2, 3)
    """
    if isinstance(fn, Module):
        module = fn
    elif isinstance(getattr(fn, "__self__", None), Module):
        module = fn.__self__
    else:
        raise ValueError(
            f"lazy_init needs a flaxgraph Module or a method of one, got {fn!r}.\nFix: pass "
            "the model (`lazy_init(model, x)`) or one of its methods (`lazy_init(model.f, x)`)."
        )
    set_initializing(module, True)
    try:
        fn(*args, **kwargs)
    finally:
        set_initializing(module, False)
    return fn


class LinenVariableNotFoundError(ScopeParamNotFoundError, flax_errors.ScopeParamNotFoundError):
    """A ``ScopeParamNotFoundError`` that is also Linen's: a call needed a variable ``lazy_init`` did not create."""

    def __init__(self, message: str):
        Exception.__init__(self, message)

    def __str__(self) -> str:
        return str(self.args[0])


def current_linen_module() -> linen.Module | None:
    """The innermost Linen module whose method is running, or ``None`` outside Linen."""
    stack = linen.module._context.module_stack  # Linen's own module stack
    return stack[-1] if stack and stack[-1] is not None else None


def _rng_keys(rngs: Rngs | jax.Array | None) -> dict[str, Any]:
    if isinstance(rngs, Rngs):
        keys = {name: stream() for name, stream in rngs.items()}
    elif rngs is not None:
        keys = {"params": rngs}
    else:
        keys = {}
    if "params" not in keys and "default" in keys:
        keys["params"] = keys.pop("default")
    return keys


class ToNNX(Module):
    """A Linen module as a flaxgraph Module.

    Args:
      module: the Linen module instance (unbound).
      rngs: an ``nnx.Rngs`` (a fork is kept), a key (the ``params`` stream) or ``None``.

    ``model(*args, rngs=None, method=None, mutable=None, **kwargs)`` calls the Linen
    module's ``method`` (default ``__call__``; also ``model.method_name(...)``) and returns
    its output; ``mutable=None`` takes the enclosing bridge or Linen module's, else ``False``.

    Raises:
      flax.errors.ScopeParamNotFoundError (from Linen): a call needs a variable that
        ``lazy_init`` did not create.

    >>> import jax.numpy as jnp, flaxgraph as nnx
    >>> from flax import linen as nn
    >>> model = nnx.bridge.ToNNX(nn.Dense(4), rngs=nnx.Rngs(0)).lazy_init(jnp.ones((1, 3)))
    >>> model(jnp.ones((2, 3))).shape, type(model.kernel).__name__
    ((2, 4), 'Param')
    """

    if TYPE_CHECKING:
        to_nnx__initializing: bool

    def _set_initializing(self, initializing: bool) -> None:
        if self.to_nnx__initializing is not initializing:
            self.to_nnx__initializing = initializing

    @staticmethod
    def _graph_keep_substate(node: ToNNX, key: Any, sub: Any) -> None:
        # update() with Variables this wrapper does not hold yet (a bridge Module's
        # apply): they become its attributes, as lazy_init would have made them.
        setattr(node, key, traversals.unflatten_mapping(dict(sub.flat_state())))

    def __init__(self, module: linen.Module, rngs: Rngs | jax.Array | None = None):
        self.to_nnx__module = module
        self.to_nnx__rngs = (
            rngs.fork()
            if isinstance(rngs, Rngs)
            else (Rngs(params=rngs) if isinstance(rngs, jax.Array) else rngs)
        )
        self.to_nnx__initializing = False

    @property
    def rngs(self) -> Rngs | None:
        warnings.warn(
            "`ToNNX.rngs` is deprecated; use `to_nnx__rngs`.", DeprecationWarning, stacklevel=2
        )
        return self.to_nnx__rngs

    @property
    def module(self) -> linen.Module:
        warnings.warn(
            "`ToNNX.module` is deprecated; use `to_nnx__module`.", DeprecationWarning, stacklevel=2
        )
        return self.to_nnx__module

    def lazy_init(self, *args: Any, **kwargs: Any) -> ToNNX:
        """``lazy_init(self, *args, **kwargs)``: creates the variables; returns ``self``."""
        return lazy_init(self, *args, **kwargs)

    def __getattr__(self, name: str) -> Any:
        # Only reached for names that are not attributes: Linen methods by name.
        if name.startswith(("__", _PREFIX)) or "to_nnx__module" not in self.__dict__:
            raise AttributeError(name)
        method = getattr(type(self.__dict__["to_nnx__module"]), name, None)
        if not callable(method):
            raise AttributeError(
                f"{type(self).__name__} has no attribute {name!r} and the wrapped Linen "
                f"module {type(self.__dict__['to_nnx__module']).__name__} has no method of "
                "that name."
            )
        bound = functools.partial(self.__call__, method=method)
        bound.__self__ = self  # type: ignore[attr-defined]  # lazy_init(model.method, x)
        return bound

    def _attrs(self) -> dict[str, Any]:
        return {k: v for k, v in vars(self).items() if not str(k).startswith(_PREFIX)}

    def __call__(
        self,
        *args: Any,
        rngs: Rngs | jax.Array | None = None,
        method: Callable[..., Any] | str | None = None,
        mutable: Any = None,
        **kwargs: Any,
    ) -> Any:
        keys = _rng_keys(self.to_nnx__rngs if rngs is None else rngs)
        linen_module = self.to_nnx__module
        updates: Any
        if self.to_nnx__initializing:
            out, updates = linen_module.init_with_output(keys, *args, method=method, **kwargs)
        else:
            if mutable is None:
                mutable = _mutable_of_context()
            try:
                result = linen_module.apply(
                    nnx_attrs_to_linen_vars(self._attrs()),
                    *args,
                    rngs=keys,
                    method=method,
                    mutable=mutable,
                    **kwargs,
                )
            except flax_errors.ScopeParamNotFoundError as error:
                raise LinenVariableNotFoundError(
                    f"{error}\nThe Linen module {type(linen_module).__name__} wrapped by ToNNX was "
                    f"called (method {getattr(method, '__name__', method) or '__call__'}) without "
                    "that variable: lazy_init created only the variables of the call it ran.\n"
                    "Fix: run lazy_init through this method too, e.g. "
                    "`nnx.bridge.lazy_init(model.<method>, x)`, or through a call that uses "
                    "every method."
                ) from error
            out, updates = result if mutable is not False else (result, None)
        if updates:
            self._absorb(updates)
        return out

    def _absorb(self, updates: Any) -> None:
        """Writes Linen's returned collections into this wrapper (existing Variables in place)."""
        new = traversals.flatten_mapping(linen_vars_to_nnx_attrs(updates))
        current = traversals.flatten_mapping(self._attrs())
        merged = dict(current)
        for path, var in new.items():
            old: Any = current.get(path)
            if type(old) is type(var) and old.get_metadata() == var.get_metadata():
                old.set_value(var.get_value())
            else:
                merged[path] = var
        if len(merged) == len(current) and all(merged[p] is current[p] for p in merged):
            return
        for name, value in traversals.unflatten_mapping(merged).items():
            if getattr(self, name, None) is not value:
                setattr(self, name, value)


def _mutable_of_context() -> Any:
    bridge_module = current_module()
    if bridge_module is not None and bridge_module.scope is not None:
        return bridge_module.scope.mutable
    linen_module = current_linen_module()
    if linen_module is not None and linen_module.scope is not None:
        return linen_module.scope.mutable
    return False
