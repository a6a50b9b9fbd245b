"""The names Flax NNX 0.12.8 defines in ``flax.nnx.nn.<module>`` exist in
``flaxgraph.nn.<module>`` and behave as Flax's: each is compared with the real
``flax.nnx`` in the same process (Flax is installed for ``make conformance``)."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import flaxgraph as nnx
from flaxgraph.nn import (
    attention,
    conv,
    embed,
    initializers,
    linear,
    lora,
    normalization,
    recurrent,
    rnn,
)

flax_nnx = pytest.importorskip("flax.nnx")
from flax.nnx.nn import linear as flax_linear  # noqa: E402
from flax.nnx.nn import recurrent as flax_recurrent  # noqa: E402


@pytest.mark.parametrize(
    ("module", "name", "home"),
    [
        (linear, "Conv", conv.Conv),
        (linear, "ConvTranspose", conv.ConvTranspose),
        (linear, "Embed", embed.Embed),
        (linear, "default_embed_init", embed.default_embed_init),
        (linear, "canonicalize_padding", conv.canonicalize_padding),
        (normalization, "WeightNorm", nnx.WeightNorm),
        (normalization, "SpectralNorm", nnx.SpectralNorm),
        (recurrent, "RNN", nnx.RNN),
        (recurrent, "Bidirectional", nnx.Bidirectional),
        (recurrent, "RNNCellBase", nnx.RNNCellBase),
        (recurrent, "flip_sequences", rnn.flip_sequences),
        (attention, "make_causal_mask", nnx.make_causal_mask),
        (attention, "make_attention_mask", nnx.make_attention_mask),
        (attention, "dot_product_attention_weights", nnx.dot_product_attention_weights),
        (linear, "Array", jax.Array),
        (lora, "Array", jax.Array),
        (recurrent, "Array", jax.Array),
        (attention, "Array", jax.Array),
    ],
)
def test_the_name_is_flaxgraphs_own_object(module, name, home):
    # The module of Flax's name gives the one object flaxgraph defines elsewhere.
    assert getattr(module, name) is home


@pytest.mark.parametrize(
    "padding",
    ["SAME", "same", "VALID", "CIRCULAR", 0, 2, [1, 2], (0, (1, 2)), [(1, 1), (0, 3)]],
)
def test_canonicalize_padding_equals_flax(padding):
    assert linear.canonicalize_padding(padding, 2) == flax_linear.canonicalize_padding(padding, 2)


@pytest.mark.parametrize("padding", [[1], [1, 2, 3], [(1, 2, 3), 0], [[1, 2], 0], [1.5, 0]])
def test_canonicalize_padding_rejects_what_flax_rejects(padding):
    with pytest.raises(ValueError, match="Invalid padding"):
        flax_linear.canonicalize_padding(padding, 2)
    with pytest.raises(ValueError, match=r"Invalid padding .* sequence of 2 entries"):
        linear.canonicalize_padding(padding, 2)


@pytest.mark.parametrize(
    ("ours", "theirs"),
    [
        (linear.default_embed_init, flax_linear.default_embed_init),
        (recurrent.default_bias_init, flax_recurrent.default_bias_init),
        (recurrent.default_kernel_init, flax_recurrent.default_kernel_init),
    ],
)
@pytest.mark.parametrize("dtype", [jnp.float32, jnp.bfloat16])
def test_initializers_draw_what_flax_draws(ours, theirs, dtype):
    key = jax.random.key(3)
    np.testing.assert_array_equal(ours(key, (7, 5), dtype), theirs(key, (7, 5), dtype))


@settings(max_examples=40, deadline=None)
@given(
    data=st.data(),
    time_major=st.booleans(),
    batch=st.lists(st.integers(1, 3), min_size=1, max_size=2),
    steps=st.integers(1, 5),
    features=st.sampled_from([(), (2,)]),
    with_lengths=st.booleans(),
)
def test_flip_sequences_equals_flax(data, time_major, batch, steps, features, with_lengths):
    shape = ((steps, *batch) if time_major else (*batch, steps)) + features
    x = jnp.arange(np.prod(shape), dtype=jnp.int32).reshape(shape)
    lengths = None
    if with_lengths:
        n = int(np.prod(batch))
        values = data.draw(st.lists(st.integers(0, steps), min_size=n, max_size=n))
        lengths = jnp.asarray(values, dtype=jnp.int32).reshape(batch)
    ours = recurrent.flip_sequences(x, lengths, len(batch), time_major)
    theirs = flax_recurrent.flip_sequences(x, lengths, len(batch), time_major)
    np.testing.assert_array_equal(ours, theirs)
    # an involution: flipping twice gives the inputs back
    np.testing.assert_array_equal(
        recurrent.flip_sequences(ours, lengths, len(batch), time_major), x
    )


def _copy_params(source, target):
    """Writes ``source``'s Param values into the Params at the same paths of ``target``."""
    values = {path: v.get_value() for path, v in nnx.iter_graph(source) if isinstance(v, nnx.Param)}
    for path, v in flax_nnx.iter_graph(target):
        if isinstance(v, flax_nnx.Param):
            v.set_value(values[path])


