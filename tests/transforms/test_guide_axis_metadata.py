"""The "Axis metadata" examples of Flax NNX's "Transformations" guide, verbatim (the
guide's ``Weights`` class and ``print`` lines, with their printed output compared line
by line), and the reading of sharding names they rely on.

The guide gives names as ``nnx.Param(array, sharding=...)`` and reads them back as
``.sharding``; Flax 0.12.8 stores them under ``out_sharding`` and warns on both old
spellings. flaxgraph stores them the same way and answers ``.sharding`` (and
``sharding_names``) with the names and a ``DeprecationWarning`` (guides/from_flax.md,
"Where flaxgraph differs on purpose").
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx as flax_nnx

import flaxgraph as nnx


# The guide's example verbatim: names given as ``sharding=`` and read back as ``.sharding``
# (Flax 0.12.8 stores them as ``out_sharding``; both old spellings warn, see
# guides/from_flax.md). Its printed output is compared line by line.
# fmt: off
class Weights(nnx.Module):
  def __init__(self, array: jax.Array, sharding: tuple[str | None, ...]):
    self.param = nnx.Param(array, sharding=sharding)


@pytest.mark.filterwarnings("ignore:.*sharding.*:DeprecationWarning")
def test_axis_metadata_inside_and_outside_vmap(capsys: pytest.CaptureFixture[str]) -> None:
    m = Weights(jnp.ones((3, 4, 5)), sharding=('a', 'b', None))

    @nnx.vmap(in_axes=1, transform_metadata={nnx.PARTITION_NAME: 'b'})
    def f(m: Weights):
      print(f'Inner {m.param.shape = }')
      print(f'Inner {m.param.sharding = }')

    f(m)
    print(f'Outter {m.param.shape = }')
    print(f'Outter {m.param.sharding = }')
    assert capsys.readouterr().out.splitlines() == [
        "Inner m.param.shape = (3, 5)",
        "Inner m.param.sharding = ('a', None)",
        "Outter m.param.shape = (3, 4, 5)",
        "Outter m.param.sharding = ('a', 'b', None)",
    ]


@pytest.mark.filterwarnings("ignore:.*sharding.*:DeprecationWarning")
def test_axis_metadata_for_modules_created_inside_vmap(capsys: pytest.CaptureFixture[str]) -> None:
    @nnx.vmap(out_axes=1, axis_size=4, transform_metadata={nnx.PARTITION_NAME: 'b'})
    def init_vmap():
      return Weights(jnp.ones((3, 5)), sharding=('a', None))

    m = init_vmap()
    print(f'Outter {m.param.shape = }')
    print(f'Outter {m.param.sharding = }')
    assert capsys.readouterr().out.splitlines() == [
        "Outter m.param.shape = (3, 4, 5)",
        "Outter m.param.sharding = ('a', 'b', None)",
    ]
    np.testing.assert_array_equal(m.param.value, np.ones((3, 4, 5)))
# fmt: on


def test_the_old_sharding_spellings_warn_and_out_sharding_is_the_stored_key() -> None:
    with pytest.deprecated_call(match="out_sharding"):
        p = nnx.Param(jnp.ones((3, 4, 5)), sharding=("a", "b", None))
    assert p.get_metadata()["out_sharding"] == ("a", "b", None)
    assert "sharding" not in p.get_metadata()
    with pytest.deprecated_call(match="out_sharding"):
        assert p.sharding == ("a", "b", None)
    with pytest.deprecated_call(match="out_sharding"):
        assert p.sharding_names == ("a", "b", None)
    assert p.out_sharding == ("a", "b", None)
    # without names, .sharding is the value's placement, as in Flax
    plain = nnx.Param(jnp.ones(2))
    assert plain.sharding == plain.get_value().sharding


def test_out_sharding_and_sharding_names_as_in_flax() -> None:
    # The stored key and the sharding_names read agree with the real Flax 0.12.8.
    for lib in (nnx, flax_nnx):
        with lib.use_eager_sharding(False), pytest.deprecated_call():
            p = lib.Param(jnp.ones((3, 4, 5)), sharding=("a", "b", None))
        assert p.get_metadata()["out_sharding"] == ("a", "b", None)
        with pytest.deprecated_call():
            assert p.sharding_names == ("a", "b", None)
