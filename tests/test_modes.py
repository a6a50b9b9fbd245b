"""Tests of ``flaxgraph/modes.py``: the defaults of ``graph``/``graph_updates`` and the
ways to change them (statement, ``with`` block, decorator), read when a transform is
created, per thread inside blocks (as JAX's configuration)."""

from __future__ import annotations

import threading

import jax.numpy as jnp
import pytest

import flaxgraph as nnx
from flaxgraph.modes import GRAPH, GRAPH_UPDATES, Mode, resolve


@pytest.fixture(autouse=True)
def _restore_defaults():
    yield
    GRAPH.set_globally(True)
    GRAPH_UPDATES.set_globally(True)


def shared_module() -> nnx.Module:
    m = nnx.Module()
    m.a = nnx.Param(jnp.ones(2))
    m.b = m.a
    return m


def test_resolve_fills_none_with_the_defaults_and_tree_mode_has_no_updates():
    assert resolve(None, None) == Mode(True, True)
    assert resolve(None, False) == Mode(True, False)
    assert resolve(False, True) == Mode(False, False)
    assert resolve(False, None).name == "graph=False"
    assert Mode(True, False).name == "graph_updates=False"


def test_set_graph_mode_as_a_statement_holds_until_changed():
    nnx.set_graph_mode(False)
    assert resolve(None, None) == Mode(False, False)
    nnx.set_graph_mode(True)
    assert resolve(None, None) == Mode(True, True)


def test_set_graph_updates_as_a_block_holds_inside_only():
    with nnx.set_graph_updates(False):
        assert resolve(None, None) == Mode(True, False)
    assert resolve(None, None) == Mode(True, True)


def test_a_decorated_function_runs_with_the_setting_each_call():
    @nnx.set_graph_mode(False)
    def inside():
        return resolve(None, None)

    assert resolve(None, None) == Mode(True, True)  # decorating changed nothing globally
    assert inside() == Mode(False, False)
    assert resolve(None, None) == Mode(True, True)


def test_the_mode_is_read_when_the_transform_is_created_not_called():
    f = nnx.jit(lambda m: None)
    with nnx.set_graph_mode(False):
        f(shared_module())  # created in graph mode: sharing is fine
        g = nnx.jit(lambda m: None)
    with pytest.raises(nnx.SharedReferenceError):
        g(shared_module())  # created in tree mode


def test_block_overrides_are_per_thread():
    seen = []
    ready, done = threading.Event(), threading.Event()

    def other():
        ready.wait(5)
        seen.append(resolve(None, None))
        done.set()

    t = threading.Thread(target=other)
    t.start()
    with nnx.set_graph_mode(False):
        ready.set()
        assert done.wait(5)
        assert resolve(None, None) == Mode(False, False)
    t.join(5)
    assert seen == [Mode(True, True)]


def test_a_setting_needs_a_bool():
    with pytest.raises(TypeError, match="True or False"):
        nnx.set_graph_mode(None)  # type: ignore[arg-type]
