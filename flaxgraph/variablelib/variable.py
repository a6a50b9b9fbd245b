"""Variables: mutable boxes that hold a model's state, tagged with a kind.

A ``Variable`` holds one value (usually a ``jax.Array``) and a dict of metadata; its
kind is its class (``Param``, ``BatchStat``, ``Cache``, ``Intermediate``,
``Perturbation`` or a user's subclass). It behaves like its value (``x @ w``,
``v.shape``, ``v[0]``); ``v[...]`` reads and ``v[...] = x`` writes it, and in-place
operators keep the same Variable. The flags (``ref``, ``hijax``, ``mutable``), the
trace guard, the storages and the layout of this module: ``variablelib/README.md``.

  >>> import jax.numpy as jnp, flaxgraph as nnx
  >>> w = nnx.Param(jnp.ones((3, 4)), out_sharding=('data', None))
  >>> w.shape, w.out_sharding
  ((3, 4), ('data', None))
  >>> w[...] += 1.0
  >>> float(w[0, 0])
  2.0

Source: Flax NNX ``Variable`` API (0.12, each member of the same name, ``with_vars``'s
``mutable``) and its guides "Variables" and "Hijax";
in-place operators as in Flax NNX's "Transformations" guide.
"""

from __future__ import annotations

import math
import operator
import warnings
from collections.abc import Callable, Iterator, Mapping
from typing import Any, ClassVar, Generic, TypeGuard, TypeVar

import jax
import jax.numpy as jnp
import numpy as np
from jax.sharding import PartitionSpec

from flaxgraph.errors import TraceContextError, numbered_fixes
from flaxgraph.mesh_context import place_at_creation, rename_sharding_keys
from flaxgraph.renderers import RENDERERS
from flaxgraph.tracing import TRACE_STATE, TraceState, current_trace, is_top_level
from flaxgraph.typing import MISSING
from flaxgraph.variablelib import axes, boxes, refs
from flaxgraph.variablelib.closure_watch import note_read
from flaxgraph.variablelib.defaults import VAR_DEFAULTS, check_flag
from flaxgraph.variablelib.refs import REF_TYPE
from flaxgraph.variablelib.value_hooks import METADATA_HOOKS, hook_refusal, install_value_hooks

A = TypeVar("A")
V = TypeVar("V", bound="Variable[Any]")

PARTITION_NAME = axes.PARTITION_NAME

FLAG_KEYS = ("ref", "hijax", "mutable")
"""Metadata names reserved for the construction flags (set them with ``with_vars``)."""


_INTERNAL = frozenset(
    {"raw_value", "_var_raw", "_var_fresh", "_var_metadata", "_var_trace", "_var_ref"}
)
# Flax's slot names a subclass may assign (``self._trace_state = ...``): properties here.
_FLAX_VARIABLE_SLOTS = frozenset({"_trace_state", "_raw_value"})
# Answered by the storage when a Ref-backed Variable has no such metadata (``shape`` is
# a property of its own: the one place it is resolved).
_REF_ATTRIBUTES = frozenset({"dtype", "ndim", "size", "sharding"})


def store_flags(metadata: dict[str, Any], ref: bool, hijax: bool, mutable: bool) -> None:
    """Writes the flags that differ from the defaults into ``metadata``."""
    if ref:
        metadata["ref"] = True
    if hijax:
        metadata["hijax"] = True
    if not mutable:
        metadata["mutable"] = False


