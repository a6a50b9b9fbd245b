"""Axis metadata and sharding helpers (SPMD; Flax's ``nnx.spmd``): the ``AxisMetadata`` box
protocol and a Variable's sharding names as ``PartitionSpec``/``NamedSharding``
(``docs/design.md``, "Axis metadata").

Source: the "Axis Metadata" FLIP flax#2434; Flax NNX ``nnx.spmd``; ``jax.sharding``."""

from __future__ import annotations

import abc
from collections.abc import Callable, Mapping
from typing import Any, TypeVar

import jax
from jax.sharding import NamedSharding, PartitionSpec

from flaxgraph.graphlib.paths import keys_str
from flaxgraph.graphlib.registry import is_node_or_variable
from flaxgraph.mesh_context import check_spec, names_of, resolve_names
from flaxgraph.variablelib.variable import PARTITION_NAME, Variable, is_variable, metadata_of

B = TypeVar("B", bound="AxisMetadata")

__all__ = [
    "PARTITION_NAME",
    "AxisMetadata",
    "Partitioned",
    "get_named_sharding",
    "get_partition_spec",
    "get_var_pspec",
    "map_boxes",
    "with_partitioning",
    "with_sharding_constraint",
]


class AxisMetadata(metaclass=abc.ABCMeta):
    """A box holding a value plus metadata that follows axes added or removed by transforms.

    Subclasses are pytrees whose leaves are the value's; ``add_axis`` and ``remove_axis``
    return new boxes and are inverses.
    """

    @abc.abstractmethod
    def unbox(self) -> Any:
        """The wrapped value (not recursively unboxed)."""

    @abc.abstractmethod
    def add_axis(self: B, index: int, params: Mapping[str, Any]) -> B:
        """A box for the value with a new axis at ``index``."""

    @abc.abstractmethod
    def remove_axis(self: B, index: int, params: Mapping[str, Any]) -> B:
        """A box for the value with the axis at ``index`` removed."""

    def variable_metadata(self) -> dict[str, Any]:
        """Metadata a Variable created from this box receives (default none)."""
        return {}


class Partitioned(AxisMetadata):
    """A value with one mesh-axis name (or ``None``) per dimension.

    A Variable created from it has ``out_sharding == names`` (and ``metadata``, e.g.
    ``mesh``); under ``vmap``/``scan`` it gains or loses
    ``transform_metadata[PARTITION_NAME]`` at the mapped axis.
    """

    __slots__ = ("value", "names", "metadata")

    def __init__(
        self,
        value: Any,
        names: tuple[str | tuple[str, ...] | None, ...],
        metadata: Mapping[str, Any] | None = None,
    ):
        self.value = value
        self.names = tuple(names)
        self.metadata = dict(metadata or {})

    def unbox(self) -> Any:
        return self.value

    def add_axis(self, index: int, params: Mapping[str, Any]) -> Partitioned:
        names = list(self.names)
        names.insert(index if index >= 0 else len(names) + 1 + index, params.get(PARTITION_NAME))
        return Partitioned(self.value, tuple(names), self.metadata)

    def remove_axis(self, index: int, params: Mapping[str, Any]) -> Partitioned:
        names = list(self.names)
        removed = names.pop(index)
        expected = params.get(PARTITION_NAME)
        if expected is not None and removed != expected:
            raise ValueError(
                f"Partitioned.remove_axis({index}) removes the axis named {removed!r}, but "
                f"the transform's PARTITION_NAME is {expected!r}."
            )
        return Partitioned(self.value, tuple(names), self.metadata)

    def variable_metadata(self) -> dict[str, Any]:
        return {**self.metadata, "out_sharding": self.names}

    def get_partition_spec(self) -> PartitionSpec:
        return PartitionSpec(*self.names)

    def __eq__(self, other: object) -> bool:
        return (
            isinstance(other, Partitioned)
            and self.names == other.names
            and self.metadata == other.metadata
            and self.value is other.value
        )

    __hash__ = None  # type: ignore[assignment]

    def __repr__(self) -> str:
        shape = getattr(self.value, "shape", None)
        return f"Partitioned(value={'shape ' + str(shape) if shape is not None else self.value!r}, names={self.names})"


