"""The drop-in: ``flax.nnx`` bound to flaxgraph for unmodified Flax code.

``flaxgraph.install_as_flax_nnx()``, ``python -m flaxgraph.run`` and the pytest plugin change
how a whole process imports, so each check runs in a fresh interpreter (``subprocess``) that
starts without ``flax.nnx``; the real Flax (the ``linen`` extra) must be installed.
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

import flaxgraph

pytest.importorskip("flax", reason="the drop-in binds flax.nnx inside the real flax package")

REPO = Path(__file__).resolve().parent.parent


def run_python(
    code: str, *args: str, cwd: Path | None = None, check: bool = True
) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "JAX_PLATFORMS": "cpu", "PYTHONPATH": str(REPO)}
    result = subprocess.run(
        [sys.executable, *args] if not code else [sys.executable, "-c", textwrap.dedent(code)],
        capture_output=True,
        text=True,
        cwd=cwd,
        env=env,
        timeout=300,
    )
    if check:
        assert result.returncode == 0, result.stderr
    return result


def test_every_spelling_of_flax_nnx_is_flaxgraph_and_the_rest_of_flax_is_flax() -> None:
    out = run_python(
        """
        import os, sys
        import flaxgraph
        flaxgraph.install_as_flax_nnx()
        flaxgraph.install_as_flax_nnx()  # idempotent
        from flax import nnx
        import flax.nnx as nnx2
        from flax.nnx import Linear
        import flax.nnx.nn.linear
        from flax.nnx.statelib import State
        from flax.nnx import graph, object as obj
        import flax.nnx.graph, flax.nnx.object
        import flax, flax.linen, flax.struct
        assert nnx is flaxgraph and nnx2 is flaxgraph and flax.nnx is flaxgraph
        assert Linear is flaxgraph.Linear and State is flaxgraph.State
        assert flax.nnx.nn.linear is sys.modules["flaxgraph.nn.linear"]
        assert graph is flaxgraph.graph and obj is flaxgraph.pytreelib
        assert sys.modules["flax.nnx.graph"] is flaxgraph.graph
        assert flaxgraph.__spec__.name == "flaxgraph"  # the module keeps its own spec
        real_nnx = os.path.join(os.path.dirname(flax.__file__), "nnx")
        assert "flax" + os.sep + "linen" in flax.linen.__file__
        leaked = [n for n, m in sys.modules.items()
                  if (getattr(m, "__file__", None) or "").startswith(real_nnx)]
        assert not leaked, leaked
        finders = [f for f in sys.meta_path if type(f).__name__ == "FlaxNnxFinder"]
        assert len(finders) == 1
        model = nnx.Linear(2, 3, rngs=nnx.Rngs(0))
        print(type(model).__module__, model(__import__("jax").numpy.ones((1, 2))).shape)
        """
    )
    assert out.stdout.split() == ["flaxgraph.nn.linear", "(1,", "3)"]


def test_flax_imported_first_still_gains_the_nnx_attribute() -> None:
    out = run_python(
        """
        import flax, flaxgraph
        flaxgraph.install_as_flax_nnx()
        print(flax.nnx is flaxgraph, flax.linen.Dense.__module__)
        """
    )
    assert out.stdout.split() == ["True", "flax.linen.linear"]


def test_binding_after_the_real_flax_nnx_is_refused_and_changes_nothing() -> None:
    out = run_python(
        """
        import sys
        import flax.nnx.graph
        import flaxgraph
        modules, meta_path = dict(sys.modules), list(sys.meta_path)
        getattr_before = sys.modules["flax"].__dict__.get("__getattr__")
        try:
            flaxgraph.install_as_flax_nnx()
        except RuntimeError as error:
            print(error)
        assert sys.modules == modules and sys.meta_path == meta_path
        assert sys.modules["flax"].__dict__.get("__getattr__") is getattr_before
        import flax.nnx
        assert flax.nnx.Module.__module__.startswith("flax.nnx")
        """
    )
    assert "flax.nnx (the real Flax NNX) was imported before" in out.stdout
    assert "python -m flaxgraph.run" in out.stdout


def test_a_missing_submodule_fails_naming_it() -> None:
    out = run_python(
        """
        import flaxgraph
        flaxgraph.install_as_flax_nnx()
        for name in ("flax.nnx.no_such_module", "flax.nnx.nn.no_such"):
            try:
                __import__(name)
            except ModuleNotFoundError as error:
                assert error.name == name, (error.name, name)
                print(error)
            else:
                raise AssertionError(name)
        """
    )
    lines = out.stdout.splitlines()
    assert lines[0].startswith("No module named 'flax.nnx.no_such_module': flax.nnx is bound")
    assert "'flaxgraph.no_such_module'" in lines[0]
    assert "'flaxgraph.nn.no_such'" in lines[1]


def test_flax_submodules_real_code_imports_resolve_to_flaxgraph_modules() -> None:
    run_python(
        """
        import sys
        import flaxgraph
        flaxgraph.install_as_flax_nnx()
        from flax.nnx.graph import GraphDef, split, RefMap
        import flax.nnx.tracers
        from flax.nnx.tracers import TraceState
        from flax.nnx.transforms.iteration import StateAxes, vmap
        from flax.nnx.transforms.transforms import resolve_kwargs
        from flax.nnx.reprlib import Representable
        from flax.nnx.proxy_caller import DelayedAccessor
        from flax.nnx.deprecations import deprecated
        from flax import nnx
        assert GraphDef is flaxgraph.GraphDef and split is flaxgraph.split
        assert RefMap is flaxgraph.graphlib.RefMap
        assert flax.nnx.tracers is sys.modules["flaxgraph.tracers"] is nnx.tracers
        assert TraceState().is_valid()
        assert StateAxes is flaxgraph.StateAxes and vmap is flaxgraph.vmap
        assert resolve_kwargs(lambda a, b: None, (1,), {"b": 2}) == (1, 2)
        assert nnx.reprlib.Representable is Representable
        assert nnx.proxy_caller.DelayedAccessor is DelayedAccessor
        assert nnx.deprecations.deprecated is deprecated
        assert not [m for m in sys.modules.values()
                    if getattr(m, "__file__", "") and "/flax/nnx/" in m.__file__]
        """
    )


@pytest.mark.parametrize("name", ["no_such_name", "NoSuchClass"])
def test_a_missing_name_names_the_flax_version_and_the_migration_table(name: str) -> None:
    with pytest.raises(AttributeError, match=rf"'flaxgraph' has no attribute '{name}'") as info:
        getattr(flaxgraph, name)
    assert "0.12.8" in str(info.value) and "guides/from_flax.md" in str(info.value)


def test_flaxgraph_run_runs_a_script_with_its_arguments_and_status(tmp_path: Path) -> None:
    (tmp_path / "helper.py").write_text("VALUE = 7\n")
    (tmp_path / "script.py").write_text(
        textwrap.dedent(
            """
            import sys
            from flax import nnx
            import helper  # the script's directory is on the path, as with `python script.py`
            print(__name__, nnx.__name__, helper.VALUE, *sys.argv)
            sys.exit(3)
            """
        )
    )
    result = run_python(
        "", "-m", "flaxgraph.run", str(tmp_path / "script.py"), "a", "--b", cwd=REPO, check=False
    )
    assert result.returncode == 3, result.stderr
    assert result.stdout.split() == [
        "__main__",
        "flaxgraph",
        "7",
        str(tmp_path / "script.py"),
        "a",
        "--b",
    ]
    missing = run_python("", "-m", "flaxgraph.run", str(tmp_path / "nope.py"), check=False)
    assert missing.returncode == 2 and "nope.py" in missing.stderr


def test_flaxgraph_run_runs_a_module(tmp_path: Path) -> None:
    package = tmp_path / "pkg"
    package.mkdir()
    (package / "__init__.py").write_text("")
    (package / "main.py").write_text(
        "import sys\nfrom flax import nnx\nprint(__name__, nnx.__name__, sys.argv[1:])\n"
    )
    result = run_python("", "-m", "flaxgraph.run", "-m", "pkg.main", "x", cwd=tmp_path)
    assert result.stdout.split() == ["__main__", "flaxgraph", "['x']"]


def test_the_pytest_plugin_binds_only_when_asked(tmp_path: Path) -> None:
    (tmp_path / "test_bound.py").write_text(
        "from flax import nnx\n\ndef test_which():\n    print('NNX=' + nnx.__name__)\n"
    )
    common = ["-m", "pytest", "-q", "-s", "-p", "flaxgraph.pytest_plugin", "-p", "no:cacheprovider"]
    bound = run_python("", *common, "--flax-nnx=flaxgraph", str(tmp_path), cwd=tmp_path)
    assert "NNX=flaxgraph" in bound.stdout and "1 passed" in bound.stdout
    real = run_python("", *common, str(tmp_path), cwd=tmp_path)
    assert "NNX=flax.nnx" in real.stdout and "1 passed" in real.stdout