class Variable(Generic[A]):
    """A mutable box holding one value and a dict of metadata.

    Args:
      value: the value to hold, usually a ``jax.Array`` (any shape and dtype); any
        pytree is allowed. A ``VariableMetadata`` or axis-metadata box
        (``nnx.Partitioned``) is unboxed and its metadata joins ``metadata``; a
        ``jax.Ref`` becomes this Variable's storage.
      hijax: mark the Variable ``hijax`` (Ref-backed, or box-backed for a pytree
        value; README). ``None``: ``nnx.var_defaults().hijax``.
      ref: keep the value in a ``jax.Ref``. ``None``: ``nnx.var_defaults().ref``
        (a default, not an explicit ``ref=True``, leaves non-array values plain).
      mutable: ``False`` makes the Variable read-only. ``None``: ``True``.
      **metadata: keyword metadata, readable as attributes (``Param(x, note=3).note``).
        ``out_sharding``: a tuple of mesh-axis names (or ``None``), one per dimension;
        the deprecated ``sharding=``/``sharding_names=`` are stored as it with a
        ``DeprecationWarning``. Under an active mesh (or with ``mesh=``) the value is
        placed at once unless eager sharding is off (``flaxgraph/mesh_context.py``).

    Attributes:
      value: the value (read and write; same as ``v[...]``).
      raw_value: the value (a Ref-backed Variable's current content).
      type: the Variable's kind (its class).
      ref, hijax, mutable: the construction flags.

    Raises:
      TypeError: ``ref=True`` for a value that is not an array or number,
        ``hijax=True`` for one that is neither that nor a pytree of arrays (or any
        pytree where this JAX has no box); a flag that is not a ``bool``.
      ValueError: ``ref=False`` with a ``jax.Ref`` value; writing a read-only
        (``mutable=False``) Variable; writing a value of another shape or dtype into
        a Ref-backed one.
      TraceContextError (a ``ValueError``): when the value or metadata is set
        from a JAX trace other than the one the Variable was created in.

    >>> import jax.numpy as jnp, flaxgraph as nnx
    >>> class Count(nnx.Variable): pass
    >>> c = Count(jnp.array(0))
    >>> c[...] += 1
    >>> c[...]
    Array(1, dtype=int32, weak_type=True)
    >>> r = nnx.Param(jnp.zeros(2), ref=True)
    >>> r.ref, type(r.get_raw_value()).__name__
    (True, 'Ref')
    >>> r[...] = jnp.ones(2)
    >>> r[...]
    Array([1., 1.], dtype=float32)
    """

    # Members grouped by concept (README). ``_var_raw``: the value (``raw_value`` reads
    # it). ``_var_plans``: the fast-path plans it holds, unset until one does
    # (``transforms/plan_owners.py``); no copy or walk reads it. ``_var_fresh``: the
    # array ``nnx.jit`` installed, until anything else reads or writes the value
    # (``transforms/donation.py``); unset counts as ``None``.
    __slots__ = ("_var_raw", "_var_metadata", "_var_trace", "_var_ref", "_var_plans", "_var_fresh")

    #: The flag keys ``get_metadata(exclude_required=True)`` leaves out (Flax NNX 0.12
    #: ``Variable.required_metadata``, plus flaxgraph's ``mutable``).
    required_metadata: frozenset[str] = frozenset((*FLAG_KEYS, "eager_sharding"))

    # -- construction ---------------------------------------------------------------
    def __init__(
        self,
        value: A,
        *,
        hijax: bool | None = None,
        ref: bool | None = None,
        mutable: bool | None = None,
        **metadata: Any,
    ):
        object.__setattr__(self, "_var_trace", current_trace())
        if isinstance(value, Variable):
            metadata = {**value._var_metadata, **metadata}
            value = value.raw_value
        elif hasattr(value, "variable_metadata") and hasattr(value, "unbox"):
            # a metadata box (nnx.VariableMetadata, nnx.Partitioned…): its metadata joins
            metadata = {**value.variable_metadata(), **metadata}
            value = value.unbox()
        rename_sharding_keys(metadata)  # `sharding=`/`sharding_names=` become out_sharding
        if metadata and not _METADATA_HOOKS.isdisjoint(metadata):
            hook = sorted(_METADATA_HOOKS.intersection(metadata))[0]
            raise TypeError(hook_refusal(f"{type(self).__name__}(...)", hook))
        if self._var_custom_create:
            # Flax 0.12 calls the hook with the Variable's metadata and value in place
            object.__setattr__(self, "_var_metadata", metadata)
            object.__setattr__(self, "_var_ref", None)
            object.__setattr__(self, "_var_raw", value)
            value = self.create_value(value)
        if metadata and not (refs.is_ref(value) or boxes.is_box(value)):
            # eager sharding: placed at creation
            value = place_at_creation(value, metadata, type(self).__name__)
        hijax, ref = check_flag("Variable", "hijax", hijax), check_flag("Variable", "ref", ref)
        mutable = check_flag("Variable", "mutable", mutable)
        given = {k: metadata.pop(k) for k in FLAG_KEYS if k in metadata}
        defaults = VAR_DEFAULTS.get()
        explicit = ref is True or hijax is True or given.get("ref") or given.get("hijax")
        explicit_ref = ref is True or given.get("ref") is True
        asked_plain = ref is False or given.get("ref") is False
        ref = ref if ref is not None else given.get("ref", defaults.ref)
        hijax = hijax if hijax is not None else given.get("hijax", defaults.hijax)
        mutable = mutable if mutable is not None else given.get("mutable", True)
        storage = None
        if refs.is_ref(value):
            if asked_plain:
                raise ValueError(
                    "Variable(value, ref=False) got a jax.Ref as its value.\nFix: pass "
                    "its content (`r[...]` or `jax.freeze(r)`) or drop ref=False."
                )
            storage = value
            ref = ref or not hijax  # a Ref given as the value: the Variable is Ref-backed
        elif boxes.is_box(value):  # a box given as the value: a hijax Variable's storage
            storage = value
            hijax = True
        elif ref or hijax:
            if refs.can_hold(value) or isinstance(value, jax.core.Tracer):
                if refs.can_hold(value) and is_top_level():
                    storage = refs.new_ref(value)
                # else: made inside a transform, the flags travel and the value stays
                # plain (a Ref-backed copy is made when it comes out, see _from_parts)
            elif hijax and not explicit_ref and boxes.fits(value):
                # a pytree value of a hijax Variable lives in a box (variablelib/boxes.py);
                # a default ref=True does not apply to it (a Ref holds one array)
                ref = False
                if is_top_level() and boxes.can_hold(value):
                    storage = boxes.new_box(value)
            elif explicit:
                raise TypeError(boxes.no_storage_message(type(self).__name__, value, hijax))
            else:
                ref = hijax = False  # the default asked for a Ref this value cannot use
        store_flags(metadata, ref, hijax, mutable)
        object.__setattr__(self, "_var_metadata", metadata)
        object.__setattr__(self, "_var_ref", storage)
        if storage is None:
            object.__setattr__(self, "_var_raw", value)

    # construction without __init__ (used by merge, copies, pytree unflatten)
    @classmethod
    def _from_parts(
        cls: type[V], value: object, metadata: dict[str, Any], trace: object = None
    ) -> V:
        obj = object.__new__(cls)
        _set_trace(obj, current_trace() if trace is None else trace)
        write_metadata(obj, metadata)
        t = type(value)  # a Ref or a box (concrete or traced) is the storage itself
        if t is REF_TYPE or t is _BOX_TYPE or (issubclass(t, _Tracer) and _traced_storage(value)):
            _set_ref(obj, value)
        elif (
            metadata
            and (metadata.get("ref") or metadata.get("hijax"))
            and refs.can_hold(value)
            and is_top_level()
        ):
            # outside any transform a copy gets its own Ref (README, "Copies")
            _set_ref(obj, refs.new_ref(value))
        elif metadata and metadata.get("hijax") and boxes.can_hold(value) and is_top_level():
            _set_ref(obj, boxes.new_box(value))  # the same for a box-backed one
        else:
            _set_ref(obj, None)
            write_slot(obj, value)
        return obj

    #: Whether the class overrides ``get_value`` (then ``.value`` and the array
    #: protocols read through it) or ``create_value`` (then ``__init__`` calls it).
    _var_custom_get: ClassVar[bool] = False
    _var_custom_create: ClassVar[bool] = False

    def __init_subclass__(cls, **kwargs: object) -> None:
        super().__init_subclass__(**kwargs)
        install_value_hooks(cls)  # Flax's on_get_value/on_set_value/on_create_value
        cls._var_custom_get = cls.get_value is not Variable.get_value
        cls._var_custom_create = cls.create_value is not Variable.create_value
        _register_variable_pytree(cls)

    # -- trace and write guards -------------------------------------------------------
    def _check_trace(self, what: str) -> None:
        if self._var_trace != current_trace():
            raise TraceContextError(
                f"Cannot {what} of {type(self).__name__}{_value_summary(self._var_raw)}: "
                "it was created outside the current JAX transform (Cannot mutate "
                f"{type(self).__name__} from a different trace level) and got in captured by "
                "closure or through `nnx.merge(..., copy=False)`, so the new value would "
                "leak a tracer.\nFix, by the way it got in:\n"
                + numbered_fixes(
                    [
                        "captured by closure: pass the object that holds it as an argument "
                        "of the transformed function (e.g. `nnx.jit(f)(model, x)` instead of "
                        "using `model` from the enclosing scope);",
                        "put into a model by `nnx.merge(graphdef, ..., copy=False)` (merge's "
                        "default) inside the function, from a State the transform does not "
                        "trace (an argument `jax.grad` does not differentiate, or a captured "
                        "one): `copy=False` keeps the State's own Variables, which belong "
                        "outside. Merge with `copy=True` to get Variables of this trace "
                        "(return `nnx.state(model)` if the new values are needed outside), "
                        "or use `nnx.grad`, which traces every argument.",
                    ]
                )
            )

    def _check_update(self) -> None:
        """The trace check before a graph update writes the value (README)."""
        if self._var_ref is None:
            self._check_trace("update")

    def _check_mutable(self) -> None:
        if self._var_metadata.get("mutable", True) is False:
            raise ValueError(
                f"Cannot write the read-only {type(self).__name__}"
                f"{_value_summary(self._var_raw)}: it was made with mutable=False.\n"
                "Fix: write to the original Variable, or make a writable copy with "
                "`nnx.with_vars(node, mutable=True)`."
            )

    def _refuse_flag_change(self, updates: Mapping[str, object], how: str) -> None:
        for key in FLAG_KEYS:
            if key in updates and updates[key] != getattr(self, key):
                raise ValueError(
                    f"Cannot change the {key!r} flag of a {type(self).__name__} with {how}.\nFix: "
                    f"make a copy with the new flag: `nnx.with_vars(node, {key}={updates[key]!r})`."
                )

    def _check_fits(self, value: object) -> None:
        """Raises ``ValueError`` if ``value`` does not fit a Ref-backed Variable's Ref."""
        ref = self._var_ref
        if ref is not None and value is not ref and refs.is_ref(ref):
            refs.check_fits(type(self).__name__, ref, value)

    def _check_settable(self) -> None:
        """Raises what ``set_value`` would raise, before the new value is computed."""
        self._check_mutable()
        if self._var_ref is None:
            self._check_trace("set the value")

    # -- the value --------------------------------------------------------------------
    @property
    def raw_value(self) -> A:
        """The stored value (a Ref-backed Variable's current content), without a subclass's
        ``get_value``; a read, as ``.value`` is (``nnx.jit`` no longer donates it in place)."""
        _set_fresh(self, None)
        typed: A = self._var_raw
        return typed

    @property
    def value(self) -> A:
        """The held value (read and write, through a subclass's ``get_value``/``set_value``)."""
        if self._var_custom_get:
            return self.get_value()
        if self._var_trace is not TRACE_STATE.value:
            note_read(self)  # a read by closure inside a transform (closure_watch.py)
        _set_fresh(self, None)
        typed: A = self._var_raw
        return typed

    @value.setter
    def value(self, value: A) -> None:
        self.set_value(value)

    def _read_value(self) -> A:
        if self._var_custom_get:
            return self.get_value()
        if self._var_trace is not TRACE_STATE.value:
            note_read(self)
        _set_fresh(self, None)
        typed: A = self._var_raw
        return typed

    def get_value(self, *, index: object = MISSING) -> A:
        """Returns the value, or ``value[index]`` (same as ``v[...]`` / ``v[index]``)."""
        if self._var_trace is not TRACE_STATE.value:
            note_read(self)  # a read by closure inside a transform (closure_watch.py)
        _set_fresh(self, None)
        if index is MISSING:
            typed: A = self._var_raw
            return typed
        ref = self._var_ref
        if ref is not None and refs.is_ref(ref):
            typed = ref[index]
            return typed
        value = self._var_raw
        if index is Ellipsis and "hijax" in self._var_metadata and boxes.fits(value):
            typed = value  # a hijax pytree (in its box, or its copy inside a transform)
            return typed
        typed = value[index]
        return typed

    def set_value(self, value: A, *, index: object = MISSING) -> None:
        """Replaces the value (``v[...] = value``), or ``value[index]`` only.

        Raises:
          ValueError: the Variable is read-only (``mutable=False``), or Ref-backed
            and ``value`` has another shape or dtype.
          TraceContextError: the Variable was created in another JAX trace (for a
            Ref-backed one: only where JAX cannot write a captured Ref).
        """
        if isinstance(value, Variable):
            value = value.raw_value
        self._check_mutable()
        ref = self._var_ref
        if ref is None:
            self._check_trace("set the value")
            if index is not MISSING:
                value = _updated(self._var_raw, index, value, self)
            write_slot(self, value)
            _set_fresh(self, None)
            return
        if not refs.is_ref(ref):  # a box: its content is replaced as a whole
            if boxes.is_box(value):
                value = boxes.read(value)
            if index is not MISSING and index is not Ellipsis:
                value = _updated(boxes.read(ref), index, value, self)
            write_value(self, value)
            return
        if index is MISSING:
            if value is ref:
                return
            if refs.is_ref(value):
                value = value[...]  # type: ignore[index]  # a Ref (refs.is_ref)
            refs.check_fits(type(self).__name__, ref, value)
            index = ...
        refs.write(type(self).__name__, ref, index, value, self._var_trace != current_trace())

    def get_raw_value(self) -> Any:
        """The storage: the ``jax.Ref`` or box of a Ref/box-backed Variable, else the value."""
        ref = self._var_ref
        if ref is None:
            _set_fresh(self, None)
            return self._var_raw
        return ref

    def set_raw_value(self, value: object, *, _unsafe_bypass_check: bool = False) -> None:
        """Replaces the storage: the value, or (given a ``jax.Ref``) the Ref itself;
        unlike ``set_value``, a new Ref is not checked, nor the ``mutable`` flag.

        Args:
          value: the new value (any pytree) or a ``jax.Ref`` to hold from now on.
          _unsafe_bypass_check: skip the trace check (for library internals).

        Raises:
          TraceContextError: the Variable was created in another JAX trace.
          ValueError: a plain value of another shape/dtype for a Ref-backed Variable.

        >>> import jax.numpy as jnp, flaxgraph as nnx
        >>> p = nnx.Param(jnp.zeros(2))
        >>> p.set_raw_value(jnp.ones(3))
        >>> p.shape
        (3,)
        """
        if not _unsafe_bypass_check:
            self._check_trace("set the raw value")
        _install(self, value)

    def create_value(self, value: object) -> Any:
        """The hook a subclass may override to transform a value; returns ``value``.

        Only ``__init__`` calls it, with the metadata in place, before eager sharding.

        >>> import flaxgraph as nnx
        >>> nnx.Param(1.0).create_value(2.0)
        2.0
        """
        return value

    def __call__(self, *args: object, **kwargs: object) -> Any:
        """Calls the value (as Flax NNX 0.12 does).

        Raises:
          TypeError: the value is not callable.
        """
        value = self.get_value()
        if not callable(value):
            raise TypeError(
                f"'{type(self).__name__}' object is not callable: its value is a "
                f"{type(value).__name__}.\nFix: read the value (`v[...]`) instead of calling "
                "the Variable."
            )
        return value(*args, **kwargs)

    # -- metadata (a new dict on every change: README) -------------------------------
    def get_metadata(
        self, name: str | None = None, default: object = MISSING, *, exclude_required: bool = False
    ) -> Any:
        """Returns the metadata dict (a copy, always listing ``hijax``, ``ref`` and
        ``eager_sharding``, ``mutable`` when ``False``, as Flax NNX 0.12), or one entry.

        Args:
          name: the entry to read; ``None`` for the whole dict.
          default: returned when ``name`` is absent.
          exclude_required: leave the flags (``hijax``, ``ref``, ``eager_sharding``,
            ``mutable``) out of the dict.

        Raises:
          KeyError: ``name`` is absent and no ``default`` was given.

        >>> import flaxgraph as nnx
        >>> nnx.Param(1.0, note='x').get_metadata()
        {'note': 'x', 'hijax': False, 'ref': False, 'eager_sharding': True}
        """
        if name is None:
            if exclude_required:
                return {
                    k: v
                    for k, v in self._var_metadata.items()
                    if k not in FLAG_KEYS and k != "eager_sharding"
                }
            return {
                **self._var_metadata,
                "hijax": self.hijax,
                "ref": self.ref,
                "eager_sharding": self._var_metadata.get("eager_sharding", True),
            }
        try:
            return self._var_metadata[name]
        except KeyError:
            if default is not MISSING:
                return default
            raise KeyError(
                f"{type(self).__name__} has no metadata {name!r} (it has "
                f"{sorted(self._var_metadata)}); pass a default: get_metadata({name!r}, None)."
            ) from None

    def has_metadata(self, name: str) -> bool:
        """Whether the metadata has an entry ``name``."""
        return name in self._var_metadata

    def set_metadata(self, *args: Any, **kwargs: object) -> None:
        """Sets metadata: ``set_metadata('name', value)``, ``set_metadata(name=value)``
        or ``set_metadata(mapping)`` (replaces all but the flags); ``sharding`` and
        ``sharding_names`` are stored as ``out_sharding``.

        Raises:
          TypeError: other argument forms.
          ValueError: a flag (``ref``, ``hijax``, ``mutable``) would change: make a
            copy with ``nnx.with_vars`` instead.
          TraceContextError: the Variable was created in another JAX trace.
        """
        self._check_trace("set metadata")
        if len(args) == 2 and not kwargs:
            updates, replace = {args[0]: args[1]}, False
        elif len(args) == 1 and isinstance(args[0], Mapping) and not kwargs:
            updates, replace = dict(args[0]), True
        elif not args:
            updates, replace = kwargs, False
        else:
            raise TypeError(
                "set_metadata takes (name, value), a single mapping, or keyword arguments"
            )
        old = self._var_metadata
        self._refuse_flag_change(updates, "set_metadata")
        updates = rename_sharding_keys({k: v for k, v in updates.items() if k not in FLAG_KEYS})
        flags = {k: old[k] for k in FLAG_KEYS if k in old}
        metadata = {**updates, **flags} if replace else {**old, **updates}
        object.__setattr__(self, "_var_metadata", metadata)

    def del_metadata(self, name: str) -> None:
        """Removes the metadata entry ``name``.

        Raises:
          AttributeError: there is no such entry. ValueError: ``name`` is a flag.
        """
        self._check_trace("delete metadata")
        if name in FLAG_KEYS:
            raise ValueError(f"The {name!r} flag cannot be deleted; use nnx.with_vars.")
        metadata = dict(self._var_metadata)
        if name not in metadata:
            raise AttributeError(name)
        del metadata[name]
        object.__setattr__(self, "_var_metadata", metadata)

    def _stored_metadata(self) -> dict[str, Any]:
        """A copy of the metadata as stored (flags only where set)."""
        return dict(self._var_metadata)

    @property
    def shape(self) -> tuple[int, ...]:
        """The shape of the value (a Ref's read without copying); a ``shape`` metadata
        entry wins.

        Raises:
          AttributeError: the value has no ``shape`` (e.g. a Python list).

        >>> import jax.numpy as jnp, flaxgraph as nnx
        >>> nnx.Param(jnp.ones((2, 3))).shape
        (2, 3)
        """
        metadata = self._var_metadata
        if "shape" in metadata:
            typed: tuple[int, ...] = metadata["shape"]
            return typed
        ref = self._var_ref
        typed = (self._var_raw if ref is None else ref).shape
        return typed

    @property
    def sharding_names(self) -> Any:
        """The ``out_sharding`` metadata, else ``None``.

        Warns:
          DeprecationWarning: always; read ``out_sharding`` instead.

        >>> import warnings
        >>> import jax.numpy as jnp, flaxgraph as nnx
        >>> v = nnx.Param(jnp.ones((2, 3)), out_sharding=('a', None))
        >>> with warnings.catch_warnings():
        ...   warnings.simplefilter('ignore', DeprecationWarning)
        ...   v.sharding_names
        ('a', None)
        """
        warnings.warn(
            "Variable.sharding_names is deprecated; read out_sharding instead.",
            DeprecationWarning,
            stacklevel=2,
        )
        return self._var_metadata.get("out_sharding")

    # -- what Flax's Variable exposes to subclasses -------------------------------------
    @property
    def _trace_state(self) -> TraceState:
        """The trace the Variable was created in (Flax 0.12's ``Variable._trace_state``)."""
        return TraceState.of(self._var_trace)

    @_trace_state.setter
    def _trace_state(self, state: TraceState) -> None:
        _set_trace(self, state.jax_trace)

    @property
    def _raw_value(self) -> Any:
        """The storage (Flax 0.12's ``Variable._raw_value``: ``get_raw_value()``)."""
        return self.get_raw_value()

    @_raw_value.setter
    def _raw_value(self, value: object) -> None:
        _install(self, value)

    def __getstate__(self) -> dict[str, Any]:
        """The state Flax 0.12's ``Variable.__getstate__`` returns (pickle uses ``__reduce__``)."""
        return {
            "_raw_value": self.get_raw_value(),
            "_trace_state": self._trace_state,
            "_var_metadata": self._var_metadata,
        }

    def __setstate__(self, state: Mapping[str, Any]) -> None:
        _set_trace(self, current_trace())
        write_metadata(self, dict(state["_var_metadata"]))
        _set_ref(self, None)
        _install(self, state["_raw_value"])

    def __getattr__(self, name: str) -> Any:
        # Only reached when normal lookup fails: a Ref-backed Variable's value (its
        # _var_raw slot is empty), then metadata, then the value's attributes.
        if name == "_var_raw":  # (``raw_value``, a property, reads it)
            ref = object.__getattribute__(self, "_var_ref")
            if ref is None:
                raise AttributeError(name)
            return ref.get() if boxes.is_box(ref) else ref[...]
        if name in _INTERNAL or name.startswith("__"):
            raise AttributeError(name)
        metadata = object.__getattribute__(self, "_var_metadata")
        if name in metadata:
            return metadata[name]
        if name == "sharding" and _placed_by_no_mesh(self._var_raw):  # see _sharding_names
            names = _sharding_names(metadata)
            if names is not None:
                return names
        if name in _PROPERTIES:  # a property raised AttributeError: its answer stands
            raise AttributeError(
                f"{type(self).__name__}.{name} is not available: its value "
                f"({type(self.get_raw_value()).__name__}) has no {name!r}."
            )
        if name in _REF_ATTRIBUTES:
            ref = object.__getattribute__(self, "_var_ref")
            if ref is not None and refs.is_ref(ref):  # read without copying the content
                return getattr(ref, name)
        if name in _VALUE_METADATA:  # not the array itself: not a read (donation.py)
            return getattr(self._var_raw, name)
        return getattr(self.raw_value, name)

    def __setattr__(self, name: str, value: Any) -> None:
        if name == "value":
            self.set_value(value)
        elif name in _FLAX_VARIABLE_SLOTS:
            object.__setattr__(self, name, value)
        elif name in _INTERNAL:
            raise AttributeError(f"{name} of a Variable is set through `.value` only")
        else:
            self.set_metadata(name, value)

    def __delattr__(self, name: str) -> None:
        self.del_metadata(name)

    # -- copies and state transfer (README, "Copies") ---------------------------------
    def replace(self: V, value: object = MISSING, **metadata: object) -> V:
        """Returns a new Variable of the same kind with ``value`` and/or metadata
        replaced, the flags kept.

        Raises:
          ValueError: ``metadata`` tries to change a flag (use ``nnx.with_vars``).
        """
        self._refuse_flag_change(metadata, "replace")
        new_value = self.raw_value if value is MISSING else value
        if isinstance(new_value, Variable):
            new_value = new_value.raw_value
        updated = {**self._var_metadata, **rename_sharding_keys(metadata)}
        return type(self)._from_parts(new_value, updated)

    def copy(self: V, value: object = MISSING, **updates: object) -> V:
        """Returns a new Variable of the same kind with the same value and metadata.

        Args:
          value: a value for the copy instead of this Variable's.
          **updates: metadata to change in the copy, flags included
            (``v.copy(ref=True)``, ``v.copy(hijax=False, out_sharding=...)``).

        Returns:
          A new Variable of ``type(self)``; this one is unchanged.

        >>> import flaxgraph as nnx
        >>> v = nnx.Param(1.0, note='a')
        >>> w = v.copy(2.0, note='b')
        >>> (float(w.value), w.note, v.note)
        (2.0, 'b', 'a')
        """
        if value is MISSING and not updates:
            return type(self)._from_parts(self.raw_value, self._var_metadata)
        if value is MISSING:
            value = self.get_value()
        metadata = {k: v for k, v in self._var_metadata.items() if k not in FLAG_KEYS}
        flags = {"ref": self.ref, "hijax": self.hijax, "mutable": self.mutable}
        return type(self)(value, **{**flags, **metadata, **updates})

    @classmethod
    def from_metadata(cls: type[V], value: object, metadata: Mapping[str, Any]) -> V:
        """A new Variable of this kind holding ``value``, with ``metadata`` (a dict as
        ``get_metadata()`` returns it; the flags ``hijax``/``ref`` in it apply).

        Example: ``nnx.Param.from_metadata(1.0, {'note': 'x', 'hijax': False})``.
        """
        given = dict(metadata)
        if given.get("eager_sharding") is True:  # the default: not stored
            del given["eager_sharding"]
        return cls(value, **given)

    def _with_flags(self: V, ref: bool, hijax: bool, mutable: bool) -> V:
        """A copy with these flags; ``TypeError`` if the value cannot live in a Ref/box."""
        metadata = {k: v for k, v in self._var_metadata.items() if k not in FLAG_KEYS}
        value = self.raw_value
        if (
            (ref or hijax)
            and not (refs.can_hold(value) or isinstance(value, jax.core.Tracer))
            and not (hijax and boxes.fits(value))
        ):
            raise TypeError(
                f"Cannot make the {type(self).__name__} holding a {type(value).__name__} "
                "Ref-backed: only arrays and numbers can live in a jax.Ref (and, with "
                "hijax=True, pytrees of arrays in a box"
                + ("" if boxes.AVAILABLE else f", but {boxes.UNAVAILABLE_REASON}")
                + ")."
            )
        store_flags(metadata, ref, hijax, mutable)
        return type(self)._from_parts(value, metadata)

    def to_state(self: V) -> V:
        """A copy of this Variable (same as ``copy()``).

        >>> import jax.numpy as jnp, flaxgraph as nnx
        >>> p = nnx.Param(jnp.ones(2))
        >>> s = p.to_state()
        >>> s is p, type(s).__name__
        (False, 'Param')
        """
        return self.copy()

    def copy_from(self, other: object) -> None:
        """Makes this Variable hold ``other``'s value and metadata (in place), its own
        flags kept.

        Args:
          other: a Variable of exactly the same class.

        Raises:
          ValueError: ``other`` is of another class ("Cannot copy from incompatible
            container"); a Ref-backed ``self`` and a value of another shape/dtype.
          TraceContextError: ``self`` was created in another JAX trace.

        >>> import jax.numpy as jnp, flaxgraph as nnx
        >>> a, b = nnx.Param(jnp.zeros(2)), nnx.Param(jnp.ones(2), note='b')
        >>> a.copy_from(b)
        >>> a[...], a.note
        (Array([1., 1.], dtype=float32), 'b')
        """
        if type(self) is not type(other):
            raise ValueError(
                f"Cannot copy from incompatible container, expected {type(self).__name__}, "
                f"got {type(other).__name__}.\nFix: copy between Variables of the same "
                f"kind, or convert first: `{type(self).__name__}(other.get_value())`."
            )
        if self is other:
            return
        self._transfer(other)

    def update_from_state(self, variable_state: object) -> None:
        """Makes this Variable hold ``variable_state``'s value and metadata (in place),
        keeping this Variable's own flags (``ref``, ``hijax``, ``mutable``).

        Args:
          variable_state: a Variable (any kind) whose value and metadata to take.

        Raises:
          ValueError: a Ref-backed ``self`` and a value of another shape/dtype.
          TraceContextError: ``self`` was created in another JAX trace.

        >>> import jax.numpy as jnp, flaxgraph as nnx
        >>> p = nnx.Param(jnp.zeros(2))
        >>> p.update_from_state(nnx.Param(jnp.ones(2)))
        >>> p[...]
        Array([1., 1.], dtype=float32)
        """
        self._transfer(variable_state)

    def _transfer(self, other: Any) -> None:
        self._check_trace("update")
        ours = self._var_metadata
        theirs = other._var_metadata
        if theirs is not ours:
            metadata = {k: v for k, v in theirs.items() if k not in FLAG_KEYS}
            metadata.update({k: ours[k] for k in FLAG_KEYS if k in ours})
        else:
            metadata = ours
        _install(self, other.raw_value)  # first: it may raise (Ref shape/dtype)
        object.__setattr__(self, "_var_metadata", metadata)

    def __reduce__(self) -> tuple[Callable[..., Variable[A]], tuple[object, dict[str, object]]]:
        # the trace token is neither copyable nor picklable: the copy takes the current one
        return (type(self)._from_parts, (self.raw_value, dict(self._var_metadata)))

    # -- axis hooks (flaxgraph/variablelib/axes.py does the transform's side) ---------
    def add_axis(self, axis_index: int, axis_name: object) -> None:
        """The hook a transform calls after adding an axis at ``axis_index``, once the
        per-axis metadata has it (README, "Axis metadata"); the base hook does nothing.
        Overrides call ``super()`` and keep ``add_axis``/``remove_axis`` inverses.

        Args:
          axis_index: the position of the new axis.
          axis_name: the transform's partition name, or ``None``. A *mapping*
            (``{nnx.PARTITION_NAME: 'batch'}``) inserts the axis into the metadata.

        >>> import jax.numpy as jnp, flaxgraph as nnx
        >>> v = nnx.Param(jnp.ones((2, 3)), out_sharding=('a', 'b'))
        >>> v.add_axis(0, {nnx.PARTITION_NAME: 'batch'})
        >>> v.out_sharding
        ('batch', 'a', 'b')
        """
        if isinstance(axis_name, Mapping):
            axes.insert_axis_metadata(self, axis_index, axis_name)

    def remove_axis(self, axis_index: int, axis_name: object) -> None:
        """The hook a transform calls after removing the axis at ``axis_index``
        (inverse of ``add_axis``; a mapping as ``axis_name`` removes the axis from
        the metadata, as a transform does).
        """
        if isinstance(axis_name, Mapping):
            axes.drop_axis_metadata(self, axis_index, axis_name)

    # -- the value's protocols (reads note a closure read; operators: after the class) -
    def __jax_array__(self) -> Any:
        return self._read_value()

    def __array__(self, dtype: Any = None, copy: object = None) -> np.ndarray:
        return np.asarray(self._read_value(), dtype=dtype)

    def __getitem__(self, key: object) -> Any:
        # Through get_value, so a subclass that overrides it is honoured (Flax 0.12).
        return self.get_value(index=key)

    def __setitem__(self, key: object, value: Any) -> None:
        storage = self._var_ref
        if key is Ellipsis and storage is not None:
            # a hijax Ref keeps its shape: a value that broadcasts fills it (a box takes any)
            if self.hijax and refs.is_ref(storage) and _fills_array(self, value):
                value = jnp.broadcast_to(value, storage.shape).astype(storage.dtype)
            self.set_value(value)
        elif key is Ellipsis and not _fills_array(self, value):
            self.set_value(value)
        else:  # ``v[...] = 2`` on an array writes into it (shape and dtype kept)
            self.set_value(value, index=key)

    def __delitem__(self, key: object) -> None:
        value: Any = self.get_value()
        if type(value) in (dict, list):  # a new container (see variable._updated)
            value = type(value)(value)
        del value[key]
        self.set_value(value)

    def __contains__(self, item: object) -> bool:
        _set_fresh(self, None)  # a read (the items may be handed out)
        return item in self._var_raw

    def __len__(self) -> int:
        return len(self._var_raw)

    def __iter__(self) -> Iterator[Any]:
        _set_fresh(self, None)
        return iter(self._var_raw)

    # No __bool__, as in Flax 0.12.8: Python takes a Variable's truth from __len__ (the
    # value's length), so an array with several elements is true and a scalar raises TypeError.

    def __int__(self) -> int:
        return int(self._var_raw)

    def __float__(self) -> float:
        return float(self._var_raw)

    def __index__(self) -> int:
        return operator.index(self._var_raw)

    def __complex__(self) -> complex:
        return complex(self._var_raw)

    def __round__(self, ndigits: int = 0) -> Any:
        """``round(v, ndigits)`` of the value (as Flax NNX 0.12's ``Variable.__round__``)."""
        return round(self._read_value(), ndigits)  # type: ignore[call-overload]

    # -- kind and flags ---------------------------------------------------------------
    # (last: ``type`` below is a property, later annotations in the class would see it)
    @property
    def var_type(self) -> type:
        """The Variable's kind, its class (same as ``.type``).

        >>> import jax.numpy as jnp, flaxgraph as nnx
        >>> nnx.Param(jnp.ones(2)).var_type is nnx.Param
        True
        """
        return type(self)

    @property
    def ref(self) -> bool:
        """Whether the Variable was made with ``ref=True`` (its value lives in a Ref)."""
        return bool(self._var_metadata.get("ref", False))

    @property
    def hijax(self) -> bool:
        """Whether the Variable was made with ``hijax=True``."""
        return bool(self._var_metadata.get("hijax", False))

    @property
    def mutable(self) -> bool:
        """``False`` for a read-only Variable (made with ``mutable=False``)."""
        return self._var_metadata.get("mutable", True) is not False

    @property
    def type(self) -> type[Variable[A]]:
        """The Variable's kind: its class."""
        return type(self)

    # -- identity and display -----------------------------------------------------------
    __hash__ = object.__hash__  # identity: Variables are references (kept after __eq__)

    # Display sits above this layer: it registers the renderers (flaxgraph/renderers.py).
    def __repr__(self) -> str:
        return RENDERERS.text("variable", self)

    def __treescope_repr__(self, path: object, subtree_renderer: object) -> object:
        return RENDERERS.treescope("variable", self, path, subtree_renderer)

    def _repr_mimebundle_(self, include: object = None, exclude: object = None) -> dict[str, Any]:
        return RENDERERS.mimebundle(self, include, exclude)


