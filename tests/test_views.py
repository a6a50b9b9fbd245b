"""Tests of flaxgraph/views.py: view, view_info, with_attributes (and the layers' set_view)."""

from __future__ import annotations

import jax.numpy as jnp
import numpy as np
import pytest

import flaxgraph as nnx


class Block(nnx.Module):
    def __init__(self, rngs: nnx.Rngs) -> None:
        self.linear = nnx.Linear(2, 4, rngs=rngs)
        self.dropout = nnx.Dropout(0.5, rngs=rngs)
        self.bn = nnx.BatchNorm(4, rngs=rngs)
        self.bn_again = self.bn


class Mode(nnx.Module):
    def __init__(self) -> None:
        self.mode = "train"
        self.w = nnx.Param(jnp.ones(2))

    def set_view(self, mode: str | None = None, **kwargs: object) -> dict[str, object]:
        """Sets the mode.

        Args:
          mode: the mode's name,
            over two lines.
        """
        if mode is not None:
            self.mode = mode
        return kwargs


def test_view_copies_objects_shares_variables_and_keeps_sharing() -> None:
    block = Block(nnx.Rngs(0))
    v = nnx.view(block, deterministic=True, use_running_average=True)
    assert v is not block and v.linear is not block.linear
    assert v.linear.kernel is block.linear.kernel and v.bn.mean is block.bn.mean
    assert v.bn is v.bn_again
    assert (v.dropout.deterministic, v.bn.use_running_average) == (True, True)
    assert (block.dropout.deterministic, block.bn.use_running_average) == (False, False)


def test_training_the_model_is_seen_by_the_view() -> None:
    block = Block(nnx.Rngs(0))
    v = nnx.view(block, deterministic=True, use_running_average=True)
    x = jnp.arange(6.0).reshape(3, 2)
    block.train()
    block.bn(block.linear(x))  # updates the batch statistics in place
    np.testing.assert_array_equal(v.bn.mean.value, block.bn.mean.value)
    # The eval view uses the running averages: its output matches the eval-mode eager call.
    expected = nnx.BatchNorm.__call__(block.bn, block.linear(x), use_running_average=True)
    np.testing.assert_allclose(v.bn(v.linear(x)), expected, rtol=1e-6)


def test_only_selects_modules() -> None:
    block = Block(nnx.Rngs(0))
    v = nnx.view(block, only=nnx.Dropout, deterministic=True)
    assert v.dropout.deterministic and not v.bn.use_running_average
    with pytest.raises(ValueError, match=r"(?s)\['use_running_average'\].*Dropout\(deterministic"):
        nnx.view(block, only=nnx.Dropout, use_running_average=True)


def test_unknown_keywords_are_an_error_unless_told_otherwise() -> None:
    block = Block(nnx.Rngs(0))
    with pytest.raises(ValueError, match=r"Unused keys found in nnx.view: \[.foo.\]"):
        nnx.view(block, foo=1)
    v = nnx.view(block, foo=1, deterministic=True, raise_if_not_found=False)
    assert v.dropout.deterministic


def test_set_view_with_var_keywords_returns_what_it_did_not_use() -> None:
    m = Mode()
    assert nnx.view(m, mode="eval").mode == "eval" and m.mode == "train"
    with pytest.raises(ValueError, match=r"Unused keys found in nnx.view: \[.other.\]"):
        nnx.view(m, other=3)


def test_view_of_attention_can_create_a_decode_cache() -> None:
    mha = nnx.MultiHeadAttention(2, 8, rngs=nnx.Rngs(0))
    v = nnx.view(mha, decode=True, batch_size=3, max_length=5)
    assert v.decode and v.cached_key.value.shape == (3, 5, 2, 4) and mha.cached_key is None
    with pytest.raises(TypeError, match="batch_size and max_length"):
        nnx.view(mha, decode=True)


def test_view_tree_mode_rejects_shared_variables() -> None:
    with pytest.raises(ValueError, match=r"(?s)several paths.*bn.*bn_again"):
        nnx.view(Block(nnx.Rngs(0)), deterministic=True, graph=False)


def test_with_attributes_sets_existing_attributes_on_a_copy() -> None:
    block = Block(nnx.Rngs(0))
    new = nnx.with_attributes(block, deterministic=True, use_running_average=True)
    assert new.dropout.deterministic and new.bn.use_running_average and new.bn is new.bn_again
    assert not block.dropout.deterministic and new.linear.kernel is block.linear.kernel
    new = nnx.with_attributes(block, only=nnx.BatchNorm, momentum=0.5)
    assert new.bn.momentum == 0.5 and block.bn.momentum != 0.5


def test_with_attributes_missing_attribute() -> None:
    block = Block(nnx.Rngs(0))
    with pytest.raises(ValueError, match=r"following attributes: \[.foo.\]"):
        nnx.with_attributes(block, foo=1)
    new = nnx.with_attributes(block, foo=1, raise_if_not_found=False)
    assert not hasattr(new.linear, "foo")


def test_with_attributes_matches_eager_set_attributes() -> None:
    block = Block(nnx.Rngs(0))
    copy = nnx.with_attributes(block, deterministic=True, use_running_average=True)
    block.set_attributes(deterministic=True, use_running_average=True)
    x = jnp.arange(6.0).reshape(3, 2)
    np.testing.assert_array_equal(
        copy.bn(copy.dropout(copy.linear(x))), block.bn(block.dropout(block.linear(x)))
    )


def test_view_info_lists_set_view_arguments_per_class() -> None:
    info = nnx.view_info(Block(nnx.Rngs(0)))
    assert info == (
        "BatchNorm:\n"
        "  use_running_average: bool | None = None\n"
        "    if True, the stored batch statistics will be\n"
        "    used instead of computing the batch statistics on the input.\n"
        "Dropout:\n"
        "  deterministic: bool | None = None\n"
        "    if True, disables dropout masking."
    )
    assert nnx.view_info(Block(nnx.Rngs(0)), only=nnx.Dropout).startswith("Dropout:")
    assert nnx.view_info(nnx.Linear(1, 1, rngs=nnx.Rngs(0))) == ""
    assert nnx.view_info(Mode()) == (
        "Mode:\n  mode: str | None = None\n    the mode's name,\n    over two lines."
    )


def test_view_info_without_a_docstring_shows_the_signature() -> None:
    class Bare(nnx.Module):
        def set_view(self, x: int = 3) -> None:
            pass

    # the class's qualified name, as Flax NNX 0.12.8 prints it
    expected = f"{Bare.__qualname__}:\n  set_view(self, x: int = 3) -> None"
    assert nnx.view_info(Bare()) == expected

    class Untyped(nnx.Module):
        def set_view(self, x=3, y=None):  # type: ignore[no-untyped-def]
            pass

    # As Flax 0.12.8 prints it.
    assert nnx.view_info(Untyped()) == f"{Untyped.__qualname__}:\n  set_view(self, x=3, y=None)"


def test_view_info_matches_flax_for_the_builtin_layers() -> None:
    flax_nnx = pytest.importorskip("flax.nnx")

    class FlaxBlock(flax_nnx.Module):
        def __init__(self, rngs: flax_nnx.Rngs) -> None:
            self.dropout = flax_nnx.Dropout(0.5, rngs=rngs)
            self.bn = flax_nnx.BatchNorm(4, rngs=rngs)

    assert nnx.view_info(Block(nnx.Rngs(0))) == flax_nnx.view_info(FlaxBlock(flax_nnx.Rngs(0)))
