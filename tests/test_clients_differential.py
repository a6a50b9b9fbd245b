"""The released Tunix and qwix on flaxgraph (through the drop-in) compute what they compute on Flax.

``tests/clients/programs.py`` drives Tunix's PEFT trainer with qwix LoRA, its DPO trainer, a
GRPO learner (vanilla rollout, mock vocabulary), its sampler, and qwix PTQ on a small model.
It runs twice, each in a fresh interpreter: once on the real Flax 0.12.8 and once with
``flax.nnx`` bound to flaxgraph by ``flaxgraph.install_as_flax_nnx()``; each scenario's numbers
must agree. Needs the ``clients`` extra (``pip install 'flaxgraph[clients]'``: the released
``google-tunix`` and ``qwix``), which ``make install`` includes; skipped with the reason
otherwise. Both runs happen once per session (a file lock shares them between xdist workers).
"""

from __future__ import annotations

import fcntl
import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest

_missing = [p for p in ("tunix", "qwix", "flax") if importlib.util.find_spec(p) is None]
if _missing:  # found without importing them: the programs run in their own interpreters
    pytest.skip(
        f"needs the clients extra ({', '.join(_missing)} missing): "
        "pip install 'flaxgraph[clients]'",
        allow_module_level=True,
    )

REPO = Path(__file__).resolve().parent.parent
PROGRAMS = REPO / "tests" / "clients" / "programs.py"


class DiffersOnFlaxgraph(AssertionError):
    """The scenario fails or computes other numbers on flaxgraph (not on Flax: that is a
    broken program, reported as a plain ``AssertionError``)."""


def _run(side: str, base: Path) -> dict[str, Any]:
    """The program's results on ``side`` ("flax" or "flaxgraph"), computed once per session."""
    out = base / f"clients-{side}.json"
    with open(base / f"clients-{side}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not out.exists():
            env = {**os.environ, "JAX_PLATFORMS": "cpu", "PYTHONPATH": str(REPO)}
            env.pop("XLA_FLAGS", None)
            done = subprocess.run(
                [sys.executable, str(PROGRAMS), "--flax-nnx", side, str(out)],
                capture_output=True,
                text=True,
                env=env,
                timeout=900,
            )
            if done.returncode != 0:
                pytest.fail(f"the program failed on {side}:\n{done.stderr[-3000:]}")
    return json.loads(out.read_text())


@pytest.fixture(scope="session")
def results(tmp_path_factory: pytest.TempPathFactory) -> dict[str, dict[str, Any]]:
    base = tmp_path_factory.getbasetemp()
    base = base.parent if os.environ.get("PYTEST_XDIST_WORKER") else base
    return {side: _run(side, base) for side in ("flax", "flaxgraph")}


@pytest.mark.parametrize("name", ["peft_lora", "dpo", "grpo", "sampling", "qwix_ptq"])
def test_the_program_computes_the_same_numbers_on_flaxgraph(
    results: dict[str, dict[str, Any]], name: str
) -> None:
    assert results["flaxgraph"]["_binding"] == {"flax.nnx": "flaxgraph"}
    assert results["flax"]["_binding"] == {"flax.nnx": "flax.nnx"}
    on_flax, on_flaxgraph = results["flax"][name], results["flaxgraph"][name]
    assert "error" not in on_flax, f"the program itself fails on real Flax: {on_flax}"
    if "error" in on_flaxgraph:
        raise DiffersOnFlaxgraph(f"{on_flaxgraph['error']} (at {on_flaxgraph['where']})")
    expected, actual = on_flax["values"], on_flaxgraph["values"]
    assert expected, "the scenario returned no numbers"
    try:
        assert sorted(actual) == sorted(expected)
        for key in expected:
            np.testing.assert_allclose(
                np.asarray(actual[key]),
                np.asarray(expected[key]),
                rtol=1e-5,
                atol=1e-6,
                err_msg=key,
            )
    except AssertionError as error:
        raise DiffersOnFlaxgraph(str(error)) from None