_PROPERTIES = frozenset(n for n, a in vars(Variable).items() if isinstance(a, property))


# -- Python operators: on the value; in-place ones (``v += 1``) return the same Variable


def _make_binary(op: Callable[[Any, Any], Any]) -> tuple[Callable[..., Any], ...]:
    def forward(self: Variable[Any], other: object) -> Any:
        if isinstance(other, Variable):
            other = other._read_value()
        return op(self._read_value(), other)

    def reflected(self: Variable[Any], other: object) -> Any:
        return op(other, self._read_value())

    def inplace(self: Variable[Any], other: object) -> Variable[Any]:
        if isinstance(other, Variable):
            other = other.raw_value
        self.set_value(op(self.raw_value, other))
        return self

    return forward, reflected, inplace


_BINARY: tuple[tuple[str, Callable[[Any, Any], Any]], ...] = (
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
)
_COMPARISONS: tuple[tuple[str, Callable[[Any, Any], Any]], ...] = (
    ("lt", operator.lt),
    ("le", operator.le),
    ("gt", operator.gt),
    ("ge", operator.ge),
    ("eq", operator.eq),
    ("ne", operator.ne),
    ("divmod", divmod),
)
_UNARY: tuple[tuple[str, Callable[[Any], Any]], ...] = (
    ("neg", operator.neg),
    ("pos", operator.pos),
    ("abs", operator.abs),
    ("invert", operator.invert),
    ("trunc", math.trunc),
    ("floor", math.floor),
    ("ceil", math.ceil),
)


