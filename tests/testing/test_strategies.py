"""Tests of flaxgraph.testing's strategies: they generate what they promise.

``find`` searches for an example with a feature: each such test fails if the
strategy can never produce the feature. ``@given`` tests check that options
restrict what is generated.
"""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from graphs import has_cycle
from hypothesis import HealthCheck, Phase, find, given, settings

import flaxgraph as nnx
import flaxgraph.testing as fgt
from flaxgraph.graphlib.registry import is_node_module as is_graph_node
from flaxgraph.testing import (
    Block,
    CustomVariable,
    Node,
    Record,
    arrays,
    filters,
    graphs,
    mutations,
    static_values,
    variables,
)
from flaxgraph.testing.strategies import VARIABLE_KINDS

# Generation only: the first example with the feature is enough (shrinking it is slow).
FIND = settings(
    max_examples=3000,
    database=None,
    suppress_health_check=list(HealthCheck),
    deadline=None,
    phases=[Phase.generate],
)


def values_of(g: Any) -> list[Any]:
    return [v for _, v in nnx.iter_graph(g)]


def variables_of(g: Any) -> list[nnx.Variable[Any]]:
    return [v for v in values_of(g) if isinstance(v, nnx.Variable)]


def nodes_of(g: Any) -> list[Any]:
    return [v for v in values_of(g) if is_graph_node(v)]


def can_generate(predicate: Callable[[Any], bool], strategy: Any = None) -> None:
    find(graphs() if strategy is None else strategy, predicate, settings=FIND)


# -- graphs(): every promised feature can be generated ------------------------------------------


def shares_variable(g: Any) -> bool:
    return any(
        isinstance(obj, nnx.Variable)
        for paths in nnx.find_duplicates(g)
        for obj in [_at(g, paths[0])]
    )


def shares_node_without_cycle(g: Any) -> bool:
    return not has_cycle(g) and any(is_graph_node(_at(g, p[0])) for p in nnx.find_duplicates(g))


def _at(g: Any, path: tuple[Any, ...]) -> Any:
    for key in path:
        g = vars(g)[key] if is_graph_node(g) else g[key]
    return g


@pytest.mark.parametrize(
    "feature",
    [
        pytest.param(has_cycle, id="cycle"),
        pytest.param(shares_variable, id="shared-variable"),
        pytest.param(shares_node_without_cycle, id="shared-node"),
        pytest.param(lambda g: any(isinstance(v, nnx.Rngs) for v in values_of(g)), id="rngs"),
        pytest.param(lambda g: any(type(v) is nnx.List for v in values_of(g)), id="nnx-list"),
        pytest.param(lambda g: any(type(v) is nnx.Dict for v in values_of(g)), id="nnx-dict"),
        pytest.param(lambda g: any(type(v) is Record for v in values_of(g)), id="record"),
        pytest.param(lambda g: any(type(v) is Block for v in nodes_of(g)[:-1]), id="block"),
        pytest.param(
            lambda g: any("out_sharding" in v.get_metadata() for v in variables_of(g)),
            id="sharding-metadata",
        ),
        pytest.param(
            lambda g: any(v.get_metadata("tag", None) in ("a", "b") for v in variables_of(g)),
            id="tag-metadata",
        ),
        pytest.param(
            lambda g: any(type(v.value) is tuple for v in variables_of(g)), id="tuple-value"
        ),
        pytest.param(
            lambda g: any(
                type(c) in (list, tuple, dict)
                and any(is_graph_node(x) for x in (c.values() if type(c) is dict else c))
                for c in values_of(g)
            ),
            id="container-holding-node",
        ),
        pytest.param(
            lambda g: any(isinstance(v, jax.Array) for n in nodes_of(g) for v in vars(n).values()),
            id="raw-array-attribute",
        ),
        pytest.param(
            lambda g: any(isinstance(v, jax.Array) and v.size == 0 for v in values_of(g)),
            id="empty-array",
        ),
    ],
)
def test_graphs_can_generate(feature: Callable[[Any], bool]) -> None:
    can_generate(feature)


@pytest.mark.parametrize("kind", VARIABLE_KINDS, ids=lambda k: k.__name__)
def test_graphs_can_generate_every_variable_kind(kind: type) -> None:
    can_generate(lambda g: any(type(v) is kind for v in variables_of(g)))


@pytest.mark.parametrize("static_type", [type(None), bool, int, str, float, tuple])
def test_graphs_can_generate_every_static_type(static_type: type) -> None:
    def has_static(g: Any) -> bool:
        return any(
            type(v) is static_type
            and p
            and isinstance(p[-1], str)
            and (static_type is not tuple or all(not isinstance(x, jax.Array) for x in v))
            for p, v in nnx.iter_graph(g)
        )

    can_generate(has_static)


# -- graphs(): options restrict what is generated ------------------------------------------------


@given(graphs(sharing=False, cycles=False))
def test_no_sharing_no_cycles_means_a_tree(g: Any) -> None:
    assert nnx.find_duplicates(g) == []


@given(graphs(cycles=False))
def test_cycles_false_means_acyclic(g: Any) -> None:
    assert not has_cycle(g)


@given(graphs(containers=False))
def test_containers_false_means_no_containers_of_data(g: Any) -> None:
    for v in values_of(g):
        assert type(v) not in (list, dict)
        if type(v) is tuple:
            assert not any(is_graph_node(x) or isinstance(x, (nnx.Variable, jax.Array)) for x in v)


