"""Variables: mutable boxes that hold a model's state, tagged with a kind.

A ``Variable`` holds one value (usually a ``jax.Array``) plus a dict of
metadata. Its *kind* is its class: ``Param`` for trainable parameters,
``BatchStat`` for running statistics, ``Cache`` for decoding caches,
``Intermediate`` for values sown during a call, ``Perturbation`` for the
zero-valued taps of ``Module.perturb``. Defining ``class Count(Variable): pass``
makes a new kind that filters can select.

A Variable behaves like its value where it is used as one: ``x @ layer.kernel +
layer.bias``, ``v.shape``, ``v[0]``, ``jnp.asarray(v)``. Writing goes through
``v.value = x`` or ``v[...] = x``; in-place operators (``v += 1``, ``v[...] += x``)
update the value and keep the *same* Variable, so every reference to it sees the
change. Metadata is given as keyword arguments and read as attributes::

  >>> import jax.numpy as jnp, flaxgraph as nnx
  >>> w = nnx.Param(jnp.ones((3, 4)), sharding=('data', None))
  >>> w.shape, w.sharding
  ((3, 4), ('data', None))
  >>> w += 1.0
  >>> float(w[0, 0])
  2.0

A Variable records the JAX trace it was created in; setting its value or
metadata from another trace (inside a transform that captured it by closure)
raises ``TraceContextError`` instead of silently leaking a tracer.

Variables are also JAX pytrees (the value is the child, the kind and metadata are
static), so ``jax.tree.map`` over a ``State`` keeps the Variable boxes.

Source: Flax NNX ``Variable`` API (0.12) and its guide "Variables"; in-place
operators as in the JAX-style NNX transforms guide (seed 003).
"""

from __future__ import annotations

import operator
from collections.abc import Callable, Mapping
from typing import Any, Generic, TypeVar

import jax
import numpy as np

from flaxgraph.errors import TraceContextError
from flaxgraph.mesh_context import SHARDING_KEYS, place_at_creation
from flaxgraph.tracing import current_trace

A = TypeVar("A")
V = TypeVar("V", bound="Variable[Any]")

PARTITION_NAME = "partition_name"
"""Key of ``transform_metadata`` naming the mesh axis a vmap/scan axis maps to."""

_SHARDING_KEYS = SHARDING_KEYS  # ("out_sharding", "sharding", "sharding_names")
_INTERNAL = frozenset({"raw_value", "_var_metadata", "_var_trace"})