def _install_operators(cls: type) -> None:
    """Sets the operator methods of the tables above on ``cls``."""
    for name, op in _BINARY:
        forward, reflected, inplace = _make_binary(op)
        setattr(cls, f"__{name}__", forward)
        setattr(cls, f"__r{name}__", reflected)
        setattr(cls, f"__i{name}__", inplace)
    for name, op in _COMPARISONS:
        setattr(cls, f"__{name}__", _make_binary(op)[0])
    cls.__rdivmod__ = _make_binary(divmod)[1]  # type: ignore[attr-defined]
    for name, unary_op in _UNARY:
        setattr(cls, f"__{name}__", _make_unary(unary_op))


def _make_unary(op: Callable[[Any], Any]) -> Callable[[Variable[Any]], Any]:
    def unary(self: Variable[Any]) -> Any:
        return op(self._read_value())

    return unary


_install_operators(Variable)


# -- module-level helpers of the class ---------------------------------------------------
def _fills_array(v: Variable[Any], value: Any) -> bool:
    """Whether ``v[...] = value`` fills the array (NumPy's ``a[...] = x``) instead of
    replacing it: a non-array into a plain array value, or a broadcastable one into a Ref."""
    ref = v._var_ref
    if ref is None:
        return isinstance(v._var_raw, jax.Array) and not hasattr(value, "shape")
    shape = tuple(np.shape(value)) if not isinstance(value, (dict, list, tuple)) else None
    if shape is None or shape == tuple(ref.shape):
        return False
    try:
        return np.broadcast_shapes(shape, tuple(ref.shape)) == tuple(ref.shape)
    except ValueError:
        return False


