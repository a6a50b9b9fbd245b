"""``ToLinen`` / ``to_linen`` / ``to_linen_class``: a flaxgraph Module used as a Linen module
(the package README, "flaxgraph inside Linen"). Source: Flax NNX 0.12 ``nnx.bridge.ToLinen``."""

from __future__ import annotations

import functools
import warnings
from collections.abc import Callable, Mapping, Sequence
from typing import Any, cast

import jax
from flax import linen
from flax.core import FrozenDict, meta, unfreeze

from flaxgraph import traversals
from flaxgraph.bridge.variables import to_linen_var
from flaxgraph.filterlib import Not
from flaxgraph.graphlib.split_merge import state as graph_state
from flaxgraph.module_class import Module
from flaxgraph.rnglib.rngs import Rngs, RngState
from flaxgraph.typing import MISSING
from flaxgraph.variablelib.names import variable_name_from_type
from flaxgraph.variablelib.variable import Variable, is_variable

__all__ = ["ToLinen", "to_linen", "to_linen_class"]


def linen_rngs_dict(linen_module: linen.Module, add_default: bool = False) -> dict[str, Any]:
    """One new key from each RNG stream of the bound Linen module (plus a dummy ``default`` if asked)."""
    keys: dict[str, Any] = {
        name: linen_module.make_rng(name) for name in cast(Any, linen_module.scope).rngs
    }
    if add_default and "default" not in keys:
        keys["default"] = 0
    return keys


def _method_of(module: Any, method: Callable[..., Any] | str | None) -> Callable[..., Any]:
    name = "__call__" if method is None else method
    fn = getattr(type(module), name, None) if isinstance(name, str) else name
    if not callable(fn):
        raise TypeError(
            f"'{type(module).__name__}.{name}' must be a callable, got {type(fn)}.\nFix: pass "
            "the name of a method of the flaxgraph Module (or the function itself) as nnx_method."
        )
    return fn


def _unbox(x: Any) -> Any:
    return x.unbox() if isinstance(x, meta.AxisMetadata) else x


class ToLinen(linen.Module):
    """A flaxgraph Module class as a Linen module.

    Attributes:
      nnx_class: the flaxgraph Module class (or a callable returning a Module).
      args, kwargs: its constructor arguments (``rngs`` is added unless ``skip_rng``).
      skip_rng: construct the Module without ``rngs=``.
      metadata_fn: Variable -> Linen leaf (default: bare value, or ``NNXMeta`` with
        metadata); ``None`` stores bare values.

    ``model.apply(variables, *args, nnx_method=None, **kwargs)`` calls the Module's
    ``nnx_method`` (default ``__call__``; also ``model.method_name(...)``); incoming
    variables the Module lacks are reported with a warning.

    >>> import jax, jax.numpy as jnp, flaxgraph as nnx
    >>> model = nnx.bridge.ToLinen(nnx.Linear, args=(3, 4))
    >>> y, variables = model.init_with_output(jax.random.key(0), jnp.ones((1, 3)))
    >>> y.shape, variables['params']['kernel'].shape
    ((1, 4), (3, 4))
    """

    nnx_class: Callable[..., Module]
    args: Sequence[Any] = ()
    kwargs: Mapping[str, Any] = FrozenDict({})
    skip_rng: bool = False
    metadata_fn: Callable[[Variable[Any]], Any] | None = to_linen_var

    def _build(self) -> Module:
        kwargs = dict(self.kwargs)
        if not self.skip_rng:
            kwargs["rngs"] = Rngs(**linen_rngs_dict(self, add_default=not self.is_initializing()))
        return self.nnx_class(*self.args, **kwargs)

    @linen.compact
    def __call__(
        self, *args: Any, nnx_method: Callable[..., Any] | str | None = None, **kwargs: Any
    ) -> Any:
        module = self._build()
        if self.is_initializing():
            self._store(module)  # init keeps the state as built, before the call
            return _method_of(module, nnx_method)(module, *args, **kwargs)
        self._load(module)
        out = _method_of(module, nnx_method)(module, *args, **kwargs)
        self._store(module)
        return out

    def _load(self, module: Module) -> None:
        """Writes the incoming Linen variables into the Module's Variables."""
        incoming: dict[tuple[Any, ...], Any] = {}
        for collection in unfreeze(self.variables).values():  # type: ignore[arg-type]
            tree = jax.tree.map(
                _unbox, collection, is_leaf=lambda x: isinstance(x, meta.AxisMetadata)
            )
            incoming.update(traversals.flatten_mapping(tree))
        current = traversals.flatten_mapping(graph_state(module))
        unknown = [p for p in incoming if p not in current]
        if unknown:
            listed = "".join(f"\n  - {'/'.join(map(str, p))}" for p in unknown)
            warnings.warn(f"Found unknown module paths in incoming state:{listed}", stacklevel=3)
        for path, value in incoming.items():
            var = current.get(path)
            if is_variable(var):
                var.set_value(value)

    def _store(self, module: Module) -> None:
        """Puts the Module's Variables (RNG state excepted) into Linen's collections, one per kind."""
        by_collection: dict[str, dict[tuple[Any, ...], Any]] = {}
        for path, var in traversals.flatten_mapping(graph_state(module, Not(RngState))).items():
            collection = variable_name_from_type(type(var), allow_register=True)
            by_collection.setdefault(collection, {})[path] = var
        for collection, flat in by_collection.items():
            if not self.is_mutable_collection(collection):
                continue
            leaves = {
                p: (self.metadata_fn(v) if self.metadata_fn is not None else v.get_value())
                for p, v in flat.items()
            }
            for name, value in traversals.unflatten_mapping(leaves).items():
                self.put_variable(collection, name, value)

    def __getattr__(self, name: str) -> Any:
        kwargs = object.__getattribute__(self, "__dict__").get("kwargs", {})
        if name in kwargs:
            return kwargs[name]
        nnx_class = object.__getattribute__(self, "__dict__").get("nnx_class")
        method = getattr(nnx_class, name, None) if not name.startswith("_") else None
        if callable(method):
            bound = functools.partial(self.__call__, nnx_method=method)
            bound.__self__ = self  # type: ignore[attr-defined]
            return bound
        return super().__getattr__(name)


