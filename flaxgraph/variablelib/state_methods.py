"""Flax NNX 0.12's state-transfer members of ``Variable``, as a mixin.

Flax code reaches through ``nnx.Variable`` (and so ``Param``, ``BatchStat``,
``RngState``…) for a handful of members that move a value and metadata between
Variables or describe one: ``copy_from``, ``update_from_state``, ``to_state``,
``set_raw_value``, ``create_value``, ``shape``, ``var_type``, ``sharding_names``
and ``required_metadata`` (``from_metadata`` is in ``variable.py``). They live here, apart from the
core of ``variable.py``, and ``Variable`` inherits them.

flaxgraph keeps its own rules while doing so: a Variable's metadata dict is never
mutated in place (a new dict is installed), the construction flags (``ref``,
``hijax``, ``mutable``) of the receiving Variable are kept, and a write checks the
trace the Variable belongs to (see ``Variable``).
"""

from __future__ import annotations

from typing import Any, TypeVar

from flaxgraph.variablelib import boxes, refs

V = TypeVar("V", bound="VariableStateMethods")

_FLAGS = ("ref", "hijax", "mutable")


class VariableStateMethods:
    """The members Flax NNX 0.12 code calls to move state between Variables."""

    __slots__ = ()

    #: The metadata keys every Variable answers for through its flags; they are
    #: left out of ``get_metadata(exclude_required=True)``.
    #: Source: Flax NNX 0.12 ``Variable.required_metadata`` (hijax, ref,
    #: eager_sharding; flaxgraph adds its ``mutable`` flag).
    required_metadata: frozenset[str] = frozenset((*_FLAGS, "eager_sharding"))

    @property
    def var_type(self) -> type:
        """The Variable's kind, its class (same as ``.type``).

        Example::

          >>> import jax.numpy as jnp, flaxgraph as nnx
          >>> nnx.Param(jnp.ones(2)).var_type is nnx.Param
          True

        Source: Flax NNX 0.12 ``Variable.var_type``.
        """
        return type(self)

    @property
    def shape(self) -> tuple[int, ...]:
        """The shape of the value (for an array value; read without copying a Ref).
        A ``shape`` metadata entry, if any, wins (as for every metadata attribute).

        Raises:
          AttributeError: the value has no ``shape`` (e.g. a Python list).

        Example::

          >>> import jax.numpy as jnp, flaxgraph as nnx
          >>> nnx.Param(jnp.ones((2, 3))).shape
          (2, 3)

        Source: Flax NNX 0.12 ``Variable.shape``.
        """
        metadata = self._var_metadata  # type: ignore[attr-defined]
        if "shape" in metadata:
            return metadata["shape"]
        return self.get_raw_value().shape  # type: ignore[attr-defined]

    @property
    def sharding_names(self) -> Any:
        """The mesh-axis names of the value: the ``sharding_names`` metadata, else
        ``out_sharding`` (Flax 0.12's name), else ``None``.

        Example::

          >>> import jax.numpy as jnp, flaxgraph as nnx
          >>> nnx.Param(jnp.ones((2, 3)), out_sharding=('a', None)).sharding_names
          ('a', None)

        Source: Flax NNX 0.12 ``Variable.sharding_names`` (deprecated there in favour
        of ``out_sharding``; flaxgraph also keeps a ``sharding_names`` metadata key).
        """
        metadata = self._var_metadata  # type: ignore[attr-defined]
        if "sharding_names" in metadata:
            return metadata["sharding_names"]
        return metadata.get("out_sharding")

    def create_value(self, value: Any) -> Any:
        """The hook a subclass may override to transform a value; returns ``value``.

        Flax calls it once at construction. flaxgraph's ``Variable.__init__`` does not
        call it (override ``__init__`` or ``set_value`` in a subclass instead); it is
        here so that code calling it explicitly works.

        Example::

          >>> import flaxgraph as nnx
          >>> nnx.Param(1.0).create_value(2.0)
          2.0

        Source: Flax NNX 0.12 ``Variable.create_value``.
        """
        return value

    def to_state(self: V) -> V:
        """A copy of this Variable (Flax 0.12 has no separate VariableState: same as
        ``copy()``).

        Example::

          >>> import jax.numpy as jnp, flaxgraph as nnx
          >>> p = nnx.Param(jnp.ones(2))
          >>> s = p.to_state()
          >>> s is p, type(s).__name__
          (False, 'Param')

        Source: Flax NNX 0.12 ``Variable.to_state`` (an alias of ``copy``).
        """
        return self.copy()  # type: ignore[attr-defined]

    def set_raw_value(self, value: Any, *, _unsafe_bypass_check: bool = False) -> None:
        """Replaces the storage: the value, or (given a ``jax.Ref``) the Ref itself.

        Unlike ``set_value`` this does not check shape/dtype against a Ref-backed
        value's Ref when a new Ref is given, nor the ``mutable`` flag.

        Args:
          value: the new value (any pytree) or a ``jax.Ref`` to hold from now on.
          _unsafe_bypass_check: skip the trace check (for library internals).

        Raises:
          TraceContextError: the Variable was created in another JAX trace.
          ValueError: a plain value of another shape/dtype for a Ref-backed Variable.

        Example::

          >>> import jax.numpy as jnp, flaxgraph as nnx
          >>> p = nnx.Param(jnp.zeros(2))
          >>> p.set_raw_value(jnp.ones(3))
          >>> p.shape
          (3,)

        Source: Flax NNX 0.12 ``Variable.set_raw_value``.
        """
        if not _unsafe_bypass_check:
            self._check_trace("set the raw value")  # type: ignore[attr-defined]
        _install(self, value)

    def copy_from(self, other: Any) -> None:
        """Makes this Variable hold ``other``'s value and metadata (in place).

        The flags of ``self`` (``ref``, ``hijax``, ``mutable``) are kept; a Ref-backed
        ``self`` gets ``other``'s value written into its own Ref.

        Args:
          other: a Variable of exactly the same class.

        Raises:
          ValueError: ``other`` is of another class ("Cannot copy from incompatible
            container"); a Ref-backed ``self`` and a value of another shape/dtype.
          TraceContextError: ``self`` was created in another JAX trace.

        Example::

          >>> import jax.numpy as jnp, flaxgraph as nnx
          >>> a, b = nnx.Param(jnp.zeros(2)), nnx.Param(jnp.ones(2), note='b')
          >>> a.copy_from(b)
          >>> a[...], a.note
          (Array([1., 1.], dtype=float32), 'b')

        Source: Flax NNX 0.12 ``Variable.copy_from``.
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

    def update_from_state(self, variable_state: Any) -> None:
        """Makes this Variable hold ``variable_state``'s value and metadata (in place),
        keeping this Variable's own flags (``ref``, ``hijax``, ``mutable``).

        Args:
          variable_state: a Variable (any kind) whose value and metadata to take.

        Raises:
          ValueError: a Ref-backed ``self`` and a value of another shape/dtype.
          TraceContextError: ``self`` was created in another JAX trace.

        Example::

          >>> import jax.numpy as jnp, flaxgraph as nnx
          >>> p = nnx.Param(jnp.zeros(2))
          >>> p.update_from_state(nnx.Param(jnp.ones(2)))
          >>> p[...]
          Array([1., 1.], dtype=float32)

        Source: Flax NNX 0.12 ``Variable.update_from_state``.
        """
        self._transfer(variable_state)

    def _transfer(self, other: Any) -> None:
        self._check_trace("update")  # type: ignore[attr-defined]
        ours = self._var_metadata  # type: ignore[attr-defined]
        theirs = other._var_metadata
        if theirs is not ours:
            metadata = {k: v for k, v in theirs.items() if k not in _FLAGS}
            metadata.update({k: ours[k] for k in _FLAGS if k in ours})
        else:
            metadata = ours
        _install(self, other.raw_value)  # first: it may raise (Ref shape/dtype)
        object.__setattr__(self, "_var_metadata", metadata)


def _install(var: Any, value: Any) -> None:
    """Puts ``value`` into ``var``'s storage (a Ref replaces the Ref or the slot; a
    box-backed Variable's box gets the new content)."""
    ref = var._var_ref
    if ref is not None and boxes.is_box(ref):
        boxes.write(
            type(var).__name__, ref, boxes.read(value) if boxes.is_box(value) else value, False
        )
    elif refs.is_ref(value):
        object.__setattr__(var, "_var_ref", value)
        if ref is None:  # a plain Variable becomes Ref-backed (it has no slot then)
            object.__delattr__(var, "raw_value")
            metadata = var._var_metadata
            if not metadata.get("hijax"):
                object.__setattr__(var, "_var_metadata", {**metadata, "ref": True})
    elif ref is None:
        object.__setattr__(var, "raw_value", value)
    else:
        refs.check_fits(type(var).__name__, ref, value)
        refs.write(type(var).__name__, ref, ..., value, False)
