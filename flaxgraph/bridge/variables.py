"""Variables across the Linen boundary: collections, metadata boxes, ``NNXMeta`` (the package
README, "Variables across the boundary").

Source: Flax NNX 0.12 ``flax.nnx.bridge.variables``; the "Axis Metadata" FLIP flax#2434."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any, Generic, TypeVar

import jax
from flax import struct
from flax.core import meta

from flaxgraph import partitioning, traversals
from flaxgraph.mesh_context import rename_sharding_keys
from flaxgraph.variablelib.initial_metadata import VariableMetadata
from flaxgraph.variablelib.names import variable_name_from_type, variable_type_from_name
from flaxgraph.variablelib.variable import FLAG_KEYS, Variable, is_variable

A = TypeVar("A")

__all__ = [
    "NNXMeta",
    "get_col_name",
    "is_vanilla_variable",
    "linen_vars_to_nnx_attrs",
    "nnx_attrs_to_linen_vars",
    "sort_variable_types",
    "to_linen_var",
    "to_nnx_var",
    "with_partitioning",
]


def sort_variable_types(types: Iterable[type]) -> list[type]:
    """Variable kinds sorted most-derived first, so a first-match lookup picks the most specific."""
    depth = {t: sum(issubclass(p, Variable) for p in t.mro()) for t in types}
    return sorted(depth, key=lambda t: -depth[t])


class NNXMeta(struct.PyTreeNode, meta.AxisMetadata, Generic[A]):
    """The Linen-side box of a flaxgraph Variable that carries metadata.

    Attributes:
      var_type: the Variable kind (``nnx.Param``…), static.
      value: the array (the box's only pytree leaf).
      metadata: the Variable's metadata (e.g. ``{'out_sharding': ('in', 'out')}``), static.

    >>> import jax.numpy as jnp, flaxgraph as nnx
    >>> box = nnx.bridge.NNXMeta(nnx.Param, jnp.ones((2, 3)), {'out_sharding': ('a', 'b')})
    >>> box.add_axis(0, {'partition_name': 'layers'}).metadata['out_sharding']
    ('layers', 'a', 'b')
    """

    var_type: type[Variable[Any]] = struct.field(pytree_node=False)
    value: Any = struct.field(pytree_node=True)
    metadata: dict[str, Any] = struct.field(pytree_node=False)

    def unbox(self) -> Any:
        return self.value

    def replace_boxed(self, val: Any) -> NNXMeta[Any]:
        return self.replace(value=val)

    def _moved_axis(self, index: int, params: Mapping[str, Any], add: bool) -> NNXMeta[A]:
        metadata = rename_sharding_keys(dict(self.metadata))
        if "out_sharding" in metadata:
            var = Variable(None, out_sharding=metadata["out_sharding"])
            (var.add_axis if add else var.remove_axis)(index, params)
            metadata["out_sharding"] = var.get_metadata("out_sharding")
        return self.replace(metadata=metadata)

    def add_axis(self, index: int, params: dict[Any, Any]) -> NNXMeta[A]:
        """The box with ``params[nn.PARTITION_NAME]`` (or ``None``) inserted at ``index`` in its sharding names."""
        return self._moved_axis(index, params, add=True)

    def remove_axis(self, index: int, params: dict[Any, Any]) -> NNXMeta[A]:
        """The box with the sharding name at ``index`` removed (inverse of ``add_axis``)."""
        return self._moved_axis(index, params, add=False)

    def get_partition_spec(self) -> jax.sharding.PartitionSpec:
        """The ``PartitionSpec`` of the Variable this box stands for."""
        return partitioning.get_partition_spec(self.to_nnx_variable()).get_value()

    def to_nnx_variable(self) -> Variable[Any]:
        """A new Variable of ``var_type`` with this value and metadata."""
        return self.var_type(self.value, **self.metadata)


def is_vanilla_variable(var: Variable[Any]) -> bool:
    """True when ``var`` has no metadata beyond the construction flags: Linen then holds its bare value."""
    for key, value in var.get_metadata(exclude_required=True).items():
        if key in FLAG_KEYS or (key.endswith("_hooks") and value == ()):
            continue
        return False
    return True


def to_linen_var(var: Variable[Any]) -> Any:
    """The Linen leaf of a Variable: its original Linen box, else the bare value, else an ``NNXMeta``."""
    metadata = var.get_metadata(exclude_required=True)
    box_type = metadata.pop("linen_meta_type", None)
    if box_type is not None:
        if hasattr(box_type, "from_nnx_metadata"):
            return box_type.from_nnx_metadata({"value": var.get_value(), **metadata})
        return box_type(var.get_value(), **metadata)
    if is_vanilla_variable(var):
        return var.get_value()
    return NNXMeta(type(var), var.get_value(), metadata)


def get_col_name(keypath: Sequence[Any]) -> str:
    """The collection at the head of a Linen key path, ``str(keypath[0].key)``; ``TypeError`` unless a ``DictKey``."""
    if not isinstance(keypath[0], jax.tree_util.DictKey):
        raise TypeError(f"get_col_name: the key path must start with a DictKey, got {keypath[0]!r}")
    return str(keypath[0].key)


def to_nnx_var(col: str, x: Any) -> Variable[Any]:
    """The Variable for the Linen leaf ``x`` of collection ``col``; ``TypeError`` for an ``NNXMeta`` of another kind."""
    kind = variable_type_from_name(col, allow_register=True)
    if isinstance(x, NNXMeta):
        if x.var_type is not kind and not issubclass(x.var_type, kind):
            raise TypeError(
                f"An NNXMeta box of kind {x.var_type.__name__} is in the Linen collection "
                f"{col!r}, which holds {kind.__name__} Variables.\nFix: register the kind "
                f"under that name (nnx.register_variable_name({col!r}, "
                f"{x.var_type.__name__})) or move the variable to the right collection."
            )
        return x.to_nnx_variable()
    if isinstance(x, meta.AxisMetadata):
        fields = dict(x.to_nnx_metadata() if hasattr(x, "to_nnx_metadata") else vars(x))
        value = fields.pop("value", None) if "value" in fields else x.unbox()
        return kind(value, **fields, linen_meta_type=type(x))
    return kind(x)


def linen_vars_to_nnx_attrs(variables: Mapping[str, Any]) -> dict[str, Any]:
    """Linen ``{collection: nested dict}`` as one nested dict of Variables by path; ``ValueError`` if two
    collections share a path."""
    flat: dict[tuple[Any, ...], Variable[Any]] = {}
    where: dict[tuple[Any, ...], str] = {}
    for col, tree in variables.items():
        if not isinstance(tree, Mapping):
            tree = {}
        for path, leaf in traversals.flatten_to_sequence(tree):
            if path in flat:
                raise ValueError(
                    f"The Linen variables {where[path]}/{'/'.join(map(str, path))} and "
                    f"{col}/{'/'.join(map(str, path))} have the same path; a flaxgraph "
                    "Module holds one Variable per attribute path.\nFix: rename one of "
                    "the variables in the Linen module."
                )
            flat[path] = to_nnx_var(col, leaf)
            where[path] = col
    return traversals.unflatten_mapping(flat)


def nnx_attrs_to_linen_vars(
    attrs: Mapping[str, Any], metadata_fn: Callable[[Variable[Any]], Any] | None = to_linen_var
) -> dict[str, Any]:
    """A nested dict of Variables as Linen ``{collection: nested dict}``; ``ValueError`` for a non-Variable leaf."""
    out: dict[tuple[Any, ...], Any] = {}
    for path, var in traversals.flatten_mapping(attrs).items():
        if not is_variable(var):
            raise ValueError(
                f"Cannot give the value at {'/'.join(map(str, path))} a Linen collection: it "
                f"is a {type(var).__name__}, not an nnx.Variable.\nFix: wrap it in a Variable "
                "kind (nnx.Param, nnx.BatchStat, ...)."
            )
        col = variable_name_from_type(type(var), allow_register=True)
        out[(col, *path)] = metadata_fn(var) if metadata_fn is not None else var.get_value()
    return traversals.unflatten_mapping(out)


def with_partitioning(
    fn: Callable[..., Any], names: tuple[Any, ...], mesh: jax.sharding.Mesh | None = None
) -> Callable[..., Any]:
    """An initializer wrapper: an ``nn.Partitioned`` box on the Linen side, ``out_sharding=names`` on flaxgraph's.

    Args:
      fn: an initializer ``(key, shape, dtype) -> array``.
      names: one mesh-axis name (or ``None``) per dimension.
      mesh: an optional mesh to place the value on at creation.

    Returns:
      An initializer returning an ``nnx.VariableMetadata`` box with the names and
      ``linen_meta_type=nn.Partitioned``.

    >>> import jax, flaxgraph as nnx
    >>> init = nnx.bridge.with_partitioning(jax.nn.initializers.ones, ('in', 'out'))
    >>> nnx.Param(init(jax.random.key(0), (2, 3))).out_sharding
    ('in', 'out')
    """
    metadata: dict[str, Any] = {"out_sharding": tuple(names), "linen_meta_type": meta.Partitioned}
    if mesh is not None:
        metadata["mesh"] = mesh

    def init(*args: Any, **kwargs: Any) -> VariableMetadata[Any]:
        return VariableMetadata(fn(*args, **kwargs), metadata=dict(metadata))

    return init