_METADATA_HOOKS = frozenset(METADATA_HOOKS)

# Attributes of the value that describe it without handing it out (``v.shape``, ``v.dtype``).
_VALUE_METADATA = frozenset(
    {"shape", "dtype", "ndim", "size", "itemsize", "nbytes", "sharding", "aval", "weak_type"}
)


def _placed_by_no_mesh(value: object) -> bool:
    """True for an array (or tracer) whose placement is not a ``NamedSharding``."""
    if not isinstance(value, jax.Array):
        return False
    try:
        placement = value.sharding
    except Exception:  # a tracer of a transform that tracks no placement
        return True
    return not isinstance(placement, jax.sharding.NamedSharding)


def _sharding_names(metadata: Mapping[str, Any]) -> Any:
    """``v.sharding`` of an array no mesh placed: its sharding names with a
    ``DeprecationWarning`` (as flax#2434 reads them), or ``None`` (then the placement)."""
    names = metadata.get("out_sharding")
    if not isinstance(names, (tuple, PartitionSpec)):
        return None
    warnings.warn(
        "Variable.sharding is deprecated for reading a Variable's sharding names; read "
        "out_sharding instead (v.out_sharding), or v.get_value().sharding for the "
        "array's placement.",
        DeprecationWarning,
        stacklevel=3,
    )
    return names


