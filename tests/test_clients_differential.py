"""The client contract in miniature: released qwix computes the same on flaxgraph as on Flax, and a
deliberately wrong flaxgraph is caught.

The full contract (every Tunix, qwix and MaxText scenario, their own environments built from the
package registry) is ``make clients``; this file keeps ``make test`` fast with one cheap qwix
scenario of it (``lora``: LoRA on a small Transformer, trained under ``nnx.jit`` and
``nnx.value_and_grad``), run by ``tests/clients/programs.py`` in fresh interpreters of this
venv: once on real Flax 0.12.8, once with ``flax.nnx`` bound to flaxgraph by the drop-in, and once
more on flaxgraph with ``--mutation skip-write-back`` (transforms that do not write updates back to
the caller's objects), which must make it disagree. Needs the ``clients`` extra
(``pip install 'flaxgraph[clients]'``: the released ``google-tunix`` and ``qwix``), which
``make install`` includes; skipped with the reason otherwise. The three runs happen at the same
time, once per session (a file lock shares them between xdist workers).
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

import pytest

_missing = [p for p in ("qwix", "flax", "optax") if importlib.util.find_spec(p) is None]
if _missing:  # found without importing them: the programs run in their own interpreters
    pytest.skip(
        f"needs the clients extra ({', '.join(_missing)} missing): "
        "pip install 'flaxgraph[clients]'",
        allow_module_level=True,
    )

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "tests" / "clients"))

from agreement import agree  # noqa: E402

RUNS = {  # name: (side, scenarios, extra arguments)
    "flax": ("flax", "lora", []),
    "flaxgraph": ("flaxgraph", "lora", []),
    "mutated": ("flaxgraph", "lora", ["--mutation", "skip-write-back"]),
}


def _start(name: str, base: Path) -> subprocess.Popen[str] | None:
    side, only, extra = RUNS[name]
    if (base / f"clients-{name}.json").exists():
        return None
    env = {**os.environ, "JAX_PLATFORMS": "cpu"}
    env.pop("XLA_FLAGS", None)
    cmd = [sys.executable, str(REPO / "tests" / "clients" / "programs.py"), "--client", "qwix"]
    cmd += ["--flax-nnx", side, "--only", only, *extra, str(base / f"clients-{name}.json")]
    return subprocess.Popen(
        cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env
    )


@pytest.fixture(scope="session")
def results(tmp_path_factory: pytest.TempPathFactory) -> dict[str, dict[str, Any]]:
    base = tmp_path_factory.getbasetemp()
    base = base.parent if os.environ.get("PYTEST_XDIST_WORKER") else base
    with open(base / "clients-programs.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        running = {name: _start(name, base) for name in RUNS}
        for name, process in running.items():
            if process is None:
                continue
            try:
                output, _ = process.communicate(timeout=600)
            except subprocess.TimeoutExpired:
                process.kill()
                pytest.fail(f"the {name} run of the qwix programs took over 600 s")
            if process.returncode != 0:
                pytest.fail(f"the {name} run of the qwix programs failed:\n{output[-3000:]}")
    return {name: json.loads((base / f"clients-{name}.json").read_text()) for name in RUNS}


def test_the_programs_ran_on_the_library_they_name(results: dict[str, dict[str, Any]]) -> None:
    assert results["flax"]["_binding"] == {"flax.nnx": "flax.nnx"}
    assert results["flaxgraph"]["_binding"] == {"flax.nnx": "flaxgraph"}
    assert results["mutated"]["_binding"] == {"flax.nnx": "flaxgraph"}


def test_qwix_lora_computes_the_same_numbers_on_flaxgraph(
    results: dict[str, dict[str, Any]],
) -> None:
    verdict = agree(results["flax"]["lora"], results["flaxgraph"]["lora"])
    assert verdict.agreed, verdict.detail


def test_a_flaxgraph_that_skips_write_backs_fails_the_contract(
    results: dict[str, dict[str, Any]],
) -> None:
    """With the mutation, the LoRA training steps change nothing the caller sees, so the LoRA
    parameters (and the losses after the first step) differ from Flax's: the comparison says so."""
    on_flax, mutated = results["flax"]["lora"], results["mutated"]["lora"]
    assert "error" not in mutated, mutated
    verdict = agree(on_flax, mutated)
    assert not verdict.agreed
    assert "differs" in verdict.detail, verdict.detail
    losses = mutated["values"]["losses[float32]"]
    assert losses[0] == pytest.approx(on_flax["values"]["losses[float32]"][0], rel=1e-5)
    assert len(set(losses)) == 1, f"every step starts from the untrained LoRA weights: {losses}"
