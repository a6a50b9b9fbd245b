"""``bridge.Module``: Linen-style modules on flaxgraph Modules (the package README,
"Linen-style modules"). Source: Flax NNX 0.12 ``nnx.bridge.Module``, ``compact``, ``Scope``."""

from __future__ import annotations

import dataclasses
import enum
import functools
import inspect
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any, TypeVar, cast

import jax
import numpy as np
import typing_extensions as tpe
from flax import errors as flax_errors
from flax.core import FrozenDict, meta

from flaxgraph import traversals
from flaxgraph.bridge.context import MODULE_CONTEXT as MODULE_CONTEXT
from flaxgraph.bridge.context import ModuleContext as ModuleContext
from flaxgraph.bridge.context import ModuleStackEntry as ModuleStackEntry
from flaxgraph.bridge.context import auto_name, current_context, entered
from flaxgraph.bridge.context import current_module as current_module
from flaxgraph.bridge.linen_in_nnx import set_initializing
from flaxgraph.bridge.variables import is_vanilla_variable, to_linen_var, to_nnx_var
from flaxgraph.graphlib.descendants import iter_graph
from flaxgraph.graphlib.inplace import update
from flaxgraph.graphlib.registry import register_node_type
from flaxgraph.graphlib.split_merge import clone
from flaxgraph.graphlib.split_merge import state as graph_state
from flaxgraph.module_class import Module as NNXModule
from flaxgraph.pytreelib import objects
from flaxgraph.pytreelib.attribute_kinds import class_kinds, register_data_type
from flaxgraph.pytreelib.objects import Pytree
from flaxgraph.rnglib.rngs import Rngs, RngState
from flaxgraph.statelib import State
from flaxgraph.variablelib.initial_metadata import VariableMetadata
from flaxgraph.variablelib.names import variable_name_from_type, variable_type_from_name
from flaxgraph.variablelib.variable import Param, Variable, is_variable

A = TypeVar("A")
F = TypeVar("F", bound=Callable[..., Any])

__all__ = [
    "MODULE_CONTEXT",
    "AttrPriority",
    "Module",
    "ModuleBase",
    "ModuleContext",
    "ModuleMeta",
    "ModuleStackEntry",
    "ModuleState",
    "Scope",
    "compact",
    "current_context",
    "current_module",
    "has_setup",
]


class Scope(Pytree):
    """The RNG streams and mutable collections of a bridge Module during ``init``/``apply``.

    Args:
      rngs: the ``nnx.Rngs`` the module draws keys from (``make_rng``).
      mutable: Linen's mutable-collection filter (``True``, ``False``, a name or names).
    """

    def __init__(self, rngs: Rngs, mutable: Any):
        self.rngs = rngs
        self.mutable = tuple(mutable) if isinstance(mutable, list) else mutable

    def copy(self) -> Scope:
        """A new Scope sharing the same Rngs and mutable filter."""
        return Scope(self.rngs, self.mutable)


class AttrPriority(enum.IntEnum):
    """Which attribute names a submodule reachable through several (lower first)."""

    HIGH = 0
    INIT_PARENT = 20
    DEFAULT = 50
    LOW = 100


class ModuleMeta(type):
    """The metaclass of ``bridge.Module``: a bridge Module created in another's ``setup``/compact method is attached."""

    def __call__(cls, *args: Any, **kwargs: Any) -> Any:
        entry = current_context()
        parent, name = None, None
        if entry is not None:
            if "parent" in kwargs:
                parent = kwargs.pop("parent")
                if entry.in_compact and parent is not None:
                    raise ValueError(
                        f"'parent' can only be set to None, got {type(parent).__name__}: in a "
                        "@bridge.compact method a submodule's parent is the module being called."
                    )
            else:
                parent = entry.module
            if "name" in kwargs:
                name = kwargs["name"] if "name" in _field_names(cls) else kwargs.pop("name")
                if not isinstance(name, str):
                    raise ValueError(f"'name' must be a 'str', got {type(name).__name__}")
            elif entry.in_compact:
                name = auto_name(entry, cls)
        module = super().__call__(*args, **kwargs)
        Pytree.__setattr__(module, "scope", None)
        Pytree.__setattr__(module, "bridge__priorities", ())
        Pytree.__setattr__(module, "bridge__initializing", False)
        if parent is not None and name is not None:
            setattr(parent, name, module)
            parent.set_attr_priority(name, AttrPriority.INIT_PARENT)
        return module


