"""Differential test: every layer's constructor and call signature against Flax NNX 0.12.

For each layer and method, the parameters must have Flax's names, order, kinds
(positional / keyword-only) and defaults. Defaults are compared by what they
are: initializers by their output on a fixed key, other functions by name,
dtypes and Variable types by name, mappings by content. flaxgraph may add
keyword parameters at the end only when listed in ``EXTRA`` with the reason;
Flax parameters flaxgraph lacks are listed in ``MISSING`` with the reason.
Flax is an optional dependency (the ``bench`` extra): without it the test skips.
"""

import inspect
import sys

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import flaxgraph as nnx

flax_nnx = pytest.importorskip("flax.nnx")

LAYERS = {
    "Embed": ["__init__", "__call__", "attend"],
    "Linear": ["__init__", "__call__"],
    "LinearGeneral": ["__init__", "__call__"],
    "Einsum": ["__init__", "__call__"],
    "Conv": ["__init__", "__call__"],
    "ConvTranspose": ["__init__", "__call__"],
    "BatchNorm": ["__init__", "__call__"],
    "LayerNorm": ["__init__", "__call__"],
    "RMSNorm": ["__init__", "__call__"],
    "GroupNorm": ["__init__", "__call__"],
    "InstanceNorm": ["__init__", "__call__"],
    "SpectralNorm": ["__init__", "__call__"],
    "WeightNorm": ["__init__", "__call__"],
    "Dropout": ["__init__", "__call__"],
    "LoRA": ["__init__", "__call__"],
    "LoRALinear": ["__init__", "__call__"],
    "LSTMCell": ["__init__", "__call__", "initialize_carry"],
    "OptimizedLSTMCell": ["__init__", "__call__", "initialize_carry"],
    "GRUCell": ["__init__", "__call__", "initialize_carry"],
    "SimpleCell": ["__init__", "__call__", "initialize_carry"],
    "RNN": ["__init__", "__call__"],
    "Bidirectional": ["__init__", "__call__"],
    "MultiHeadAttention": ["__init__", "__call__"],
    "PReLU": ["__init__", "__call__"],
}

# (layer, method, parameter): why flaxgraph lacks it
MISSING: dict[tuple[str, str, str], str] = {}
# (layer, method, parameter): why flaxgraph has it and Flax does not
EXTRA: dict[tuple[str, str, str], str] = {}
# (layer, method): parameter order differs (the parameters are keyword-only)
ORDER_DIFFERS: dict[tuple[str, str], str] = {}

INIT_NAMES = {
    "kernel_init",
    "bias_init",
    "embedding_init",
    "scale_init",
    "recurrent_kernel_init",
    "out_kernel_init",
    "out_bias_init",
    "a_initializer",
    "b_initializer",
    "carry_init",
    "negative_slope_init",
}


def describe_default(name, value):
    """A comparable description of a default value."""
    if value is inspect.Parameter.empty:
        return "<required>"
    if name in INIT_NAMES and callable(value):
        out = value(jax.random.key(7), (4, 3), jnp.float32)
        return ("init", np.asarray(out).round(6).tolist())
    if isinstance(value, type):
        return ("type", value.__name__)
    if hasattr(value, "items") and not callable(value):
        return ("mapping", sorted(dict(value).items()))
    if type(value).__name__ == "PathContains":
        return ("PathContains", value.key, value.exact)
    if callable(value):
        return ("function", getattr(value, "__name__", type(value).__name__))
    return ("value", value)


def same_helper(name, ours, theirs):
    """Whether a function default is Flax's module-level helper under Flax's name:
    flaxgraph defines it public elsewhere and binds it at Flax's path (e.g.
    ``flaxgraph.nn.recurrent._concatenate`` is ``rnn.concat_last_axis``)."""
    if not (callable(ours) and callable(theirs)) or isinstance(theirs, type):
        return False
    flax_name = getattr(theirs, "__name__", None)
    flax_module = getattr(theirs, "__module__", "") or ""
    if flax_name is None or not flax_module.startswith("flax.nnx."):
        return False
    our_module = sys.modules.get("flaxgraph." + flax_module.removeprefix("flax.nnx."))
    return our_module is not None and getattr(our_module, flax_name, None) is ours


