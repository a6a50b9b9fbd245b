"""Property tests of the consistent-aliasing rule, with an oracle written here.

The rule (the "JAX-style NNX Transforms" FLIP flax#4107; ``docs/design.md``, "The five lift steps"): every alias of an
object must receive the same prefix (``argnums`` flag, ``in_shardings``,
``out_shardings``); otherwise the transform raises ``InconsistentAliasingError``
(a ``ValueError``) naming every alias by its path from the arguments.

The tests draw a small pool of Modules holding Variables (some Variables and
sub-Modules shared between Modules) and place pool objects at random positions
in nested tuples, lists and dicts across the positional and keyword arguments,
with a random prefix per argument (or per container entry). The oracle walks the
argument structure itself, from the attributes it built, records for every leaf
(a Variable by identity, or a raw array attribute of a Module) the path and
prefix of every way it is reached, and predicts: accepted iff every leaf gets
one prefix; if rejected, the message lists every path of every offending leaf
with the prefix it received there.

For ``grad``, a leaf's prefix is whether it is differentiated: a ``Param``
reached through an argument in ``argnums`` is, anything else is not. So a
``Param`` reachable from a differentiated and a non-differentiated argument is
inconsistent, while a shared ``BatchStat`` is never differentiated and is fine.
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Callable, Hashable
from typing import Any

import hypothesis.strategies as st
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from helpers import structures
from hypothesis import event, given
from jax.sharding import Mesh, NamedSharding
from jax.sharding import PartitionSpec as P

import flaxgraph as nnx
from flaxgraph.testing import Node

# -- shardings: three distinct prefixes on a one-device mesh -----------------------------------

MESH = Mesh(np.array(jax.devices()[:1]), ("x",))
SHARDINGS: dict[str, Any] = {
    "P()": NamedSharding(MESH, P()),
    "P(None)": NamedSharding(MESH, P(None)),
    "None": None,
}
LABELS = tuple(SHARDINGS)
UNSPECIFIED = "UNSPECIFIED"  # jit's kwargs when in_shardings is a per-argument tuple


def test_the_shardings_are_distinct_prefixes() -> None:
    a, b = SHARDINGS["P()"], SHARDINGS["P(None)"]
    assert a != b and hash(a) != hash(b)


# -- the pool: Modules holding Variables, some shared ------------------------------------------


@dataclasses.dataclass
class Pool:
    """Objects to place in arguments, and the attributes of every Module built here
    (so the oracle never asks flaxgraph what a Module holds)."""

    objects: list[Any]
    attrs: dict[int, list[tuple[str, Any]]]
    keep: list[Any]  # keeps objects (and so their ids) alive


@st.composite
def pools(draw: Any, kinds: tuple[type, ...] = (nnx.Param,)) -> Pool:
    variables: list[Any] = []
    modules: list[Any] = []
    attrs: dict[int, list[tuple[str, Any]]] = {}
    for _ in range(draw(st.integers(1, 3))):
        items: list[tuple[str, Any]] = []
        earlier = list(variables)
        for j in range(draw(st.integers(1, 2))):
            v = draw(st.sampled_from(kinds))(jnp.full((2,), float(len(variables))))
            variables.append(v)
            items.append((f"v{j}", v))
        if draw(st.booleans()):
            items.append(("raw", jnp.arange(2.0)))
        if earlier and draw(st.booleans()):
            items.append(("shared", draw(st.sampled_from(earlier))))
        if modules and draw(st.booleans()):
            items.append(("sub", draw(st.sampled_from(modules))))
        m = Node(**dict(items))
        attrs[id(m)] = items
        modules.append(m)
    objects = modules + variables
    return Pool(objects, attrs, objects)


@st.composite
def label_trees(draw: Any, value: Any) -> Any:
    """A prefix (label) tree for ``value``: one label, or per container entry."""
    if type(value) in (tuple, list, dict) and draw(st.booleans()):
        if type(value) is dict:
            return {k: draw(label_trees(v)) for k, v in value.items()}
        return type(value)(draw(label_trees(v)) for v in value)
    return draw(st.sampled_from(LABELS))


def to_shardings(tree: Any) -> Any:
    if type(tree) is dict:
        return {k: to_shardings(v) for k, v in tree.items()}
    if type(tree) in (tuple, list):
        return type(tree)(to_shardings(v) for v in tree)
    return SHARDINGS[tree]


# -- the oracle ---------------------------------------------------------------------------------

Records = dict[Hashable, list[tuple[str, Any]]]


def record_aliases(
    records: Records,
    value: Any,
    path: str,
    label: Any,
    attrs: dict[int, list[tuple[str, Any]]],
    resolve: Callable[[Any, Any], Any],
    enter: Callable[[Any], Any] = lambda label: label,
) -> None:
    """Appends ``(path, prefix)`` for every leaf under ``value``, along every path.

    ``label`` is the prefix tree at ``value``: a container of labels matching a
    container value, or one label for everything below. ``resolve(leaf, label)``
    gives the prefix a leaf ends up with; ``enter(label)`` is the label inside an
    object. The pool graphs are acyclic, so walking every path terminates.
    """
    if isinstance(value, nnx.Variable):
        records.setdefault(("variable", id(value)), []).append((path, resolve(value, label)))
    elif id(value) in attrs:
        label = enter(label)
        for name, child in attrs[id(value)]:
            if isinstance(child, jax.Array):  # a raw array attribute: keyed by its owner
                key = ("attribute", id(value), name)
                records.setdefault(key, []).append((f"{path}.{name}", resolve(child, label)))
            else:
                record_aliases(records, child, f"{path}.{name}", label, attrs, resolve, enter)
    elif type(value) in (tuple, list):
        for i, child in enumerate(value):
            sub = label[i] if type(label) in (tuple, list) else label
            record_aliases(records, child, f"{path}[{i}]", sub, attrs, resolve, enter)
    elif type(value) is dict:
        for k, child in value.items():
            sub = label[k] if type(label) is dict else label
            record_aliases(records, child, f"{path}[{k!r}]", sub, attrs, resolve, enter)


def inconsistent(records: Records) -> Records:
    # An unspecified sharding (jit's keyword arguments here) constrains nothing, so
    # it is consistent with any other prefix, as in jax.jit.
    return {k: r for k, r in records.items() if len({p for _, p in r if p != UNSPECIFIED}) > 1}


ENTRY = re.compile(r"^\s+(\S.*?): (.+)$")


def listed(message: str) -> set[tuple[str, str]]:
    """The ``(path, prefix repr)`` entries an aliasing error lists."""
    return {(m[1], m[2]) for line in message.splitlines() if (m := ENTRY.match(line))}


def check_rejection(
    error: nnx.InconsistentAliasingError, bad: Records, show: Callable[[Any], str]
) -> None:
    entries = listed(str(error))
    for record in bad.values():
        for path, prefix in record:
            assert (path, show(prefix)) in entries, (
                f"the error does not list the alias {path} with prefix {show(prefix)}:\n{error}"
            )


# -- grad: argnums --------------------------------------------------------------------------------


@st.composite
def argnums_for(draw: Any, n_args: int) -> Any:
    index = st.integers(-n_args, n_args - 1)
    if draw(st.booleans()):
        return draw(index)
    nums = draw(st.lists(index, min_size=1, max_size=n_args, unique_by=lambda i: i % n_args))
    return tuple(nums)


def constant_loss(*args: Any, **kwargs: Any) -> Any:
    return jnp.zeros(())


@given(st.data())
def test_grad_accepts_exactly_the_consistent_placements(data: Any) -> None:
    pool = data.draw(pools(kinds=(nnx.Param, nnx.Param, nnx.BatchStat)), label="pool")
    n_args = data.draw(st.integers(1, 3), label="n_args")
    args = tuple(
        data.draw(structures(pool, none_at_top=False), label=f"args[{i}]") for i in range(n_args)
    )
    kwargs = data.draw(
        st.dictionaries(
            st.sampled_from(["p", "q"]), structures(pool, none_at_top=False), max_size=1
        ),
        label="kwargs",
    )
    argnums = data.draw(argnums_for(n_args), label="argnums")
    differentiated = {i % n_args for i in (argnums if isinstance(argnums, tuple) else (argnums,))}

    # An int argnum differentiates the Params of the objects inside the argument, and
    # a Variable reached through containers only whole (Flax NNX 0.12).
    def resolve(leaf: Any, label: str) -> bool:
        return label == "diff" or (label == "diff-object" and isinstance(leaf, nnx.Param))

    def enter(label: str) -> str:
        return "diff-object" if label == "diff" else label

    records: Records = {}
    for i, a in enumerate(args):
        label = "diff" if i in differentiated else "no"
        record_aliases(records, a, f"args[{i}]", label, pool.attrs, resolve, enter)
    for k, v in kwargs.items():
        record_aliases(records, v, f"kwargs[{k!r}]", "no", pool.attrs, resolve, enter)
    bad = inconsistent(records)
    event("rejected" if bad else "accepted")

    f = nnx.grad(constant_loss, argnums=argnums)
    if not bad:
        f(*args, **kwargs)
        return
    with pytest.raises(nnx.InconsistentAliasingError) as info:
        f(*args, **kwargs)
    assert isinstance(info.value, ValueError)
    check_rejection(info.value, bad, repr)


def test_a_shared_param_differentiated_on_one_path_only_is_rejected() -> None:
    w = nnx.Param(jnp.ones(2))
    m = Node(a=w, n=Node(p=w))
    with pytest.raises(nnx.InconsistentAliasingError) as info:
        nnx.grad(constant_loss, argnums=0)(m, [{"k": m.n}])
    assert listed(str(info.value)) >= {
        ("args[0].a", "True"),
        ("args[0].n.p", "True"),
        ("args[1][0]['k'].p", "False"),
    }


def test_a_shared_batch_stat_is_never_differentiated_so_it_is_consistent() -> None:
    s = nnx.BatchStat(jnp.ones(2))
    m = Node(s=s, w=nnx.Param(jnp.ones(2)))
    grads = nnx.grad(lambda a, b: jnp.sum(a.w.value), argnums=0)(m, (s,))
    assert np.array_equal(grads["w"].value, np.ones(2))


def test_an_alias_reached_through_one_shared_module_three_times_is_listed_three_times() -> None:
    # Every sighting counts, even when the sub-module was already walked with that prefix.
    w = nnx.Param(jnp.ones(2))
    shared = Node(w=w)
    with pytest.raises(nnx.InconsistentAliasingError) as info:
        nnx.grad(constant_loss, argnums=0)(w, shared, shared, shared)
    assert listed(str(info.value)) == {
        ("args[0]", "True"),
        ("args[1].w", "False"),
        ("args[2].w", "False"),
        ("args[3].w", "False"),
    }


# -- jit: in_shardings -----------------------------------------------------------------------------


def _nothing(*args: Any, **kwargs: Any) -> None:
    return None


@given(st.data())
def test_jit_accepts_exactly_the_consistent_in_shardings(data: Any) -> None:
    pool = data.draw(pools(), label="pool")
    n_args = data.draw(st.integers(1, 3), label="n_args")
    args = tuple(
        data.draw(structures(pool, none_at_top=False), label=f"args[{i}]") for i in range(n_args)
    )
    kwargs = data.draw(
        st.dictionaries(
            st.sampled_from(["p", "q"]), structures(pool, none_at_top=False), max_size=1
        ),
        label="kwargs",
    )
    labels = tuple(
        data.draw(label_trees(a), label=f"in_shardings[{i}]") for i, a in enumerate(args)
    )

    records: Records = {}
    for i, a in enumerate(args):
        record_aliases(records, a, f"args[{i}]", labels[i], pool.attrs, lambda _, p: p)
    for k, v in kwargs.items():
        record_aliases(records, v, f"kwargs[{k!r}]", UNSPECIFIED, pool.attrs, lambda _, p: p)
    bad = inconsistent(records)
    event("rejected" if bad else "accepted")

    f = nnx.jit(_nothing, in_shardings=to_shardings(labels))
    if not bad:
        assert f(*args, **kwargs) is None
        return
    with pytest.raises(nnx.InconsistentAliasingError) as info:
        f(*args, **kwargs)
    check_rejection(info.value, bad, show_sharding)


def show_sharding(label: str) -> str:
    return UNSPECIFIED if label == UNSPECIFIED else repr(SHARDINGS[label])


# -- jit: out_shardings against in_shardings ----------------------------------------------------


@st.composite
def outputs(draw: Any, places: list[tuple[Any, ...]], depth: int = 0) -> Any:
    """An output spec: ``("at", place)`` returns the object at ``place`` in the
    arguments, ``("wrap", spec)`` a new Node holding ``spec``'s value, or a
    tuple/list/dict of specs."""
    kinds = ["at", "at", "wrap"] + (["tuple", "list", "dict"] if depth < 1 else [])
    kind = draw(st.sampled_from(kinds))
    if kind == "at":
        return ("at", draw(st.sampled_from(places)))
    if kind == "wrap":
        return ("wrap", draw(outputs(places, depth + 1)))
    if kind == "dict":
        keys = draw(st.lists(st.sampled_from(["k", "x"]), unique=True, min_size=1, max_size=2))
        return {k: draw(outputs(places, depth + 1)) for k in keys}
    items = [draw(outputs(places, depth + 1)) for _ in range(draw(st.integers(1, 2)))]
    return ("tuple", tuple(items)) if kind == "tuple" else items


def object_places(value: Any, place: tuple[Any, ...]) -> list[tuple[Any, ...]]:
    if isinstance(value, (nnx.Variable, Node)):
        return [place]
    if type(value) in (tuple, list):
        return [p for i, v in enumerate(value) for p in object_places(v, (*place, i))]
    if type(value) is dict:
        return [p for k, v in value.items() for p in object_places(v, (*place, k))]
    return []


def at(args: tuple[Any, ...], place: tuple[Any, ...]) -> Any:
    value: Any = args
    for key in place:
        value = value[key]
    return value


def build_output(spec: Any, args: tuple[Any, ...], attrs: dict[int, Any] | None = None) -> Any:
    """The output described by ``spec``, from ``args`` (the caller's or the merged ones).
    New wrapper Nodes are registered in ``attrs`` for the oracle when given."""
    if type(spec) is list:
        return [build_output(s, args, attrs) for s in spec]
    if type(spec) is dict:
        return {k: build_output(s, args, attrs) for k, s in spec.items()}
    kind, body = spec
    if kind == "at":
        return at(args, body)
    if kind == "tuple":
        return tuple(build_output(s, args, attrs) for s in body)
    child = build_output(body, args, attrs)
    node = Node(child=child)
    if attrs is not None:
        attrs[id(node)] = [("child", child)]
    return node


def check_same_objects(spec: Any, out: Any, args: tuple[Any, ...]) -> None:
    """An output place that holds an input object holds the caller's same object."""
    if type(spec) is list:
        assert type(out) is list and len(out) == len(spec)
        for s, o in zip(spec, out):
            check_same_objects(s, o, args)
        return
    if type(spec) is dict:
        assert type(out) is dict and set(out) == set(spec)
        for k, s in spec.items():
            check_same_objects(s, out[k], args)
        return
    kind, body = spec
    if kind == "at":
        assert out is at(args, body)
    elif kind == "tuple":
        assert type(out) is tuple and len(out) == len(body)
        for s, o in zip(body, out):
            check_same_objects(s, o, args)
    else:
        assert type(out) is Node
        check_same_objects(body, out.child, args)


@given(st.data())
def test_jit_rejects_outputs_whose_out_shardings_differ_from_their_in_shardings(data: Any) -> None:
    pool = data.draw(pools(), label="pool")
    n_args = data.draw(st.integers(1, 2), label="n_args")
    args = tuple(
        data.draw(structures(pool, none_at_top=False), label=f"args[{i}]") for i in range(n_args)
    )
    places = object_places(args, ())
    if not places:
        args = (*args, pool.objects[0])
        places = [(len(args) - 1,)]
    in_labels = tuple(
        data.draw(st.sampled_from(LABELS), label=f"in[{i}]") for i in range(len(args))
    )
    spec = data.draw(outputs(places), label="output")
    attrs = dict(pool.attrs)
    expected_out = build_output(spec, args, attrs)
    out_label = data.draw(label_trees(expected_out), label="out_shardings")

    in_records: Records = {}
    for i, a in enumerate(args):
        record_aliases(in_records, a, f"args[{i}]", in_labels[i], attrs, lambda _, p: p)
    all_records = {k: list(r) for k, r in in_records.items()}
    record_aliases(all_records, expected_out, "output", out_label, attrs, lambda _, p: p)
    # Inputs are checked first (outside the trace); outputs with the inputs inside it.
    bad = inconsistent(in_records) or inconsistent(all_records)
    event(
        "accepted"
        if not bad
        else "rejected on input"
        if inconsistent(in_records)
        else "rejected on output"
    )

    f = nnx.jit(
        lambda *a: build_output(spec, a),
        in_shardings=tuple(SHARDINGS[label] for label in in_labels),
        out_shardings=to_shardings(out_label),
    )
    if not bad:
        check_same_objects(spec, f(*args), args)
        return
    with pytest.raises(nnx.InconsistentAliasingError) as info:
        f(*args)
    check_rejection(info.value, bad, show_sharding)
    if inconsistent(in_records):
        return
    assert any(path.startswith("output") for r in bad.values() for path, _ in r)


def test_returning_an_input_with_other_out_shardings_names_the_output_paths() -> None:
    m = Node(w=nnx.Param(jnp.ones(2)), sub=Node(b=nnx.Param(jnp.zeros(1))))
    f = nnx.jit(
        lambda a: Node(inner=a),
        in_shardings=(SHARDINGS["P()"],),
        out_shardings=SHARDINGS["P(None)"],
    )
    with pytest.raises(nnx.InconsistentAliasingError) as info:
        f(m)
    entries = {path for path, _ in listed(str(info.value))}
    assert entries >= {"args[0].w", "args[0].sub.b", "output.inner.w", "output.inner.sub.b"}
    same = nnx.jit(
        lambda a: Node(inner=a),
        in_shardings=(SHARDINGS["P()"],),
        out_shardings=SHARDINGS["P()"],
    )(m)
    assert same.inner is m


def test_jit_with_per_argument_in_shardings_accepts_objects_in_keyword_arguments() -> None:
    # Regression: keyword arguments get no in_sharding (UNSPECIFIED), which was not
    # among jit's leaf groups ("Internal error: prefix (UNSPECIFIED, False) ...").
    m = Node(w=nnx.Param(jnp.ones(2)))
    f = nnx.jit(lambda x, *, p: p.w.value + x, in_shardings=(SHARDINGS["P()"],))
    assert np.array_equal(f(jnp.ones(2), p=m), np.full(2, 2.0))


def test_jit_accepts_in_shardings_trees_holding_lists_and_dicts() -> None:
    # Regression: the prefix tree travelled in the (hashable) static part of the
    # call, so a list or dict inside in_shardings raised "unhashable type".
    m = Node(w=nnx.Param(jnp.ones(2)))
    f = nnx.jit(
        lambda a, b: a[0].w.value + b["k"].w.value,
        in_shardings=([SHARDINGS["P()"]], {"k": SHARDINGS["P()"]}),
    )
    assert np.array_equal(f([m], {"k": m}), np.full(2, 2.0))
