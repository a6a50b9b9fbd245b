"""Variables: mutable boxes that hold a model's state, tagged with a kind.

A ``Variable`` holds one value (usually a ``jax.Array``) plus a dict of
metadata. Its *kind* is its class: ``Param`` for trainable parameters,
``BatchStat`` for running statistics, ``Cache`` for decoding caches,
``Intermediate`` for values sown during a call, ``Perturbation`` for the
zero-valued taps of ``Module.perturb``. Defining ``class Count(Variable): pass``
makes a new kind that filters can select.

A Variable behaves like its value where it is used as one: ``x @ layer.kernel +
layer.bias``, ``v.shape``, ``v[0]``, ``jnp.asarray(v)``. Read it with ``v[...]``
(or ``v.get_value()``, ``v.value``) and write it with ``v[...] = x`` (or
``v.set_value(x)``, ``v.value = x``); in-place operators (``v[...] += x``,
``v += 1``) update the value and keep the *same* Variable, so every reference to
it sees the change. Metadata is given as keyword arguments and read as
attributes or with ``get_metadata``::

  >>> import jax.numpy as jnp, flaxgraph as nnx
  >>> w = nnx.Param(jnp.ones((3, 4)), sharding=('data', None))
  >>> w.shape, w.sharding
  ((3, 4), ('data', None))
  >>> w[...] += 1.0
  >>> float(w[0, 0])
  2.0

Three flags, set at construction (``nnx.with_vars`` makes re-flagged copies):

* ``ref=True``: the value lives in a ``jax.Ref`` (``flaxgraph/variablelib/refs.py``);
  ``v.get_raw_value()`` is the Ref, ``v[...]`` its current content, and writes go
  into the Ref. flaxgraph transforms read the content on the way in and write
  the result into the same Ref on the way out, so ``nnx.jit``/``grad``/``vmap``/
  ``scan`` treat it exactly as a plain Variable; as a JAX pytree its leaf is the
  Ref itself, so raw ``jax.jit`` sees a mutable input (and ``jax.tree.map`` over
  a State of such Variables gets Refs: read them with ``x[...]``).
* ``hijax=True``: Flax's "hijax" Variables are their own JAX type. flaxgraph has
  no such type: a hijax Variable is Ref-backed (as above) and marked ``hijax``.
  A hijax Variable whose value is a pytree (a dict, a list…, ``{}`` included) keeps
  it in JAX's mutable box instead (``flaxgraph/variablelib/boxes.py``): the same
  rules hold (the box is its pytree leaf, raw ``jax.jit`` writes reach the caller,
  copies get their own box, flaxgraph transforms read and write the content), and
  since a box holds any pytree, ``v[key] = x`` may add entries, under ``jax.jit``
  too. ``v[...]`` is the whole pytree. Where this JAX has no box, such a value
  raises ``TypeError``.
* ``mutable=False``: a read-only Variable: writes raise ``ValueError``; as a JAX
  pytree its leaf is its value (not a Ref), so raw ``jax.grad`` accepts it.

Non-default flags appear in the metadata (``ref=True``, ``hijax=True``,
``mutable=False``) and travel with copies and through transforms; inside a
transform a Ref-backed Variable's copy holds the traced value directly.
Defaults for ``ref``/``hijax`` come from ``nnx.var_defaults``.

A Variable records the JAX trace it was created in; setting its value or
metadata from another trace (inside a transform that captured it by closure)
raises ``TraceContextError`` instead of silently leaking a tracer. A captured
Ref-backed Variable may be written where JAX allows it (``jit``, ``scan``).

Variables are also JAX pytrees (the value is the child, the kind and metadata are
static), so ``jax.tree.map`` over a ``State`` keeps the Variable boxes.

Source: Flax NNX ``Variable`` API (0.12) and its guides "Variables" and "Hijax";
in-place operators as in Flax NNX's "Transformations" guide.
"""

from __future__ import annotations

import operator
from collections.abc import Callable
from typing import Any, Generic, TypeVar

import jax