def params(cls, method):
    sig = inspect.signature(getattr(cls, method))
    return [p for p in sig.parameters.values() if p.name != "self"]


def flat(tree, prefix=()):
    """A nested dict as ``{path: leaf}``."""
    out = {}
    for k, v in tree.items():
        if hasattr(v, "items"):
            out.update(flat(v, (*prefix, k)))
        else:
            out[(*prefix, k)] = v
    return out


CASES = [(name, method) for name, methods in LAYERS.items() for method in methods]


@pytest.mark.parametrize("name, method", CASES, ids=[f"{n}.{m}" for n, m in CASES])
def test_signature_matches_flax(name, method):
    ours = {p.name: p for p in params(getattr(nnx, name), method)}
    theirs = {p.name: p for p in params(getattr(flax_nnx, name), method)}
    problems = []
    for pname, p in theirs.items():
        if pname not in ours:
            if (name, method, pname) not in MISSING:
                problems.append(f"missing parameter {pname!r}")
            continue
        q = ours[pname]
        if p.kind != q.kind:
            problems.append(f"{pname}: kind {q.kind.name}, Flax {p.kind.name}")
        if p.kind is not inspect.Parameter.VAR_KEYWORD:
            mine, flax_default = (
                describe_default(pname, q.default),
                describe_default(pname, p.default),
            )
            if mine != flax_default and not same_helper(name, q.default, p.default):
                problems.append(f"{pname}: default {mine}, Flax {flax_default}")
    for pname in ours:
        if pname not in theirs and (name, method, pname) not in EXTRA:
            problems.append(f"extra parameter {pname!r}")
    common_ours = [n for n in ours if n in theirs]
    common_theirs = [n for n in theirs if n in ours]
    if common_ours != common_theirs and (name, method) not in ORDER_DIFFERS:
        problems.append(f"order {common_ours}, Flax {common_theirs}")
    assert not problems, f"{name}.{method}: " + "; ".join(problems)


def test_allowlists_are_current():
    """Every listed difference still exists (remove entries once fixed)."""
    for name, method, pname in MISSING:
        assert pname not in inspect.signature(getattr(getattr(nnx, name), method)).parameters
    for name, method, pname in EXTRA:
        assert pname not in inspect.signature(getattr(getattr(flax_nnx, name), method)).parameters


@pytest.mark.parametrize(
    "make",
    [
        lambda m: m.Linear(3, 4, rngs=m.Rngs(0)),
        lambda m: m.LinearGeneral(3, (2, 2), rngs=m.Rngs(0)),
        lambda m: m.Einsum("ab,bc->ac", (3, 4), (4,), rngs=m.Rngs(0)),
        lambda m: m.Conv(3, 4, (2, 2), rngs=m.Rngs(0)),
        lambda m: m.ConvTranspose(3, 4, (2, 2), strides=2, rngs=m.Rngs(0)),
        lambda m: m.LayerNorm(3, rngs=m.Rngs(0)),
        lambda m: m.RMSNorm(3, rngs=m.Rngs(0)),
        lambda m: m.GroupNorm(3, num_groups=3, rngs=m.Rngs(0)),
        lambda m: m.InstanceNorm(3, rngs=m.Rngs(0)),
        lambda m: m.BatchNorm(3, rngs=m.Rngs(0)),
        lambda m: m.LoRALinear(3, 4, lora_rank=2, rngs=m.Rngs(0)),
    ],
)
def test_parameters_and_outputs_match_flax(make):
    """Same seed, same Params (names, shapes, dtypes, values) and outputs."""
    ours, theirs = make(nnx), make(flax_nnx)
    x = np.asarray(jax.random.normal(jax.random.key(1), (2, 5, 5, 3)))
    if isinstance(ours, (nnx.Linear, nnx.LinearGeneral, nnx.Einsum, nnx.LoRALinear)):
        x = x[:, 0, 0]
    ours_params = flat(nnx.state(ours, nnx.Param).to_pure_dict())
    theirs_params = flat(flax_nnx.to_pure_dict(flax_nnx.state(theirs, flax_nnx.Param)))
    assert sorted(ours_params) == sorted(theirs_params)
    for path, a in ours_params.items():
        b = theirs_params[path]
        assert (path, a.shape, a.dtype) == (path, b.shape, b.dtype)
        np.testing.assert_allclose(np.asarray(a), np.asarray(b), rtol=1e-6, atol=1e-6)
    np.testing.assert_allclose(np.asarray(ours(x)), np.asarray(theirs(x)), rtol=1e-5, atol=1e-5)


