"""Defaults for new Variables: whether they keep their value in a ``jax.Ref`` (``var_defaults``).

The defaults are one scoped flag (``flaxgraph/config.py``). Source: Flax NNX 0.12
``nnx.var_defaults`` (the "Hijax" guide).
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Callable, Iterator, Mapping
from types import TracebackType
from typing import Any, TypeVar, cast

from flaxgraph.config import Flag

F = TypeVar("F", bound=Callable[..., Any])


@dataclasses.dataclass(frozen=True)
class VarDefaults(Mapping[str, bool]):
    """The defaults new Variables use for ``hijax`` and ``ref`` (both ``bool``).

    Read as attributes (``d.hijax``) or as a read-only mapping (``d['ref']``, ``**d``).
    """

    hijax: bool
    ref: bool

    def __getitem__(self, key: str) -> bool:
        if key not in ("hijax", "ref"):
            raise KeyError(key)
        typed: bool = getattr(self, key)
        return typed

    def __iter__(self) -> Iterator[str]:
        return iter(("hijax", "ref"))

    def __len__(self) -> int:
        return 2


VAR_DEFAULTS: Flag[VarDefaults] = Flag("var_defaults", VarDefaults(hijax=False, ref=False))
"""The current defaults; changed only through ``var_defaults``."""


def check_flag(caller: str, name: str, value: object) -> bool | None:
    """``value`` if it is a ``bool`` or ``None``, else ``TypeError`` naming ``caller(name=...)``."""
    if value is None or isinstance(value, bool):
        return value
    raise TypeError(f"{caller}({name}=...) takes True, False or None, got {type(value).__name__}.")


class VarDefaultsContext:
    """What ``var_defaults(...)`` returns when it changes the defaults (already changed).

    Left alone, the new defaults hold for the rest of the program; as a ``with`` block the
    previous ones come back at its end; as a decorator the change is undone at once and
    re-applied around every call. ``.hijax`` and ``.ref`` read the new defaults.
    """

    __slots__ = ("previous", "current", "changes")

    def __init__(self, previous: VarDefaults, current: VarDefaults, changes: dict[str, bool]):
        self.previous = previous
        self.current = current
        self.changes = changes  # only the fields the call gave

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
        VAR_DEFAULTS.set_current(self.previous)

    def __call__(self, fn: F) -> F:
        """Decorator use: ``fn`` runs with the given defaults."""
        VAR_DEFAULTS.set_current(self.previous)
        if not callable(fn):
            raise TypeError(
                f"var_defaults(...) used as a decorator needs a function, got "
                f"{type(fn).__name__}. Write @nnx.var_defaults(hijax=True) above a def, "
                "or use it in a with block."
            )
        changes = self.changes

        @functools.wraps(fn)
        def with_var_defaults(*args: object, **kwargs: object) -> object:
            with VAR_DEFAULTS.scoped(dataclasses.replace(VAR_DEFAULTS.get(), **changes)):
                return fn(*args, **kwargs)

        return cast(F, with_var_defaults)

    def __repr__(self) -> str:
        return f"VarDefaultsContext({self.current!r}, previous={self.previous!r})"


def var_defaults(
    *, hijax: bool | None = None, ref: bool | None = None
) -> VarDefaults | VarDefaultsContext:
    """Reads or sets the defaults for ``Variable(..., hijax=, ref=)``.

    Args:
      hijax: new default for ``hijax`` (``None``: unchanged).
      ref: new default for ``ref`` (``None``: unchanged); a pytree value is box-backed
        under ``hijax`` and not affected by ``ref``.

    Returns:
      With no argument, the current ``VarDefaults``; otherwise a ``VarDefaultsContext``
      (the new defaults are in force: a ``with`` block or a decorator scopes them).

    Raises:
      TypeError: ``hijax`` or ``ref`` is not a ``bool`` or ``None``.

    >>> import flaxgraph as nnx
    >>> nnx.var_defaults()
    VarDefaults(hijax=False, ref=False)
    >>> with nnx.var_defaults(ref=True):
    ...   nnx.Param(1.0).ref
    True
    >>> nnx.var_defaults().ref
    False
    """
    for name, value in (("hijax", hijax), ("ref", ref)):
        check_flag("var_defaults", name, value)
    previous = VAR_DEFAULTS.get()
    if hijax is None and ref is None:
        return previous
    current = VarDefaults(
        hijax=previous.hijax if hijax is None else hijax,
        ref=previous.ref if ref is None else ref,
    )
    VAR_DEFAULTS.set_current(current)
    changes = {k: v for k, v in (("hijax", hijax), ("ref", ref)) if v is not None}
    return VarDefaultsContext(previous, current, changes)
