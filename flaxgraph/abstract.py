"""Abstract models with shardings: build a model's structure without allocating it.

``nnx.get_abstract_model(init_fn, mesh)`` runs ``init_fn`` abstractly (under
``nnx.eval_shape``, with ``mesh`` set) and returns ``(graphdef, abstract_state)``:
every Variable of the State holds a ``jax.ShapeDtypeStruct`` that carries the
``NamedSharding`` its sharding names ask for. That State is the target of a
sharded restore (orbax reads, on each process, only the shards that process's
devices hold) and gives ``jit``'s ``out_shardings`` for a sharded initialisation::

  graphdef, abstract_state = nnx.get_abstract_model(lambda: Model(nnx.Rngs(0)), mesh)
  state = checkpointer.restore(path, abstract_state)
  model = nnx.merge(graphdef, state)

``nnx.as_abstract(tree)`` attaches those shardings to the abstract Variables of an
object or State already built with ``nnx.eval_shape`` (the mesh is the Variable's
``mesh`` metadata, else the active one).

Source: Flax NNX 0.12 ``nnx.get_abstract_model``, ``nnx.as_abstract`` and the
deprecated ``nnx.abstract_with_sharding`` (behaviour checked against the installed
Flax 0.12.8); ``jax.eval_shape``, ``jax.sharding``.
"""

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
      init_fn: a function of no arguments returning a model (``lambda:
        Model(nnx.Rngs(0))``). It runs abstractly: nothing is computed or allocated.
      mesh: the ``jax.sharding.Mesh`` the State's shardings refer to; it is set
        (``jax.set_mesh``) while ``init_fn`` runs.
      graph: accepted for Flax compatibility (traversal mode); the result is the
        same in both modes for a model without shared Variables.

    Returns:
      ``(graphdef, abstract_state)``: ``abstract_state`` is an ``nnx.State`` whose
      Variables hold ``jax.ShapeDtypeStruct(shape, dtype, sharding=NamedSharding(mesh,
      spec))``, ``spec`` from the Variable's sharding names (mapped by the active
      ``nnx.logical_axis_rules``; ``PartitionSpec()`` when it has none).

    Raises:
      ShardingSpecError (a ``ValueError``): a Variable's names include an axis the
        mesh lacks, or their number is not the value's rank; the message names the
        Variable's path, the spec and the mesh axes or shape.

    Example::

      >>> import jax, flaxgraph as nnx
      >>> mesh = jax.make_mesh((1, 1), ('data', 'model'))
      >>> graphdef, abstract = nnx.get_abstract_model(
      ...   lambda: nnx.Linear(2, 4, rngs=nnx.Rngs(0),
      ...                      kernel_metadata={'out_sharding': (None, 'model')}), mesh)
      >>> abstract['kernel'].value.shape, abstract['kernel'].value.sharding.spec
      ((2, 4), P(None, 'model'))

    Source: Flax NNX 0.12 ``nnx.get_abstract_model``.
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
    """Attaches a ``NamedSharding`` to every abstract Variable of ``tree`` that has
    sharding names and no sharding yet.

    Args:
      tree: an object (``nnx.Module``…) or a State / pytree of Variables whose values
        are ``jax.ShapeDtypeStruct`` (from ``nnx.eval_shape``). Other values are left
        as they are.
      graph: accepted for Flax compatibility (traversal mode).

    Returns:
      A new tree of the same structure (objects are rebuilt; ``tree`` is unchanged)
      whose abstract values carry ``NamedSharding(mesh, spec)``: ``mesh`` is the
      Variable's ``mesh`` metadata, else the mesh set with ``jax.set_mesh``; without
      either the value is left unsharded.

    Raises:
      ShardingSpecError (a ``ValueError``): a spec names an axis the mesh lacks or
        does not match the value's rank (the message names the Variable's path).

    Example::

      >>> import jax, flaxgraph as nnx
      >>> mesh = jax.make_mesh((1,), ('model',))
      >>> abstract = nnx.eval_shape(lambda: nnx.Linear(
      ...   2, 4, rngs=nnx.Rngs(0), kernel_metadata={'out_sharding': (None, 'model')}))
      >>> with jax.set_mesh(mesh):
      ...   abstract = nnx.as_abstract(abstract)
      >>> abstract.kernel.value.sharding.spec
      P(None, 'model')

    Source: Flax NNX 0.12 ``nnx.as_abstract``.
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
    """The older name of ``as_abstract`` (deprecated in Flax 0.12; same behaviour).

    Example::

      >>> import flaxgraph as nnx
      >>> nnx.abstract_with_sharding is not nnx.as_abstract
      True

    Source: Flax NNX 0.12 ``nnx.abstract_with_sharding``.
    """
    return as_abstract(tree, graph)