def test_recurrent_cells_match_flax():
    for name in ("LSTMCell", "OptimizedLSTMCell", "GRUCell", "SimpleCell"):
        ours = getattr(nnx, name)(3, 4, rngs=nnx.Rngs(0))
        theirs = getattr(flax_nnx, name)(3, 4, rngs=flax_nnx.Rngs(0))
        x = np.asarray(jax.random.normal(jax.random.key(1), (2, 3)))
        carry = ours.initialize_carry((2, 3))
        out_ours = ours(carry, x)
        out_theirs = theirs(theirs.initialize_carry((2, 3), rngs=flax_nnx.Rngs(0)), x)
        for a, b in zip(jax.tree.leaves(out_ours), jax.tree.leaves(out_theirs)):
            np.testing.assert_allclose(np.asarray(a), np.asarray(b), rtol=1e-5, atol=1e-5)


def test_dropout_matches_flax():
    x = np.ones((4, 6), np.float32)
    ours = nnx.Dropout(0.5, rngs=nnx.Rngs(0))
    theirs = flax_nnx.Dropout(0.5, rngs=flax_nnx.Rngs(0))
    np.testing.assert_array_equal(np.asarray(ours(x)), np.asarray(theirs(x)))
    ours = nnx.Dropout(0.5, broadcast_dims=(0,))
    theirs = flax_nnx.Dropout(0.5, broadcast_dims=(0,))
    np.testing.assert_array_equal(
        np.asarray(ours(x, rngs=nnx.Rngs(dropout=3))),
        np.asarray(theirs(x, rngs=flax_nnx.Rngs(dropout=3))),
    )
    ours.eval()
    theirs.eval()
    assert ours.deterministic is theirs.deterministic is True


def normal_carry(key, shape, dtype=jnp.float32):
    """A module-level (hashable by name) random carry initializer."""
    return jax.random.normal(key, shape, dtype)


@pytest.mark.filterwarnings("ignore:carry_init is provided in __init__")
def test_rnn_carry_streams_match_flax():
    init = normal_carry
    x = np.ones((2, 5, 3), np.float32)

    def both(make_rnn):
        return make_rnn(nnx), make_rnn(flax_nnx)

    for rngs_arg in (lambda m: True, lambda m: m.Rngs(carry=7), lambda m: m.Rngs(7)):
        ours, theirs = both(
            lambda m, r=rngs_arg: m.RNN(
                m.GRUCell(3, 4, carry_init=init, rngs=m.Rngs(0)), return_carry=True, rngs=r(m)
            )
        )
        for _ in range(2):  # the kept stream advances per call
            np.testing.assert_allclose(
                np.asarray(ours(x)[0]), np.asarray(theirs(x)[0]), rtol=1e-5, atol=1e-5
            )
    ours, theirs = both(
        lambda m: m.Bidirectional(
            m.RNN(m.GRUCell(3, 4, carry_init=init, rngs=m.Rngs(0))),
            m.RNN(m.GRUCell(3, 4, carry_init=init, rngs=m.Rngs(1))),
        )
    )
    np.testing.assert_allclose(np.asarray(ours(x)), np.asarray(theirs(x)), rtol=1e-5, atol=1e-5)
