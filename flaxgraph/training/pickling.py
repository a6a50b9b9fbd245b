"""Pickling the static callables of training objects (optax transformations, filters).

See the package README, "Pickling". Source: the ``pickle`` protocol (``__reduce__``,
``__getstate__``/``__setstate__``, ``__deepcopy__``); cloudpickle; flax#4247.
"""

from __future__ import annotations

import pickle
from typing import Any

__all__ = ["ByValue", "unwrap", "wrap"]


class ByValue:
    """A value (``what`` names it in errors) that ``pickle`` serialises on its own with cloudpickle; a copy unwraps it.

    ``pickle.loads`` and ``copy.copy``/``deepcopy`` give the value itself. Pickling raises
    ``pickle.PicklingError`` naming ``what`` if cloudpickle is missing and ``pickle`` refuses.

    >>> import pickle, optax
    >>> from flaxgraph.training.pickling import ByValue
    >>> pickle.loads(pickle.dumps(ByValue(optax.sgd(0.1), 'tx'))).init({'w': 1.0})
    (EmptyState(), EmptyState())
    """

    __slots__ = ("value", "what")

    def __init__(self, value: Any, what: str):
        self.value = value
        self.what = what

    def __reduce__(self) -> Any:
        return (pickle.loads, (_dumps(self.value, self.what),))

    def __copy__(self) -> Any:
        return self.value

    def __deepcopy__(self, memo: Any) -> Any:
        return self.value


def wrap(attributes: dict[str, Any], names: tuple[str, ...], owner: str) -> dict[str, Any]:
    """A copy of ``attributes`` whose ``names`` (those present) are wrapped in ``ByValue``."""
    return {k: ByValue(v, f"{owner}.{k}") if k in names else v for k, v in attributes.items()}


def unwrap(attributes: dict[str, Any]) -> dict[str, Any]:
    """``attributes`` with every ``ByValue`` replaced by its value."""
    return {k: v.value if isinstance(v, ByValue) else v for k, v in attributes.items()}


def _dumps(value: Any, what: str) -> bytes:
    try:
        import cloudpickle
    except ImportError:
        try:
            return pickle.dumps(value)
        except (pickle.PicklingError, AttributeError, TypeError) as e:
            raise pickle.PicklingError(
                f"cannot pickle {what} ({type(value).__name__}): {e}. optax transformations "
                "are closures, which the standard pickle refuses.\nFix: install cloudpickle "
                "(`pip install cloudpickle`); flaxgraph then pickles them by value."
            ) from e
    return cloudpickle.dumps(value)
