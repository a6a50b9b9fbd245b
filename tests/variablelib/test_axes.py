"""Per-axis metadata through axis-changing transforms (flaxgraph/variablelib/axes.py)."""

from typing import Any, ClassVar

import jax.numpy as jnp
from hypothesis import given
from hypothesis import strategies as st

import flaxgraph as nnx
from flaxgraph.variablelib.axes import add_axis_of, remove_axis_of

NAMES = st.sampled_from(["data", "model", "layers", None])


class Recording(nnx.Param):
    """Records the hook calls, as Flax's own test does."""

    calls: ClassVar[list[tuple[str, int, Any]]] = []

    def add_axis(self, axis_index: int, axis_name: Any) -> None:
        Recording.calls.append(("add", axis_index, axis_name))
        super().add_axis(axis_index, axis_name)

    def remove_axis(self, axis_index: int, axis_name: Any) -> None:
        Recording.calls.append(("remove", axis_index, axis_name))
        super().remove_axis(axis_index, axis_name)


def test_hooks_get_the_partition_name_and_other_keys_follow_the_axis() -> None:
    Recording.calls = []
    meta = {nnx.PARTITION_NAME: "layers", "nickname": "nick"}

    @nnx.vmap(in_axes=0, out_axes=0, transform_metadata=meta, axis_size=3)
    def make(_: Any) -> Any:
        return Recording(jnp.ones((2, 4)), out_sharding=("a", "b"), nickname=("in", "out"))

    v = make(jnp.arange(3))
    assert v.shape == (3, 2, 4)
    assert v.out_sharding == ("layers", "a", "b")
    assert v.nickname == ("nick", "in", "out")
    assert Recording.calls == [("add", 0, "layers")]

    seen = {}

    @nnx.vmap(in_axes=0, transform_metadata=meta)
    def inside(w: Any) -> None:
        seen["out_sharding"], seen["nickname"] = w.out_sharding, w.nickname

    inside(v)
    assert seen == {"out_sharding": ("a", "b"), "nickname": ("in", "out")}
    assert v.nickname == ("nick", "in", "out")  # back on the way out
    assert Recording.calls[1:] == [("remove", 0, "layers"), ("add", 0, "layers")]


def test_a_name_given_to_the_base_hook_changes_no_metadata() -> None:
    v = nnx.Param(jnp.ones((2, 3)), out_sharding=("a", "b"))
    v.add_axis(0, "layers")  # Flax's hook form: the transform already moved the names
    v.remove_axis(0, "layers")
    assert v.out_sharding == ("a", "b")


def test_insertion_past_the_end_pads_with_none() -> None:
    v = nnx.Param(jnp.ones((2, 3, 4)), out_sharding=("a",))
    add_axis_of(v, 2, {nnx.PARTITION_NAME: "x"})
    assert v.out_sharding == ("a", None, "x")


@given(
    names=st.lists(NAMES, max_size=4).map(tuple),
    tags=st.lists(st.text(max_size=2), min_size=4, max_size=4).map(tuple),
    new=NAMES,
    data=st.data(),
)
def test_add_axis_of_and_remove_axis_of_are_inverses(
    names: tuple[Any, ...], tags: tuple[str, ...], new: Any, data: Any
) -> None:
    tags = tags[: len(names)]
    v = nnx.Param(jnp.zeros((1,) * len(names)), out_sharding=names, tags=tags)
    before = v.get_metadata()
    meta = {nnx.PARTITION_NAME: new, "tags": "t"}
    index = data.draw(st.integers(-(len(names) + 1), len(names)), label="index")
    add_axis_of(v, index, meta)
    if names:
        assert v.out_sharding[index] == new
        assert v.tags[index] == "t"
    remove_axis_of(v, index, meta)
    assert v.get_metadata() == before


def test_vmap_without_partition_name_leaves_new_variables_metadata_alone() -> None:
    @nnx.vmap(in_axes=None, out_axes=0, axis_size=5)
    @nnx.transform_metadata(in_axes=None, out_axes=0, partition="c")
    def create() -> Any:
        return nnx.Param(jnp.ones((2, 3)), out_sharding=("a", "b"))

    v = create()
    assert v.shape == (5, 2, 3)
    assert v.out_sharding == ("c", "a", "b")  # transform_metadata's axis, none from vmap


def test_vmap_without_partition_name_leaves_a_mapped_inputs_metadata_alone() -> None:
    v = nnx.Param(jnp.ones((4, 3)), out_sharding=("layers", "model"))
    seen = []
    nnx.vmap(lambda w: seen.append(w.out_sharding), in_axes=0)(v)
    assert seen == [("layers", "model")]  # as in Flax: only PARTITION_NAME moves names
    assert v.out_sharding == ("layers", "model")