def _rnn_pair(cell_type: str, time_major: bool):
    cls, flax_cls = getattr(nnx, cell_type), getattr(flax_nnx, cell_type)
    cell, flax_cell = cls(3, 4, rngs=nnx.Rngs(0)), flax_cls(3, 4, rngs=flax_nnx.Rngs(0))
    _copy_params(cell, flax_cell)
    return nnx.RNN(cell, time_major=time_major), flax_nnx.RNN(flax_cell, time_major=time_major)


@settings(max_examples=8, deadline=None)
@given(
    lengths=st.integers(1, 4).flatmap(
        lambda batch: st.tuples(
            st.integers(1, 6), st.lists(st.integers(0, 6), min_size=batch, max_size=batch)
        )
    ),
    cell_type=st.sampled_from(["GRUCell", "LSTMCell", "SimpleCell"]),
    time_major=st.booleans(),
    reverse=st.booleans(),
    keep_order=st.booleans(),
)
def test_rnn_with_seq_lengths_equals_flax_on_every_step(
    lengths, cell_type, time_major, reverse, keep_order
):
    # Flax NNX 0.12.8 runs the cell on through the padding steps and returns, as the
    # final carry, the carry after each sequence's step length - 1 (the last step
    # for a length of 0): every output and the carry are compared.
    steps, seq = lengths
    seq_lengths = jnp.minimum(jnp.array(seq), steps)
    ours, theirs = _rnn_pair(cell_type, time_major)
    shape = (steps, len(seq), 3) if time_major else (len(seq), steps, 3)
    x = jax.random.normal(jax.random.key(steps), shape)
    options = {"seq_lengths": seq_lengths, "reverse": reverse, "keep_order": keep_order}
    carry, ys = ours(x, return_carry=True, **options)
    flax_carry, flax_ys = theirs(x, return_carry=True, **options)
    np.testing.assert_allclose(ys, flax_ys, rtol=1e-5, atol=1e-6)
    jax.tree.map(
        lambda a, b: np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-6), carry, flax_carry
    )
    np.testing.assert_allclose(ours(x, **options), theirs(x, **options), rtol=1e-5, atol=1e-6)


def test_rnn_padding_steps_run_the_cell():
    # The outputs past a sequence's length are the cell run on through the padding,
    # as in Flax, not the cell applied to a held carry.
    ours, theirs = _rnn_pair("GRUCell", False)
    x = jax.random.normal(jax.random.key(1), (2, 5, 3))
    lengths = jnp.array([2, 5])
    whole = ours(x)
    np.testing.assert_allclose(ours(x, seq_lengths=lengths), whole, rtol=1e-6)
    np.testing.assert_allclose(theirs(x, seq_lengths=lengths), whole, rtol=1e-5, atol=1e-6)


def test_type_names_are_flaxs():
    assert (linear.Axis, linear.Size, lora.Axis, lora.Size) == (int, int, int, int)
    assert initializers.DtypeLikeInexact is flax_nnx.nn.initializers.DtypeLikeInexact
    assert recurrent.Carry is flax_recurrent.Carry and recurrent.Output is flax_recurrent.Output


def test_bidirectional_accepts_any_rnn_base():
    # RNNBase is the call signature Bidirectional needs: a plain callable works.
    class Mirror:
        def __call__(self, inputs, *, return_carry=None, reverse=None, **kwargs):
            out = jnp.flip(inputs, axis=-2) if reverse else inputs
            return (None, out) if return_carry else out

    x = jnp.arange(6.0).reshape(1, 3, 2)
    both = nnx.Bidirectional(Mirror(), Mirror(), rngs=False)(x)
    np.testing.assert_array_equal(both, jnp.concatenate([x, jnp.flip(x, axis=-2)], axis=-1))


