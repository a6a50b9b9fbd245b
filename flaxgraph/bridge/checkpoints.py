"""A Linen variables dict to a flaxgraph ``State`` and back, path for path (the package README,
"Checkpoints"). Source: Flax's Linen-to-NNX migration guide; ``flax.nnx.bridge.variables``."""

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
    """A State (path -> Variable) from Linen variables, for ``nnx.update(model, state)``.

    Args:
      variables: Linen's ``{collection: nested dict}``, or one collection's dict with
        ``collection=``.
      collection: the collection name when ``variables`` is one collection.
      renames: path-prefix renames, Linen name -> flaxgraph attribute
        (``{'Dense_0': 'fc1', ('Block_0', 'Dense_0'): ('blocks', 0, 'fc')}``).

    Returns:
      A ``State`` of Variables of the collections' kinds, keyed by flaxgraph path.

    Raises:
      ValueError: two variables end up at the same path.

    >>> import jax.numpy as jnp, flaxgraph as nnx
    >>> linen_params = {'Dense_0': {'kernel': jnp.ones((2, 3)), 'bias': jnp.zeros(3)}}
    >>> state = nnx.bridge.linen_params_to_state(linen_params, collection='params', renames={'Dense_0': 'fc'})
    >>> sorted(state['fc']), type(state['fc']['kernel']).__name__
    (['bias', 'kernel'], 'Param')
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
    state: Mapping[Any, Any], *, renames: Mapping[Any, Any] | None = None, boxed: bool = False
) -> dict[str, Any]:
    """Linen variables ``{collection: nested dict}`` (RNG state left out) from a flaxgraph State.

    Args:
      state: ``nnx.state(model)`` (or any State of Variables).
      renames: path-prefix renames, flaxgraph attribute -> Linen name.
      boxed: keep metadata as Linen boxes (default: bare arrays).

    >>> import flaxgraph as nnx
    >>> model = nnx.Linear(2, 3, rngs=nnx.Rngs(0))
    >>> nnx.bridge.state_to_linen_params(nnx.state(model))['params']['kernel'].shape
    (2, 3)
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
