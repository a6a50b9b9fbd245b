"""Helpers shared by the tests: exact "nothing changed" snapshots, running checks
on 8 simulated CPU devices in a subprocess, and the guide runner."""

import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path
from types import ModuleType
from typing import Any

from hypothesis import strategies as st

import flaxgraph as nnx
from flaxgraph.testing import assert_graphs_equal


def snapshot(root: Any) -> list[tuple[Any, ...]]:
    out: list[tuple[Any, ...]] = []
    for path, v in nnx.iter_graph(root):
        if isinstance(v, nnx.Variable):
            out.append((path, v, v.raw_value, v.get_metadata()))
        elif isinstance(v, nnx.Pytree):
            out.append((path, v, tuple(sorted(map(str, vars(v))))))
    return out


def assert_unchanged(root: Any, before: list[tuple[Any, ...]], clone: Any = None) -> None:
    """Every node, Variable, value object and metadata is as in ``before``; and, given a
    clone taken before the call, the graph also equals it."""
    after = snapshot(root)
    assert [e[0] for e in after] == [e[0] for e in before]
    for a, b in zip(after, before):
        assert a[1] is b[1], f"a different object at {a[0]}"
        if isinstance(a[1], nnx.Variable):
            assert a[2] is b[2], f"value replaced at {a[0]}"
            assert a[3] == b[3]
        else:
            assert a[2] == b[2], f"attributes changed at {a[0]}"
    if clone is not None:
        assert_graphs_equal(root, clone)


def sgd_train_step(lr: float = 0.1) -> Any:
    """A plain ``@nnx.jit`` train step: ``value_and_grad`` of the mean squared output,
    then SGD on the Params in place (``nnx.update``); returns the loss."""
    import jax
    import jax.numpy as jnp

    @nnx.jit
    def step(model: Any, x: Any) -> Any:
        loss, grads = nnx.value_and_grad(lambda m: jnp.mean(m(x) ** 2))(model)
        params = nnx.state(model, nnx.Param)
        nnx.update(model, jax.tree.map(lambda p, g: p - lr * g, params, grads))
        return loss

    return step


_DEVICE_HEAD = """\
import json, traceback

CHECKS = {}


def check(fn):
    CHECKS[fn.__name__] = fn
    return fn

"""
_DEVICE_TAIL = """

if CHECKS:
    _results = {}
    for _name, _fn in CHECKS.items():
        try:
            _fn()
            _results[_name] = "ok"
        except Exception:
            _results[_name] = traceback.format_exc()
    print("RESULTS=" + json.dumps(_results))
"""


def run_device_checks(script: str, timeout: int = 600) -> dict[str, str]:
    """Runs ``script`` in a fresh Python with 8 simulated CPU devices (JAX reads
    ``XLA_FLAGS`` once, at import, so the test process itself cannot have them) and
    returns the ``{check name: "ok" or traceback}`` dict printed on a line starting
    with ``RESULTS=``.

    The script may register checks with the ``@check`` decorator defined for it
    (into ``CHECKS``); they run after the script, each caught on its own, and their
    results are printed. A script that prints its own ``RESULTS=`` line registers
    none."""
    script = _DEVICE_HEAD + script + _DEVICE_TAIL
    env = {
        **os.environ,
        "XLA_FLAGS": "--xla_force_host_platform_device_count=8",
        "JAX_PLATFORMS": "cpu",
    }
    proc = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=timeout, env=env
    )
    lines = [line for line in proc.stdout.splitlines() if line.startswith("RESULTS=")]
    assert proc.returncode == 0 and lines, f"subprocess failed:\n{proc.stdout}\n{proc.stderr}"
    return json.loads(lines[-1][len("RESULTS=") :])  # type: ignore[no-any-return]


def assert_checks_passed(results: dict[str, str], names: list[str]) -> None:
    """Every check in ``names`` ran and passed; the message lists each failure's traceback."""
    assert sorted(results) == sorted(names)
    failed = {name: tb for name, tb in results.items() if tb != "ok"}
    assert not failed, "\n\n".join(f"check {name} failed:\n{tb}" for name, tb in failed.items())


@st.composite
def structures(draw: Any, pool: Any, depth: int = 0, *, none_at_top: bool = True) -> Any:
    """An argument for aliasing tests: one of ``pool.objects`` (so objects recur across
    and within arguments), ``None``, or a tuple/list/dict of such arguments (depth <= 2).
    ``none_at_top=False`` keeps a bare ``None`` out of the top level."""
    kinds = (
        ["object", "object"]
        + (["none"] if depth or none_at_top else [])
        + (["tuple", "list", "dict"] if depth < 2 else [])
    )
    kind = draw(st.sampled_from(kinds))
    if kind == "object":
        return draw(st.sampled_from(pool.objects))
    if kind == "none":
        return None
    if kind == "dict":
        keys = draw(st.lists(st.sampled_from(["k", "x", "y"]), unique=True, max_size=3))
        return {k: draw(structures(pool, depth + 1)) for k in keys}
    items = [draw(structures(pool, depth + 1)) for _ in range(draw(st.integers(0, 3)))]
    return tuple(items) if kind == "tuple" else items


def guide_runner() -> ModuleType:
    """``guides/run_guide.py`` (not a package module), loaded once as ``run_guide``."""
    if "run_guide" not in sys.modules:
        path = Path(__file__).resolve().parent.parent / "guides" / "run_guide.py"
        spec = importlib.util.spec_from_file_location("run_guide", path)
        assert spec is not None and spec.loader is not None
        module = importlib.util.module_from_spec(spec)
        sys.modules["run_guide"] = module  # dataclasses look their module up
        spec.loader.exec_module(module)
    return sys.modules["run_guide"]
