"""Tests of flaxgraph/pytreelib/attribute_kinds.py (and their use by objects.py): nnx.data /
nnx.static as markers and as field specifiers, nnx.dataclass, the deprecated
nnx.Data / nnx.Static annotations, is_data / has_data / register_data_type,
check_pytree. (No ``from __future__ import annotations`` here: the annotations are
evaluated, as in most user code.)"""

import dataclasses

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import flaxgraph as nnx


def test_field_specifiers_in_a_plain_pytree_class():
    class Foo(nnx.Pytree):
        table: list = nnx.data()
        label: str = nnx.static()

        def __init__(self):
            self.table = [1, 2]  # plain ints: data because of the class-level field
            self.label = "x"
            self.w = jnp.ones(1)

    foo = Foo()
    assert jax.tree.leaves(foo) == [1, 2, foo.w]
    # The graph view walks a marked list as any list: its ints stay static, as in Flax.
    assert sorted(nnx.state(foo).to_pure_dict()) == ["w"]


def test_a_marked_container_keeps_its_non_array_values_static_through_jit():
    # A trainer keeps the dtypes of a model's parameters next to their gradients,
    # marked data so it may later hold arrays: the dtypes are not State leaves, so
    # nnx.jit traces the arrays only and hands the dtypes in as they are.
    class Accumulator(nnx.Pytree):
        def __init__(self, model):
            params = nnx.state(model, nnx.Param)
            is_var = lambda x: isinstance(x, nnx.Variable)
            self.dtypes = nnx.data(
                jax.tree.map(lambda v: np.dtype(jnp.bfloat16), params, is_leaf=is_var)
            )
            self.grads = nnx.data(
                jax.tree.map(lambda v: jnp.zeros(v.shape), params, is_leaf=is_var)
            )
            self.extra = nnx.data({"scale": np.dtype("bfloat16"), "bias": (jnp.ones(1), 2)})
            self.count = nnx.data(0)  # not a container: a State leaf

    acc = Accumulator(nnx.Linear(2, 3, rngs=nnx.Rngs(0)))
    state = nnx.state(acc).to_pure_dict()
    assert sorted(state) == ["count", "extra", "grads"]
    assert state["extra"] == {"bias": {0: acc.extra["bias"][0]}}

    @nnx.jit
    def cast(acc):
        acc.count += 1
        return jax.tree.map(lambda g, d: g.astype(d), acc.grads, acc.dtypes)

    out = cast(acc)
    assert out["kernel"].dtype == jnp.bfloat16 and acc.count == 1
    assert acc.extra["scale"] == np.dtype("bfloat16") and acc.extra["bias"][1] == 2


def test_dataclass_with_field_specifiers():
    @nnx.dataclass
    class Point(nnx.Pytree):
        x: jax.Array
        label: str = nnx.static(default="p")
        steps: int = nnx.data(default=0)

    p = Point(jnp.zeros(2))
    assert dataclasses.is_dataclass(p) and p.label == "p" and p.steps == 0
    assert jax.tree.leaves(p) == [0, p.x]  # attributes in name order
    graphdef, state = nnx.split(p)
    assert sorted(state.to_pure_dict()) == ["steps", "x"]
    q = nnx.merge(graphdef, state)
    assert type(q) is Point and q.label == "p"
    doubled = jax.jit(lambda p: jax.tree.map(lambda a: a + 1, p))(p)
    assert doubled.steps == 1 and doubled.label == "p"


def test_dataclass_options_and_errors():
    @nnx.dataclass(kw_only=True, eq=False)
    class Conf(nnx.Pytree):
        n: int = nnx.static(default=1)

    assert Conf(n=2).n == 2
    with pytest.raises(TypeError):
        Conf(2)
    with pytest.raises(TypeError, match=r"nnx\.Pytree subclasses"):
        nnx.dataclass(type("Plain", (), {}))


