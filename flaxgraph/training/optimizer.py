"""Optimizer: an optax gradient transformation and its state, as an Object.

See the package README, "Optimizer". Source: Flax NNX ``nnx.Optimizer``,
``ModelAndOptimizer``, ``OptState``, ``OptArray``, ``OptVariable``, ``to_opt_state``
(0.12: ``Optimizer`` is given the model in ``update``, ``ModelAndOptimizer`` stores it);
optax for all numerics.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Generic, TypeVar, cast

import jax
import jax.numpy as jnp

from flaxgraph.errors import numbered_fixes
from flaxgraph.filterlib import Filter
from flaxgraph.graphlib.inplace import update as graph_update
from flaxgraph.pytreelib.objects import Pytree, static
from flaxgraph.statelib import State
from flaxgraph.training._params import (
    OPTIMIZER_SHARDING,
    as_flat,
    filter_str,
    freeze_filter,
    pure_state,
    raw,
    unbox,
    unshare,
    values_at,
    wrap_mirroring,
    write_leaves,
    wrt_pairs,
)
from flaxgraph.training.pickling import unwrap, wrap
from flaxgraph.typing import MISSING as MISSING
from flaxgraph.variablelib.variable import Param, Variable, is_variable

A = TypeVar("A")

__all__ = [
    "MISSING",
    "ModelAndOptimizer",
    "OptArray",
    "OptState",
    "OptVariable",
    "Optimizer",
    "to_opt_state",
]


if TYPE_CHECKING:
    import optax


class OptState(Variable[A]):
    """Any optimizer state: the step counter and, through ``OptArray``/``OptVariable``, optax's arrays."""


class OptArray(OptState[A]):
    """An array of optax's state that mirrors no parameter (a step count, a hyper-parameter…)."""


class OptVariable(OptState[A]):
    """An array of optax's state that mirrors a parameter (adam's moments…).

    Its metadata is the parameter's plus ``source_type`` (the parameter's kind), without
    sharding names when the shapes differ (factored states)."""


def to_opt_state(tree: Any) -> Any:
    """``tree`` with each leaf wrapped in an optimizer-state Variable (the input is not changed).

    Args:
      tree: a pytree whose leaves are arrays or Variables.

    Returns:
      A pytree of the same structure: a Variable becomes an ``OptVariable`` with its value
      and a copy of its metadata (``optimizer_sharding`` becomes ``out_sharding``), any
      other leaf an ``OptArray``.

    >>> import jax.numpy as jnp, flaxgraph as nnx
    >>> from flaxgraph.training.optimizer import to_opt_state
    >>> state = to_opt_state({'w': nnx.Param(jnp.ones(2), out_sharding=('a',)),
    ...                       'count': jnp.zeros(())})
    >>> type(state['w']).__name__, state['w'].out_sharding, type(state['count']).__name__
    ('OptVariable', ('a',), 'OptArray')
    """

    def wrap_leaf(x: Any) -> OptState[Any]:
        if not is_variable(x):
            return OptArray(x)
        metadata = x.get_metadata()
        if OPTIMIZER_SHARDING in metadata:
            metadata["out_sharding"] = metadata.pop(OPTIMIZER_SHARDING)
        return OptVariable(x.get_value(), **metadata)

    return jax.tree.map(wrap_leaf, tree, is_leaf=is_variable)


M = TypeVar("M")
F = TypeVar("F", bound=Callable[..., Any])


def _explains_old_calls(update: F) -> F:
    """Wraps ``update`` so a call in the Flax 0.10 form raises a ``TypeError`` saying how to call it now."""

    @functools.wraps(update)
    def checked(self: Optimizer[Any], *args: Any, **kwargs: Any) -> Any:
        if len(args) != self._update_arity:
            raise TypeError(_wrong_update_call(self, args, kwargs))
        return update(self, *args, **kwargs)

    return cast(F, checked)


def _wrong_update_call(opt: Optimizer[Any], args: tuple[Any, ...], kwargs: dict[str, Any]) -> str:
    name = type(opt).__name__
    keywords = [k for k in ("model", "grads") if k in kwargs]
    if opt._update_arity == 2 and "model" not in kwargs and len(args) + len(keywords) == 1:
        call = "update(grads=grads)" if keywords else "update(grads)"
        return (
            f"{name}.{call} is the Flax 0.10 call: since Flax 0.11 an nnx.Optimizer does "
            "not hold its model, and update takes it first, then the gradients, both "
            "positionally.\nFix, either:\n"
            + numbered_fixes(
                [
                    "pass the model: `optimizer.update(model, grads)` (in a jitted train "
                    "step, pass the model as an argument too: `train_step(model, optimizer, "
                    "batch)`);",
                    "or keep the 0.10 style with `nnx.ModelAndOptimizer(model, tx)`, which "
                    "holds its model (`state.model`; `wrt` defaults to nnx.Param): "
                    "`state.update(grads)`.",
                ]
            )
        )
    if opt._update_arity == 1 and len(args) + len(keywords) == 2:
        return (
            f"{name}.update(model, grads) is nnx.Optimizer's call: a ModelAndOptimizer "
            "holds its model (`state.model`) and its update takes only the gradients.\nFix: "
            "`state.update(grads)`; or use nnx.Optimizer(model, tx, wrt=nnx.Param), whose "
            "update takes the model."
        )
    expected = "(model, grads)" if opt._update_arity == 2 else "(grads)"
    got = f"{len(args)} positionally" + (
        f" and {', '.join(k + '=' for k in keywords)} by keyword" if keywords else ""
    )
    return (
        f"{name}.update{expected} takes {opt._update_arity} positional argument"
        f"{'s' if opt._update_arity == 2 else ''} (its keyword arguments go to tx.update), "
        f"got {got}.\nFix: call {'optimizer' if opt._update_arity == 2 else 'state'}"
        f".update{expected}."
    )


