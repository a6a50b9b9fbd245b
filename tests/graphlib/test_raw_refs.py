"""Raw ``jax.Ref`` leaves in graph mode: identity-tracked like Variables."""

import hypothesis
import hypothesis.strategies as st
import jax
import jax.numpy as jnp
import pytest

import flaxgraph as nnx


class Holder(nnx.Module):
    def __init__(self, ref):
        self.a = ref
        self.b = ref


def test_shared_raw_ref_is_one_leaf_and_one_index():
    m = Holder(jax.new_ref(jnp.array(1.0)))
    ref_map = nnx.graphlib.RefMap()
    graphdef, leaves = nnx.graphlib.flatten(m, ref_index=ref_map, graph=True)
    assert len(leaves) == 1
    assert len(ref_map) == 2  # Holder + the Ref
    m1 = nnx.merge(graphdef, nnx.state(m))
    assert m1.a is m1.b
    assert isinstance(m1.a, jax.Ref)


def test_shared_raw_ref_under_jit_stays_shared():
    m = Holder(jax.new_ref(jnp.array(1.0)))

    @nnx.jit
    def f(m):
        m.a[...] += 1.0
        return m

    assert f(m) is m
    assert m.a is m.b
    assert float(m.b[...]) == 2.0


def test_shared_raw_ref_tree_mode_still_an_error():
    m = Holder(jax.new_ref(jnp.array(1.0)))
    with pytest.raises(ValueError, match="shared references"):
        nnx.split(m, graph=False)


def test_raw_ref_def_carries_its_index():
    graphdef, _ = nnx.split(Holder(jax.new_ref(jnp.array(1.0))))
    assert graphdef.root.attributes[0][1].index == 1


def test_raw_ref_root_is_its_own_state():
    ref = jax.new_ref(jnp.array(1.0))
    graphdef, state = nnx.split(ref)
    assert state is ref
    assert nnx.merge(graphdef, state) is ref


def test_jit_raw_ref_argument_and_new_ref_output():
    ref = jax.new_ref(jnp.array(1.0))

    @nnx.jit
    def f(r):
        r[...] += 1.0
        return jax.new_ref(jnp.array(10.0)), r

    for expected in (2.0, 3.0):  # the second call takes the fast path
        new, same = f(ref)
        assert same is ref
        assert float(ref[...]) == expected
        assert isinstance(new, jax.Ref) and float(new[...]) == 10.0


@hypothesis.settings(max_examples=25, deadline=None)
@hypothesis.given(st.lists(st.integers(0, 3), min_size=1, max_size=6))
def test_split_merge_keeps_raw_ref_sharing(picks):
    # Attribute i holds Ref number picks[i]: the merged graph shares exactly as the
    # original did, with one State leaf per distinct Ref.
    refs = [jax.new_ref(jnp.array(float(i))) for i in range(4)]
    node = nnx.Dict({f"a{i}": refs[p] for i, p in enumerate(picks)})
    graphdef, state = nnx.split(node)
    assert len(jax.tree.leaves(state)) == len(set(picks))
    merged = nnx.merge(graphdef, state)
    for i, p in enumerate(picks):
        for j, q in enumerate(picks):
            assert (merged[f"a{i}"] is merged[f"a{j}"]) == (p == q)


def test_a_raw_ref_given_two_axes_is_an_aliasing_error_naming_both_paths() -> None:
    ref = jax.new_ref(jnp.ones((3,)))
    with pytest.raises(nnx.InconsistentAliasingError, match=r"(?s)args\[0\]: 0.*args\[1\]: None"):
        nnx.vmap(lambda a, b: None, in_axes=(0, None))(ref, ref)