class Variable(Generic[A]):
    """A mutable box holding one value and a dict of metadata.

    Args:
      value: the value to hold, usually a ``jax.Array``; any pytree is allowed.
      **metadata: arbitrary keyword metadata, readable as attributes
        (``Param(x, sharding=('a', None)).sharding``). ``out_sharding`` (Flax
        0.12's name), ``sharding`` and ``sharding_names`` are plain tuples of
        mesh-axis names (or ``None``); no device mesh is needed to hold them.
        Created under an active mesh (``jax.set_mesh``) or with ``mesh=``
        metadata, the value is placed with that sharding at once unless eager
        sharding is off (see ``flaxgraph/mesh_context.py``).

    Attributes:
      value: the held value (read and write).
      raw_value: the held value, bypassing nothing (same as ``value``; kept for
        Flax NNX compatibility).
      type: the Variable's kind (its class).

    Raises:
      TraceContextError (a ``ValueError``): when the value or metadata is set
        from a JAX trace other than the one the Variable was created in.

    Example::

      >>> import jax.numpy as jnp, flaxgraph as nnx
      >>> class Count(nnx.Variable): pass
      >>> c = Count(jnp.array(0))
      >>> c += 1
      >>> c.value
      Array(1, dtype=int32, weak_type=True)

    Source: Flax NNX ``nnx.Variable``.
    """

    __slots__ = ("raw_value", "_var_metadata", "_var_trace")

    def __init__(self, value: A, **metadata: Any):
        object.__setattr__(self, "_var_trace", current_trace())
        if isinstance(value, Variable):
            metadata = {**value._var_metadata, **metadata}
            value = value.raw_value
        elif hasattr(value, "variable_metadata") and hasattr(value, "unbox"):
            # an axis-metadata box (nnx.Partitioned…): its metadata joins the Variable's
            metadata = {**value.variable_metadata(), **metadata}
            value = value.unbox()
        if metadata:  # eager sharding: placed on the active mesh at creation
            value = place_at_creation(value, metadata, type(self).__name__)
        object.__setattr__(self, "_var_metadata", metadata)
        object.__setattr__(self, "raw_value", value)

    # -- construction without __init__ (used by merge, pytree unflatten) -----
    @classmethod
    def _from_parts(cls: type[V], value: Any, metadata: dict[str, Any], trace: object = None) -> V:
        # ``metadata`` may be shared: a Variable's metadata dict is never mutated in
        # place (every change installs a new dict), so copies can share it.
        obj = object.__new__(cls)
        _set_trace(obj, current_trace() if trace is None else trace)
        _set_metadata(obj, metadata)
        _set_value(obj, value)
        return obj

    # -- trace guard ------------------------------------------------------------
    def _check_trace(self, what: str) -> None:
        if self._var_trace != current_trace():
            raise TraceContextError(
                f"Cannot {what} of {type(self).__name__}{_value_summary(self.raw_value)}: "
                "it was created outside the current JAX transform and was captured by "
                "closure, so the new value would leak a tracer.\n"
                "Fix: pass the object that holds it as an argument of the transformed "
                "function (e.g. `nnx.jit(f)(model, x)` instead of using `model` from the "
                "enclosing scope)."
            )

    # -- value ------------------------------------------------------------------
    @property
    def value(self) -> A:
        """The held value (read and write; writing checks the trace, see the class)."""
        return self.raw_value

    @value.setter
    def value(self, value: A) -> None:
        """The held value (read and write; writing checks the trace, see the class)."""
        self.set_value(value)

    def get_value(self) -> A:
        """Returns the held value."""
        return self.raw_value

    def set_value(self, value: A) -> None:
        """Replaces the held value (same as ``v.value = value``)."""
        if isinstance(value, Variable):
            value = value.raw_value
        self._check_trace("set the value")
        object.__setattr__(self, "raw_value", value)

    @property
    def type(self) -> type[Variable[A]]:
        """The Variable's kind: its class."""
        return type(self)

    # -- metadata ---------------------------------------------------------------
    def __getattr__(self, name: str) -> Any:
        # Only reached when normal lookup fails: metadata first, then the value.
        if name in _INTERNAL or name.startswith("__"):
            raise AttributeError(name)
        metadata = object.__getattribute__(self, "_var_metadata")
        if name in metadata:
            return metadata[name]
        return getattr(object.__getattribute__(self, "raw_value"), name)

    def __setattr__(self, name: str, value: Any) -> None:
        if name == "value":
            self.set_value(value)
        elif name in _INTERNAL:
            raise AttributeError(f"{name} of a Variable is set through `.value` only")
        else:
            self.set_metadata(name, value)

    def __delattr__(self, name: str) -> None:
        self._check_trace("delete metadata")
        metadata = dict(self._var_metadata)
        if name not in metadata:
            raise AttributeError(name)
        del metadata[name]
        object.__setattr__(self, "_var_metadata", metadata)

    def get_metadata(self, name: str | None = None, default: Any = None) -> Any:
        """Returns the metadata dict (a copy), or one entry (``default`` if absent)."""
        if name is None:
            return dict(self._var_metadata)
        return self._var_metadata.get(name, default)

    def set_metadata(self, *args: Any, **kwargs: Any) -> None:
        """Sets metadata: ``set_metadata('name', value)``, ``set_metadata(name=value)``
        or ``set_metadata(mapping)`` (replaces all metadata)."""
        self._check_trace("set metadata")
        if len(args) == 2 and not kwargs:
            metadata = {**self._var_metadata, args[0]: args[1]}
        elif len(args) == 1 and isinstance(args[0], Mapping) and not kwargs:
            metadata = dict(args[0])
        elif not args:
            metadata = {**self._var_metadata, **kwargs}
        else:
            raise TypeError(
                "set_metadata takes (name, value), a single mapping, or keyword arguments"
            )
        # A new dict each time: copies made by split/merge share no mutable state.
        object.__setattr__(self, "_var_metadata", metadata)

    def replace(self: V, value: Any = ..., **metadata: Any) -> V:
        """Returns a new Variable of the same kind with ``value`` and/or metadata replaced."""
        new_value = self.raw_value if value is ... else value
        return type(self)._from_parts(new_value, {**self._var_metadata, **metadata})

    def copy(self: V) -> V:
        """Returns a new Variable of the same kind with the same value and metadata."""
        return type(self)._from_parts(self.raw_value, self._var_metadata)

    def __reduce__(self) -> Any:
        # copy.copy/deepcopy/pickle: rebuild through _from_parts (the trace token is
        # neither copyable nor picklable; the copy belongs to the trace it is made in).
        return (type(self)._from_parts, (self.raw_value, dict(self._var_metadata)))

    # -- axis metadata -------------------------------------------------------------
    def add_axis(self, index: int, params: Mapping[str, Any]) -> None:
        """Records that a transform added an axis at ``index`` (e.g. ``vmap``'s ``out_axes``).

        The default inserts ``params[PARTITION_NAME]`` (``None`` if absent) into the
        ``sharding``/``sharding_names`` metadata tuples so they keep matching the
        value's rank. Subclasses may override; ``add_axis`` and ``remove_axis`` must
        be inverses.
        """
        name = params.get(PARTITION_NAME)
        for key in _SHARDING_KEYS:
            names = self._var_metadata.get(key)
            if isinstance(names, tuple):
                idx = index if index >= 0 else len(names) + 1 + index
                self._set_metadata_unchecked(key, (*names[:idx], name, *names[idx:]))

    def remove_axis(self, index: int, params: Mapping[str, Any]) -> None:
        """Records that a transform removed the axis at ``index`` (inverse of ``add_axis``)."""
        for key in _SHARDING_KEYS:
            names = self._var_metadata.get(key)
            if isinstance(names, tuple) and names:
                idx = index if index >= 0 else len(names) + index
                self._set_metadata_unchecked(key, names[:idx] + names[idx + 1 :])

    def _set_metadata_unchecked(self, key: str, value: Any) -> None:
        object.__setattr__(self, "_var_metadata", {**self._var_metadata, key: value})

    # -- array protocol -------------------------------------------------------------
    def __jax_array__(self) -> Any:
        return self.raw_value

    def __array__(self, dtype: Any = None, copy: Any = None) -> np.ndarray:
        return np.asarray(self.raw_value, dtype=dtype)

    def __getitem__(self, key: Any) -> Any:
        return self.raw_value[key]

    def __setitem__(self, key: Any, value: Any) -> None:
        if key is Ellipsis:
            self.set_value(value)
        elif isinstance(self.raw_value, jax.Array):
            self.set_value(self.raw_value.at[key].set(value))
        else:
            self._check_trace("set an item")
            self.raw_value[key] = value  # type: ignore[index]

    def __len__(self) -> int:
        return len(self.raw_value)  # type: ignore[arg-type]

    def __iter__(self) -> Any:
        return iter(self.raw_value)  # type: ignore[call-overload]

    def __bool__(self) -> bool:
        return bool(self.raw_value)

    def __int__(self) -> int:
        return int(self.raw_value)  # type: ignore[call-overload]

    def __float__(self) -> float:
        return float(self.raw_value)  # type: ignore[arg-type]

    def __index__(self) -> int:
        return operator.index(self.raw_value)  # type: ignore[arg-type]

    def __complex__(self) -> complex:
        return complex(self.raw_value)  # type: ignore[arg-type]

    __hash__ = object.__hash__  # identity: Variables are references

    def __repr__(self) -> str:
        from flaxgraph.display import variable_repr

        return variable_repr(self)

    def __treescope_repr__(self, path: Any, subtree_renderer: Any) -> Any:
        from flaxgraph.display_treescope import variable_treescope_repr

        return variable_treescope_repr(self, path, subtree_renderer)

    # -- pytree ------------------------------------------------------------------------
    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        _register_variable_pytree(cls)