def test_marker_with_value_and_keywords_is_an_error():
    with pytest.raises(TypeError, match="no keyword arguments"):
        nnx.data(1, default=2)


def test_deprecated_data_and_static_annotations_warn_and_work():
    with pytest.warns(DeprecationWarning, match=r"nnx\.(Data|Static)\[T\] is deprecated") as rec:

        class Old(nnx.Pytree):
            a: nnx.Data[int]
            b: nnx.Static[int]

            def __init__(self, b):
                self.a = 1
                self.b = b

    assert sorted(str(w.message)[:10] for w in rec) == ["nnx.Data[T", "nnx.Static"]
    with pytest.warns(DeprecationWarning, match=r"nnx.Static\[T\]"):
        nnx.Static[int]
    old = Old(2.0)
    assert jax.tree.leaves(old) == [1]
    # An array in a declared-static attribute is an error, as in Flax NNX 0.12.8.
    with pytest.raises(ValueError, match="Found unexpected data on value of type 'ArrayImpl'"):
        Old(jnp.ones(1))


def test_deprecated_annotation_as_a_string():
    with pytest.warns(DeprecationWarning, match="deprecated"):

        class Old(nnx.Pytree):
            a: "nnx.Data[int]"

            def __init__(self):
                self.a = 1

    assert jax.tree.leaves(Old()) == [1]


def test_class_kinds_are_inherited():
    class Base(nnx.Pytree):
        n: int = nnx.data()

    class Child(Base):
        def __init__(self):
            self.n = 5

    assert jax.tree.leaves(Child()) == [5]


def test_is_data_and_has_data():
    assert nnx.is_data(jnp.ones(1)) and nnx.is_data(np.ones(1))
    assert nnx.is_data(nnx.Param(1)) and nnx.is_data(nnx.Rngs(0))
    assert nnx.is_data(nnx.Linear(1, 1, rngs=nnx.Rngs(0)))
    for static in ("hello", 42, None, [1, jnp.ones(1)], {"a": nnx.Param(1)}, (1, 2)):
        assert not nnx.is_data(static)
    w = jnp.ones(1)
    p = nnx.Param(2)
    assert nnx.has_data([1, w]) == [w]
    assert nnx.has_data({"a": p, "b": 2}) == [p]
    assert nnx.has_data(("x", 3)) == []


def test_register_data_type():
    @nnx.register_data_type
    @dataclasses.dataclass(frozen=True)
    class Tag:
        value: int

    class Foo(nnx.Pytree):
        def __init__(self):
            self.tag = Tag(3)
            self.name = "foo"

    foo = Foo()
    assert nnx.is_data(Tag(1)) and jax.tree.leaves(foo) == [Tag(3)]
    graphdef, state = nnx.split(foo)
    assert state["tag"] == Tag(3)
    assert nnx.merge(graphdef, state).tag == Tag(3)


def test_check_pytree():
    class Good(nnx.Pytree):
        def __init__(self):
            self.w = jnp.ones(1)
            self.n = nnx.static(3)

    nnx.check_pytree(Good())

    class Bad(nnx.Pytree):
        table: list = nnx.static()

    bad = Bad()
    vars(bad).update(table=[jnp.ones(1), nnx.Param(1)])  # past __setattr__'s own check
    with pytest.raises(ValueError, match=r"Bad\.table holds data \(ArrayImpl, Param\)"):
        nnx.check_pytree(bad)
    with pytest.raises(TypeError, match=r"expects an nnx\.Pytree"):
        nnx.check_pytree({"a": 1})


def test_names_match_flax_signatures():
    fnnx = pytest.importorskip("flax.nnx")
    import inspect

    for name in (
        "dataclass",
        "data",
        "static",
        "is_data",
        "has_data",
        "register_data_type",
        "check_pytree",
    ):
        ours = list(inspect.signature(getattr(nnx, name)).parameters)
        theirs = list(inspect.signature(getattr(fnnx, name)).parameters)
        assert ours == theirs, name
