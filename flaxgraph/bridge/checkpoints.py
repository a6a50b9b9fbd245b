"""Checkpoints across the boundary: a Linen ``params`` dict (as a Linen training
script saves it) to a flaxgraph ``State`` and back, path for path.

Linen names a parameter by its path in the ``params`` collection
(``{'Dense_0': {'kernel': ...}}``); the flaxgraph port of the model names it by
its attribute path (``model.Dense_0.kernel``, or a renamed ``model.fc1.kernel``).
``linen_params_to_state`` builds a State in the layout of the port (optionally
renaming path prefixes) that ``nnx.update(model, state)`` restores; the State's
Variables are of the kinds the collections name and Linen boxes
(``nn.Partitioned``) keep their sharding names.

Source: Flax's Linen-to-NNX migration guide (checkpoint restoring) and
``flax.nnx.bridge.variables``.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from flaxgraph import traversals
from flaxgraph.bridge.variables import to_linen_var, to_nnx_var
from flaxgraph.statelib import State
from flaxgraph.variablelib.names import variable_name_from_type
from flaxgraph.variablelib.variable import Variable, is_variable

__all__ = ["linen_params_to_state", "state_to_linen_params"]


def _renamed(path: tuple[Any, ...], renames: Mapping[Any, Any], where: str) -> tuple[Any, ...]:
    for old, new in renames.items():
        old_t = old if isinstance(old, tuple) else (old,)
        new_t = new if isinstance(new, tuple) else (new,)
        if path[: len(old_t)] == old_t:
            return (*new_t, *path[len(old_t) :])
    return path


def linen_params_to_state(
    variables: Mapping[str, Any],
    *,
    collection: str | None = None,
    renames: Mapping[Any, Any] | None = None,
) -> State:
    """A State (path -> Variable) from Linen variables.

    Args:
      variables: Linen's ``{collection: nested dict}`` (``model.init(...)`` or a
        restored checkpoint), or one collection's nested dict with ``collection=``.
      collection: the collection name when ``variables`` is one collection
        (e.g. ``'params'``).
      renames: path-prefix renames, Linen name -> flaxgraph attribute
        (``{'Dense_0': 'fc1', ('Block_0', 'Dense_0'): ('blocks', 0, 'fc')}``).

    Returns:
      A ``State`` whose leaves are Variables of the collections' kinds (``Param``
      for ``'params'``…), keyed by flaxgraph path: ``nnx.update(model, state)``.

    Raises:
      ValueError: two variables end up at the same path.

    Example::

      >>> import jax.numpy as jnp, flaxgraph as nnx
      >>> linen_params = {'Dense_0': {'kernel': jnp.ones((2, 3)), 'bias': jnp.zeros(3)}}
      >>> state = nnx.bridge.linen_params_to_state(linen_params, collection='params', renames={'Dense_0': 'fc'})
      >>> sorted(state['fc']), type(state['fc']['kernel']).__name__
      (['bias', 'kernel'], 'Param')

    Source: Flax's Linen-to-NNX migration guide (restoring Linen checkpoints).
    """
    collections = {collection: variables} if collection is not None else dict(variables)
    renames = dict(renames or {})
    flat: dict[tuple[Any, ...], Variable[Any]] = {}
    for col, tree in collections.items():
        for path, leaf in _leaves(tree):
            target = _renamed(path, renames, col)
            if target in flat:
                raise ValueError(
                    f"The Linen variables {col}/{'/'.join(map(str, path))} and another one map "
                    f"to the same flaxgraph path {'.'.join(map(str, target))}.\nFix: check the "
                    "renames (each flaxgraph path must receive one variable)."
                )
            flat[target] = to_nnx_var(col, leaf)
    return State(traversals.unflatten_mapping(flat))


def _leaves(tree: Any, prefix: tuple[Any, ...] = ()) -> list[tuple[tuple[Any, ...], Any]]:
    if not isinstance(tree, Mapping):
        return [(prefix, tree)]
    out: list[tuple[tuple[Any, ...], Any]] = []
    for key, value in tree.items():
        out += _leaves(value, (*prefix, key))
    return out


def state_to_linen_params(
    state: Mapping[Any, Any],
    *,
    renames: Mapping[Any, Any] | None = None,
    boxed: bool = False,
) -> dict[str, Any]:
    """Linen variables ``{collection: nested dict}`` from a flaxgraph State.

    Args:
      state: ``nnx.state(model)`` (or any State of Variables).
      renames: path-prefix renames, flaxgraph attribute -> Linen name (the inverse
        of ``linen_params_to_state``'s).
      boxed: keep metadata as Linen boxes (``nn.Partitioned``/``NNXMeta``); default
        bare arrays, as ``model.init(...)['params']`` without partitioning holds.

    Returns:
      ``{'params': {...}, 'batch_stats': {...}, ...}`` (RNG state left out).

    Example::

      >>> import jax, flaxgraph as nnx
      >>> model = nnx.Linear(2, 3, rngs=nnx.Rngs(0))
      >>> params = nnx.bridge.state_to_linen_params(nnx.state(model))['params']
      >>> params['kernel'].shape
      (2, 3)

    Source: Flax NNX 0.12 ``bridge.variables.nnx_attrs_to_linen_vars``.
    """
    from flaxgraph.rnglib.rngs import RngState

    renames = dict(renames or {})
    out: dict[tuple[Any, ...], Any] = {}
    flat = (
        state.flat_state()
        if isinstance(state, State)
        else traversals.flatten_mapping(state).items()
    )
    for path, var in flat:
        if not is_variable(var) or isinstance(var, RngState):
            continue
        col = variable_name_from_type(type(var), allow_register=True)
        leaf = to_linen_var(var) if boxed else var.get_value()
        out[(col, *_renamed(tuple(path), renames, col))] = leaf
    return traversals.unflatten_mapping(out)