# Direct slot setters (C-level; bypass the guarded __setattr__): for construction.
_set_trace = Variable._var_trace.__set__  # type: ignore[attr-defined]
_set_metadata = Variable._var_metadata.__set__  # type: ignore[attr-defined]
_set_value = Variable.raw_value.__set__  # type: ignore[attr-defined]


def _value_summary(value: Any) -> str:
    shape = getattr(value, "shape", None)
    dtype = getattr(value, "dtype", None)
    if shape is not None and dtype is not None:
        return f"(shape={tuple(shape)}, dtype={dtype})"
    return ""


def _make_binary(op: Callable[[Any, Any], Any]) -> tuple[Callable[..., Any], ...]:
    def forward(self: Variable[Any], other: Any) -> Any:
        if isinstance(other, Variable):
            other = other.raw_value
        return op(self.raw_value, other)

    def reflected(self: Variable[Any], other: Any) -> Any:
        return op(other, self.raw_value)

    def inplace(self: Variable[Any], other: Any) -> Variable[Any]:
        if isinstance(other, Variable):
            other = other.raw_value
        self.set_value(op(self.raw_value, other))
        return self

    return forward, reflected, inplace


for _name, _op in [
    ("add", operator.add),
    ("sub", operator.sub),
    ("mul", operator.mul),
    ("matmul", operator.matmul),
    ("truediv", operator.truediv),
    ("floordiv", operator.floordiv),
    ("mod", operator.mod),
    ("pow", operator.pow),
    ("and", operator.and_),
    ("or", operator.or_),
    ("xor", operator.xor),
    ("lshift", operator.lshift),
    ("rshift", operator.rshift),
]:
    _fwd, _refl, _inpl = _make_binary(_op)
    setattr(Variable, f"__{_name}__", _fwd)
    setattr(Variable, f"__r{_name}__", _refl)
    setattr(Variable, f"__i{_name}__", _inpl)

