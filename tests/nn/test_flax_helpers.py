"""The module-level names of Flax NNX 0.12.8's ``flax/nnx/nn/*.py``, private helpers
included, exist at the same path in ``flaxgraph.nn.*`` with the same signature, and the
helper functions give Flax's results.

Third-party code imports Flax's helpers (``from flax.nnx.nn.linear import
_conv_dimension_numbers``). The names are read from the installed Flax's source with
:mod:`ast` (every ``def``, ``class`` and assignment at module level); the signatures are
compared by parameter names, kinds and defaults (annotations are each library's own).
"""

from __future__ import annotations

import ast
import importlib
import inspect
from pathlib import Path
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
import pytest

flax = pytest.importorskip("flax", reason="the names are read from Flax NNX's source")

FLAX_NN = Path(flax.__file__).resolve().parent / "nnx" / "nn"


class Name(NamedTuple):
    module: str  # 'linear'
    name: str  # '_conv_dimension_numbers'
    kind: str  # 'def', 'class' or 'value'


def flax_names() -> list[Name]:
    names = []
    for path in sorted(FLAX_NN.glob("*.py")):
        if path.stem == "__init__":
            continue
        for statement in ast.parse(path.read_text(encoding="utf-8")).body:
            if isinstance(statement, ast.FunctionDef):
                names.append(Name(path.stem, statement.name, "def"))
            elif isinstance(statement, ast.ClassDef):
                names.append(Name(path.stem, statement.name, "class"))
            elif isinstance(statement, ast.Assign):
                for target in statement.targets:
                    if isinstance(target, ast.Name):
                        names.append(Name(path.stem, target.id, "value"))
            elif isinstance(statement, ast.AnnAssign) and isinstance(statement.target, ast.Name):
                names.append(Name(path.stem, statement.target.id, "value"))
    return names


NAMES = flax_names()
FUNCTIONS = [n for n in NAMES if n.kind == "def"]


def _modules(name: Name) -> tuple[Any, Any]:
    return (
        importlib.import_module(f"flax.nnx.nn.{name.module}"),
        importlib.import_module(f"flaxgraph.nn.{name.module}"),
    )


def _default(value: Any) -> Any:
    """A default as comparable across libraries: plain values as they are, other
    objects (functions, dtypes, initializers) by kind and name."""
    if value is inspect.Parameter.empty or isinstance(
        value, (int, float, str, bool, type(None), tuple)
    ):
        return value
    if isinstance(value, type):
        return ("type", value.__name__)
    if isinstance(value, dict) or type(value).__name__ in {"FrozenDict", "mappingproxy"}:
        return ("mapping", dict(value))
    return (type(value).__name__, getattr(value, "__name__", None))


def _shape_of(function: Any) -> list[tuple[str, str, Any]]:
    return [
        (p.name, p.kind.name, _default(p.default))
        for p in inspect.signature(function).parameters.values()
    ]


def test_the_walk_finds_the_helpers_third_party_code_imports() -> None:
    found = {(n.module, n.name) for n in NAMES}
    assert {("linear", "_conv_dimension_numbers"), ("linear", "_canonicalize_tuple")} <= found
    assert {("normalization", "_compute_stats"), ("attention", "combine_masks")} <= found
    print(f"flax.nnx.nn module-level names: {len(NAMES)} ({len(FUNCTIONS)} functions)")


@pytest.mark.parametrize("name", NAMES, ids=[f"{n.module}.{n.name}" for n in NAMES])
def test_each_flax_nn_name_exists_in_flaxgraph(name: Name) -> None:
    theirs, ours = _modules(name)
    assert hasattr(ours, name.name), f"flaxgraph.nn.{name.module} lacks {name.name}"
    if name.name == "__all__":
        assert sorted(ours.__all__) == sorted(theirs.__all__)