@pytest.mark.parametrize(
    ("module", "name"),
    [
        ("linear", "PrecisionLike"),
        ("linear", "PaddingLike"),
        ("linear", "LaxPadding"),
        ("linear", "Shape"),
        ("linear", "DotGeneralT"),
        ("linear", "ConvGeneralDilatedT"),
        ("linear", "EinsumT"),
        ("attention", "PrecisionLike"),
        ("activations", "Array"),
        ("activations", "Dtype"),
        ("normalization", "Array"),
        ("recurrent", "Shape"),
    ],
)
def test_imported_type_names_are_flax_s(module, name):
    # Names Flax's module imports from flax.typing, importable from ours as from Flax's.
    import importlib
    import typing

    ours = getattr(importlib.import_module(f"flaxgraph.nn.{module}"), name)
    theirs = getattr(importlib.import_module(f"flax.nnx.nn.{module}"), name)
    assert set(typing.get_args(ours)) == set(typing.get_args(theirs)), name
    assert typing.get_origin(ours) in (typing.get_origin(theirs), type(ours)), name


@pytest.mark.parametrize("module", ["activations", "attention", "linear", "lora", "normalization"])
def test_promote_dtype_fn_names_flaxgraph_s_protocol(module):
    import importlib

    from flaxgraph.typing import PromoteDtypeFn

    assert importlib.import_module(f"flaxgraph.nn.{module}").PromoteDtypeFn is (PromoteDtypeFn)


def test_a_language_model_s_flax_imports_run_on_flaxgraph_through_the_drop_in():
    # Issue 29's example: `from flax.nnx.nn.linear import default_embed_init` failed at
    # import under flaxgraph.install_as_flax_nnx(). A fresh interpreter, as the drop-in binds
    # the whole process.
    import os
    import subprocess
    import sys
    import textwrap
    from pathlib import Path

    code = textwrap.dedent(
        """
        import sys
        import jax, jax.numpy as jnp
        import flaxgraph
        flaxgraph.install_as_flax_nnx()
        from flax import nnx
        from flax.nnx.nn.linear import default_embed_init, Conv, Embed, PrecisionLike
        from flax.nnx.nn.recurrent import RNN, flip_sequences
        from flax.nnx.nn.normalization import WeightNorm
        from flax.nnx.rnglib import backup_keys, NotKey
        from flax.nnx.training.optimizer import to_opt_state
        from flax.nnx.variablelib import is_array_ref, VariableTypeCache

        class LM(nnx.Module):
            def __init__(self, rngs):
                self.embed = Embed(11, 4, embedding_init=default_embed_init, rngs=rngs)
                self.conv = Conv(4, 4, kernel_size=(3,), rngs=rngs)

            def __call__(self, ids):
                return self.embed.attend(self.conv(self.embed(ids)))

        model = LM(nnx.Rngs(0))
        assert nnx.jit(lambda m, x: m(x))(model, jnp.ones((2, 5), jnp.int32)).shape == (2, 5, 11)
        assert Conv is flaxgraph.Conv and VariableTypeCache["params"] is flaxgraph.Param
        assert not [m for m in sys.modules.values()
                    if getattr(m, "__file__", "") and "/flax/nnx/" in m.__file__]
        """
    )
    repo = Path(__file__).resolve().parent.parent.parent
    env = {**os.environ, "JAX_PLATFORMS": "cpu", "PYTHONPATH": str(repo)}
    result = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=300
    )
    assert result.returncode == 0, result.stderr


def test_rnn_cell_base_says_what_a_subclass_must_define():
    class Half(nnx.RNNCellBase):
        def __init__(self):
            self.in_features = self.hidden_features = 2

    cell = Half()
    with pytest.raises(NotImplementedError, match=r"Half .* must define initialize_carry"):
        cell.initialize_carry((1, 2))
    with pytest.raises(NotImplementedError, match=r"Half .* must define __call__"):
        cell(jnp.zeros((1, 2)), jnp.zeros((1, 2)))
    with pytest.raises(NotImplementedError):  # as Flax's base class
        flax_recurrent.RNNCellBase().initialize_carry((1, 2))