from flaxgraph.errors import TraceContextError, numbered_fixes
from flaxgraph.mesh_context import place_at_creation
from flaxgraph.renderers import RENDERERS
from flaxgraph.tracing import TRACE_STATE, current_trace, is_top_level
from flaxgraph.variablelib import axes, boxes, refs
from flaxgraph.variablelib.axes import AxisHooks
from flaxgraph.variablelib.closure_watch import note_read
from flaxgraph.variablelib.copies import VariableCopies
from flaxgraph.variablelib.defaults import VAR_DEFAULTS
from flaxgraph.variablelib.metadata_ops import FLAG_KEYS as FLAG_KEYS
from flaxgraph.variablelib.metadata_ops import MISSING as MISSING
from flaxgraph.variablelib.metadata_ops import MetadataOps, store_flags
from flaxgraph.variablelib.state_methods import VariableStateMethods
from flaxgraph.variablelib.value_ops import ValueOps

A = TypeVar("A")
V = TypeVar("V", bound="Variable[Any]")

PARTITION_NAME = axes.PARTITION_NAME

_INTERNAL = frozenset({"raw_value", "_var_metadata", "_var_trace", "_var_ref"})
_REF_ATTRIBUTES = frozenset({"shape", "dtype", "ndim", "size", "sharding"})


def _flag(name: str, value: Any) -> bool | None:
    if value is None or isinstance(value, bool):
        return value
    raise TypeError(f"Variable({name}=...) takes True, False or None, got {type(value).__name__}.")