def _install(var: Variable[Any], value: object) -> None:
    """Puts ``value`` into ``var``'s storage (a Ref replaces the Ref or the slot)."""
    ref = var._var_ref
    if ref is not None and boxes.is_box(ref):
        boxes.write(
            type(var).__name__, ref, boxes.read(value) if boxes.is_box(value) else value, False
        )
    elif refs.is_ref(value):
        object.__setattr__(var, "_var_ref", value)
        if ref is None:  # a plain Variable becomes Ref-backed (it has no slot then)
            object.__delattr__(var, "_var_raw")
            _set_fresh(var, None)
            metadata = var._var_metadata
            if not metadata.get("hijax"):
                object.__setattr__(var, "_var_metadata", {**metadata, "ref": True})
    elif ref is None:
        object.__setattr__(var, "_var_raw", value)
        _set_fresh(var, None)
    else:
        refs.check_fits(type(var).__name__, ref, value)
        refs.write(type(var).__name__, ref, ..., value, False)


# Direct slot setters (C-level; bypass the guarded __setattr__): for construction.
_set_trace = Variable._var_trace.__set__  # type: ignore[attr-defined]

METADATA_SLOT = "_var_metadata"
"""The name of the metadata slot, for generated fast-path source (README)."""

metadata_of: Callable[[Variable[Any]], dict[str, Any]] = operator.attrgetter(METADATA_SLOT)
"""``metadata_of(v)``: ``v``'s metadata dict as stored; never mutate it (README)."""

