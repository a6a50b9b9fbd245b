"""``jax.random`` samplers and keyed initializers as methods of a random stream.

A method draws its key from the stream, the other arguments are ``jax.random``'s;
``rngs.lecun_normal()`` returns an initializer without a key argument. See the package
README, "Samplers".

>>> import jax, flaxgraph as nnx
>>> a = nnx.Rngs(0).normal((2, 3))
>>> b = jax.random.normal(nnx.Rngs(0)(), (2, 3))
>>> bool((a == b).all())
True

Source: Flax NNX 0.12.8 ``RngStream``/``Rngs`` random helpers,
``flax.nnx.rnglib.KeylessInitializer``.
"""

from __future__ import annotations

import functools
import inspect
from collections.abc import Callable
from typing import Any, Protocol, runtime_checkable

import jax

SAMPLERS: tuple[str, ...] = (
    "bits", "uniform", "randint", "permutation", "choice", "normal",
    "multivariate_normal", "truncated_normal", "bernoulli", "beta", "cauchy",
    "dirichlet", "exponential", "gamma", "loggamma", "poisson", "gumbel",
    "categorical", "laplace", "logistic", "pareto", "t", "chisquare", "f",
    "rademacher", "maxwell", "double_sided_maxwell", "weibull_min", "orthogonal",
    "generalized_normal", "ball", "rayleigh", "wald", "geometric", "triangular",
    "lognormal", "binomial", "multinomial",
)  # fmt: skip
"""The ``jax.random`` functions offered as stream methods (as in Flax NNX 0.12.8)."""

INITIALIZERS: tuple[str, ...] = (
    "delta_orthogonal", "glorot_normal", "glorot_uniform", "he_normal",
    "he_uniform", "kaiming_normal", "kaiming_uniform", "lecun_normal",
    "lecun_uniform", "variance_scaling", "xavier_normal", "xavier_uniform",
)  # fmt: skip
"""The ``jax.nn.initializers`` constructors offered as stream methods (``normal``,
``uniform``, ``truncated_normal``, ``orthogonal`` are the ``jax.random`` samplers)."""


@runtime_checkable
class KeylessInitializer(Protocol):
    """An initializer whose key comes from a stream: ``init(shape, dtype=None, out_sharding=None)``.

    Returns an array of ``shape`` and ``dtype``, placed by ``out_sharding`` if given (a type
    for annotations: its signature is not checked)."""

    def __call__(
        self,
        shape: tuple[int, ...],
        dtype: Any | None = None,
        out_sharding: jax.sharding.NamedSharding | jax.sharding.PartitionSpec | None = None,
    ) -> jax.Array: ...


def _method_signature(fn: Callable[..., Any], skip: int) -> inspect.Signature | None:
    """``fn``'s signature as a method's: ``self`` instead of its first ``skip`` parameters."""
    try:
        sig = inspect.signature(fn)
    except (TypeError, ValueError):
        return None
    params = list(sig.parameters.values())
    self_param = inspect.Parameter("self", inspect.Parameter.POSITIONAL_ONLY)
    return sig.replace(parameters=[self_param, *params[skip:]])


def _sampler_method(name: str) -> Callable[..., jax.Array]:
    sample = getattr(jax.random, name)

    def method(self: Callable[[], jax.Array], *args: Any, **kwargs: Any) -> jax.Array:
        return sample(self(), *args, **kwargs)

    method.__name__ = method.__qualname__ = name
    method.__doc__ = (
        f"``jax.random.{name}`` with a key drawn from this stream (one key per call).\n\n"
        f"Args and returns: those of ``jax.random.{name}`` after its ``key`` argument.\n\n"
        f"Example: ``nnx.Rngs(0).{name}(...)`` == "
        f"``jax.random.{name}(nnx.Rngs(0)(), ...)``.\n\n"
        "Source: Flax NNX 0.12.8 random helpers of ``RngStream``/``Rngs``."
    )
    signature = _method_signature(sample, 1)  # the key comes from the stream
    if signature is not None:
        method.__signature__ = signature  # type: ignore[attr-defined]
    return method