class Variable(MetadataOps, VariableStateMethods, VariableCopies, ValueOps, AxisHooks, Generic[A]):
    """A mutable box holding one value and a dict of metadata.

    Args:
      value: the value to hold, usually a ``jax.Array`` (any shape and dtype); any
        pytree is allowed. A ``VariableMetadata`` or axis-metadata box
        (``nnx.Partitioned``) is unboxed and its metadata joins ``metadata``; a
        ``jax.Ref`` becomes this Variable's storage.
      hijax: mark the Variable ``hijax`` (it is then Ref-backed, or box-backed for
        a pytree value, see the module docstring). ``None``:
        ``nnx.var_defaults().hijax``.
      ref: keep the value in a ``jax.Ref``. ``None``: ``nnx.var_defaults().ref``.
        Only arrays and numbers can live in a Ref: when the default (not an
        explicit ``ref=True``) asks for one, other values stay plain.
      mutable: ``False`` makes the Variable read-only. ``None``: ``True``.
      **metadata: arbitrary keyword metadata, readable as attributes
        (``Param(x, sharding=('a', None)).sharding``). ``out_sharding`` (Flax
        0.12's name), ``sharding`` and ``sharding_names`` are plain tuples of
        mesh-axis names (or ``None``); no device mesh is needed to hold them.
        Created under an active mesh (``jax.set_mesh``) or with ``mesh=``
        metadata, the value is placed with that sharding at once unless eager
        sharding is off (see ``flaxgraph/mesh_context.py``).

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

    Example::

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

    Source: Flax NNX 0.12 ``nnx.Variable`` (its ``hijax``/``ref`` arguments and the
    ``mutable`` flag of ``nnx.with_vars``).
    """

    __slots__ = ("raw_value", "_var_metadata", "_var_trace", "_var_ref")

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
        if metadata and not (refs.is_ref(value) or boxes.is_box(value)):
            # eager sharding: placed at creation
            value = place_at_creation(value, metadata, type(self).__name__)
        hijax, ref, mutable = _flag("hijax", hijax), _flag("ref", ref), _flag("mutable", mutable)
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
            object.__setattr__(self, "raw_value", value)

    # -- construction without __init__ (used by merge, pytree unflatten) -----
    @classmethod
    def _from_parts(cls: type[V], value: Any, metadata: dict[str, Any], trace: object = None) -> V:
        # ``metadata`` may be shared: a Variable's metadata dict is never mutated in
        # place (every change installs a new dict), so copies can share it.
        obj = object.__new__(cls)
        _set_trace(obj, current_trace() if trace is None else trace)
        write_metadata(obj, metadata)
        t = type(value)  # a Ref or a box (concrete or traced) is the storage itself
        if t is _REF_TYPE or t is _BOX_TYPE or (issubclass(t, _Tracer) and _traced_storage(value)):
            _set_ref(obj, value)
        elif (
            metadata
            and (metadata.get("ref") or metadata.get("hijax"))
            and refs.can_hold(value)
            and is_top_level()
        ):
            # a copy of a Ref-backed Variable (split, copy, pickle…) outside any
            # transform: its own Ref, independent of the original's. (Inside a
            # transform the copy holds the value directly; the lift writes it back.)
            _set_ref(obj, refs.new_ref(value))
        elif metadata and metadata.get("hijax") and boxes.can_hold(value) and is_top_level():
            _set_ref(obj, boxes.new_box(value))  # the same for a box-backed one
        else:
            _set_ref(obj, None)
            write_slot(obj, value)
        return obj

    # -- trace guard ------------------------------------------------------------
    def _check_trace(self, what: str) -> None:
        if self._var_trace != current_trace():
            raise TraceContextError(
                f"Cannot {what} of {type(self).__name__}{_value_summary(self.raw_value)}: "
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
        """The trace check before a graph update writes the value (``nnx.update``,
        a transform's write-back): a Ref-backed Variable may be written from another
        trace where JAX allows it (``refs.write`` reports where it does not)."""
        if self._var_ref is None:
            self._check_trace("update")

    def _check_mutable(self) -> None:
        if self._var_metadata.get("mutable", True) is False:
            raise ValueError(
                f"Cannot write the read-only {type(self).__name__}"
                f"{_value_summary(self.raw_value)}: it was made with mutable=False.\n"
                "Fix: write to the original Variable, or make a writable copy with "
                "`nnx.with_vars(node, mutable=True)`."
            )

    def _check_fits(self, value: Any) -> None:
        """Raises ``ValueError`` if ``value`` cannot replace the value (a Ref-backed
        Variable keeps its shape and dtype); used before any write is made."""
        ref = self._var_ref
        if ref is not None and value is not ref and refs.is_ref(ref):
            refs.check_fits(type(self).__name__, ref, value)

    # -- value ------------------------------------------------------------------
    @property
    def value(self) -> A:
        """The held value (read and write; writing checks the trace, see the class)."""
        if self._var_trace is not TRACE_STATE.value:
            note_read(self)  # a read by closure inside a transform (closure_watch.py)
        return self.raw_value

    def _read_value(self) -> A:
        if self._var_trace is not TRACE_STATE.value:
            note_read(self)
        return self.raw_value

    @value.setter
    def value(self, value: A) -> None:
        """The held value (read and write; writing checks the trace, see the class)."""
        self.set_value(value)

    def get_value(self, *, index: Any = MISSING) -> A:
        """Returns the value, or ``value[index]`` (same as ``v[...]`` / ``v[index]``)."""
        if self._var_trace is not TRACE_STATE.value:
            note_read(self)  # a read by closure inside a transform (closure_watch.py)
        if index is MISSING:
            return self.raw_value
        ref = self._var_ref
        if ref is not None and refs.is_ref(ref):
            return ref[index]
        value = self.raw_value
        if index is Ellipsis and "hijax" in self._var_metadata and boxes.fits(value):
            return value  # a hijax pytree (in its box, or its copy inside a transform)
        return value[index]  # type: ignore[index]

    def set_value(self, value: A, *, index: Any = MISSING) -> None:
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
                value = _updated(self.raw_value, index, value, self)
            write_slot(self, value)
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
                value = value[...]
            refs.check_fits(type(self).__name__, ref, value)
            index = ...
        refs.write(type(self).__name__, ref, index, value, self._var_trace != current_trace())

    def _check_settable(self) -> None:
        """Raises what ``set_value`` would raise before it computes anything: for
        callers (``RngStream``) whose new value is computed from values that may be
        tracers of another trace."""
        self._check_mutable()
        if self._var_ref is None:
            self._check_trace("set the value")

    def _stored_metadata(self) -> dict[str, Any]:
        """The metadata as stored (flags only where set), for copies that must keep
        exactly this Variable's metadata (``_from_parts``)."""
        return dict(self._var_metadata)

    def get_raw_value(self) -> Any:
        """The storage: the ``jax.Ref`` of a Ref-backed Variable, the box of a
        box-backed one, else the value."""
        ref = self._var_ref
        return self.raw_value if ref is None else ref

    @property
    def type(self) -> type[Variable[A]]:
        """The Variable's kind: its class."""
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

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        """Calls the value (a Variable holding a callable proxies the call, as in
        Flax NNX 0.12).

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

    # -- metadata ---------------------------------------------------------------
    def __getattr__(self, name: str) -> Any:
        # Only reached when normal lookup fails: a Ref-backed Variable's value (its
        # raw_value slot is empty), then metadata, then the value's attributes.
        if name == "raw_value":
            ref = object.__getattribute__(self, "_var_ref")
            if ref is None:
                raise AttributeError(name)
            return ref.get() if boxes.is_box(ref) else ref[...]
        if name in _INTERNAL or name.startswith("__"):
            raise AttributeError(name)
        metadata = object.__getattribute__(self, "_var_metadata")
        if name in metadata:
            return metadata[name]
        if name in _REF_ATTRIBUTES:
            ref = object.__getattribute__(self, "_var_ref")
            if ref is not None and refs.is_ref(ref):  # read without copying the content
                return getattr(ref, name)
        return getattr(self.raw_value, name)

    def __setattr__(self, name: str, value: Any) -> None:
        if name == "value":
            self.set_value(value)
        elif name in _INTERNAL:
            raise AttributeError(f"{name} of a Variable is set through `.value` only")
        else:
            self.set_metadata(name, value)

    def __delattr__(self, name: str) -> None:
        self.del_metadata(name)

    __hash__ = object.__hash__  # identity: Variables are references

    # Display sits above this layer: it registers the renderers (flaxgraph/renderers.py).
    def __repr__(self) -> str:
        return RENDERERS.text("variable", self)

    def __treescope_repr__(self, path: Any, subtree_renderer: Any) -> Any:
        return RENDERERS.treescope("variable", self, path, subtree_renderer)

    def _repr_mimebundle_(self, include: Any = None, exclude: Any = None) -> dict[str, Any]:
        return RENDERERS.mimebundle(self, include, exclude)

    # -- pytree ------------------------------------------------------------------------
    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        _register_variable_pytree(cls)


# Direct slot setters (C-level; bypass the guarded __setattr__): for construction.
_set_trace = Variable._var_trace.__set__  # type: ignore[attr-defined]

METADATA_SLOT = "_var_metadata"
"""The name of the slot that holds a Variable's metadata dict, for source code generated
at run time that must read it at attribute speed (the transforms' compiled fast-path
checks, ``flaxgraph/transforms/plan_code.py``). Other code outside this package calls
``metadata_of``. (Flax code may read ``v._var_metadata`` itself: it stays.)"""

metadata_of: Callable[[Variable[Any]], dict[str, Any]] = operator.attrgetter(METADATA_SLOT)
"""``metadata_of(v)``: the Variable ``v``'s metadata dict *as stored* (flags only where
set, see ``get_metadata`` for Flax's view). A C-level call for the engine's hot loops
(split, merge, update, the transforms' fast path) outside this package. Never mutate
the dict: install a new one with ``write_metadata``; that a changed Variable has a new
dict is how the fast path tells nothing changed (``docs/design.md``, "The fast path")."""

write_metadata: Callable[[Variable[Any], dict[str, Any]], None] = Variable._var_metadata.__set__  # type: ignore[attr-defined]
"""``write_metadata(v, metadata)``: installs ``metadata`` (a new dict, never mutated
afterwards) as ``v``'s metadata without the checks of ``set_metadata`` (trace, flags):
for graph updates, transforms' write-back and restoring a saved dict, whose callers
validated first. C-level, like ``metadata_of``."""
write_slot = Variable.raw_value.__set__  # type: ignore[attr-defined]
_set_ref = Variable._var_ref.__set__  # type: ignore[attr-defined]


def write_value(v: Variable[Any], value: Any) -> None:
    """Stores ``value`` without the user-facing checks (graph updates, transforms'
    write-back, which validate first): into the Ref of a Ref-backed Variable (whose
    shape and dtype ``Variable._check_fits`` checked), else in the slot."""
    ref = v._var_ref
    if ref is None:
        write_slot(v, value)
    elif value is ref:
        return
    elif refs.is_ref(ref):
        value = value[...] if refs.is_ref(value) else value
        refs.write(type(v).__name__, ref, ..., value, v._var_trace != current_trace())
    else:  # a box
        value = boxes.read(value) if boxes.is_box(value) else value
        boxes.write(type(v).__name__, ref, value, v._var_trace != current_trace())


def is_ref_backed(v: Variable[Any]) -> bool:
    """Whether ``v`` keeps its value in a ``jax.Ref`` or a box (not in its slot):
    reads and writes go through the storage (see ``is_box_backed``)."""
    return v._var_ref is not None


def is_box_backed(v: Variable[Any]) -> bool:
    """Whether ``v`` is a hijax Variable keeping a pytree value in a box
    (``flaxgraph/variablelib/boxes.py``); the transforms' fast path, which reads and
    installs Ref arrays directly, leaves graphs holding such Variables to the
    general path."""
    ref = v._var_ref
    return ref is not None and boxes.is_box(ref)


def _updated(current: Any, index: Any, value: Any, v: Variable[Any]) -> Any:
    """``current`` with ``current[index] = value``: functional for JAX arrays, a new
    container for dicts and lists (so a changed value is a new object: the
    transforms tell unchanged values by identity; Flax's ``get_value`` hands out
    copies anyway), in place for other mutable values (NumPy arrays)."""
    if isinstance(current, jax.Array):
        return current.at[index].set(value)
    if type(current) in _COPIED_CONTAINERS:
        current = type(current)(current)
    current[index] = value
    return current


_COPIED_CONTAINERS = (dict, list)


def _value_summary(value: Any) -> str:
    shape = getattr(value, "shape", None)
    dtype = getattr(value, "dtype", None)
    if shape is not None and dtype is not None:
        return f"(shape={tuple(shape)}, dtype={dtype})"
    return ""


_VALUE_KEY = jax.tree_util.GetAttrKey("value")
_REF_TYPE = jax.Ref
_BOX_TYPE = boxes.BOX_TYPE
_Tracer = jax.core.Tracer


def _traced_storage(value: Any) -> bool:
    """Whether the tracer ``value`` is a traced Ref or box."""
    return refs.is_ref(value) or boxes.is_box(value)


def _tree_flatten(v: Variable[Any]) -> tuple[tuple[Any], dict[str, Any]]:
    # The aux data is the metadata dict itself: JAX compares aux data with == (dicts
    # compare as the sorted items did) and does not hash it, and a Variable's
    # metadata dict is never mutated in place, so sharing it is safe and costs nothing.
    # A writable Ref-backed Variable shows JAX its Ref (raw jax.jit then sees a
    # mutable input); a read-only one shows its value (raw jax.grad accepts it).
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


def _register_variable_pytree(cls: type) -> None:
    new = object.__new__
    from_parts = cls._from_parts  # type: ignore[attr-defined]

    def unflatten(metadata: dict[str, Any], children: Any) -> Variable[Any]:
        # Runs once per Variable on every jax.tree.unflatten (jax.jit's outputs).
        value = children[0]
        t = type(value)
        if (
            "ref" in metadata
            or "hijax" in metadata
            or t is _REF_TYPE
            or (issubclass(t, _Tracer) and refs.is_ref(value))
        ):
            return from_parts(value, metadata)  # type: ignore[no-any-return]
        obj = new(cls)  # a plain Variable: what _from_parts does, without its checks
        _set_trace(obj, TRACE_STATE.value)
        write_metadata(obj, metadata)
        _set_ref(obj, None)
        write_slot(obj, value)
        return obj  # type: ignore[no-any-return]

    jax.tree_util.register_pytree_with_keys(cls, _tree_flatten_with_keys, unflatten, _tree_flatten)


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
    """A zero-valued tap added by ``Module.perturb`` to read gradients of activations.

    A kind of ``Intermediate`` (as in Flax NNX 0.12): an ``nnx.Intermediate``
    filter also selects perturbations."""
