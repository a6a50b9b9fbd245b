"""``Pytree`` and ``Object``: the reference-semantics base classes (graph nodes).

The two views, the trace record and the structure version: the package README and
``docs/design.md``, "Objects are pytrees too". Source: Flax NNX 0.12 ``nnx.Pytree``,
``nnx.Object``; the data/static split of the "Understanding PAX" tutorial.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable, Iterable
from typing import TYPE_CHECKING, Any

import jax

from flaxgraph.errors import TraceContextError, UnclassifiableValueError
from flaxgraph.graphlib.registry import (
    ARRAY,
    BUILTIN_CONTAINERS,
    DICT,
    NODE,
    PYTREE,
    REGISTRY,
    SEQUENCE,
    VARIABLE,
    DataLeaf,
    StaticLeaf,
    find_unflattenable,
    flatten_pytree,
    pytree_children,
    register_node_type,
    unclassifiable_message,
)
from flaxgraph.graphlib.snapshot import same_structure
from flaxgraph.pytreelib.attribute_kinds import (
    DATA,
    DATA_TYPES,
    STATIC,
    Marked,
    class_kinds,
    data,
    has_data,
    static,
)
from flaxgraph.pytreelib.pytree_state import PytreeState
from flaxgraph.pytreelib.tree_layout import Aux, Layout, is_stable
from flaxgraph.renderers import RENDERERS
from flaxgraph.tracing import TRACE_STATE, current_trace
from flaxgraph.typing import MISSING


class Pytree:
    """Base class of reference-semantics objects that are also JAX pytrees.

    ``class Foo(nnx.Pytree, pytree=False)`` makes a graph node JAX sees as one leaf
    (marks and declared kinds are then dropped, as in Flax NNX 0.12.8); subclasses
    inherit the choice.

    Raises:
      TraceContextError (a ``ValueError``): an attribute is assigned or deleted from a
        JAX trace other than the object's.

    >>> import jax, jax.numpy as jnp, flaxgraph as nnx
    >>> class Scale(nnx.Pytree):
    ...   def __init__(self):
    ...     self.w = nnx.Param(jnp.ones(2)); self.name = 'scale'
    >>> jax.tree.leaves(Scale())
    [Array([1., 1.], dtype=float32)]
    """

    __slots__ = (
        "_obj_trace",
        "_obj_version",
        "_obj_kinds",
        "_obj_layout",
        "_obj_flags",
        "_obj_plans",
        "__dict__",
        "__weakref__",
    )
    if TYPE_CHECKING:  # the slots' types (``__dict__`` also holds nnx.List's int keys)
        __dict__: dict[Any, Any]
        _obj_trace: Any
        _obj_version: int
        _obj_kinds: tuple[tuple[Hashable, str], ...]
        _obj_layout: tuple[int, Layout] | None  # (structure version, layout)
        _obj_flags: PytreeState  # set on the first read of ``_pytree__state``
        _obj_plans: list[Any]  # the fast-path plans it holds (transforms/plan_owners.py)
    _obj_class_kinds: tuple[tuple[str, str], ...] = ()
    _obj_is_pytree = True

    def __new__(cls, *args: Any, **kwargs: Any) -> Any:
        obj = object.__new__(cls)
        _init_slots(obj, cls._obj_class_kinds)
        return obj

    def __init_subclass__(cls, *, pytree: bool | None = None, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        if pytree is not None:
            cls._obj_is_pytree = bool(pytree)
        # (a pytree=False class ignores declared kinds too, as its marks: Flax NNX 0.12.8)
        cls._obj_class_kinds = class_kinds(cls) if cls._obj_is_pytree else ()
        _register(cls)

    # -- mutation guard and structure version ----------------------------------------
    def _check_trace(self, what: str) -> None:
        if self._obj_trace != current_trace():
            self._check_valid_context(
                lambda: (
                    f"Cannot {what} of this {type(self).__name__}: it was created outside "
                    "the current JAX transform and was captured by closure (Cannot mutate "
                    f"{type(self).__name__!r} from different trace level), so the change "
                    "would leak a tracer.\nFix: pass the object as an argument of the "
                    "transformed function (e.g. `nnx.jit(f)(model, x)` instead of using "
                    "`model` from the enclosing scope)."
                )
            )

    def _check_valid_context(self, error_msg: Callable[[], str]) -> None:
        """Raises ``TraceContextError(error_msg())`` from another trace (Flax 0.12's hook)."""
        if self._obj_trace != current_trace():
            raise TraceContextError(error_msg())

    # -- what Flax's Pytree exposes to subclasses ---------------------------------------
    @property
    def _pytree__state(self) -> PytreeState:
        """The object's ``PytreeState`` (Flax 0.12's ``_pytree__state``), the same on every read.

        Assigning one moves the object to its trace; its ``trace_state`` names the current one.
        """
        state: PytreeState | None = getattr(self, "_obj_flags", None)
        if state is None:
            state = PytreeState.of_trace(self._obj_trace)
            _set_flags(self, state)
        elif state.trace_state.jax_trace is not self._obj_trace:
            state.retrace(self._obj_trace)
        return state

    @_pytree__state.setter
    def _pytree__state(self, state: PytreeState) -> None:
        _set_trace(self, state.trace_state.jax_trace)
        _set_flags(self, state)

    @property
    def _object__state(self) -> PytreeState:
        """Flax's older name of ``_pytree__state``."""
        return self._pytree__state

    @property
    def _pytree__nodes(self) -> dict[Any, bool]:
        """Each attribute's name and whether it is data (Flax 0.12's ``_pytree__nodes``, a copy)."""
        forced = dict(self._obj_kinds)
        return {
            name: (forced[name] == DATA) if name in forced else _is_data(value)
            for name, value in self.__dict__.items()
        }

    @property
    def _pytree__is_pytree(self) -> bool:
        """Whether the class is a JAX pytree (``pytree=True``, Flax's class flag)."""
        return self._obj_is_pytree

    def _check_write(self, items: list[tuple[Hashable, Any]], kinds: Any) -> None:
        """Raises if writing ``items`` in place would mutate this object from another trace."""
        d = self.__dict__
        if self._obj_trace != current_trace() and (
            _items_change_structure(self, items, kinds)
            or any(d.get(k, MISSING) is not v for k, v in items)
        ):
            self._check_trace("update the attributes")

    def __setattr__(self, name: str, value: Any) -> None:
        if name in _FLAX_PYTREE_SLOTS:
            object.__setattr__(self, name, value)
            return
        self._check_trace(f"set attribute {name!r}")
        if type(value) is Marked and self._obj_is_pytree:
            if value.kind == STATIC:
                _check_no_data_in_static(self, name, value.value, "marked")
            self._set_kind(name, value.kind)
            value = value.value
        else:
            if type(value) is Marked:
                # pytree=False: the mark is dropped, as in Flax NNX 0.12.8.
                value = value.value
            if self._obj_kinds and self._obj_is_pytree:
                kind = dict(self._obj_kinds).get(name)
                if kind == STATIC:
                    declared = dict(type(self)._obj_class_kinds).get(name) == STATIC
                    _check_no_data_in_static(self, name, value, "declared" if declared else "kept")
            if type(value) not in _KNOWN_KINDS or type(value) in BUILTIN_CONTAINERS:
                # a type whose kind is not remembered (a user's), or a plain container
                _check_classifiable(self, name, value)
        old = self.__dict__.get(name, MISSING)
        if not same_structure(old, value):
            object.__setattr__(self, "_obj_version", self._obj_version + 1)
        object.__setattr__(self, name, value)

    def __delattr__(self, name: str) -> None:
        self._check_trace(f"delete attribute {name!r}")
        object.__delattr__(self, name)
        object.__setattr__(self, "_obj_version", self._obj_version + 1)
        if any(n == name for n, _ in self._obj_kinds):
            object.__setattr__(
                self, "_obj_kinds", tuple((n, k) for n, k in self._obj_kinds if n != name)
            )

    def _set_kind(self, name: str, kind: str) -> None:
        kinds = tuple(sorted((*((n, k) for n, k in self._obj_kinds if n != name), (name, kind))))
        if kinds != self._obj_kinds:
            object.__setattr__(self, "_obj_kinds", kinds)
            object.__setattr__(self, "_obj_version", self._obj_version + 1)

    # Display sits above this layer: it registers the renderers (flaxgraph/renderers.py).
    def __repr__(self) -> str:
        return RENDERERS.text("object", self)

    def __treescope_repr__(self, path: Any, subtree_renderer: Any) -> Any:
        return RENDERERS.treescope("object", self, path, subtree_renderer)

    def _repr_mimebundle_(self, include: Any = None, exclude: Any = None) -> dict[str, Any]:
        return RENDERERS.mimebundle(self, include, exclude)

    def __getstate__(self) -> Any:
        return dict(self.__dict__), self._obj_kinds

    def __setstate__(self, state: Any) -> None:
        attributes, kinds = state
        _init_slots(self, kinds)
        self.__dict__.update(attributes)


_FLAX_PYTREE_SLOTS = frozenset({"_pytree__state"})
"""Flax's slot names a subclass may assign (properties here, not attributes)."""


_KNOWN_KINDS = REGISTRY.kind_cache()  # type -> Kind, for the types whose kind is remembered


def _check_classifiable(obj: Pytree, name: str, value: Any) -> None:
    """Raises ``UnclassifiableValueError`` (naming the attribute) for a value whose pytree
    flatten fails, unless the attribute's kind is marked or declared.
    """
    found = find_unflattenable(value)
    if found is None or any(n == name for n, _ in obj._obj_kinds):
        return
    where = f"the value assigned to {type(obj).__name__}.{name}" + "".join(
        f"[{k!r}]" for k in found.keys
    )
    raise UnclassifiableValueError(
        unclassifiable_message(type(found.value).__name__, found.error, where), found.value
    ) from found.error


def _check_no_data_in_static(obj: Pytree, name: str, value: Any, why: str) -> None:
    """Raises if ``value``, for the static attribute ``name``, holds arrays, Variables, objects."""
    if not _is_data(value):
        return
    cls = type(obj).__name__
    vtype = type(value).__name__
    found = ", ".join(sorted({type(x).__name__ for x in has_data(value)})) or vtype
    if why == "marked":
        what = (
            f"Found data in value of type '{vtype}' annotated with nnx.static(...) when "
            f"setting attribute '{name}' of {cls}"
        )
    elif why == "declared":
        what = (
            f"Found unexpected data on value of type '{vtype}' in static attribute "
            f"'{name}' of {cls} (declared static on the class)"
        )
    else:
        what = (
            f"Found data on value of type '{vtype}' assigned to static attribute '{name}' "
            f"of {cls} (it was made static by an earlier nnx.static(...) assignment)"
        )
    raise ValueError(
        f"{what}: it holds {found}, and static attributes may not hold arrays, Variables "
        "or objects.\n"
        f"Fix: assign it as data, `self.{name} = nnx.data(...)`, or keep the data out of "
        "the static value."
    )


def _init_slots(
    obj: Pytree, kinds: tuple[tuple[str, str], ...], trace: object = None, version: int = 0
) -> None:
    _set_trace(obj, current_trace() if trace is None else trace)
    _set_version(obj, version)
    _set_kinds(obj, kinds)
    _set_layout(obj, None)


BUILDING = -1
"""The structure version of an object the engine creates empty (``merge``) until its
first attributes arrive: filling it is not a change of structure, while an existing
object (version 0 or more) given its first attributes is one. A filled object keeps
-1 until its first change of structure (which moves it to 0); one built with no
attributes is at 0 at once. Versions only move forward."""

_set_trace = Pytree._obj_trace.__set__
_set_version = Pytree._obj_version.__set__  # type: ignore[attr-defined]
_set_kinds = Pytree._obj_kinds.__set__  # type: ignore[attr-defined]
_set_layout = Pytree._obj_layout.__set__  # type: ignore[union-attr]
_set_flags = Pytree._obj_flags.__set__  # type: ignore[attr-defined]


def structure_version(obj: Pytree) -> int:
    """The structure version of ``obj`` (the package README)."""
    return obj._obj_version


def mark_structure_changed(obj: Pytree) -> None:
    """Moves ``obj``'s structure version forward (for a subclass storing children its own way)."""
    _set_version(obj, obj._obj_version + 1)


def set_attribute_kinds(obj: Pytree, kinds: tuple[tuple[Hashable, str], ...]) -> None:
    """Replaces ``obj``'s forced attribute kinds (sorted ``(name, kind)``); structure changed."""
    _set_kinds(obj, kinds)
    _set_version(obj, obj._obj_version + 1)


# -- graph view --------------------------------------------------------------------------


def sorted_items(obj: Pytree) -> list[tuple[Any, Any]]:
    try:
        return sorted(obj.__dict__.items())
    except TypeError:  # int keys (nnx.List) mixed with attribute names
        return sorted(obj.__dict__.items(), key=lambda kv: (type(kv[0]).__name__, kv[0]))


def _graph_flatten(obj: Pytree) -> tuple[list[tuple[str, Any]], Hashable]:
    kinds = obj._obj_kinds
    items = sorted_items(obj)
    if DATA_TYPES:  # registered data types that are not pytrees are State leaves
        items = [(k, DataLeaf(v) if _is_opaque_data(v) else v) for k, v in items]
    if kinds:
        forced = dict(kinds)
        items = [
            (
                k,
                DataLeaf(v)
                if forced.get(k) == DATA and _is_marked_leaf(v)
                else StaticLeaf(v)
                if forced.get(k) == STATIC
                else v,
            )
            for k, v in items
        ]
    return items, kinds


def _is_marked_leaf(value: Any) -> bool:
    """Whether an ``nnx.data``-marked value is one State leaf (no data, container or ``None``)."""
    if value is None:
        return False
    kind = REGISTRY.kind_of(value)
    if kind is SEQUENCE or kind is DICT or kind is PYTREE or _is_data(value):
        return False
    # (a graph node of a type that is also a JAX pytree node is walked, not a leaf)
    return kind is not NODE or pytree_children(value) is None


def _is_opaque_data(value: Any) -> bool:
    return type(value) in DATA_TYPES and pytree_children(value) is None


def _items_change_structure(
    obj: Pytree, items: list[tuple[Hashable, Any]], kinds: Hashable
) -> bool:
    d = obj.__dict__
    if len(d) != len(items) or obj._obj_kinds != kinds:
        return True
    return any(not same_structure(d.get(k, MISSING), v) for k, v in items)


def _graph_set_items(obj: Pytree, items: list[tuple[Hashable, Any]], kinds: Hashable) -> None:
    d = obj.__dict__
    if not d:  # a node being built (merge), or an existing one without attributes
        d.update(items)
        if kinds != obj._obj_kinds:
            _set_kinds(obj, kinds)
            _set_layout(obj, None)
        version = obj._obj_version
        if version != BUILDING:
            # An existing object given its first attributes (a transform writing
            # back into an empty object): a change of structure that the fast
            # path's snapshots see through the version alone.
            if items or kinds:
                _set_version(obj, version + 1)
        elif not items:
            _set_version(obj, 0)  # built empty: from now on an existing object
        return
    if _items_change_structure(obj, items, kinds):
        d.clear()
        object.__setattr__(obj, "_obj_kinds", kinds)
        object.__setattr__(obj, "_obj_version", obj._obj_version + 1)
    d.update(items)


def _graph_create_empty(cls: type) -> Any:
    def create(kinds: Hashable, trace: object = None) -> Pytree:
        obj: Pytree = object.__new__(cls)
        _init_slots(obj, kinds, trace, BUILDING)  # type: ignore[arg-type]
        return obj

    return create


def _graph_get_child(obj: Pytree, key: Hashable) -> Any:
    return obj.__dict__.get(key, MISSING)


def _graph_set_child(obj: Pytree, key: Hashable, value: Any) -> None:
    if isinstance(key, str):
        obj.__setattr__(key, value)
        return
    obj._check_trace(f"set item {key!r}")  # int keys: nnx.List items
    old = obj.__dict__.get(key, MISSING)
    obj.__dict__[key] = value
    if not same_structure(old, value):
        object.__setattr__(obj, "_obj_version", obj._obj_version + 1)


def _graph_del_child(obj: Pytree, key: Hashable) -> None:
    if isinstance(key, str):
        obj.__delattr__(key)
        return
    obj._check_trace(f"delete item {key!r}")
    del obj.__dict__[key]
    object.__setattr__(obj, "_obj_version", obj._obj_version + 1)


# -- pytree view ---------------------------------------------------------------------------


def _is_data(value: Any) -> bool:
    """Whether ``value`` is data in the pytree view (the package README, "Data or static")."""
    t = type(value)
    if t in DATA_TYPES:
        return True
    kind = REGISTRY.kind_of(value)
    if kind is ARRAY or kind is VARIABLE:
        return True
    if kind is NODE:
        return isinstance(value, Pytree)  # other registered node types are not data
    if kind is SEQUENCE:
        for v in value:
            if _is_data(v):
                return True
        return False
    if kind is DICT:
        for v in value.values():
            if _is_data(v):
                return True
        return False
    # Other pytree nodes (named tuples such as optax states, States…) are data when
    # they hold data, as the graph view walks them too.
    return kind is PYTREE and any(_is_data(v) for _, v in flatten_pytree(value)[0])


def _volatile_unchanged(d: dict[Any, Any], volatile: tuple[tuple[Any, bool], ...]) -> bool:
    for name, was in volatile:
        if _is_data(d[name]) is not was:
            return False
    return True


def _valid_layout(obj: Pytree) -> Layout | None:
    """The cached layout if still valid, else None (inlined in the flatten functions)."""
    cached = obj._obj_layout
    if cached is not None and cached[0] == obj._obj_version:
        layout: Layout = cached[1]
        d = obj.__dict__
        if (
            layout.size == len(d)
            and layout.n_types == len(DATA_TYPES)
            and (not layout.volatile or _volatile_unchanged(d, layout.volatile))
        ):
            return layout
    return None


def _layout(obj: Pytree) -> Layout:
    """The object's pytree ``Layout``: the cached one while valid, else a new one."""
    layout = _valid_layout(obj)
    if layout is not None:
        return layout
    forced = dict(obj._obj_kinds)
    children: list[tuple[Any, Any]] = []
    statics: list[tuple[Any, Any]] = []
    volatile = []
    for name, value in sorted_items(obj):
        kind = forced.get(name)
        if kind is None:
            is_data = _is_data(value)
            kind = DATA if is_data else STATIC
            if not is_stable(value, Pytree):
                volatile.append((name, is_data))
        (children if kind == DATA else statics).append((name, value))
    layout = Layout(obj._obj_kinds, children, statics, tuple(volatile))
    _set_layout(obj, (obj._obj_version, layout))
    return layout


def _pytree_flatten(obj: Pytree) -> tuple[tuple[Any, ...], Aux]:
    # The validity test of _valid_layout, inlined: this runs once per object on every
    # jax.tree.flatten / jax.jit call.
    cached = obj._obj_layout
    if cached is not None and cached[0] == obj._obj_version:
        layout = cached[1]
        d = obj.__dict__
        if (
            layout.size == len(d)
            and layout.n_types == len(DATA_TYPES)
            and (not layout.volatile or _volatile_unchanged(d, layout.volatile))
        ):
            return layout.get(d), layout.aux
    layout = _layout(obj)
    return layout.get(obj.__dict__), layout.aux


def _pytree_flatten_with_keys(obj: Pytree) -> tuple[Any, Aux]:
    layout = _layout(obj)
    return tuple(zip(layout.keys, layout.get(obj.__dict__))), layout.aux


def _pytree_unflatten(cls: type) -> Callable[[Any, Iterable[Any]], Pytree]:
    new = object.__new__

    def unflatten(aux: Any, children: Iterable[Any]) -> Pytree:
        # Runs once per object on every jax.tree.unflatten (jax.jit's outputs): the
        # recipe comes ready-made with the aux data of a layout (see tree_layout.py);
        # setting items one by one is cheaper here than dict.update.
        build = aux.build if type(aux) is Aux else None
        if build is None:  # a plain tuple (a treedef made elsewhere or unpickled)
            build = (*aux, None)
        names, statics, kinds, fresh = build
        obj: Pytree = new(cls)
        _set_trace(obj, TRACE_STATE.value)
        _set_version(obj, 0)
        _set_kinds(obj, kinds)
        # Same attributes as the flattened object, hence the same layout (version 0).
        _set_layout(obj, fresh)
        d = obj.__dict__
        for name, value in statics:
            d[name] = value
        for name, value in zip(names, children):
            d[name] = value
        return obj

    return unflatten


def _register(cls: type) -> None:
    register_node_type(
        cls,
        _graph_flatten,
        _graph_create_empty(cls),
        _graph_set_items,
        _graph_get_child,
        _graph_set_child,
        _graph_del_child,
    )
    if cls._obj_is_pytree:  # type: ignore[attr-defined]
        jax.tree_util.register_pytree_with_keys(
            cls, _pytree_flatten_with_keys, _pytree_unflatten(cls), _pytree_flatten
        )


_register(Pytree)


class Object(Pytree, pytree=False):
    """Base class of reference-semantics objects that are *not* pytrees (``pytree=False``).

    Graph functions and transforms see them as usual; plain JAX sees one leaf.

    >>> import jax, jax.numpy as jnp, flaxgraph as nnx
    >>> class Counter(nnx.Object):
    ...   def __init__(self):
    ...     self.n = nnx.Variable(jnp.array(0))
    >>> c = Counter()
    >>> jax.tree.leaves(c) == [c], list(nnx.state(c))
    (True, ['n'])
    """


__all__ = [
    "Object",
    "Pytree",
    "data",  # defined in attribute_kinds; importable from here too
    "static",
    "structure_version",
]
