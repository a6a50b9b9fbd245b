"""Flax's class-level value hooks of a Variable subclass (``on_get_value`` and the others).

A subclass defining them gets them installed once as its ``get_value``/``set_value``/
``create_value`` (so Variables without hooks pay nothing); constructing one warns with
Flax's ``UserWarning``. Hooks given as metadata are refused (``TypeError``).
Source: Flax NNX 0.12 ``Variable.__init__``/``get_value``/``set_value``.
"""

from __future__ import annotations

import warnings
from collections.abc import Callable
from typing import Any

HOOKS = ("on_get_value", "on_set_value", "on_create_value")
"""The hook method names, in Flax's spelling."""

METADATA_HOOKS = (
    "on_set_value",
    "on_get_value",
    "on_create_value",
    "on_add_axis",
    "on_remove_axis",
)
"""The hooks Flax takes as metadata or ``VariableMetadata`` fields (refused here)."""


def hook_refusal(what: str, hook: str) -> str:
    """The ``TypeError`` message for the value hook ``hook`` given as metadata (in ``what``)."""
    return (
        f"{what} got the value hook {hook!r}; flaxgraph Variables have no value hooks as "
        "metadata (Flax 0.12 deprecates them).\nFix: subclass the Variable and override "
        "the method (get_value / set_value / create_value / add_axis / remove_axis), or "
        f"define {hook}(self, value) on the subclass (applied as Flax applies it), e.g.\n"
        "  class Scaled(nnx.Param):\n"
        "    def get_value(self, **kw):\n"
        "      return super().get_value(**kw) * 2"
    )


def install_value_hooks(cls: type) -> None:
    """Wraps ``cls``'s ``get_value``/``set_value``/``create_value`` to apply the hooks it defines.

    The wrapper calls ``self.on_...``, so a subclass redefining a hook replaces it.
    """
    defined = [name for name in HOOKS if callable(vars(cls).get(name))]
    if not defined:
        return
    if "on_get_value" in defined and not _wrapped(cls, "get_value"):
        base_get = cls.get_value  # type: ignore[attr-defined]

        def get_value(self: Any, **kwargs: object) -> object:
            return self.on_get_value(base_get(self, **kwargs))

        _install(cls, "get_value", get_value, base_get)
    if "on_set_value" in defined and not _wrapped(cls, "set_value"):
        base_set = cls.set_value  # type: ignore[attr-defined]

        def set_value(self: Any, value: object, **kwargs: object) -> None:
            base_set(self, self.on_set_value(value), **kwargs)

        _install(cls, "set_value", set_value, base_set)
    if not _wrapped(cls, "create_value"):  # construction warns, as in Flax
        base_create = cls.create_value  # type: ignore[attr-defined]

        def create_value(self: object, value: object) -> object:
            warnings.warn(DEPRECATION, UserWarning, stacklevel=3)
            hook = getattr(self, "on_create_value", None)
            return base_create(self, value if hook is None else hook(value))

        _install(cls, "create_value", create_value, base_create)


DEPRECATION = (
    "Variable hooks are deprecated. Create your own Variable type and overload "
    "`get_value` and `set_value` instead."
)
"""The warning Flax NNX 0.12 gives when a Variable with value hooks is constructed."""


_MARK = "__flaxgraph_value_hook__"


def _wrapped(cls: type, name: str) -> bool:
    return getattr(getattr(cls, name), _MARK, False)


def _install(
    cls: type, name: str, wrapper: Callable[..., object], base: Callable[..., object]
) -> None:
    wrapper.__name__ = name
    wrapper.__qualname__ = f"{cls.__qualname__}.{name}"
    wrapper.__doc__ = base.__doc__
    setattr(wrapper, _MARK, True)
    setattr(cls, name, wrapper)
