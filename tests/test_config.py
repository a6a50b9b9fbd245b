"""Tests of flaxgraph/config.py: the scoped Flag."""

import pytest

import flaxgraph as nnx
from flaxgraph.config import Flag


def test_get_returns_default():
    assert Flag("f", 3).get() == 3


def test_set_globally_changes_value():
    flag = Flag("f", True)
    flag.set_globally(False)
    assert flag.get() is False


def test_scoped_overrides_and_restores():
    flag = Flag("f", "a")
    with flag.scoped("b"):
        assert flag.get() == "b"
        with flag.scoped("c"):
            assert flag.get() == "c"
        assert flag.get() == "b"
    assert flag.get() == "a"


def test_scoped_restores_on_exception():
    flag = Flag("f", 1)
    with pytest.raises(RuntimeError, match="inside"), flag.scoped(2):
        assert flag.get() == 2
        raise RuntimeError("inside")
    assert flag.get() == 1


def test_set_globally_inside_scope_holds_after_it():
    # As with JAX's configuration: a scoped override wins inside its block; a global
    # change made meanwhile is the value once the block ends.
    flag = Flag("f", 1)
    with flag.scoped(2):
        flag.set_globally(5)
        assert flag.get() == 2
    assert flag.get() == 5


def test_scoped_override_holds_in_its_thread_only():
    import threading

    flag = Flag("f", 1)
    seen = []
    entered, release = threading.Event(), threading.Event()

    def other():
        entered.wait(5)
        seen.append(flag.get())  # the main thread's override does not reach here
        with flag.scoped(3):
            seen.append(flag.get())
        release.set()

    t = threading.Thread(target=other)
    t.start()
    with flag.scoped(2):
        entered.set()
        assert release.wait(5)
        assert flag.get() == 2
    t.join(5)
    assert seen == [1, 3] and flag.get() == 1


def test_flags_are_independent():
    a, b = Flag("a", 0), Flag("b", 0)
    with a.scoped(1):
        assert (a.get(), b.get()) == (1, 0)


def test_repr_names_flag_and_value():
    assert repr(Flag("check_aliasing", True)) == "Flag('check_aliasing', True)"


def test_flag_has_no_instance_dict():
    flag = Flag("f", 0)
    with pytest.raises(AttributeError):
        flag.other = 1  # type: ignore[attr-defined]


def test_flag_exported():
    assert nnx.Flag is Flag


def test_flax_named_update_and_read():
    from flaxgraph import config
    from flaxgraph.modes import GRAPH

    before = config._read("nnx_graph_mode")
    try:
        config.update("nnx_graph_mode", False)
        assert config._read("nnx_graph_mode") is False and GRAPH.get() is False
    finally:
        config.update("nnx_graph_mode", before)
    assert GRAPH.get() is before
    with pytest.raises(LookupError, match="Unrecognized config option: 'nope'"):
        config.update("nope", 1)
    with pytest.raises(LookupError, match="Unrecognized config option"):
        config._read("nope")


def test_flax_config_sets_the_graph_mode_defaults_as_in_flax() -> None:
    """Flax NNX 0.12.8 reads its graph-mode defaults and repr depth from ``flax.config``
    (``nnx_graph_mode``, ``nnx_graph_updates``, ``flax_max_repr_depth``); flaxgraph
    follows the same settings once Flax is imported, and its own setters write there."""
    import flax

    from flaxgraph import modes, reprlib

    try:
        for graph, updates in ((False, True), (True, False), (True, True)):
            flax.config.update("nnx_graph_mode", graph)
            flax.config.update("nnx_graph_updates", updates)
            # What a transform made now uses, and what Flax reads from the same settings.
            assert modes.resolve(None, None) == modes.Mode(graph, graph and updates)
            assert (flax.config.nnx_graph_mode, flax.config.nnx_graph_updates) == (graph, updates)
        flax.config.update("nnx_graph_updates", True)
        flax.config.update("nnx_graph_mode", False)
        # A transform made now defaults to tree mode, as Flax's would.
        assert modes.resolve(None, None) == modes.Mode(False, False)
        with nnx.set_graph_mode(True):  # a block still overrides the default
            assert modes.GRAPH.get() is True
        assert modes.GRAPH.get() is False
        nnx.set_graph_mode(True)  # flaxgraph's global setter writes flax.config
        assert flax.config.nnx_graph_mode is True
        nnx.config.update("flax_max_repr_depth", 2)
        assert flax.config.flax_max_repr_depth == 2 and reprlib.MAX_REPR_DEPTH.get() == 2
    finally:
        flax.config.update("nnx_graph_mode", True)
        flax.config.update("nnx_graph_updates", True)
        flax.config.update("flax_max_repr_depth", None)
    assert modes.resolve(None, None) == modes.Mode(True, True)
    assert reprlib.MAX_REPR_DEPTH.get() is None
