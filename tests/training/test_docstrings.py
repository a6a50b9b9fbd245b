"""The examples in the training modules' docstrings run and print what they show.

They are written for ``import flaxgraph as nnx`` with the training names exported
at the top level (``nnx.Optimizer``, ``nnx.metrics``…); the test provides those
names if the package does not (yet) export them.
"""

from __future__ import annotations

import doctest
from types import ModuleType

import pytest

import flaxgraph as nnx
from flaxgraph import training
from flaxgraph.training import ema, metrics, optimizer, train_state

EXPORTS = {
    "Optimizer": training.Optimizer,
    "OptState": training.OptState,
    "OptArray": training.OptArray,
    "OptVariable": training.OptVariable,
    "ModelAndOptimizer": training.ModelAndOptimizer,
    "TrainState": training.TrainState,
    "MultiMetric": training.MultiMetric,
    "EMA": training.EMA,
    "metrics": training.metrics,
}


@pytest.mark.parametrize("module", [optimizer, metrics, ema, train_state], ids=lambda m: m.__name__)
def test_docstring_examples(module: ModuleType, monkeypatch: pytest.MonkeyPatch):
    for name, value in EXPORTS.items():
        if not hasattr(nnx, name):
            monkeypatch.setattr(nnx, name, value, raising=False)
        else:
            assert getattr(nnx, name) is value, f"nnx.{name} is not flaxgraph.training's"
    result = doctest.testmod(module, optionflags=doctest.ELLIPSIS, verbose=False)
    assert result.attempted > 0
    assert result.failed == 0
