"""EMA: an exponential moving average of a model's parameters, as an Object.

``EMA(model, decay)`` starts from a copy of the model's ``wrt`` sub-state (its
parameters by default); each ``ema.update(model)`` moves the average towards the
model's current values::

  average <- decay * average + (1 - decay) * params

The average is what is often evaluated instead of the last parameters (Polyak
averaging). ``ema.averaged_state()`` returns it as an ``nnx.State`` of the
parameters' own kinds (for ``nnx.merge`` or ``nnx.update``); ``ema.copy_to(model)``
writes it into a model in place::

  >>> import jax.numpy as jnp, flaxgraph as nnx
  >>> class Model(nnx.Module):
  ...   def __init__(self):
  ...     self.w = nnx.Param(jnp.zeros(2))
  >>> model = Model()
  >>> ema = nnx.EMA(model, decay=0.5)
  >>> model.w.value = jnp.ones(2)
  >>> ema.update(model)
  >>> ema.averaged_state()['w'].value
  Array([0.5, 0.5], dtype=float32)

The average lives in ``EMAState`` Variables that copy each parameter's metadata
(sharding names included), so an ``EMA`` passed to ``nnx.jit`` is updated inside
the compiled step and shards like the model. The update is
``optax.incremental_update``.

Source: flaxgraph's own (Flax NNX has no EMA object); the update rule is optax's
``incremental_update`` (as in Polyak-Ruppert averaging and ``optax.ema`` without
debiasing).
"""

from __future__ import annotations

from typing import Any, TypeVar

import jax

from flaxgraph.filters import Filter
from flaxgraph.graph.update import update as graph_update
from flaxgraph.objects import Pytree
from flaxgraph.state import State
from flaxgraph.training._params import (
    filter_str,
    freeze_filter,
    is_variable,
    mirror,
    pure_state,
    raw,
    unshare,
    values_at,
    wrt_pairs,
)
from flaxgraph.variables import Param, Variable

A = TypeVar("A")

__all__ = ["EMA", "EMAState"]


class EMAState(Variable[A]):
    """The kind of the Variables holding an ``EMA``'s averages. Each copies the
    metadata of the parameter it averages, plus ``source_type`` (its kind)."""


class EMA(Pytree):
    """An exponential moving average of the ``wrt`` sub-state of a model.

    Args:
      model: the model (an ``nnx.Module``/``Object`` or a container of them); read,
        not stored. The average starts as a copy of its ``wrt`` sub-state.
      decay: the weight of the old average, a float in [0, 1] (0.999 by default).
      wrt: a filter selecting the averaged state (default ``nnx.Param``).

    Attributes:
      decay, wrt: static attributes (a list filter is stored as a tuple).
      averages: an ``nnx.State`` of ``EMAState`` Variables at the parameters' paths,
        each of its parameter's shape and dtype.

    Raises:
      ValueError: ``decay`` is outside [0, 1].
      TypeError: ``model`` is a single Variable or array rather than a model.

    Example::

      >>> import jax.numpy as jnp, optax, flaxgraph as nnx
      >>> class Model(nnx.Module):
      ...   def __init__(self):
      ...     self.w = nnx.Param(jnp.ones(3))
      >>> model = Model()
      >>> optimizer = nnx.Optimizer(model, optax.sgd(0.1))
      >>> ema = nnx.EMA(model, decay=0.5)
      >>> @nnx.jit
      ... def train_step(model, optimizer, ema):
      ...   grads = nnx.grad(lambda m: (m.w.value ** 2).sum())(model)
      ...   optimizer.update(model, grads)
      ...   ema.update(model)
      >>> train_step(model, optimizer, ema)
      >>> ema.averages['w'].value
      Array([0.9, 0.9, 0.9], dtype=float32)

    Source: see the module docstring.
    """

    def __init__(self, model: Any, decay: float = 0.999, *, wrt: Filter = Param):
        decay = float(decay)
        if not 0.0 <= decay <= 1.0:
            raise ValueError(f"EMA decay must be in [0, 1], got {decay}.")
        self.decay = decay
        self.wrt = freeze_filter(wrt)
        pairs = wrt_pairs(model, self.wrt)
        values = unshare([raw(v) for _, v in pairs], [raw(v) for _, v in pairs])
        self.averages = State.from_flat_path(
            (p, mirror(EMAState, x, v)) for (p, v), x in zip(pairs, values)
        )

    def _model_values(self, model: Any, what: str) -> tuple[list[Any], list[Any]]:
        """The averages' paths and the model's values at them, in the same order."""
        flat = self.averages.flat_state()
        paths = list(flat.paths)
        values = values_at(
            paths,
            dict(wrt_pairs(model, self.wrt)),
            header=(
                f"EMA.{what}: the model's state selected by wrt={filter_str(self.wrt)} does not have "
                "the paths of the averages (paths missing from the model, and new paths "
                "in it):"
            ),
            fixes=[
                "pass a model with the structure of the one the EMA was built from;",
                "or build a new EMA for this model: nnx.EMA(model, decay).",
            ],
        )
        return paths, values

    def update(self, model: Any) -> None:
        """Moves the averages towards ``model``'s current values, in place:
        ``average = decay * average + (1 - decay) * value`` (``optax.incremental_update``).

        Raises:
          GraphStructureError (a ``ValueError``): ``model``'s ``wrt`` sub-state does
            not have the averages' paths; the message lists the missing and new ones.
        """
        paths, values = self._model_values(model, "update")
        variables = list(self.averages.flat_state().leaves)
        import optax  # optional dependency: only training needs it

        new = optax.incremental_update(
            pure_state(paths, values),
            pure_state(paths, [v.raw_value for v in variables]),
            1.0 - self.decay,
        )
        for var, value in zip(variables, jax.tree.leaves(new)):
            var.value = value.astype(var.raw_value.dtype)

    def averaged_state(self) -> State:
        """Returns the averages as an ``nnx.State`` of new Variables of the averaged
        parameters' kinds (``Param``…) with their metadata, at their paths: usable as
        ``nnx.update(model, ema.averaged_state())`` or in ``nnx.merge``."""

        def to_source(var: Any) -> Any:
            metadata = var.get_metadata()
            kind = metadata.pop("source_type", None)
            return var.raw_value if kind is None else kind._from_parts(var.raw_value, metadata)

        return jax.tree.map(to_source, self.averages, is_leaf=is_variable)

    def copy_to(self, model: Any) -> None:
        """Writes the averages into ``model``'s ``wrt`` sub-state, in place.

        Raises:
          GraphStructureError (a ``ValueError``): ``model``'s ``wrt`` sub-state does
            not have the averages' paths.
        """
        paths, _ = self._model_values(model, "copy_to")
        averages = [v.raw_value for v in self.averages.flat_state().leaves]
        graph_update(model, pure_state(paths, averages))