def _field_names(cls: type) -> set[str]:
    return set(inspect.get_annotations(cls)) | {f.name for f in dataclasses.fields(cls)}


def _priority_flatten(obj: Any) -> Any:
    items, kinds = objects._graph_flatten(obj)
    order = dict(obj.__dict__.get("bridge__priorities", ()))
    items = sorted(items, key=lambda kv: (order.get(kv[0], AttrPriority.DEFAULT), str(kv[0])))
    return items, kinds


def _keep_substate(node: Any, key: Any, sub: State) -> None:
    Pytree.__setattr__(node, key, sub)  # hidden (see __getattribute__) until the child exists


class ModuleBase:
    """Flax's base of ``bridge.Module`` (declares ``scope`` and ``attr_priorities``)."""

    if TYPE_CHECKING:
        scope: Scope | None


class ModuleState(State):
    """A State a bridge Module keeps; registered as a data type, as in Flax."""


register_data_type(ModuleState)


def has_setup(x: Any) -> bool:
    """Whether ``x`` defines ``setup`` (a Linen-style bridge Module does)."""
    return hasattr(x, "setup")


@tpe.dataclass_transform(field_specifiers=(dataclasses.field,))
class Module(NNXModule, ModuleBase, metaclass=ModuleMeta):
    """Base class of Linen-style flaxgraph modules; subclasses are dataclasses (``features: int``).

    Raises:
      ValueError: ``param``/``variable``/``make_rng`` outside ``init``/``apply`` (no
        scope); ``param`` finds a non-Param Variable under that name.
      flax.errors.ScopeParamShapeError: a given value's shape differs from the initializer's.

    >>> import jax, jax.numpy as jnp, flaxgraph as nnx
    >>> class Dense(nnx.bridge.Module):
    ...   features: int
    ...   @nnx.bridge.compact
    ...   def __call__(self, x):
    ...     w = self.param('w', nnx.initializers.lecun_normal(), (x.shape[-1], self.features))
    ...     return x @ w
    >>> variables = Dense(3).init(0, jnp.ones((1, 2)))
    >>> variables['params']['w'].shape, Dense(3).apply(variables, jnp.ones((1, 2))).shape
    ((2, 3), (1, 3))
    """

    __slots__ = ("_bridge_setup_done",)
    _bridge_lazy = True
    _graph_keep_substate = staticmethod(_keep_substate)

    if tpe.TYPE_CHECKING:
        scope: Scope | None

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(pytree=False, **kwargs)
        dataclasses.dataclass(repr=False)(cls)
        cls.__hash__ = object.__hash__  # type: ignore[method-assign]
        cls._obj_class_kinds = class_kinds(cls)
        impl = objects._graph_create_empty(cls)
        register_node_type(
            cls,
            _priority_flatten,
            impl,
            objects._graph_set_items,
            objects._graph_get_child,
            objects._graph_set_child,
            objects._graph_del_child,
        )

    # -- attributes -------------------------------------------------------------------
    def __getattribute__(self, name: str) -> Any:
        value = object.__getattribute__(self, name)
        if type(value) is State and not name.startswith("_"):
            raise AttributeError(name)  # state kept for a submodule not created yet
        return value

    def __setattr__(self, name: str, value: Any) -> None:
        scope = self.__dict__.get("scope")
        if scope is not None and name != "scope":
            pending = self.__dict__.get(name)
            if type(pending) is State and isinstance(value, Pytree):
                update(value, pending)
            for leaf in jax.tree.leaves(value, is_leaf=lambda x: isinstance(x, Pytree)):
                if isinstance(leaf, Module):
                    leaf._set_initializing(self.is_initializing())
                    _bind(self, leaf)
        super().__setattr__(name, value)

    @property
    def attr_priorities(self) -> dict[str, AttrPriority]:
        """Attribute name -> ``AttrPriority`` (those set explicitly)."""
        return dict(self.__dict__.get("bridge__priorities", ()))

    def set_attr_priority(self, name: str, value: AttrPriority) -> None:
        """Sets the priority of attribute ``name`` (see ``AttrPriority``)."""
        order = dict(self.__dict__.get("bridge__priorities", ()))
        order[name] = AttrPriority(value)
        Pytree.__setattr__(self, "bridge__priorities", tuple(sorted(order.items())))

    def is_initializing(self) -> bool:
        """Whether the module runs in ``init`` (or ``lazy_init``)."""
        return bool(self.__dict__.get("bridge__initializing", False))

    def _set_initializing(self, initializing: bool) -> None:
        if self.__dict__.get("bridge__initializing") is not initializing:
            Pytree.__setattr__(self, "bridge__initializing", initializing)

    # -- variables --------------------------------------------------------------------
    def make_rng(self, name: str = "default") -> jax.Array:
        """A new key from the scope's RNG stream ``name`` (``ValueError`` outside ``init``/``apply``)."""
        if self.__dict__.get("scope") is None:
            raise ValueError(
                "Can't use RNGs on unbound modules: make_rng works inside init/apply (or "
                "a module attached to one)."
            )
        return cast(Scope, self.scope).rngs[name]()

    def param(
        self,
        name: str,
        init_fn: Callable[..., Any],
        *init_args: Any,
        unbox: bool = True,
        **init_kwargs: Any,
    ) -> Param[Any]:
        """The ``Param`` ``name``: the existing one, or ``init_fn(make_rng('params'), *init_args, **init_kwargs)``.

        Raises:
          ValueError: outside ``setup``/a compact method, or ``name`` holds another kind.
          flax.errors.ScopeParamShapeError: a given value has the wrong shape.
        """
        if self.__dict__.get("scope") is None:
            raise ValueError(
                f"{type(self).__name__}.param({name!r}): Parameters must be initialized in "
                "`setup()` or in a method wrapped in `@compact`, while the module runs in "
                "init/apply.\nFix: create it in setup() or a @bridge.compact method and call "
                "the module through `module.init(rngs, x)` / `module.apply(variables, x)`."
            )
        if hasattr(self, name):
            existing = getattr(self, name)
            if is_variable(existing):
                if not isinstance(existing, Param):
                    raise ValueError(
                        f"Expected '{name}' to be a Param, got {type(existing).__name__}"
                    )
                return existing
            variable = Param(
                _checked(
                    name, existing, lambda: init_fn(jax.random.key(0), *init_args, **init_kwargs)
                )
            )
        else:
            variable = Param(init_fn(self.make_rng("params"), *init_args, **init_kwargs))
        setattr(self, name, variable)
        return variable

    def variable(
        self,
        col: str,
        name: str,
        init_fn: Callable[..., Any] | None = None,
        *init_args: Any,
        unbox: bool = True,
        **init_kwargs: Any,
    ) -> Variable[Any]:
        """The Variable ``name`` of collection ``col``, created with ``init_fn(*init_args, **init_kwargs)`` on first use.

        The kind is ``nnx.variable_type_from_name(col, allow_register=True)``.

        Raises:
          ValueError: outside ``setup``/a compact method, or no ``init_fn`` to create it.
        """
        kind = variable_type_from_name(col, allow_register=True)
        if self.__dict__.get("scope") is None:
            raise ValueError(
                f"{type(self).__name__}.variable({col!r}, {name!r}): Variables must be "
                "initialized in `setup()` or in a method wrapped in `@compact`, while the module "
                "runs in init/apply.\nFix: create it in setup() or a @bridge.compact method and "
                "call the module through `module.init(...)` / `module.apply(...)`."
            )
        existing = getattr(self, name, None)
        if is_variable(existing):
            return existing
        if init_fn is None:
            raise ValueError("Expected 'init_fn' to be a callable, got None")
        if hasattr(self, name):
            variable = kind(_checked(name, existing, lambda: init_fn(*init_args, **init_kwargs)))
        else:
            variable = kind(init_fn(*init_args, **init_kwargs))
        setattr(self, name, variable)
        return variable

    def _get_variables(self) -> dict[str, Any]:
        collections: dict[str, dict[tuple[Any, ...], Any]] = {}
        for path, var in traversals.flatten_mapping(graph_state(self, graph=True)).items():
            if isinstance(var, RngState) or not is_variable(var):
                continue  # Linen keeps no RNG state
            try:
                collection = variable_name_from_type(type(var))
            except ValueError:
                collection = type(var).__name__
            leaf = var.get_value() if is_vanilla_variable(var) else to_linen_var(var)
            collections.setdefault(collection, {})[path] = leaf
        return {c: traversals.unflatten_mapping(flat) for c, flat in collections.items()}

    @property
    def variables(self) -> FrozenDict[str, Any]:
        """The module's variables as Linen's dict (``{'params': {...}, ...}``)."""
        return FrozenDict(self._get_variables())

    # -- Linen's functional API ---------------------------------------------------------
    def apply(
        self,
        variables: Mapping[str, Any],
        *args: Any,
        rngs: int | jax.Array | Mapping[str, Any] | Rngs | None = None,
        method: Callable[..., Any] | str = "__call__",
        mutable: Any = False,
        _initialize: bool = False,
        **kwargs: Any,
    ) -> Any:
        """Runs ``method`` on a clone of the module holding ``variables``.

        Args:
          variables: Linen's variable dict (``{'params': {...}, ...}``; boxes allowed).
          *args, **kwargs: the method's arguments.
          rngs: an int, a key, ``{stream: key}`` or an ``nnx.Rngs``.
          method: a method name or function (default ``__call__``).
          mutable: Linen's mutable collections.

        Returns:
          The output, or ``(output, variables)`` when ``mutable`` is not ``False``.

        Raises:
          TypeError: ``method`` names a non-callable attribute.
        """
        module = clone(self, graph=True)
        flat: dict[tuple[Any, ...], Variable[Any]] = {}
        is_box = lambda x: isinstance(x, meta.AxisMetadata)
        for col, tree in variables.items():
            if isinstance(tree, Mapping):
                boxed = jax.tree.map(lambda x: x, dict(tree), is_leaf=is_box)
                for path, leaf in traversals.flatten_mapping(boxed).items():
                    flat[path] = to_nnx_var(col, leaf)
        if flat:
            update(module, State(traversals.unflatten_mapping(flat)))
        fn = _resolve_method(module, method)
        scoped = _as_rngs(rngs)
        nodes = [v for _, v in iter_graph(module, graph=True)]
        set_initializing(module, _initialize)
        for node in nodes:
            if isinstance(node, Module):
                Pytree.__setattr__(node, "scope", Scope(scoped, mutable))
        try:
            for node in nodes:
                if isinstance(node, Module):
                    _maybe_setup(node)
            with entered(module, in_compact=False):
                out = fn(module, *args, **kwargs)
        finally:
            set_initializing(module, False)
            for _, node in iter_graph(module, graph=True):
                if isinstance(node, Module) and node.__dict__.get("scope") is not None:
                    Pytree.__setattr__(node, "scope", None)
        if mutable is False:
            return out
        return out, module._get_variables()

    def init(
        self,
        rngs: int | jax.Array | Mapping[str, Any] | Rngs | None = None,
        *args: Any,
        method: Callable[..., Any] | str = "__call__",
        **kwargs: Any,
    ) -> dict[str, Any]:
        """Creates the variables by running ``method`` once; returns Linen's variable dict."""
        return self.init_with_output(rngs, *args, method=method, **kwargs)[1]

    def init_with_output(
        self,
        rngs: int | jax.Array | Mapping[str, Any] | Rngs | None = None,
        *args: Any,
        method: Callable[..., Any] | str = "__call__",
        mutable: Any = False,
        **kwargs: Any,
    ) -> tuple[Any, dict[str, Any]]:
        """Like ``init`` but also returns the method's output: ``(output, variables)``."""
        return self.apply(
            {}, *args, rngs=rngs, method=method, mutable=True, _initialize=True, **kwargs
        )