def _aux(p: Partitioned) -> Any:
    return p.names, tuple(sorted(p.metadata.items()))


def _unflatten_partitioned(aux: Any, children: Any) -> Partitioned:
    return Partitioned(children[0], aux[0], dict(aux[1]))


jax.tree_util.register_pytree_with_keys(
    Partitioned,
    lambda p: (((jax.tree_util.GetAttrKey("value"), p.value),), _aux(p)),
    _unflatten_partitioned,
    lambda p: ((p.value,), _aux(p)),
)


def with_partitioning(
    initializer: Callable[..., Any],
    sharding: tuple[str | tuple[str, ...] | None, ...],
    mesh: Any = None,
    **metadata: Any,
) -> Callable[..., Partitioned]:
    """Wraps an initializer so it returns ``Partitioned(value, sharding)`` (plus ``mesh``, which
    places the Variable at creation, and ``metadata``).

    Example::

      >>> import jax, flaxgraph as nnx
      >>> init = nnx.with_partitioning(jax.nn.initializers.ones, (None, 'model'))
      >>> nnx.Param(init(jax.random.key(0), (2, 4))).out_sharding
      (None, 'model')
    """

    extra = {**metadata, **({"mesh": mesh} if mesh is not None else {})}

    def init(*args: Any, **kwargs: Any) -> Partitioned:
        return Partitioned(initializer(*args, **kwargs), sharding, extra)

    return init


def _names(v: Variable[Any]) -> tuple[Any, ...] | None:
    return names_of(metadata_of(v))


def spec_of(leaf: Any) -> PartitionSpec:
    if is_variable(leaf):
        names = _names(leaf)
        if names is None:
            return PartitionSpec()
        local = metadata_of(leaf).get("sharding_rules") or ()
        return PartitionSpec(*resolve_names(names, local))
    if isinstance(leaf, Partitioned):
        return PartitionSpec(*resolve_names(leaf.names, leaf.metadata.get("sharding_rules", ())))
    return PartitionSpec()


def _has_names(leaf: Any) -> bool:
    return isinstance(leaf, Partitioned) or (is_variable(leaf) and _names(leaf) is not None)


def _is_box(x: Any) -> bool:
    return is_variable(x) or isinstance(x, Partitioned)


def leaf_where(keypath: tuple[Any, ...], leaf: Any) -> str:
    keys = [getattr(k, "key", getattr(k, "name", getattr(k, "idx", k))) for k in keypath]
    kind = type(leaf).__name__
    return f"the {kind} at {keys_str(keys)!r}"


def get_var_pspec(v: Variable[Any]) -> PartitionSpec | None:
    """The ``PartitionSpec`` of one Variable: its names under the active logical axis rules and
    its own ``sharding_rules``; ``P()`` without names, ``None`` if its value has no shape.

    Example::

      >>> import jax.numpy as jnp, flaxgraph as nnx
      >>> w = nnx.Param(jnp.ones((2, 4)), out_sharding=('embed', 'mlp'))
      >>> with nnx.logical_axis_rules([('mlp', 'model')]):
      ...   print(nnx.spmd.get_var_pspec(w))
      P('embed', 'model')
      >>> nnx.spmd.get_var_pspec(nnx.Param(jnp.ones(3))), nnx.spmd.get_var_pspec(nnx.Variable('x'))
      (P(), None)
    """
    if _names(v):
        return spec_of(v)
    return PartitionSpec() if hasattr(v, "shape") else None


def get_partition_spec(tree: Any) -> Any:
    """``tree`` (a State or pytree of Variables and ``Partitioned``) with each leaf's
    ``PartitionSpec`` as its value (``P()`` without names); Variables stay boxed.

    Example::

      >>> import jax.numpy as jnp, flaxgraph as nnx
      >>> s = nnx.State({'w': nnx.Param(jnp.ones((2, 4)), out_sharding=(None, 'model'))})
      >>> nnx.get_partition_spec(s)['w'].value
      P(None, 'model')
    """

    def spec(leaf: Any) -> Any:
        s = spec_of(leaf)
        return leaf.replace(s) if is_variable(leaf) else s

    return jax.tree.map(spec, tree, is_leaf=_is_box)