def _initializer_method(name: str) -> Callable[..., KeylessInitializer]:
    make_initializer = getattr(jax.nn.initializers, name)

    def method(self: Callable[[], jax.Array], *args: Any, **kwargs: Any) -> KeylessInitializer:
        init = make_initializer(*args, **kwargs)

        @functools.wraps(init)
        def keyless(*init_args: Any, **init_kwargs: Any) -> jax.Array:
            return init(self(), *init_args, **init_kwargs)

        return keyless

    method.__name__ = method.__qualname__ = name
    method.__doc__ = (
        f"``jax.nn.initializers.{name}(...)`` whose key comes from this stream.\n\n"
        f"Args: those of ``jax.nn.initializers.{name}``.\n\n"
        "Returns: ``init(shape, dtype=..., ...)``, which draws one key per call.\n\n"
        f"Example: ``w = nnx.Rngs(0).{name}()((3, 4))``.\n\n"
        "Source: Flax NNX 0.12.8 initializer helpers of ``RngStream``/``Rngs``."
    )
    signature = _method_signature(make_initializer, 0)
    if signature is not None:  # it returns a keyless initializer, not the Initializer
        method.__signature__ = signature.replace(  # type: ignore[attr-defined]
            return_annotation=inspect.Signature.empty
        )
    return method


class RandomSamplers:
    """Mixin: ``SAMPLERS`` and ``INITIALIZERS`` as methods (``rngs.uniform((2, 5))``) of a class whose instances return a key when called."""

    __slots__ = ()

    # For readers and type checkers; the loop below sets each of these.
    bits: Callable[..., jax.Array]
    uniform: Callable[..., jax.Array]
    randint: Callable[..., jax.Array]
    permutation: Callable[..., jax.Array]
    choice: Callable[..., jax.Array]
    normal: Callable[..., jax.Array]
    multivariate_normal: Callable[..., jax.Array]
    truncated_normal: Callable[..., jax.Array]
    bernoulli: Callable[..., jax.Array]
    beta: Callable[..., jax.Array]
    cauchy: Callable[..., jax.Array]
    dirichlet: Callable[..., jax.Array]
    exponential: Callable[..., jax.Array]
    gamma: Callable[..., jax.Array]
    loggamma: Callable[..., jax.Array]
    poisson: Callable[..., jax.Array]
    gumbel: Callable[..., jax.Array]
    categorical: Callable[..., jax.Array]
    laplace: Callable[..., jax.Array]
    logistic: Callable[..., jax.Array]
    pareto: Callable[..., jax.Array]
    t: Callable[..., jax.Array]
    chisquare: Callable[..., jax.Array]
    f: Callable[..., jax.Array]
    rademacher: Callable[..., jax.Array]
    maxwell: Callable[..., jax.Array]
    double_sided_maxwell: Callable[..., jax.Array]
    weibull_min: Callable[..., jax.Array]
    orthogonal: Callable[..., jax.Array]
    generalized_normal: Callable[..., jax.Array]
    ball: Callable[..., jax.Array]
    rayleigh: Callable[..., jax.Array]
    wald: Callable[..., jax.Array]
    geometric: Callable[..., jax.Array]
    triangular: Callable[..., jax.Array]
    lognormal: Callable[..., jax.Array]
    binomial: Callable[..., jax.Array]
    multinomial: Callable[..., jax.Array]
    delta_orthogonal: Callable[..., KeylessInitializer]
    glorot_normal: Callable[..., KeylessInitializer]
    glorot_uniform: Callable[..., KeylessInitializer]
    he_normal: Callable[..., KeylessInitializer]
    he_uniform: Callable[..., KeylessInitializer]
    kaiming_normal: Callable[..., KeylessInitializer]
    kaiming_uniform: Callable[..., KeylessInitializer]
    lecun_normal: Callable[..., KeylessInitializer]
    lecun_uniform: Callable[..., KeylessInitializer]
    variance_scaling: Callable[..., KeylessInitializer]
    xavier_normal: Callable[..., KeylessInitializer]
    xavier_uniform: Callable[..., KeylessInitializer]


for _name in SAMPLERS:
    setattr(RandomSamplers, _name, _sampler_method(_name))
for _name in INITIALIZERS:
    setattr(RandomSamplers, _name, _initializer_method(_name))
del _name
