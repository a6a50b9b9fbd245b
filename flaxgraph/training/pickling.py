"""Pickling the static callables of training objects (optax transformations, filters).

An optax ``GradientTransformation`` is a pair of closures (``chain.<locals>.init_fn``…),
which the standard ``pickle`` refuses. ``Optimizer``, ``ModelAndOptimizer``,
``TrainState`` and ``EMA`` therefore hand such attributes to ``pickle`` wrapped in a
``ByValue``: it serialises the wrapped value with cloudpickle (which pickles closures
by value and importable functions by reference), and a deep copy gets the wrapped
value itself back (a transformation is immutable, and sharing it keeps ``nnx.jit``'s
cache warm). The wrapped value is serialised on its own, so it shares nothing with the
rest of the pickle (a schedule function a transformation closes over is copied).

Without cloudpickle installed, the standard ``pickle`` is tried and a value it refuses
raises ``pickle.PicklingError`` saying to install cloudpickle.

Source: the ``pickle`` protocol (``__reduce__``, ``__getstate__``/``__setstate__``,
``__deepcopy__``); cloudpickle; flax#4247 (optimizers that cannot be pickled).
"""

from __future__ import annotations

import pickle
from typing import Any

__all__ = ["ByValue", "unwrap", "wrap"]


class ByValue:
    """A value that ``pickle`` serialises with cloudpickle, and that a copy unwraps.

    Args:
      value: the value (an optax transformation, a filter…).
      what: what it is, for the error message (``"Optimizer.tx"``).

    ``pickle.loads`` of a pickled ``ByValue`` gives the value itself (loading needs
    cloudpickle when it was pickled with it); ``copy.copy``/``copy.deepcopy`` too.

    Raises:
      pickle.PicklingError: (when pickled) cloudpickle is not installed and the
        standard ``pickle`` refuses the value; the message names ``what``.

    Example::

      >>> import pickle, optax
      >>> from flaxgraph.training.pickling import ByValue
      >>> tx = pickle.loads(pickle.dumps(ByValue(optax.sgd(0.1), 'tx')))
      >>> tx.init({'w': 1.0})
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
    """``attributes`` with every ``ByValue`` replaced by its value (a shallow copy
    passes them on unchanged)."""
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