def get_named_sharding(tree: Any, mesh: jax.sharding.Mesh) -> Any:
    """As ``get_partition_spec`` with ``NamedSharding(mesh, spec)`` values, each checked.

    Args:
      tree: a State or pytree of Variables, ``Partitioned`` boxes or arrays (or
        ``jax.ShapeDtypeStruct``).
      mesh: a ``jax.sharding.Mesh`` (or ``AbstractMesh``).

    Raises:
      ShardingSpecError (a ``ValueError``): a spec names an axis ``mesh`` lacks, or has
        more entries than the value has dimensions.

    Example::

      >>> import jax, jax.numpy as jnp, flaxgraph as nnx
      >>> mesh = jax.make_mesh((1,), ('model',))
      >>> s = nnx.State({'w': nnx.Param(jnp.ones((2, 4)), out_sharding=(None, 'model'))})
      >>> nnx.get_named_sharding(s, mesh)['w'].value.spec
      P(None, 'model')
    """

    def sharding(keypath: tuple[Any, ...], leaf: Any) -> Any:
        spec = spec_of(leaf)
        value = leaf.raw_value if is_variable(leaf) else leaf
        value = value.value if isinstance(value, Partitioned) else value
        shape = getattr(value, "shape", None)
        if shape is not None and not _has_names(leaf):
            shape = None  # PartitionSpec() (replicated) fits every rank
        check_spec(spec, mesh, None if shape is None else tuple(shape), leaf_where(keypath, leaf))
        s = NamedSharding(mesh, spec)
        return leaf.replace(s) if is_variable(leaf) else s

    return jax.tree_util.tree_map_with_path(sharding, tree, is_leaf=_is_box)


def with_sharding_constraint(tree: Any, shardings: Any) -> Any:
    """``jax.lax.with_sharding_constraint`` for trees holding Variables and States.

    ``shardings`` is one Sharding/PartitionSpec for all leaves, or a tree of ``tree``'s
    structure (Variables holding shardings are unboxed). Variables come back rebuilt with
    the constrained value.
    """
    if isinstance(shardings, (jax.sharding.Sharding, PartitionSpec)):
        return jax.tree.map(lambda v: _constrain(v, shardings), tree, is_leaf=is_variable)
    return jax.tree.map(
        lambda v, s: _constrain(v, s.raw_value if is_variable(s) else s),
        tree,
        shardings,
        is_leaf=is_variable,
    )


def _constrain(v: Any, sharding: Any) -> Any:
    if is_variable(v):
        return v.replace(jax.lax.with_sharding_constraint(v.raw_value, sharding))
    return jax.lax.with_sharding_constraint(v, sharding)


def map_boxes(prefix: Any, tree: Any, fn: Callable[[AxisMetadata, Any], AxisMetadata]) -> Any:
    """Applies ``fn(box, axis)`` to every ``AxisMetadata`` box in ``tree``, ``axis`` the int
    entry of ``prefix`` above it (other prefixes leave boxes alone)."""
    if isinstance(prefix, int) and not isinstance(prefix, bool):
        # Objects and Variables are leaves here: rebuilding them as pytrees would hand
        # the function copies, and its changes would be lost (vmap over ``__init__``).
        is_leaf = lambda x: isinstance(x, AxisMetadata) or is_node_or_variable(x)
        if not any(isinstance(x, AxisMetadata) for x in jax.tree.leaves(tree, is_leaf=is_leaf)):
            return tree
        return jax.tree.map(
            lambda x: fn(x, prefix) if isinstance(x, AxisMetadata) else x, tree, is_leaf=is_leaf
        )
    if (
        isinstance(prefix, (tuple, list))
        and isinstance(tree, (tuple, list))
        and len(prefix) == len(tree)
    ):
        mapped = [map_boxes(p, t, fn) for p, t in zip(prefix, tree)]
        return mapped if isinstance(tree, list) else tuple(mapped)
    if isinstance(prefix, dict) and isinstance(tree, dict):
        return {k: map_boxes(prefix.get(k), v, fn) for k, v in tree.items()}
    return tree
