"""Axis metadata (the "Axis Metadata" FLIP flax#2434; Flax NNX's "Transformations"
guide, "Axis metadata") and the sharding helpers.

* Variables' ``out_sharding`` names follow the axes vmap/scan remove
  and add, with ``transform_metadata`` (the guide's printed outputs).
* The box protocol: ``AxisMetadata``, ``Partitioned``, ``with_partitioning``; a
  boxed initial value becomes a Variable with that metadata; boxes passed
  through vmap/scan update their names.
* ``get_partition_spec``, ``get_named_sharding``, ``with_sharding_constraint``
  on a one-device mesh (the multi-device run is tests/test_sharded_training.py).
"""

from __future__ import annotations

import dataclasses
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax.sharding import Mesh, NamedSharding
from jax.sharding import PartitionSpec as P

import flaxgraph as nnx
from flaxgraph.testing import Node


class Weights(nnx.Module):
    def __init__(self, array: jax.Array, **metadata: Any):
        self.param = nnx.Param(array, **metadata)


# -- metadata following vmap and scan ------------------------------------------------------------------


def test_vmap_removes_and_restores_the_mapped_axis_name() -> None:
    m = Weights(jnp.ones((3, 4, 5)), out_sharding=("a", "b", None))
    seen: dict[str, Any] = {}

    @nnx.vmap(in_axes=1, transform_metadata={nnx.PARTITION_NAME: "b"})
    def f(m: Weights) -> None:
        seen["shape"], seen["names"] = m.param.shape, m.param.get_metadata("out_sharding")

    f(m)
    assert seen == {"shape": (3, 5), "names": ("a", None)}
    assert m.param.shape == (3, 4, 5)
    assert m.param.get_metadata("out_sharding") == ("a", "b", None)


def test_vmap_adds_the_partition_name_to_objects_created_inside() -> None:
    @nnx.vmap(out_axes=1, axis_size=4, transform_metadata={nnx.PARTITION_NAME: "b"})
    def init_vmap() -> Weights:
        return Weights(jnp.ones((3, 5)), out_sharding=("a", None))

    m = init_vmap()
    assert m.param.shape == (3, 4, 5)
    assert m.param.get_metadata("out_sharding") == ("a", "b", None)


def test_vmap_without_a_partition_name_leaves_the_metadata_alone() -> None:
    # No transform_metadata (as in Flax 0.12): the names are not moved, inside or out.
    m = Weights(jnp.ones((3, 4)), out_sharding=("x", "y"))

    @nnx.vmap(in_axes=1)
    def f(m: Weights) -> None:
        assert m.param.out_sharding == ("x", "y")
        m.param.value = m.param.value * 2

    f(m)
    assert m.param.out_sharding == ("x", "y")
    np.testing.assert_array_equal(m.param.value, np.full((3, 4), 2.0))


def test_scan_removes_and_restores_the_scanned_axis_name() -> None:
    m = Weights(jnp.ones((3, 4, 5)), out_sharding=("a", "b", None))
    seen: list[Any] = []

    @nnx.scan(
        in_axes=(nnx.Carry, 1),
        out_axes=(nnx.Carry, 0),
        transform_metadata={nnx.PARTITION_NAME: "b"},
    )
    def f(c: jax.Array, m: Weights) -> tuple[jax.Array, jax.Array]:
        seen.append((m.param.shape, m.param.out_sharding))
        m.param.value = m.param.value + c
        return c + 1, jnp.sum(m.param.value)

    _, ys = f(jnp.zeros(()), m)
    assert seen == [((3, 5), ("a", None))]
    assert m.param.shape == (3, 4, 5)
    assert m.param.out_sharding == ("a", "b", None)
    np.testing.assert_array_equal(m.param.value[:, :, 0], np.tile(np.arange(1.0, 5.0), (3, 1)))
    np.testing.assert_array_equal(ys, [15.0 * (i + 1) for i in range(4)])