@given(graphs(rngs=False, variable_kinds=[nnx.Param], metadata=False))
def test_variable_options(g: Any) -> None:
    for v in variables_of(g):
        assert type(v) is nnx.Param
        assert v.get_metadata(exclude_required=True) == {}


@given(graphs(node_types=[Node], rngs=False))
def test_node_types_option(g: Any) -> None:
    assert all(type(n) is Node for n in nodes_of(g) if n is not g)


@given(graphs(max_nodes=1))
def test_max_nodes_one_means_a_single_node(g: Any) -> None:
    assert nodes_of(g) == [g]


@given(graphs(max_nodes=4))
def test_max_nodes_bounds_the_node_count(g: Any) -> None:
    # RngStreams are parts of their Rngs, which counts as one node
    assert len([n for n in nodes_of(g) if type(n) is not nnx.RngStream]) <= 4


@given(graphs(max_depth=0))
def test_max_depth_zero_means_flat(g: Any) -> None:
    assert all(len(p) == 1 for p in nnx.state(g).flat_state().paths)


@given(graphs(max_attributes=2, rngs=False))
def test_max_attributes(g: Any) -> None:
    for n in nodes_of(g):
        assert len(vars(n)) <= 2


def test_graphs_rejects_bad_options() -> None:
    with pytest.raises(ValueError, match="max_nodes >= 1"):
        graphs(max_nodes=0)
    with pytest.raises(ValueError, match="max_depth >= 0"):
        graphs(max_depth=-1)


@given(graphs())
def test_root_is_a_node_or_block_and_splits(g: Any) -> None:
    assert type(g) in (Node, Block)
    nnx.split(g)  # every generated graph is a valid graph (static values hashable…)


# -- the smaller strategies ----------------------------------------------------------------------


@given(arrays(dtypes=[jnp.float32, jnp.int32, jnp.uint32, jnp.bool_], max_rank=3, max_side=2))
def test_arrays_bounds_and_exact_values(x: jax.Array) -> None:
    assert x.ndim <= 3 and all(0 <= d <= 2 for d in x.shape)
    assert x.dtype in (jnp.float32, jnp.int32, jnp.uint32, jnp.bool_)
    if x.dtype == jnp.float32:
        assert np.all(np.asarray(x) * 4 == np.round(np.asarray(x) * 4))
        assert np.all(np.abs(np.asarray(x)) <= 4)
    if x.dtype == jnp.uint32:
        assert np.all(np.asarray(x) <= 16)


def test_arrays_rejects_bad_options() -> None:
    with pytest.raises(ValueError, match="min_side <= max_side"):
        arrays(min_side=3, max_side=2)


@given(arrays(max_rank=0))
def test_arrays_rank_zero_gives_scalars(x: jax.Array) -> None:
    assert x.shape == ()


@given(static_values())
def test_static_values_are_hashable(v: Any) -> None:
    hash(v)
    assert nnx.graphdef(Node(v=v)) == nnx.graphdef(Node(v=v))


@given(variables())
def test_variables_metadata_matches_rank(v: nnx.Variable[Any]) -> None:
    assert isinstance(v, VARIABLE_KINDS)
    sharding = v.get_metadata("out_sharding", None)
    if sharding is not None:
        assert len(sharding) == v.value.ndim


@given(variables(kinds=[CustomVariable], metadata=False))
def test_variables_options(v: nnx.Variable[Any]) -> None:
    assert type(v) is CustomVariable and v.get_metadata(exclude_required=True) == {}


@given(filters(), graphs())
def test_filters_are_valid_filters(f: Any, g: Any) -> None:
    predicate = nnx.filterlib.to_predicate(f)
    for path, leaf in nnx.state(g).flat_state():
        assert predicate(path, leaf) in (True, False)


@given(mutations(max_steps=2, cycles=False))
def test_mutations_options(steps: list[Any]) -> None:
    assert len(steps) <= 2
    assert all(getattr(s, "allow_cycle", False) is False for s in steps)


# -- lazy import of hypothesis -------------------------------------------------------------------


def run_python(code: str) -> str:
    result = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=False, timeout=120
    )
    assert result.returncode == 0, result.stderr
    return result.stdout.strip()


def test_importing_flaxgraph_does_not_import_hypothesis() -> None:
    out = run_python(
        "import sys, flaxgraph, flaxgraph.testing\n"
        "print('hypothesis' in sys.modules)\n"
        "flaxgraph.testing.graphs\n"
        "print('hypothesis' in sys.modules)"
    )
    assert out.split() == ["False", "True"]


def test_strategies_without_hypothesis_say_how_to_install_it() -> None:
    out = run_python(
        "import sys; sys.modules['hypothesis'] = None\n"
        "import flaxgraph.testing as t\n"
        "print(t.graphs_equal(1, 1))\n"
        "try:\n"
        "    t.graphs\n"
        "except ImportError as e:\n"
        "    print('pip install hypothesis' in str(e))"
    )
    assert out.split() == ["True", "True"]


def test_dir_lists_the_strategies() -> None:
    assert {"graphs", "arrays", "mutations", "filters"} <= set(dir(fgt))
    with pytest.raises(AttributeError, match="no attribute 'nope'"):
        _ = fgt.nope