def to_linen(
    nnx_class: Callable[..., Module],
    *args: Any,
    metadata_fn: Callable[[Variable[Any]], Any] | None = to_linen_var,
    name: str | None = None,
    skip_rng: bool = False,
    abstract_init: bool = True,
    **kwargs: Any,
) -> ToLinen:
    """``ToLinen(nnx_class, args=args, kwargs=kwargs, ...)``: a Module class and its arguments as a Linen module.

    Args:
      nnx_class: the flaxgraph Module class.
      *args, **kwargs: constructor arguments (``rngs`` comes from Linen's streams).
      metadata_fn, skip_rng: as for ``ToLinen``.
      name: the Linen submodule name.
      abstract_init: accepted for Flax compatibility (no effect).

    Returns:
      A ``ToLinen`` Linen module.

    >>> import jax, jax.numpy as jnp, flaxgraph as nnx
    >>> model = nnx.bridge.to_linen(nnx.Linear, 3, out_features=2)
    >>> model.init(jax.random.key(0), jnp.ones((1, 3)))['params']['bias'].shape
    (2,)
    """
    del abstract_init
    return ToLinen(
        nnx_class,
        args=args,
        kwargs=FrozenDict(kwargs),
        metadata_fn=metadata_fn,
        skip_rng=skip_rng,
        name=name,
    )


def to_linen_class(
    base_nnx_class: type[Module],
    base_metadata_fn: Callable[[Variable[Any]], Any] | None = to_linen_var,
    base_skip_rng: bool = False,
    **partial_kwargs: Any,
) -> type[ToLinen]:
    """A Linen module class wrapping ``base_nnx_class``, taking its keyword arguments (over ``partial_kwargs``).

    Returns:
      A ``ToLinen`` subclass; ``Cls(name=..., **module_kwargs)`` makes a Linen module.

    >>> import jax, jax.numpy as jnp, flaxgraph as nnx
    >>> LinenLinear = nnx.bridge.to_linen_class(nnx.Linear, in_features=3)
    >>> LinenLinear(out_features=5).init(jax.random.key(0), jnp.ones((1, 3)))['params']['kernel'].shape
    (3, 5)
    """

    class ToLinenPartial(ToLinen):
        """A ``ToLinen`` with ``nnx_class`` and default keyword arguments fixed."""

    def __init__(
        self: ToLinen,
        args: Sequence[Any] | None = None,
        kwargs: Mapping[str, Any] | None = None,
        nnx_class: Callable[..., Module] | None = None,
        skip_rng: bool | None = None,
        metadata_fn: Callable[[Variable[Any]], Any] | None = None,
        name: Any = MISSING,
        parent: Any = MISSING,
        **module_kwargs: Any,
    ) -> None:
        linen_kwargs = {k: v for k, v in (("name", name), ("parent", parent)) if v is not MISSING}
        ToLinen.__init__(
            self,
            nnx_class=nnx_class or base_nnx_class,
            args=args or (),
            kwargs=FrozenDict({**partial_kwargs, **(kwargs or {}), **module_kwargs}),
            skip_rng=skip_rng or base_skip_rng,
            metadata_fn=metadata_fn or base_metadata_fn,
            **linen_kwargs,
        )

    ToLinenPartial.__init__ = __init__  # type: ignore[assignment, method-assign]
    return ToLinenPartial