def test_scan_adds_the_partition_name_to_objects_created_inside() -> None:
    @nnx.scan(
        in_axes=(nnx.Carry,),
        out_axes=(nnx.Carry, 1),
        length=4,
        transform_metadata={nnx.PARTITION_NAME: "b"},
    )
    def init_scan(c: jax.Array) -> tuple[jax.Array, Weights]:
        return c + 1, Weights(jnp.ones((3, 5)) * c, out_sharding=("a", None))

    _, m = init_scan(jnp.zeros(()))
    assert m.param.shape == (3, 4, 5)
    assert m.param.out_sharding == ("a", "b", None)
    np.testing.assert_array_equal(m.param.value[0, :, 0], [0.0, 1.0, 2.0, 3.0])


# -- the box protocol -------------------------------------------------------------------------------------


def test_axis_metadata_is_an_abstract_box_protocol() -> None:
    with pytest.raises(TypeError):
        nnx.AxisMetadata()  # type: ignore[abstract]
    assert issubclass(nnx.Partitioned, nnx.AxisMetadata)


def test_partitioned_add_and_remove_axis() -> None:
    x = jnp.ones((2, 3))
    box = nnx.Partitioned(x, ("a", None))
    added = box.add_axis(1, {nnx.PARTITION_NAME: "layers"})
    assert added.names == ("a", "layers", None) and added.unbox() is x
    assert box.names == ("a", None)  # a new box; the old one is unchanged
    assert added.remove_axis(1, {nnx.PARTITION_NAME: "layers"}) == box
    assert box.add_axis(-1, {}).names == ("a", None, None)
    with pytest.raises(ValueError, match=r"named 'layers'.*PARTITION_NAME is 'other'"):
        added.remove_axis(1, {nnx.PARTITION_NAME: "other"})
    assert box.get_partition_spec() == P("a", None)
    assert jax.tree.leaves(box) == [x]
    doubled = jax.tree.map(lambda v: v * 2, box)
    assert type(doubled) is nnx.Partitioned and doubled.names == ("a", None)


def test_with_partitioning_boxes_an_initializer_and_a_variable_unboxes_it() -> None:
    init = nnx.with_partitioning(jax.nn.initializers.lecun_normal(), (None, "model"))
    boxed = init(jax.random.key(0), (4, 8))
    assert isinstance(boxed, nnx.Partitioned) and boxed.names == (None, "model")
    np.testing.assert_array_equal(
        boxed.value, jax.nn.initializers.lecun_normal()(jax.random.key(0), (4, 8))
    )
    p = nnx.Param(boxed)
    assert p.out_sharding == (None, "model")
    assert p.value is boxed.value
    assert nnx.Param(boxed, out_sharding=("x", "y")).out_sharding == ("x", "y")  # explicit wins


@jax.tree_util.register_dataclass
@dataclasses.dataclass
class Tagged(nnx.AxisMetadata):
    """A user-defined box: per-axis labels (not sharding names)."""

    value: Any
    labels: tuple[str | None, ...] = dataclasses.field(metadata=dict(static=True))

    def unbox(self) -> Any:
        return self.value

    def add_axis(self, index: int, params: Any) -> Tagged:
        labels = list(self.labels)
        labels.insert(index, params.get("label"))
        return Tagged(self.value, tuple(labels))

    def remove_axis(self, index: int, params: Any) -> Tagged:
        labels = list(self.labels)
        labels.pop(index)
        return Tagged(self.value, tuple(labels))

    def variable_metadata(self) -> dict[str, Any]:
        return {"labels": self.labels}


def test_a_user_defined_box_becomes_variable_metadata() -> None:
    v = nnx.Param(Tagged(jnp.ones(3), ("feature",)))
    assert v.labels == ("feature",)
    assert v.value.shape == (3,)


