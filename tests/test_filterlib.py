"""Tests of flaxgraph/filterlib.py: filter -> predicate conversion and combinators."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import flaxgraph as nnx
from flaxgraph.filterlib import filters_to_predicates, to_predicate

PARAM = nnx.Param(jnp.ones(2))
BSTAT = nnx.BatchStat(jnp.zeros(2))
TAGGED = nnx.Variable(jnp.zeros(()), tag="dropout")
ARRAY = jnp.ones(3)
NP_ARRAY = np.ones(3)


class Custom(nnx.Param):
    pass


CUSTOM = Custom(jnp.ones(1))


# -- atoms -----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("value", "expected"),
    [(PARAM, True), (CUSTOM, True), (BSTAT, False), (TAGGED, False), (ARRAY, False)],
)
def test_type_filter_matches_instances_and_subclasses(value, expected):
    assert to_predicate(nnx.Param)(("w",), value) is expected
    assert nnx.OfType(nnx.Param)(("w",), value) is expected


def test_variable_type_matches_every_kind():
    pred = to_predicate(nnx.Variable)
    assert all(pred((), v) for v in (PARAM, BSTAT, TAGGED, CUSTOM))
    assert not pred((), ARRAY)


def test_array_type_filter_matches_raw_arrays_only():
    pred = to_predicate(jax.Array)
    assert pred(("x",), ARRAY)
    assert not pred(("x",), PARAM)


def test_type_filter_returns_oftype():
    assert to_predicate(nnx.Param) == nnx.OfType(nnx.Param)
    assert repr(nnx.OfType(nnx.Param)) == "OfType(Param)"


def test_string_filter_matches_tag():
    pred = to_predicate("dropout")
    assert pred == nnx.WithTag("dropout")
    assert pred(("a",), TAGGED)
    assert not pred(("a",), PARAM)
    assert not to_predicate("params")(("a",), TAGGED)
    assert not pred(("dropout",), ARRAY)  # a string filter is a tag, not a path


def test_string_filter_selects_rng_stream_state():
    rngs = nnx.Rngs(params=0, dropout=1)
    state = nnx.state(rngs, "dropout")
    assert set(state.flat_state().paths) == {("dropout", "key"), ("dropout", "count")}


@pytest.mark.parametrize("f", [..., True, nnx.Everything()])
def test_everything(f):
    pred = to_predicate(f)
    assert isinstance(pred, nnx.Everything)
    assert all(pred(p, v) for p, v in [((), PARAM), (("a", 0), ARRAY), (("x",), None)])


@pytest.mark.parametrize("f", [None, False, nnx.Nothing()])
def test_nothing(f):
    pred = to_predicate(f)
    assert isinstance(pred, nnx.Nothing)
    assert not any(pred(p, v) for p, v in [((), PARAM), (("a", 0), ARRAY)])


def test_everything_nothing_equality_hash_repr():
    assert nnx.Everything() == nnx.Everything()
    assert hash(nnx.Everything()) == hash(nnx.Everything())
    assert nnx.Nothing() == nnx.Nothing()
    assert nnx.Everything() != nnx.Nothing()
    assert repr(nnx.Everything()) == "Everything()"
    assert repr(nnx.Nothing()) == "Nothing()"


def test_callable_is_used_as_predicate():
    def f(path, value):
        return len(path) == 2

    assert to_predicate(f) is f


def test_path_contains_exact():
    pred = nnx.PathContains("kernel")
    assert pred(("linear", "kernel"), ARRAY)
    assert not pred(("linear", "kernel_2"), ARRAY)
    assert nnx.PathContains(0)(("layers", 0, "w"), ARRAY)
    assert not nnx.PathContains(1)(("layers", 0, "w"), ARRAY)


def test_path_contains_inexact_matches_substrings_of_keys():
    pred = nnx.PathContains("kern", exact=False)
    assert pred(("linear", "kernel_2"), ARRAY)
    assert not pred(("linear", "bias"), ARRAY)
    assert nnx.PathContains(1, exact=False)(("layers", 10), ARRAY)


def test_dataclass_filters_are_hashable_and_compare_by_value():
    assert nnx.PathContains("a") == nnx.PathContains("a")
    assert nnx.PathContains("a") != nnx.PathContains("a", exact=False)
    assert hash(nnx.WithTag("x")) == hash(nnx.WithTag("x"))
    assert len({nnx.OfType(nnx.Param), nnx.OfType(nnx.Param)}) == 1


# -- combinators -------------------------------------------------------------------------


def test_tuple_and_list_mean_any():
    pred = to_predicate((nnx.Param, "dropout"))
    assert isinstance(pred, nnx.Any)
    assert pred((), PARAM) and pred((), TAGGED) and not pred((), BSTAT)
    assert to_predicate([nnx.BatchStat])((), BSTAT)


def test_empty_any_and_all():
    assert not nnx.Any()((), PARAM)
    assert nnx.All()((), PARAM)
    assert not to_predicate(())((), PARAM)


def test_all_requires_every_filter():
    pred = nnx.All(nnx.Param, nnx.PathContains("kernel"))
    assert pred(("kernel",), PARAM)
    assert not pred(("bias",), PARAM)
    assert not pred(("kernel",), BSTAT)


def test_not_negates():
    pred = nnx.Not(nnx.Param)
    assert not pred((), PARAM)
    assert pred((), BSTAT)
    assert pred((), ARRAY)


def test_combinator_equality_hash_and_repr():
    assert nnx.Any(nnx.Param, "x") == nnx.Any(nnx.Param, "x")
    assert nnx.Any(nnx.Param) != nnx.All(nnx.Param)
    assert nnx.Not(nnx.Param) == nnx.Not(nnx.OfType(nnx.Param))
    assert hash(nnx.All(nnx.Param, ...)) == hash(nnx.All(nnx.Param, ...))
    assert len({nnx.Not(None), nnx.Not(False)}) == 1
    assert repr(nnx.Any(nnx.Param, ...)) == "Any(OfType(Param), Everything())"
    assert repr(nnx.All(nnx.Param)) == "All(OfType(Param))"
    assert repr(nnx.Not(nnx.Param)) == "Not(OfType(Param))"


def test_filters_to_predicates_converts_each():
    preds = filters_to_predicates((nnx.Param, "t", ...))
    assert preds == (nnx.OfType(nnx.Param), nnx.WithTag("t"), nnx.Everything())


# -- invalid filters ---------------------------------------------------------------------


@pytest.mark.parametrize("bad", [1, 0, 2.5, b"x", object(), np.int32(3)])
def test_invalid_filter_raises_type_error_naming_it(bad):
    with pytest.raises(TypeError, match=f"Invalid filter .* of type {type(bad).__name__}"):
        to_predicate(bad)
    with pytest.raises(nnx.InvalidFilterError):
        to_predicate(bad)


@pytest.mark.parametrize(
    "make", [lambda: nnx.Any(nnx.Param, 1), lambda: nnx.All(3), lambda: nnx.Not(7), lambda: (1,)]
)
def test_invalid_filter_inside_combinator(make):
    with pytest.raises(nnx.InvalidFilterError, match="Invalid filter"):
        to_predicate(make())


def test_invalid_filter_with_unprintable_repr_still_raises_type_error():
    class Weird:
        def __repr__(self):
            return "<weird %s {0} filter>"

    with pytest.raises(nnx.InvalidFilterError, match="weird"):
        to_predicate(Weird())


# -- laws (hypothesis) --------------------------------------------------------------------

SAMPLES = [
    (("linear", "kernel"), PARAM),
    (("linear", "bias"), PARAM),
    (("bn", "mean"), BSTAT),
    (("rngs", "dropout", "key"), TAGGED),
    (("layers", 0, "w"), CUSTOM),
    (("raw",), ARRAY),
    (("np", 1), NP_ARRAY),
]

# Each atom: (filter, independent oracle).
ATOMS = [
    (nnx.Param, lambda p, v: isinstance(v, nnx.Param)),
    (nnx.BatchStat, lambda p, v: isinstance(v, nnx.BatchStat)),
    (nnx.Variable, lambda p, v: isinstance(v, nnx.Variable)),
    (jax.Array, lambda p, v: isinstance(v, jax.Array)),
    ("dropout", lambda p, v: getattr(v, "tag", None) == "dropout"),
    (nnx.PathContains("kernel"), lambda p, v: "kernel" in p),
    (nnx.PathContains(0), lambda p, v: 0 in p),
    (nnx.PathContains("lay", exact=False), lambda p, v: any("lay" in str(k) for k in p)),
    (..., lambda p, v: True),
    (True, lambda p, v: True),
    (None, lambda p, v: False),
    (False, lambda p, v: False),
]


def _combine(children):
    return st.one_of(
        st.tuples(st.just("not"), children),
        st.tuples(st.just("any"), st.lists(children, max_size=3)),
        st.tuples(st.just("all"), st.lists(children, max_size=3)),
        st.tuples(st.just("tuple"), st.lists(children, max_size=3)),
    )


TREES = st.recursive(st.sampled_from(range(len(ATOMS))), _combine, max_leaves=6)


def build(tree):
    if isinstance(tree, int):
        return ATOMS[tree][0]
    op, arg = tree
    if op == "not":
        return nnx.Not(build(arg))
    children = [build(a) for a in arg]
    return {"any": nnx.Any, "all": nnx.All}[op](*children) if op != "tuple" else tuple(children)


def oracle(tree, path, value):
    if isinstance(tree, int):
        return ATOMS[tree][1](path, value)
    op, arg = tree
    if op == "not":
        return not oracle(arg, path, value)
    results = [oracle(a, path, value) for a in arg]
    return all(results) if op == "all" else any(results)


@settings(max_examples=60, deadline=None)
@given(TREES)
def test_predicate_agrees_with_independent_oracle(tree):
    pred = to_predicate(build(tree))
    for path, value in SAMPLES:
        assert bool(pred(path, value)) == oracle(tree, path, value)


@settings(max_examples=40, deadline=None)
@given(TREES)
def test_not_matches_exactly_the_complement(tree):
    f = build(tree)
    pred, neg = to_predicate(f), nnx.Not(f)
    for path, value in SAMPLES:
        assert neg(path, value) != bool(pred(path, value))
    double = nnx.Not(nnx.Not(f))
    assert all(double(p, v) == bool(pred(p, v)) for p, v in SAMPLES)


@settings(max_examples=40, deadline=None)
@given(TREES, TREES)
def test_de_morgan_and_identities(ta, tb):
    a, b = build(ta), build(tb)
    for path, value in SAMPLES:
        assert nnx.Not(nnx.Any(a, b))(path, value) == nnx.All(nnx.Not(a), nnx.Not(b))(path, value)
        assert nnx.Not(nnx.All(a, b))(path, value) == nnx.Any(nnx.Not(a), nnx.Not(b))(path, value)
        assert nnx.Any(a, b)(path, value) == nnx.Any(b, a)(path, value)
        assert nnx.All(a, b)(path, value) == nnx.All(b, a)(path, value)
        pa = bool(to_predicate(a)(path, value))
        assert nnx.Any(a, nnx.Nothing())(path, value) == pa
        assert nnx.All(a, nnx.Everything())(path, value) == pa
        assert nnx.Any(a, ...)(path, value) is True
        assert nnx.All(a, None)(path, value) is False


def test_a_catch_all_must_be_the_last_filter_of_a_split():
    m = nnx.Dict(a=nnx.Param(1), b=nnx.BatchStat(2))
    with pytest.raises(
        ValueError, match=r"`\.\.\.` or `True` can only be used as the last filters"
    ):
        nnx.split(m, ..., nnx.Param)
    with pytest.raises(ValueError, match="can only be used as the last filters"):
        nnx.state(m).split(True, nnx.Param)
    nnx.split(m, nnx.Param, ..., True)  # catch-alls after the last real filter are fine


def test_non_exhaustive_split_names_the_leaf():
    m = nnx.Dict(a=nnx.Param(1), b=nnx.BatchStat(2))
    with pytest.raises(ValueError, match=r"(?s)node\.b.*Non-exhaustive filters"):
        nnx.split(m, nnx.Param)