@pytest.mark.parametrize("name", FUNCTIONS, ids=[f"{n.module}.{n.name}" for n in FUNCTIONS])
def test_each_flax_nn_function_has_flax_signature(name: Name) -> None:
    theirs, ours = _modules(name)
    assert _shape_of(getattr(ours, name.name)) == _shape_of(getattr(theirs, name.name))


# ------------------------------------------------------ the same results on samples

RNG = np.random.default_rng(0)
X = jnp.asarray(RNG.normal(size=(2, 3, 4)), jnp.float32)
XB = X.astype(jnp.bfloat16)
MASK = jnp.asarray(RNG.random((2, 3, 4)) > 0.3)
Q = jnp.asarray(RNG.normal(size=(2, 3, 4, 5)), jnp.float32)
K = jnp.asarray(RNG.normal(size=(2, 6, 4, 5)), jnp.float32)
KG = jnp.asarray(RNG.normal(size=(2, 6, 2, 5)), jnp.float32)
LEN = jnp.array([2, 3])
AMASK = jnp.asarray(RNG.random((2, 1, 3, 6)) > 0.3).at[..., 0].set(True)
BIAS = jnp.asarray(RNG.normal(size=(1, 4, 3, 6)), jnp.float32)


def _samples() -> list[tuple[str, str, tuple[Any, ...], dict[str, Any]]]:
    return [
        ("linear", "canonicalize_padding", ("SAME", 2), {}),
        ("linear", "canonicalize_padding", (1, 2), {}),
        ("linear", "canonicalize_padding", ([(1, 2), 3], 2), {}),
        ("linear", "_conv_dimension_numbers", ((8, 5, 5, 3),), {}),
        ("linear", "_conv_dimension_numbers", ((8, 5, 3),), {}),
        ("linear", "_normalize_axes", ((-1, 0), 3), {}),
        ("linear", "_canonicalize_tuple", (3,), {}),
        ("linear", "_canonicalize_tuple", ([1, 2],), {}),
        ("normalization", "_canonicalize_axes", (3, -1), {}),
        ("normalization", "_canonicalize_axes", (4, (0, -1, 3)), {}),
        ("normalization", "_abs_sq", (X,), {}),
        ("normalization", "_abs_sq", (X + 1j * X,), {}),
        ("normalization", "_compute_stats", (X, (-1,), None), {}),
        ("normalization", "_compute_stats", (XB, (1, 2), None), {}),
        ("normalization", "_compute_stats", (X, -1, jnp.bfloat16), {"use_fast_variance": False}),
        ("normalization", "_compute_stats", (X, (0, 1), None), {"use_mean": False, "mask": MASK}),
        (
            "normalization",
            "_normalize",
            (X, X.mean(-1), X.var(-1), X[0, 0], X[1, 1], -1, -1, None, 1e-6),
            {},
        ),
        (
            "normalization",
            "_normalize",
            (XB, X.mean((1, 2)), X.var((1, 2)), None, None, (1, 2), -1, jnp.bfloat16, 1e-3),
            {},
        ),
        ("normalization", "_l2_normalize", (X,), {}),
        ("normalization", "_l2_normalize", (X, (0, 2), 1e-3), {}),
        ("attention", "dot_product_attention_weights", (Q, K), {}),
        ("attention", "dot_product_attention_weights", (Q, KG), {"is_causal": True}),
        (
            "attention",
            "dot_product_attention_weights",
            (Q.astype(jnp.bfloat16), K),
            {"bias": BIAS},
        ),
        ("attention", "dot_product_attention", (Q, K, K), {}),
        ("attention", "dot_product_attention", (Q, KG, KG), {"mask": AMASK}),
        ("attention", "dot_product_attention", (Q, K, K), {"module": None, "is_causal": True}),
        (
            "attention",
            "dot_product_attention",
            (Q, KG, KG),
            {"dropout_rate": 0.5, "dropout_rng": jax.random.key(0)},
        ),
        ("attention", "make_attention_mask", (jnp.array([1, 1, 0]), jnp.array([1, 0])), {}),
        ("attention", "make_causal_mask", (jnp.ones((2, 3)),), {"extra_batch_dims": 1}),
        ("attention", "combine_masks", (MASK, None, MASK[::-1]), {}),
        ("attention", "combine_masks", (None,), {}),
        ("attention", "_validate_qkv_shapes", (Q, K, K), {}),
        ("dtypes", "canonicalize_dtype", (X, XB), {}),
        ("dtypes", "canonicalize_dtype", (jnp.arange(3),), {}),
        ("dtypes", "promote_dtype", ((X, XB, None),), {"dtype": jnp.bfloat16}),
        ("dtypes", "promote_dtype", ((X, XB),), {}),
        ("initializers", "zeros_init", (), {}),
        ("initializers", "ones_init", (), {}),
        ("recurrent", "flip_sequences", (X, LEN, 1, False), {}),
        ("recurrent", "flip_sequences", (X, None, 1, True), {}),
        ("recurrent", "_select_last_carry", ((X, X * 2), jnp.array([1, 2, 2])), {}),
        ("recurrent", "_expand_dims_like", (LEN, X), {}),
        ("recurrent", "_concatenate", (X, X[..., :2]), {}),
        ("recurrent", "modified_orthogonal", (jax.random.key(1), (4, 4)), {}),
    ]


