"""``import flaxgraph`` works without flax; ``nnx.bridge`` then says how to install it."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

HIDE_FLAX = textwrap.dedent(
    """
    import importlib.abc, sys

    class HideFlax(importlib.abc.MetaPathFinder):
        def find_spec(self, name, path=None, target=None):
            if name == "flax" or name.startswith("flax."):
                raise ImportError(f"No module named {name!r} (hidden by the test)")
            return None

    sys.meta_path.insert(0, HideFlax())
    """
)


def _run(code: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-c", HIDE_FLAX + textwrap.dedent(code)],
        capture_output=True,
        text=True,
        cwd=ROOT,
        env={"PYTHONPATH": str(ROOT), "JAX_PLATFORMS": "cpu", "PATH": "/usr/bin:/bin"},
        timeout=120,
    )


def test_import_flaxgraph_without_flax() -> None:
    proc = _run(
        """
        import flaxgraph as nnx
        import jax.numpy as jnp
        model = nnx.Linear(2, 3, rngs=nnx.Rngs(0))
        print(model(jnp.ones((1, 2))).shape, any(m.split('.')[0] == 'flax' for m in sys.modules))
        """
    )
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "(1, 3) False"


def test_bridge_without_flax_says_how_to_install() -> None:
    proc = _run(
        """
        import flaxgraph as nnx
        try:
            nnx.bridge
        except ImportError as error:
            print(str(error).splitlines()[-1])
        """
    )
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "Fix: pip install 'flaxgraph[linen]'"


def test_bridge_is_a_lazy_attribute() -> None:
    import flaxgraph as nnx

    assert nnx.bridge.ToNNX.__module__ == "flaxgraph.bridge.linen_in_nnx"
