"""EMA: an exponential moving average of Variables, as a Pytree.

See the package README, "EMA". Source: Flax NNX ``nnx.EMA`` (0.12.8: ``EMA(params,
decay, *, only=...)``, ``params``, ``update``, ``apply_to``); optax's
``incremental_update`` (Polyak-Ruppert averaging).
"""

from __future__ import annotations

from typing import Any, TypeVar

import jax.numpy as jnp

from flaxgraph.filterlib import Filter
from flaxgraph.graphlib.descendants import iter_graph, recursive_map
from flaxgraph.graphlib.paths import keys_str
from flaxgraph.graphlib.split_merge import merge, split
from flaxgraph.pytreelib.objects import Pytree
from flaxgraph.statelib import State
from flaxgraph.training._params import (
    filter_str,
    freeze_filter,
    pure_state,
    raw,
    unshare,
    values_at,
    wrt_pairs,
)
from flaxgraph.training.pickling import unwrap, wrap
from flaxgraph.variablelib.variable import Variable, is_variable

A = TypeVar("A")

__all__ = ["EMA"]


class EMA(Pytree):
    """An exponential moving average of the Variables of ``params`` selected by ``only``.

    Args:
      params: a model (Module/Object or a container of them) or an ``nnx.State``; read,
        not stored. The average starts as a copy of its selected Variables.
      decay: the weight of the old average, a float in [0, 1] (e.g. 0.999).
      only: a filter of the averaged Variables (keyword-only; default every Variable, as
        in Flax; ``nnx.Param`` when the model holds random state).
      graph: ``False`` selects in tree mode (a shared Variable is an error); ``None`` the
        default.

    Attributes:
      decay: the decay (a static float).
      filter: the ``only`` filter (static; a list is stored as a tuple).
      params: an ``nnx.State`` of new Variables, one per selected Variable, at its path,
        of its kind and metadata, holding the average.

    Raises:
      ValueError: ``decay`` is outside [0, 1] (Flax accepts any float).
      TypeError: ``params`` is a single Variable or array, or a selected Variable holds
        no numbers (a random key: use ``only=nnx.Param``).

    >>> import jax.numpy as jnp, flaxgraph as nnx
    >>> model = nnx.Dict(w=nnx.Param(jnp.ones(2)))
    >>> ema = nnx.EMA(model, decay=0.5, only=nnx.Param)
    >>> model['w'].value = jnp.zeros(2)
    >>> ema.update(model)
    >>> ema.params['w'].value
    Array([0.5, 0.5], dtype=float32)
    """

    def __init__(self, params: Any, decay: float, *, only: Filter = ..., graph: bool | None = None):
        decay = float(decay)
        if not 0.0 <= decay <= 1.0:
            raise ValueError(
                f"EMA decay must be in [0, 1], got {decay}.\nFix: pass the weight of the old "
                "average, e.g. nnx.EMA(model, decay=0.999)."
            )
        self.decay = decay
        self.filter = freeze_filter(only)
        pairs = wrt_pairs(params, self.filter, graph)
        for path, var in pairs:
            value = raw(var)
            dtype = getattr(value, "dtype", None)
            if dtype is None or not (
                jnp.issubdtype(dtype, jnp.number) or jnp.issubdtype(dtype, jnp.bool_)
            ):
                raise TypeError(
                    f"EMA cannot average the {type(var).__name__} at {keys_str(path)}: it "
                    f"holds {dtype if dtype is not None else type(value).__name__}, not "
                    "numbers.\nFix: select the Variables to average, e.g. "
                    "nnx.EMA(model, decay, only=nnx.Param)."
                )
        values = unshare([raw(v) for _, v in pairs], [raw(v) for _, v in pairs])
        self.params = State.from_flat_path((p, _copy_of(v, x)) for (p, v), x in zip(pairs, values))

    def __getstate__(self) -> Any:
        attributes, kinds = super().__getstate__()
        return wrap(attributes, ("filter",), "EMA"), kinds

    def __setstate__(self, state: Any) -> None:
        super().__setstate__((unwrap(state[0]), state[1]))

    def _values_of(self, node: Any, what: str) -> tuple[list[Any], list[Any]]:
        """The averages' paths and ``node``'s values at them, in the same order."""
        paths = list(self.params.flat_state().paths)
        values = values_at(
            paths,
            dict(wrt_pairs(node, self.filter)),
            header=(
                f"EMA.{what}: the Variables selected by only={filter_str(self.filter)} do not "
                "have the paths of the averages (paths missing from the argument, and new "
                "paths in it):"
            ),
            fixes=[
                "pass an object with the structure of the one the EMA was built from;",
                "or build a new EMA for it: nnx.EMA(model, decay).",
            ],
        )
        return paths, values

    def update(self, updates: Any) -> None:
        """Moves the averages towards the values of ``updates``, in place (cast back to each dtype).

        Args:
          updates: a model or ``nnx.State`` with the structure of the EMA's ``params``.

        Raises:
          GraphStructureError (a ``ValueError``): the selected Variables of ``updates`` are not
            at the averages' paths (the message lists missing and new ones); nothing is updated.
        """
        paths, values = self._values_of(updates, "update")
        variables = list(self.params.flat_state().leaves)
        import optax  # optional dependency: only training needs it

        new = optax.incremental_update(
            pure_state(paths, values),
            pure_state(paths, [v.raw_value for v in variables]),
            1.0 - self.decay,
        )
        for var, (_, value) in zip(variables, new.flat_state()):
            var.value = jnp.asarray(value).astype(var.raw_value.dtype)

    def apply_to(self, model: A) -> A:
        """A new model of ``model``'s structure using ``ema.params`` as its averaged Variables.

        It follows every later ``update`` (see the package README, "EMA"); its other
        Variables are ``model``'s; ``model`` is not changed.

        Args:
          model: an object with the structure of the EMA's ``params``.

        Returns:
          A new object of ``model``'s type; ``ema.apply_to(model).w is ema.params['w']``.

        Raises:
          GraphStructureError (a ``ValueError``): the Variables of ``model`` selected by
            ``only`` are not at the averages' paths.

        >>> import jax.numpy as jnp, flaxgraph as nnx
        >>> model = nnx.Dict(w=nnx.Param(jnp.zeros(2)))
        >>> ema = nnx.EMA(model, decay=0.5)
        >>> ema_model = ema.apply_to(model)
        >>> model['w'].value = jnp.ones(2)
        >>> ema.update(model)
        >>> ema_model['w'].value
        Array([0.5, 0.5], dtype=float32)
        """
        self._values_of(model, "apply_to")
        averages = dict(self.params.flat_state())
        originals = {p: v for p, v in iter_graph(model) if is_variable(v)}
        copy = merge(*split(model))

        def use(path: Any, x: Any) -> Any:
            if is_variable(x):
                return averages.get(path, originals.get(path, x))
            return x

        return recursive_map(use, copy)


def _copy_of(var: Any, value: Any) -> Variable[Any]:
    """A new Variable of ``var``'s kind and metadata holding ``value``."""
    if is_variable(var):
        return var.replace(value)  # (value is a raw array: replace keeps kind and metadata)
    return Variable(value)