for _name, _op in [
    ("lt", operator.lt),
    ("le", operator.le),
    ("gt", operator.gt),
    ("ge", operator.ge),
    ("eq", operator.eq),
    ("ne", operator.ne),
    ("divmod", divmod),
]:
    setattr(Variable, f"__{_name}__", _make_binary(_op)[0])
Variable.__rdivmod__ = _make_binary(divmod)[1]  # type: ignore[attr-defined]
Variable.__hash__ = object.__hash__  # type: ignore[method-assign]  # restored after __eq__

for _name, _op in [
    ("neg", operator.neg),
    ("pos", operator.pos),
    ("abs", operator.abs),
    ("invert", operator.invert),
]:
    setattr(Variable, f"__{_name}__", (lambda op: lambda self: op(self.raw_value))(_op))


def _freeze_metadata(metadata: dict[str, Any]) -> tuple[tuple[str, Any], ...]:
    return tuple(sorted(metadata.items()))


def _register_variable_pytree(cls: type) -> None:
    def flatten_with_keys(v: Variable[Any]) -> Any:
        return ((jax.tree_util.GetAttrKey("value"), v.raw_value),), _freeze_metadata(
            v._var_metadata
        )

    def flatten(v: Variable[Any]) -> Any:
        return (v.raw_value,), _freeze_metadata(v._var_metadata)

    def unflatten(metadata: tuple[tuple[str, Any], ...], children: Any) -> Variable[Any]:
        return cls._from_parts(children[0], dict(metadata))

    jax.tree_util.register_pytree_with_keys(cls, flatten_with_keys, unflatten, flatten)


_register_variable_pytree(Variable)


class Param(Variable[A]):
    """A trainable parameter; what ``grad`` differentiates by default."""


class BatchStat(Variable[A]):
    """A running statistic (e.g. BatchNorm's mean and variance); not trained."""


class Cache(Variable[A]):
    """A cache (e.g. attention keys/values during autoregressive decoding)."""


class Intermediate(Variable[A]):
    """A value sown during a call with ``Module.sow``."""


class Perturbation(Variable[A]):
    """A zero-valued tap added by ``Module.perturb`` to read gradients of activations."""


# -- kind <-> collection-name registry ---------------------------------------------
# The one registry of this file, like JAX's pytree registry: written only through
# `register_variable_name`.
_NAME_TO_TYPE: dict[str, type[Variable[Any]]] = {}
_TYPE_TO_NAME: dict[type[Variable[Any]], str] = {}


def register_variable_name(name: str, typ: type[Variable[Any]], *, overwrite: bool = False) -> None:
    """Associates the collection name ``name`` (e.g. ``'params'``) with a Variable kind.

    Raises:
      ValueError: if ``name`` is already registered to another kind and
        ``overwrite`` is False.
    """
    if not overwrite and _NAME_TO_TYPE.get(name, typ) is not typ:
        raise ValueError(
            f"Variable name {name!r} is already registered to {_NAME_TO_TYPE[name].__name__}; "
            "pass overwrite=True to replace it."
        )
    _NAME_TO_TYPE[name] = typ
    _TYPE_TO_NAME[typ] = name


def variable_name_from_type(typ: type[Variable[Any]], *, allow_register: bool = False) -> str:
    """Returns the collection name of a Variable kind (``Param`` -> ``'params'``).

    Raises:
      ValueError: if the kind is not registered and ``allow_register`` is False;
        with ``allow_register=True`` it is registered under its class name.
    """
    if typ in _TYPE_TO_NAME:
        return _TYPE_TO_NAME[typ]
    if allow_register:
        register_variable_name(typ.__name__, typ)
        return typ.__name__
    raise ValueError(
        f"Variable kind {typ.__name__} has no registered name; call "
        f"nnx.register_variable_name('name', {typ.__name__}) or pass allow_register=True."
    )


def variable_type_from_name(name: str, *, allow_register: bool = False) -> type[Variable[Any]]:
    """Returns the Variable kind registered under ``name`` (``'params'`` -> ``Param``).

    Raises:
      ValueError: if no kind is registered under ``name`` and ``allow_register`` is
        False; with ``allow_register=True`` a new Variable subclass is created.
    """
    if name in _NAME_TO_TYPE:
        return _NAME_TO_TYPE[name]
    if allow_register:
        typ = type(name, (Variable,), {})
        register_variable_name(name, typ)
        return typ
    raise ValueError(f"No Variable kind is registered under the name {name!r}.")


for _n, _t in [
    ("params", Param),
    ("batch_stats", BatchStat),
    ("cache", Cache),
    ("intermediates", Intermediate),
    ("perturbations", Perturbation),
]:
    register_variable_name(_n, _t)