def _checked(name: str, value: Any, make: Callable[[], Any]) -> Any:
    """``value`` (given for ``name``) after checking its shapes against ``make``'s."""
    abstract = jax.eval_shape(make)
    if isinstance(abstract, VariableMetadata):
        metadata = abstract.metadata
        abstract = abstract.raw_value
    else:
        metadata = None
    for val, abs_val in zip(jax.tree.leaves(value), jax.tree.leaves(abstract), strict=False):
        if np.shape(val) != np.shape(abs_val):
            raise flax_errors.ScopeParamShapeError(name, "", np.shape(abs_val), np.shape(val))
    return value if metadata is None else VariableMetadata(value, metadata=metadata)


def _as_rngs(rngs: Any) -> Rngs:
    if rngs is None:
        return Rngs()
    if isinstance(rngs, Rngs):
        return rngs
    if isinstance(rngs, Mapping):
        return Rngs(**rngs)
    return Rngs(rngs)


def _resolve_method(module: Module, method: Callable[..., Any] | str) -> Callable[..., Any]:
    if isinstance(method, str):
        bound = getattr(module, method)
        if not callable(bound):
            raise TypeError(
                f"'{type(module).__name__}.{method}' must be a callable, got {type(bound)}."
            )
        if isinstance(bound, NNXModule):  # a submodule's name: call it
            name = method
            return lambda m, *a, **k: getattr(m, name)(*a, **k)
        method = bound
    if inspect.ismethod(method) and isinstance(method.__self__, Module):
        method = method.__func__
    if not callable(method) or len(inspect.signature(method).parameters) < 1:
        raise flax_errors.ApplyModuleInvalidMethodError(method)
    return method


