"""Defaults for new Variables: whether they keep their value in a ``jax.Ref``.

``nnx.var_defaults`` reads or changes two defaults that ``Variable(value)``
uses when ``ref=`` / ``hijax=`` are not given:

* ``ref``: the value lives in a JAX mutable array reference (``jax.new_ref``);
* ``hijax``: the Variable is marked ``hijax`` (in flaxgraph it is Ref-backed
  too, see ``flaxgraph/variablelib/variable.py``).

Called with no argument it returns the current ``VarDefaults``. Called with
arguments it sets them for the rest of the program *and* returns a context
manager that restores the previous defaults on exit, so both spellings work::

  >>> import flaxgraph as nnx
  >>> nnx.var_defaults()
  VarDefaults(hijax=False, ref=False)
  >>> with nnx.var_defaults(ref=True):
  ...   nnx.Param(1.0).ref
  True
  >>> nnx.var_defaults().ref
  False

The defaults are one scoped flag (``flaxgraph/config.py``), not a module global.

Source: Flax NNX 0.12 ``nnx.var_defaults`` (the "Hijax" guide).
"""

from __future__ import annotations

from types import TracebackType
from typing import NamedTuple

from flaxgraph.config import Flag


class VarDefaults(NamedTuple):
    """The defaults new Variables use for ``hijax`` and ``ref`` (both ``bool``)."""

    hijax: bool
    ref: bool


VAR_DEFAULTS: Flag[VarDefaults] = Flag("var_defaults", VarDefaults(hijax=False, ref=False))
"""The current defaults; changed only through ``var_defaults``."""


class VarDefaultsContext:
    """What ``var_defaults(...)`` returns when it changes the defaults.

    The change has already happened when this object exists; using it in a
    ``with`` block restores the defaults that were in force before the call when
    the block ends. Attribute access (``.hijax``, ``.ref``) reads the new defaults.
    """

    __slots__ = ("previous", "current")

    def __init__(self, previous: VarDefaults, current: VarDefaults):
        self.previous = previous
        self.current = current

    @property
    def hijax(self) -> bool:
        return self.current.hijax

    @property
    def ref(self) -> bool:
        return self.current.ref

    def __enter__(self) -> VarDefaultsContext:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        VAR_DEFAULTS.set_globally(self.previous)

    def __repr__(self) -> str:
        return f"VarDefaultsContext({self.current!r}, previous={self.previous!r})"


def var_defaults(
    *, hijax: bool | None = None, ref: bool | None = None
) -> VarDefaults | VarDefaultsContext:
    """Reads or sets the defaults for ``Variable(..., hijax=, ref=)``.

    Args:
      hijax: new default for ``hijax`` (``None``: unchanged).
      ref: new default for ``ref`` (``None``: unchanged).

    Returns:
      With no argument, the current ``VarDefaults(hijax, ref)``. Otherwise a
      ``VarDefaultsContext``: the new defaults are already in force; ``with`` it to
      restore the previous ones at the end of the block.

    Raises:
      TypeError: if ``hijax`` or ``ref`` is not a ``bool`` or ``None``.

    Example::

      >>> import flaxgraph as nnx
      >>> _ = nnx.var_defaults(ref=True)      # for the rest of the program
      >>> nnx.Variable(0.0).ref
      True
      >>> _ = nnx.var_defaults(ref=False)

    Source: Flax NNX 0.12 ``nnx.var_defaults``.
    """
    for name, value in (("hijax", hijax), ("ref", ref)):
        if value is not None and not isinstance(value, bool):
            raise TypeError(
                f"var_defaults({name}=...) takes True, False or None, got {type(value).__name__}."
            )
    previous = VAR_DEFAULTS.get()
    if hijax is None and ref is None:
        return previous
    current = VarDefaults(
        hijax=previous.hijax if hijax is None else hijax,
        ref=previous.ref if ref is None else ref,
    )
    VAR_DEFAULTS.set_globally(current)
    return VarDefaultsContext(previous, current)
