"""New Variables made from an existing one: ``replace``, ``copy``, ``from_metadata``,
re-flagged copies (``nnx.with_vars``) and what ``copy.copy``/``pickle`` rebuild.

``VariableCopies`` is a base class of ``Variable``; every copy is a new Variable of
the same kind, and this one is left unchanged. A Ref-backed Variable's copy made
outside any transform gets a Ref of its own (see ``Variable._from_parts``), a
box-backed one (a hijax Variable holding a pytree) a box of its own.

  >>> import flaxgraph as nnx
  >>> v = nnx.Param(1.0, note='a')
  >>> w = v.replace(2.0)
  >>> (float(w.value), w.note, float(v.value))
  (2.0, 'a', 1.0)

Source: Flax NNX 0.12 ``Variable.replace``, ``Variable.copy``,
``Variable.from_metadata`` and ``nnx.with_vars``.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, TypeVar

import jax

from flaxgraph.variablelib import boxes, refs
from flaxgraph.variablelib.metadata_ops import FLAG_KEYS, MISSING, store_flags

V = TypeVar("V", bound="VariableCopies")


class VariableCopies:
    """The copying methods of ``Variable`` (see the module docstring)."""

    __slots__ = ()
    raw_value: Any
    _var_metadata: dict[str, Any]

    def replace(self: V, value: Any = MISSING, **metadata: Any) -> V:
        """Returns a new Variable of the same kind with ``value`` and/or metadata replaced.

        The flags are kept (a Ref-backed Variable's copy gets its own Ref); ``self``
        is unchanged.

        Raises:
          ValueError: ``metadata`` tries to change a flag (use ``nnx.with_vars``).
        """
        for key in FLAG_KEYS:
            if key in metadata and metadata[key] != getattr(self, key):
                raise ValueError(
                    f"replace cannot change the {key!r} flag; use nnx.with_vars(node, "
                    f"{key}={metadata[key]!r})."
                )
        new_value = self.raw_value if value is MISSING else value
        if isinstance(new_value, VariableCopies):  # a Variable
            new_value = new_value.raw_value
        return type(self)._from_parts(new_value, {**self._var_metadata, **metadata})

    def _with_flags(self: V, ref: bool, hijax: bool, mutable: bool) -> V:
        """A new Variable of the same kind, value and metadata with these flags (a
        Ref-backed one gets its own Ref, holding the current value).

        Raises:
          TypeError: ``ref``/``hijax`` asked for a value that cannot live in a Ref.
        """
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

    @classmethod
    def from_metadata(cls: type[V], value: Any, metadata: Mapping[str, Any]) -> V:
        """A new Variable of this kind holding ``value``, with ``metadata`` (a dict as
        ``get_metadata()`` returns it; the flags ``hijax``/``ref`` in it apply).

        Example: ``nnx.Param.from_metadata(1.0, {'note': 'x', 'hijax': False})``.

        Source: Flax NNX 0.12 ``Variable.from_metadata``.
        """
        given = dict(metadata)
        if given.get("eager_sharding") is True:  # the default: not stored
            del given["eager_sharding"]
        return cls(value, **given)

    def copy(self: V, value: Any = MISSING, **updates: Any) -> V:
        """Returns a new Variable of the same kind with the same value and metadata
        (a Ref-backed Variable's copy gets its own Ref).

        Args:
          value: a value for the copy instead of this Variable's.
          **updates: metadata to change in the copy, flags included
            (``v.copy(ref=True)``, ``v.copy(hijax=False, sharding=...)``).

        Returns:
          A new Variable of ``type(self)``; this one is unchanged.

        Example::

          >>> import flaxgraph as nnx
          >>> v = nnx.Param(1.0, note='a')
          >>> w = v.copy(2.0, note='b')
          >>> (float(w.value), w.note, v.note)
          (2.0, 'b', 'a')

        Source: Flax NNX 0.12 ``Variable.copy``.
        """
        if value is MISSING and not updates:
            return type(self)._from_parts(self.raw_value, self._var_metadata)
        if value is MISSING:
            value = self.get_value()
        metadata = {k: v for k, v in self._var_metadata.items() if k not in FLAG_KEYS}
        flags = {"ref": self.ref, "hijax": self.hijax, "mutable": self.mutable}
        return type(self)(value, **{**flags, **metadata, **updates})

    def __reduce__(self) -> Any:
        # copy.copy/deepcopy/pickle: rebuild through _from_parts (the trace token is
        # neither copyable nor picklable; the copy belongs to the trace it is made in).
        return (type(self)._from_parts, (self.raw_value, dict(self._var_metadata)))