@pytest.mark.parametrize("box", ["partitioned", "user"])
def test_boxes_in_arguments_and_outputs_follow_vmap_axes(box: str) -> None:
    if box == "partitioned":
        value = nnx.Partitioned(jnp.arange(12.0).reshape(4, 3), ("b", None))
        names = lambda b: b.names
        params = {nnx.PARTITION_NAME: "b"}
    else:
        value = Tagged(jnp.arange(12.0).reshape(4, 3), ("b", None))
        names = lambda b: b.labels
        params = {"label": "b", nnx.PARTITION_NAME: "b"}
    seen: dict[str, Any] = {}

    def f(b: Any) -> Any:
        seen["names"], seen["shape"] = names(b), b.unbox().shape
        return b

    out = nnx.vmap(f, out_axes=1, transform_metadata=params)(value)
    assert seen == {"names": (None,), "shape": (3,)}
    assert type(out) is type(value)
    assert names(out) == (None, "b")
    np.testing.assert_array_equal(out.unbox(), np.arange(12.0).reshape(4, 3).T)
    assert names(value) == ("b", None)  # the caller's box is unchanged


def test_boxes_follow_scan_axes_and_boxed_initializers_inside_vmap() -> None:
    box = nnx.Partitioned(jnp.ones((4, 3)), ("layers", None))
    seen: list[Any] = []

    def body(c: jax.Array, b: nnx.Partitioned) -> tuple[jax.Array, nnx.Partitioned]:
        seen.append(b.names)
        return c + b.value.sum(), nnx.Partitioned(b.value * c, b.names)

    c, ys = nnx.scan(body, transform_metadata={nnx.PARTITION_NAME: "layers"})(jnp.zeros(()), box)
    assert seen == [(None,)]
    assert isinstance(ys, nnx.Partitioned) and ys.names == ("layers", None)
    assert float(c) == 12.0
    np.testing.assert_array_equal(ys.value[:, 0], [0.0, 3.0, 6.0, 9.0])

    init = nnx.with_partitioning(jax.nn.initializers.ones, (None, "model"))

    @nnx.vmap(transform_metadata={nnx.PARTITION_NAME: "layers"})
    def make(key: jax.Array) -> Node:
        return Node(w=nnx.Param(init(key, (2, 3))))

    m = make(jax.random.split(jax.random.key(0), 4))
    assert m.w.shape == (4, 2, 3) and m.w.out_sharding == ("layers", None, "model")


# -- partition specs and shardings ------------------------------------------------------------------------


def model() -> Node:
    return Node(
        w=nnx.Param(jnp.ones((2, 3)), out_sharding=("a", None)),
        b=nnx.Param(jnp.ones(3)),
        s=nnx.BatchStat(jnp.ones(3), out_sharding=("a",)),
        raw=jnp.ones(2),
    )


def test_get_partition_spec_of_a_state_and_of_a_pytree_of_boxes() -> None:
    specs = nnx.get_partition_spec(nnx.state(model()))
    assert specs["w"].value == P("a", None)
    assert specs["b"].value == P()
    assert specs["s"].value == P("a")
    assert specs["raw"] == P()
    assert isinstance(specs["w"], nnx.Param)  # Variables stay boxed
    tree = {"p": nnx.Partitioned(jnp.ones((2, 2)), (None, "a")), "x": jnp.ones(2)}
    assert nnx.get_partition_spec(tree) == {"p": P(None, "a"), "x": P()}


MESH = Mesh(np.array(jax.devices()[:1]), ("a",))