write_metadata: Callable[[Variable[Any], dict[str, Any]], None] = Variable._var_metadata.__set__  # type: ignore[attr-defined]
"""``write_metadata(v, metadata)``: installs a new dict without ``set_metadata``'s checks."""
write_slot = Variable._var_raw.__set__  # type: ignore[attr-defined]
"""``write_slot(v, value)``: stores a plain Variable's value, nothing checked; a writer
also calls ``_set_fresh(v, None)`` unless it is ``nnx.jit``'s (``donation.py``)."""
_set_fresh = Variable._var_fresh.__set__  # type: ignore[attr-defined]
read_slot: Callable[[Variable[Any]], Any] = operator.attrgetter("_var_raw")
"""``read_slot(v)``: the value as stored, not a read that hands it out (``raw_value`` is
one): for ``nnx.jit``'s own reads and for what describes the value (``donation.py``)."""
mark_fresh: Callable[[Variable[Any], object], None] = _set_fresh
"""``mark_fresh(v, array)``: ``nnx.jit``'s write-back notes the array it installed, which
nothing outside it has seen; ``mark_fresh(v, None)`` forgets it (``donation.py``)."""
_set_ref = Variable._var_ref.__set__  # type: ignore[attr-defined]

trace_of: Callable[[Variable[Any]], object] = operator.attrgetter("_var_trace")
"""``trace_of(v)``: the JAX trace ``v`` was created in."""

