"""Abstract models with shardings: a model's structure without allocating it (the target
of a sharded restore, ``jit``'s ``out_shardings``; ``guides/distributed.md``, "Abstract models").

Source: Flax NNX 0.12.8 ``nnx.get_abstract_model``, ``nnx.as_abstract``,
``nnx.abstract_with_sharding``; ``jax.eval_shape``, ``jax.sharding``."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar

import jax
from jax.sharding import NamedSharding

from flaxgraph.graphlib.graphdefs import GraphDef
from flaxgraph.graphlib.registry import is_node_module
from flaxgraph.graphlib.split_merge import merge, split
from flaxgraph.mesh_context import active_mesh, check_spec, names_of, use_eager_sharding
from flaxgraph.partitioning import get_named_sharding, leaf_where, spec_of
from flaxgraph.statelib import State
from flaxgraph.transforms.control import eval_shape
from flaxgraph.variablelib.variable import is_variable, metadata_of

A = TypeVar("A")

__all__ = ["abstract_with_sharding", "as_abstract", "get_abstract_model"]


def get_abstract_model(
    init_fn: Callable[[], Any], mesh: jax.sharding.Mesh, *, graph: bool | None = None
) -> tuple[GraphDef, State]:
    """The structure and abstract, sharded State of the model ``init_fn()`` builds.

    Args:
      init_fn: a function of no arguments returning a model; it runs abstractly (under
        ``nnx.eval_shape``, with ``mesh`` set), nothing is computed or allocated.
      mesh: the ``jax.sharding.Mesh`` the shardings refer to.
      graph: accepted for Flax compatibility (same result without shared Variables).

    Returns:
      ``(graphdef, abstract_state)``: each Variable holds ``jax.ShapeDtypeStruct(shape,
      dtype, sharding=NamedSharding(mesh, spec))``, ``spec`` from its sharding names under
      the active logical axis rules (``P()`` without names).

    Raises:
      ShardingSpecError (a ``ValueError``): a name the mesh lacks, or more names than the
        value's rank; the message names the Variable's path.

    Example::

      >>> import jax, flaxgraph as nnx
      >>> mesh = jax.make_mesh((1, 1), ('data', 'model'))
      >>> graphdef, abstract = nnx.get_abstract_model(
      ...   lambda: nnx.Linear(2, 4, rngs=nnx.Rngs(0),
      ...                      kernel_metadata={'out_sharding': (None, 'model')}), mesh)
      >>> abstract['kernel'].value.shape, abstract['kernel'].value.sharding.spec
      ((2, 4), P(None, 'model'))
    """
    del graph
    # Eager placement is off while tracing: the shardings are checked and attached
    # below, where each Variable's path is known for the error message.
    with jax.set_mesh(mesh), use_eager_sharding(False):
        model = eval_shape(init_fn)
    graphdef, state = split(model)
    shardings = get_named_sharding(state, mesh)
    abstract = jax.tree.map(
        lambda v, s: v.replace(
            jax.ShapeDtypeStruct(v.raw_value.shape, v.raw_value.dtype, sharding=s.raw_value)
        ),
        state,
        shardings,
        is_leaf=is_variable,
    )
    return graphdef, abstract


def as_abstract(tree: A, graph: bool | None = None) -> A:
    """Attaches a ``NamedSharding`` to every abstract Variable of ``tree`` that has sharding
    names and no sharding yet.

    Args:
      tree: an object or a State/pytree of Variables holding ``jax.ShapeDtypeStruct``
        (from ``nnx.eval_shape``); other values stay.
      graph: accepted for Flax compatibility.

    Returns:
      A new tree (``tree`` is unchanged); the mesh is the Variable's ``mesh`` metadata,
      else the one of ``jax.set_mesh``; without either the value stays unsharded.

    Raises:
      ShardingSpecError (a ``ValueError``): as ``get_abstract_model``.

    Example::

      >>> import jax, flaxgraph as nnx
      >>> mesh = jax.make_mesh((1,), ('model',))
      >>> abstract = nnx.eval_shape(lambda: nnx.Linear(
      ...   2, 4, rngs=nnx.Rngs(0), kernel_metadata={'out_sharding': (None, 'model')}))
      >>> with jax.set_mesh(mesh):
      ...   abstract = nnx.as_abstract(abstract)
      >>> abstract.kernel.value.sharding.spec
      P(None, 'model')
    """
    del graph

    def attach(keypath: tuple[Any, ...], leaf: Any) -> Any:
        if not is_variable(leaf):
            return leaf
        value = leaf.raw_value
        if not isinstance(value, jax.ShapeDtypeStruct) or value.sharding is not None:
            return leaf
        if names_of(metadata_of(leaf)) is None:
            return leaf
        mesh = leaf.get_metadata("mesh", None) or active_mesh()
        if mesh is None:
            return leaf
        spec = spec_of(leaf)
        check_spec(spec, mesh, tuple(value.shape), leaf_where(keypath, leaf))
        sharding = NamedSharding(mesh, spec)
        return leaf.replace(jax.ShapeDtypeStruct(value.shape, value.dtype, sharding=sharding))

    def over_state(state: Any) -> Any:
        return jax.tree_util.tree_map_with_path(attach, state, is_leaf=is_variable)

    if is_node_module(tree):
        graphdef, state = split(tree)
        return merge(graphdef, over_state(state))
    return over_state(tree)


def abstract_with_sharding(tree: A, graph: bool | None = None) -> A:
    """The older name of ``as_abstract`` (deprecated in Flax 0.12; same behaviour)."""
    return as_abstract(tree, graph)