class Optimizer(Pytree, Generic[M]):
    """An optax gradient transformation and its state, for the ``wrt`` sub-state of a model.

    Args:
      model: the model (a Module/Object or a container of them); read, not stored.
      tx: an ``optax.GradientTransformation`` (``optax.adam(1e-3)``…).
      wrt: a filter of the parameters (keyword-only, required, usually ``nnx.Param``);
        ``update`` expects gradients of exactly this sub-state.

    Attributes:
      step: an ``OptState``, a ``uint32`` scalar counting ``update`` calls.
      tx: the optax transformation (static, compared by identity: see the package README).
      wrt: the filter (static; a list is stored as a tuple).
      graph: ``False`` selects ``wrt`` in tree mode; ``None`` the default.
      opt_state: ``tx.init(params)``, arrays wrapped in ``OptArray``/``OptVariable``.

    Raises:
      TypeError: ``wrt`` is missing (the message names ``nnx.ModelAndOptimizer``), or
        ``model`` is a single Variable or array.
      pickle.PicklingError: (on ``pickle.dumps``) cloudpickle is not installed and ``tx``
        or ``wrt`` is a closure (every optax transformation is).

    >>> import jax.numpy as jnp, optax, flaxgraph as nnx
    >>> model = nnx.Dict(w=nnx.Param(jnp.ones((2, 3)), out_sharding=(None, 'model')))
    >>> optimizer = nnx.Optimizer(model, optax.adam(1e-2), wrt=nnx.Param)
    >>> optimizer.opt_state[0].mu['w'].out_sharding     # metadata carried over
    (None, 'model')
    >>> @nnx.jit
    ... def train_step(model, optimizer, x):
    ...   grads = nnx.grad(lambda m: (x @ m['w'].value).sum())(model)
    ...   optimizer.update(model, grads)
    >>> train_step(model, optimizer, jnp.ones((4, 2)))
    >>> int(optimizer.step.value)
    1
    """

    def __new__(cls, *args: Any, **kwargs: Any) -> Any:
        # Before __init__, whose signature keeps `wrt` required (as Flax's); copy and
        # pickle call __new__ without arguments.
        if (args or kwargs) and "wrt" not in kwargs and cls._wrt_required:
            raise TypeError(
                f"{cls.__name__}(model, tx) is missing the required keyword argument `wrt`: "
                "the filter of the Variables to optimise.\nFix: pass the filter the "
                "gradients are taken for, e.g. nnx.Optimizer(model, tx, wrt=nnx.Param); or "
                "use nnx.ModelAndOptimizer(model, tx), whose wrt defaults to nnx.Param (as "
                "nnx.Optimizer's did before Flax 0.11)."
            )
        return super().__new__(cls)

    _wrt_required = True

    def __init__(
        self,
        model: M,
        tx: optax.GradientTransformation,
        *,
        wrt: Filter,
        graph: bool | None = None,
    ):
        self.tx = static(tx)  # one static value: its closures are equal only to themselves
        self.wrt = freeze_filter(wrt)
        self.step = OptState(jnp.array(0, dtype=jnp.uint32))
        pairs = wrt_pairs(model, self.wrt, graph)
        paths = [p for p, _ in pairs]
        sources = [v for _, v in pairs]
        params = pure_state(paths, [raw(v) for v in sources])
        opt_state = unshare(tx.init(params), jax.tree.leaves(params))
        self.opt_state = wrap_mirroring(opt_state, params, sources, OptVariable, OptArray)

    _update_arity = 2  # positional arguments of update: (model, grads)

    def __getattr__(self, name: str) -> Any:
        # Only reached when the attribute is missing.
        if name == "model":
            raise AttributeError(
                f"{type(self).__name__!r} object has no attribute 'model': since Flax 0.11 "
                "an nnx.Optimizer does not hold its model; update takes it: "
                "`optimizer.update(model, grads)`.\nFix: use the model you built the optimizer "
                "for; or nnx.ModelAndOptimizer(model, tx), which holds it as `state.model` "
                "(and whose update takes only the gradients).",
                name=name,
                obj=self,
            )
        raise AttributeError(
            f"{type(self).__name__!r} object has no attribute {name!r}", name=name, obj=self
        )

    @_explains_old_calls
    def update(self, model: M, grads: Any, /, **kwargs: Any) -> State:
        """Applies one optimizer step to ``model``, ``opt_state`` and ``step`` in place (also in ``nnx.jit``).

        Args:
          model: the model whose ``wrt`` sub-state is updated (kinds, metadata and dtypes
            kept; other state untouched).
          grads: the ``nnx.State`` ``nnx.grad`` returns for ``wrt`` (or a mapping with the
            same paths), or a model-shaped object (tree-mode ``nnx.grad``).
          **kwargs: extra arguments of ``tx.update`` (e.g. ``value=loss``); Variables unboxed.

        Returns:
          The updates applied: an ``nnx.State`` of arrays at the parameters' paths.

        Raises:
          GraphStructureError (a ``ValueError``): the paths of ``grads`` are not those of the
            ``wrt`` sub-state (the message lists missing and extra paths).
          TypeError: ``grads`` is not a State, mapping or model-shaped object; or the call has
            the Flax 0.10 form ``update(grads)``, or ``model``/``grads`` by keyword.

        >>> import jax.numpy as jnp, optax, flaxgraph as nnx
        >>> model = nnx.Dict(w=nnx.Param(jnp.array([1.0, -2.0])))
        >>> opt = nnx.Optimizer(model, optax.sgd(0.5), wrt=nnx.Param)
        >>> opt.update(model, nnx.grad(lambda m: m['w'].value.sum())(model))['w']
        Array([-0.5, -0.5], dtype=float32)
        """
        pairs = wrt_pairs(model, self.wrt)
        paths = [p for p, _ in pairs]
        grad_values = values_at(
            paths,
            as_flat(grads, "grads", self.wrt),
            header=(
                "Optimizer.update: the gradients do not match the parameters selected by "
                f"wrt={filter_str(self.wrt)} in the model (paths missing from grads, and paths in "
                "grads that wrt does not select):"
            ),
            fixes=[
                "differentiate the same sub-state the optimizer updates: "
                f"nnx.grad(loss_fn, argnums=nnx.DiffState(0, {filter_str(self.wrt)}))(model);",
                "or build the optimizer with the filter the gradients were taken for: "
                "nnx.Optimizer(model, tx, wrt=<filter>);",
                "check that update gets the same model the optimizer was built for.",
            ],
        )
        params = pure_state(paths, [raw(v) for _, v in pairs])
        grad_state = pure_state(paths, grad_values)
        updates, new_opt_state = self.tx.update(
            grad_state, unbox(self.opt_state), params, **unbox(kwargs)
        )
        import optax  # optional dependency: only training needs it

        new_params = optax.apply_updates(params, updates)
        graph_update(model, new_params)
        write_leaves(self.opt_state, new_opt_state, "optimizer state")
        self.step.value = self.step.value + 1
        return updates

    def __getstate__(self) -> Any:
        attributes, kinds = super().__getstate__()
        return wrap(attributes, ("tx", "wrt"), type(self).__name__), kinds

    def __setstate__(self, state: Any) -> None:
        super().__setstate__((unwrap(state[0]), state[1]))