# The slot's own setter: marking setup done is bookkeeping of the bridge, not an
# attribute assignment the object model should see (no structure change, no trace check).
_mark_setup_done = Module._bridge_setup_done.__set__  # type: ignore[attr-defined]


def _maybe_setup(module: Module) -> None:
    if hasattr(module, "setup") and not getattr(module, "_bridge_setup_done", False):
        with entered(module, in_compact=False):
            module.setup()
        _mark_setup_done(module, True)


def _bind(parent: Module, module: Module) -> None:
    """Gives every bridge Module in ``module``'s graph a scope and runs its setup."""
    for _, node in reversed(list(iter_graph(module, graph=True))):
        if isinstance(node, Module):
            if node.__dict__.get("scope") is None:
                Pytree.__setattr__(node, "scope", cast(Scope, parent.scope).copy())
            _maybe_setup(node)


def compact(f: F) -> F:
    """Marks a bridge Module method as compact: submodules made in it are auto-named, ``self.param`` creates on first use.

    Raises:
      ValueError: the method is called on something that is not a bridge Module.
    """

    @functools.wraps(f)
    def compact_method(self: Any, *args: Any, **kwargs: Any) -> Any:
        if not isinstance(self, Module):
            raise ValueError(
                f"Expected 'self' to be a nnx.bridge.Module, got {type(self).__name__}"
            )
        with entered(self, in_compact=True):
            return f(self, *args, **kwargs)

    return compact_method  # type: ignore[return-value]
