"""TrainState: the functional training state of Flax NNX, an immutable pytree.

See the package README, "TrainState".

>>> import jax, jax.numpy as jnp, optax, flaxgraph as nnx
>>> graphdef, params = nnx.split(nnx.Linear(2, 1, rngs=nnx.Rngs(0)))
>>> state = nnx.TrainState.create(graphdef, params=params, tx=optax.sgd(0.5))
>>> @jax.jit
... def train_step(state, x):
...   loss_fn = lambda params: state.apply(params)(x)[0].sum()
...   return state.apply_gradients(jax.grad(loss_fn)(state.params))
>>> int(train_step(state, jnp.ones((1, 2))).step)
1

Source: Flax NNX ``nnx.TrainState`` (0.12; a ``flax.struct.PyTreeNode`` there,
``jax.tree_util.register_dataclass`` here); optax for the numerics.
"""

from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING, Any, Generic, TypeVar, dataclass_transform

import jax
import jax.numpy as jnp

from flaxgraph.graphlib.graphdefs import GraphDef
from flaxgraph.graphlib.pure_methods import CallProxy
from flaxgraph.statelib import State
from flaxgraph.training.pickling import unwrap, wrap

if TYPE_CHECKING:
    import optax

M = TypeVar("M")
TS = TypeVar("TS", bound="TrainState[Any]")

__all__ = ["TrainState"]

_STATIC = {"static": True}


@dataclass_transform(frozen_default=True, field_specifiers=(dataclasses.field,))
class _FrozenPytree:
    """Makes each subclass a frozen dataclass pytree; fields with ``static=True`` metadata are static."""

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        dataclasses.dataclass(frozen=True)(cls)
        jax.tree_util.register_dataclass(cls)


class TrainState(_FrozenPytree, Generic[M]):
    """The state of a functional training loop (example in the module docstring).

    Fields:
      graphdef: the model's ``GraphDef`` (static).
      params: an ``nnx.State`` of the trained Variables (a pytree child).
      opt_state: ``tx.init(params)``.
      step: an integer array, the number of ``apply_gradients`` calls.
      tx: the ``optax.GradientTransformation`` (static).
    """

    graphdef: GraphDef = dataclasses.field(metadata=_STATIC)
    params: State
    opt_state: Any
    step: jax.Array
    tx: optax.GradientTransformation = dataclasses.field(metadata=_STATIC)

    @classmethod
    def create(
        cls: type[TS],
        graphdef: GraphDef,
        *,
        params: State,
        tx: optax.GradientTransformation,
        step: int = 0,
        **kwargs: Any,
    ) -> TS:
        """A new state with ``opt_state = tx.init(params)``.

        Args:
          graphdef: the model's structure (from ``nnx.split``).
          params: the trained state (an ``nnx.State``).
          tx: an ``optax.GradientTransformation``.
          step: the initial step count (an int).
          **kwargs: the values of a subclass's own fields.

        Returns:
          An instance of ``cls``; ``step`` is ``jnp.asarray(step)``.

        Raises:
          TypeError: a field of ``cls`` is missing from, or unknown to, ``kwargs``.
        """
        return cls(
            graphdef=graphdef,
            params=params,
            opt_state=tx.init(params),
            step=jnp.asarray(step),
            tx=tx,
            **kwargs,
        )

    def __getstate__(self) -> dict[str, Any]:
        return wrap(dict(self.__dict__), ("tx",), type(self).__name__)

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(unwrap(state))

    def replace(self: TS, **changes: Any) -> TS:
        """A copy with the given fields replaced (``dataclasses.replace``)."""
        return dataclasses.replace(self, **changes)

    def apply(self, state: State | str, *states: State | str) -> Any:
        """Calls the model rebuilt from ``graphdef`` and the given states.

        Args:
          state, *states: ``nnx.State`` objects, or names of fields holding one (``'params'``).

        Returns:
          A proxy as ``nnx.call`` returns: ``state.apply('params')(x)`` (or ``.method(x)``)
          returns ``(output, (graphdef, new_state))``; the given States are never written.

        Raises:
          AttributeError: a name is not a field.
        """
        resolved = [getattr(self, s) if isinstance(s, str) else s for s in (state, *states)]
        return CallProxy(self.graphdef, tuple(resolved), (), copy=True)

    def apply_gradients(self: TS, grads: State, **kwargs: Any) -> TS:
        """One optimizer step: ``tx.update`` then ``optax.apply_updates``.

        Args:
          grads: the gradients of ``params`` (same structure).
          **kwargs: other fields to replace in the result (e.g. ``batch_stats``).

        Returns:
          A new state with updated ``params`` and ``opt_state`` and ``step + 1``.
        """
        import optax  # optional dependency: only training needs it

        updates, opt_state = self.tx.update(grads, self.opt_state, self.params)
        params = optax.apply_updates(self.params, updates)
        return self.replace(params=params, opt_state=opt_state, step=self.step + 1, **kwargs)