class ModelAndOptimizer(Optimizer[M]):
    """An ``Optimizer`` that holds its model: ``update(grads)`` needs no model.

    Args:
      model: the model, stored as ``self.model`` (a reference, updated in place).
      tx: an ``optax.GradientTransformation``.
      wrt: the filter of the optimised Variables (default ``nnx.Param``).
      graph: as in ``Optimizer``.

    Raises:
      TypeError: as ``Optimizer``.

    >>> import optax, flaxgraph as nnx
    >>> state = nnx.ModelAndOptimizer(nnx.Linear(2, 1, rngs=nnx.Rngs(0)), optax.sgd(0.5))
    >>> _ = state.update(nnx.grad(lambda m: m.kernel.value.sum())(state.model))
    >>> int(state.step.value)
    1
    """

    _wrt_required = False
    _update_arity = 1  # update(grads)

    def __init__(
        self,
        model: M,
        tx: optax.GradientTransformation,
        *,
        wrt: Filter = Param,
        graph: bool | None = None,
    ):
        super().__init__(model, tx, wrt=wrt, graph=graph)
        self.model = model

    @_explains_old_calls
    def update(self, grads: Any, /, **kwargs: Any) -> State:  # type: ignore[override]
        """``Optimizer.update`` on ``self.model`` (called as ``update(model, grads)``, the ``TypeError`` says to drop the model)."""
        return Optimizer.update.__wrapped__(self, self.model, grads, **kwargs)  # type: ignore[attr-defined]