SAMPLES = _samples()


def _value(x: Any) -> Any:
    """Results made comparable: arrays to raw bits, initializers to what they draw."""
    if callable(x) and not isinstance(x, jax.Array):
        return _value(x(jax.random.key(2), (2, 3), jnp.float32))
    if isinstance(x, jax.Array) and jax.dtypes.issubdtype(x.dtype, jax.dtypes.prng_key):
        return _value(jax.random.key_data(x))
    if isinstance(x, (jax.Array, np.ndarray)):
        a = np.asarray(x)
        if a.dtype.kind in "fc" or a.dtype.name == "bfloat16":
            return (a.dtype.name, a.shape, a.view(f"u{a.dtype.itemsize}").tobytes())
        return (a.dtype.name, a.shape, a.tobytes())
    if isinstance(x, (tuple, list)):
        return type(x).__name__, [_value(v) for v in x]
    if isinstance(x, np.dtype) or isinstance(x, type):
        return jnp.dtype(x).name
    return x


@pytest.mark.parametrize("module, name, args, kwargs", SAMPLES, ids=[f"{s[0]}.{s[1]}-{i}" for i, s in enumerate(SAMPLES)])  # fmt: skip
def test_each_flax_nn_helper_gives_flax_results(module: str, name: str, args: Any, kwargs: Any) -> None:  # fmt: skip
    theirs, ours = _modules(Name(module, name, "def"))
    assert _value(getattr(ours, name)(*args, **kwargs)) == _value(
        getattr(theirs, name)(*args, **kwargs)
    )


def test_the_samples_cover_every_flax_nn_function() -> None:
    sampled = {(m, n) for m, n, _, _ in SAMPLES}
    functions = {(n.module, n.name) for n in FUNCTIONS}
    assert functions == sampled, sorted(functions ^ sampled)


@pytest.mark.parametrize(
    "module, name, args",
    [
        ("linear", "canonicalize_padding", ((1, 2, 3), 2)),
        ("attention", "_validate_qkv_shapes", (Q, K[0], K)),
        ("attention", "_validate_qkv_shapes", (Q, K[:1], K)),
        ("attention", "combine_masks", (MASK, MASK[0])),
    ],
)
def test_each_flax_nn_helper_raises_where_flax_raises(module: str, name: str, args: Any) -> None:
    theirs, ours = _modules(Name(module, name, "def"))
    with pytest.raises((ValueError, AssertionError)) as flax_error:
        getattr(theirs, name)(*args)
    with pytest.raises(ValueError if flax_error.type is not AssertionError else Exception):
        getattr(ours, name)(*args)
