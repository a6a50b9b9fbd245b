"""The metadata accessors of ``Variable``: ``get_metadata``, ``has_metadata``,
``set_metadata``, ``del_metadata``, as a mixin over the Variable's
``_var_metadata`` dict.

A Variable's metadata dict is never mutated in place: every change installs a new
dict, so copies made by split/merge can share it. The construction flags (``ref``,
``hijax``, ``mutable``) live in the same dict (only where set) but are not metadata
one may change here: ``nnx.with_vars`` makes a copy with other flags.

Source: Flax NNX 0.12 ``Variable.get_metadata``/``set_metadata``/``del_metadata``.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

FLAG_KEYS = ("ref", "hijax", "mutable")
"""Metadata names reserved for the construction flags (set them with ``with_vars``)."""


def store_flags(metadata: dict[str, Any], ref: bool, hijax: bool, mutable: bool) -> None:
    """Writes the flags that differ from the defaults into ``metadata`` (a Variable's
    metadata holds ``ref=True``, ``hijax=True`` and ``mutable=False`` only when set)."""
    if ref:
        metadata["ref"] = True
    if hijax:
        metadata["hijax"] = True
    if not mutable:
        metadata["mutable"] = False


class _Missing:
    def __repr__(self) -> str:
        return "MISSING"


MISSING: Any = _Missing()
"""The "no argument given" default of Variable methods."""


class MetadataOps:
    """Mixin of ``Variable`` (see the module docstring)."""

    __slots__ = ()
    # Provided by Variable: its metadata slot, trace check and flag properties.
    _var_metadata: dict[str, Any]
    _check_trace: Any
    hijax: bool
    ref: bool

    def get_metadata(
        self, name: str | None = None, default: Any = MISSING, *, exclude_required: bool = False
    ) -> Any:
        """Returns the metadata dict (a copy), or one entry.

        As in Flax NNX 0.12, the whole dict always lists the flags ``hijax``, ``ref``
        and ``eager_sharding`` (their values for this Variable) next to the metadata
        it was given; ``mutable`` appears when it is ``False``.

        Args:
          name: the entry to read; ``None`` for the whole dict.
          default: returned when ``name`` is absent.
          exclude_required: leave the flags (``hijax``, ``ref``, ``eager_sharding``,
            ``mutable``) out of the dict.

        Raises:
          KeyError: ``name`` is absent and no ``default`` was given.

        Example::

          >>> import flaxgraph as nnx
          >>> nnx.Param(1.0, note='x').get_metadata()
          {'note': 'x', 'hijax': False, 'ref': False, 'eager_sharding': True}

        Source: Flax NNX 0.12 ``Variable.get_metadata``.
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

    def set_metadata(self, *args: Any, **kwargs: Any) -> None:
        """Sets metadata: ``set_metadata('name', value)``, ``set_metadata(name=value)``
        or ``set_metadata(mapping)`` (replaces all metadata but the flags).

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
        for key in FLAG_KEYS:
            if key in updates and updates[key] != getattr(self, key):
                raise ValueError(
                    f"Cannot change the {key!r} flag of a {type(self).__name__} with "
                    f"set_metadata.\nFix: make a copy with the new flag: "
                    f"`nnx.with_vars(node, {key}={updates[key]!r})`."
                )
        updates = {k: v for k, v in updates.items() if k not in FLAG_KEYS}
        flags = {k: old[k] for k in FLAG_KEYS if k in old}
        # A new dict each time: copies made by split/merge share no mutable state.
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