storage_of: Callable[[Variable[Any]], Any] = operator.attrgetter("_var_ref")
"""``storage_of(v)``: ``v``'s ``jax.Ref`` or box, ``None`` for a plain Variable."""


def write_value(v: Variable[Any], value: Any) -> None:
    """Stores ``value`` (into the Ref or box, else the slot) without the user-facing checks."""
    ref = v._var_ref
    if ref is None:
        write_slot(v, value)
        _set_fresh(v, None)
    elif value is ref:
        return
    elif refs.is_ref(ref):
        value = value[...] if refs.is_ref(value) else value
        refs.write(type(v).__name__, ref, ..., value, v._var_trace != current_trace())
    else:  # a box
        value = boxes.read(value) if boxes.is_box(value) else value
        boxes.write(type(v).__name__, ref, value, v._var_trace != current_trace())


def is_variable(x: object) -> TypeGuard[Variable[Any]]:
    """Whether ``x`` is a Variable of any kind, whatever it holds (a raw ``jax.Ref`` or
    array is not one); narrows ``x`` for type checkers. A graph walk asks
    ``REGISTRY.kind_of(x) is Kind.VARIABLE`` instead (``docs/design.md``, "What a value is").

    Args:
      x: any value.

    Returns:
      ``True`` if ``x`` is an instance of ``Variable`` or of a subclass.

    >>> import flaxgraph as nnx, jax.numpy as jnp
    >>> from flaxgraph.variablelib import is_variable
    >>> is_variable(nnx.Param(jnp.ones(2))), is_variable(jnp.ones(2))
    (True, False)
    """
    return isinstance(x, Variable)


def is_ref_backed(v: Variable[Any]) -> bool:
    """Whether ``v`` keeps its value in a ``jax.Ref`` or a box (not in its slot)."""
    return v._var_ref is not None


def is_box_backed(v: Variable[Any]) -> bool:
    """Whether ``v`` is a hijax Variable keeping a pytree value in a box."""
    ref = v._var_ref
    return ref is not None and boxes.is_box(ref)


def _updated(current: Any, index: object, value: object, v: Variable[Any]) -> Any:
    """``current`` with ``current[index] = value``: a new array, dict or list (the
    transforms tell changes by identity), else in place (NumPy arrays)."""
    if isinstance(current, jax.Array):
        return current.at[index].set(value)
    if type(current) in _COPIED_CONTAINERS:
        current = type(current)(current)
    current[index] = value
    return current


_COPIED_CONTAINERS = (dict, list)


def _value_summary(value: object) -> str:
    shape = getattr(value, "shape", None)
    dtype = getattr(value, "dtype", None)
    if shape is not None and dtype is not None:
        return f"(shape={tuple(shape)}, dtype={dtype})"
    return ""


_VALUE_KEY = jax.tree_util.GetAttrKey("value")
_BOX_TYPE = boxes.BOX_TYPE
_Tracer = jax.core.Tracer


def _traced_storage(value: object) -> bool:
    """Whether the tracer ``value`` is a traced Ref or box."""
    return refs.is_ref(value) or boxes.is_box(value)


def _tree_flatten(v: Variable[Any]) -> tuple[tuple[Any], dict[str, Any]]:
    # child and aux data: README, "The three flags"
    ref = v._var_ref
    metadata = v._var_metadata
    if ref is None or metadata.get("mutable", True) is False:
        return (v.raw_value,), metadata
    return (ref,), metadata


def _tree_flatten_with_keys(v: Variable[Any]) -> tuple[tuple[tuple[Any, Any]], dict[str, Any]]:
    ref = v._var_ref
    metadata = v._var_metadata
    if ref is None or metadata.get("mutable", True) is False:
        return ((_VALUE_KEY, v.raw_value),), metadata
    return ((_VALUE_KEY, ref),), metadata


def _register_variable_pytree(cls: type[Variable[Any]]) -> None:
    new = object.__new__
    from_parts = cls._from_parts

    def unflatten(metadata: dict[str, Any], children: Any) -> Variable[Any]:
        # Runs once per Variable on every jax.tree.unflatten (jax.jit's outputs).
        value = children[0]
        t = type(value)
        if (
            "ref" in metadata
            or "hijax" in metadata
            or t is REF_TYPE
            or (issubclass(t, _Tracer) and refs.is_ref(value))
        ):
            return from_parts(value, metadata)
        obj: Variable[Any] = new(cls)  # a plain Variable: what _from_parts does, without its checks
        _set_trace(obj, TRACE_STATE.value)
        write_metadata(obj, metadata)
        _set_ref(obj, None)
        write_slot(obj, value)
        return obj

    jax.tree_util.register_pytree_with_keys(  # type: ignore[type-var]
        cls, _tree_flatten_with_keys, unflatten, _tree_flatten
    )


_register_variable_pytree(Variable)


class Param(Variable[A]):
    """A trainable parameter; what ``grad`` differentiates by default."""


class BatchStat(Variable[A]):
    """A running statistic (e.g. BatchNorm's mean and variance); not trained."""


class Cache(Variable[A]):
    """A cache (e.g. attention keys/values during autoregressive decoding)."""


class Intermediate(Variable[A]):
    """A value sown during a call with ``Module.sow``."""


class Perturbation(Intermediate[A]):
    """A zero-valued tap added by ``Module.perturb``; a kind of ``Intermediate``."""