def test_get_named_sharding_and_with_sharding_constraint() -> None:
    m = model()
    shardings = nnx.get_named_sharding(nnx.state(m), MESH)
    assert shardings["w"].value == NamedSharding(MESH, P("a", None))
    assert shardings["b"].value == NamedSharding(MESH, P())
    assert shardings["s"].value == NamedSharding(MESH, P("a"))

    # Eagerly, the constraint places the arrays (on one device XLA's compiled outputs
    # are normalised to P(); tests/test_sharded_training.py checks jit on 8 devices).
    state = nnx.state(m)
    constrained = nnx.with_sharding_constraint(state, shardings)
    assert isinstance(constrained["w"], nnx.Param)
    assert constrained["w"].out_sharding == ("a", None)  # the metadata is kept
    assert constrained["w"].value.sharding.spec == P("a", None)
    assert constrained["s"].value.sharding.spec == P("a")
    np.testing.assert_array_equal(constrained["w"].value, np.ones((2, 3)))

    with jax.set_mesh(MESH):
        x, v = nnx.with_sharding_constraint((jnp.arange(2.0), nnx.Param(jnp.arange(3.0))), P("a"))
    assert isinstance(v, nnx.Param)
    assert x.sharding.spec == P("a") and v.value.sharding.spec == P("a")
    np.testing.assert_array_equal(v.value, np.arange(3.0))

    @nnx.jit
    def constrain(m: Node) -> None:
        state = nnx.state(m)
        nnx.update(m, nnx.with_sharding_constraint(state, nnx.get_named_sharding(state, MESH)))

    w = m.w
    constrain(m)
    assert m.w is w
    np.testing.assert_array_equal(m.w.value, np.ones((2, 3)))


def test_with_partitioning_carries_mesh_and_metadata_to_the_variable():

    mesh = Mesh(np.array(jax.devices()[:1]), ("model",))
    init = nnx.with_partitioning(jax.nn.initializers.ones, (None, "model"), mesh, note="x")
    boxed = init(jax.random.key(0), (2, 4))
    assert jax.tree.map(lambda v: v, boxed).metadata == boxed.metadata  # survives pytrees
    p = nnx.Param(boxed)
    assert p.out_sharding == (None, "model") and p.note == "x" and p.mesh is mesh


def test_a_variables_own_sharding_rules_resolve_its_names() -> None:
    v = nnx.Param(jnp.ones((2, 3)), out_sharding=("rows", None), sharding_rules=(("rows", "data"),))
    assert nnx.get_partition_spec(nnx.State({"v": v}))["v"].get_value() == P("data", None)
    with nnx.logical_axis_rules([("rows", "model")]):
        with pytest.raises(ValueError, match="Inconsistent logical axis annotations for 'rows'"):
            nnx.get_partition_spec(nnx.State({"v": v}))


def test_get_var_pspec_matches_get_partition_spec_per_variable():
    # A checkpoint loader asks each template Variable for its spec, one at a time.
    state = nnx.State(
        {
            "w": nnx.Param(jnp.ones((2, 4)), out_sharding=("embed", "mlp")),
            "b": nnx.Param(jnp.ones(4)),
            "name": nnx.Variable("layer"),
        }
    )
    with nnx.logical_axis_rules([("mlp", "model")]):
        specs = {k: nnx.spmd.get_var_pspec(v) for k, v in state.items()}
        whole = nnx.get_partition_spec(state)
    assert specs == {"w": P("embed", "model"), "b": P(), "name": None}
    assert specs["w"] == whole["w"].value and specs["b"] == whole["b"].value


def test_get_var_pspec_matches_flax():
    fnnx = pytest.importorskip("flax.nnx")
    mesh = jax.make_mesh((1, 1), ("e", "model"), axis_types=(jax.sharding.AxisType.Auto,) * 2)

    def specs(lib: Any) -> tuple[Any, ...]:
        with jax.set_mesh(mesh), lib.logical_axis_rules([("mlp", "model")]):
            return (
                lib.spmd.get_var_pspec(lib.Param(jnp.ones((2, 4)), out_sharding=("e", "mlp"))),
                lib.spmd.get_var_pspec(lib.Param(jnp.ones(4))),
                lib.spmd.get_var_pspec(lib.Variable("x")),
            )

    assert specs(nnx) == specs(fnnx) == (P("e", "model"), P(), None)
