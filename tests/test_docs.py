"""The documentation site's sources: the API reference is complete, and the build's
docstring checks work (``docs/api_groups.py``, ``docs/conf.py``, ``docs/build.py``).

* Every public name of ``flaxgraph``, ``nnx.nn``, ``nnx.training``, ``nnx.metrics``,
  ``nnx.bridge`` and ``nnx.testing`` has an entry in a group of ``docs/api_groups.py``
  (the same object under another public name counts), and every entry exists.
* A docstring with a broken cross-reference, or with invalid markup, fails a Sphinx
  build made with the site's configuration, naming the docstring's file and line; the
  same docstring with a reference that resolves builds, with a link.
* The docstring conventions the configuration reads (several parameter names on one
  ``Args:`` entry, starred names, plurals of literals) become valid markup.

The built site itself (links, search, pages in a browser) is tested by
``tests/test_docs_site.py`` after ``make docs``.
"""

from __future__ import annotations

import importlib
import importlib.util
import subprocess
import sys
import types
from pathlib import Path
from typing import Any, TypeVar

import pytest

REPO = Path(__file__).resolve().parent.parent
DOCS = REPO / "docs"


def _load(name: str) -> types.ModuleType:
    spec = importlib.util.spec_from_file_location(f"flaxgraph_docs_{name}", DOCS / f"{name}.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


api_groups = _load("api_groups")

_INCIDENTAL = ("typing", "__future__", "collections.abc")


def public_names(namespace: str) -> dict[str, Any]:
    """The public names of a namespace: not underscored, not modules or type variables,
    not typing helpers; for ``flaxgraph.metrics`` (a module) only what it defines."""
    module: Any = importlib.import_module("flaxgraph")
    for part in namespace.split(".")[1:]:
        module = getattr(module, part)
    names = {}
    for name in dir(module):
        obj = getattr(module, name)
        if name.startswith("_") or isinstance(obj, types.ModuleType | TypeVar):
            continue
        home = str(getattr(obj, "__module__", "") or "")
        if home in _INCIDENTAL or getattr(obj, "__module__", None) == "typing":
            continue
        if namespace == "flaxgraph.metrics" and not home.startswith("flaxgraph"):
            continue
        names[name] = obj
    return names


def _documented() -> dict[str, Any]:
    out = {}
    for group in api_groups.GROUPS:
        for name in group.names:
            obj: Any = importlib.import_module("flaxgraph")
            for part in name.split("."):
                obj = getattr(obj, part)
            out[name] = obj
    return out


def test_every_entry_names_a_public_object() -> None:
    names = [name for group in api_groups.GROUPS for name in group.names]
    assert len(names) == len(set(names)), "a name is listed in two groups"
    for name in names:
        obj: Any = importlib.import_module("flaxgraph")
        for part in name.split("."):
            assert hasattr(obj, part), (
                f"docs/api_groups.py lists flaxgraph.{name}, which does not exist"
            )
            obj = getattr(obj, part)


@pytest.mark.parametrize("namespace", api_groups.NAMESPACES)
def test_every_public_name_has_an_api_entry(namespace: str) -> None:
    documented = _documented()
    ids = {id(obj) for obj in documented.values()}
    prefix = namespace.removeprefix("flaxgraph").removeprefix(".")
    missing = [
        name
        for name, obj in public_names(namespace).items()
        if id(obj) not in ids and f"{prefix}.{name}".lstrip(".") not in documented
    ]
    assert not missing, (
        f"public names of {namespace} with no entry in the API reference: {sorted(missing)}. "
        "Add each to the group of docs/api_groups.py where a user would look for it."
    )


def test_the_completeness_check_sees_a_new_name(monkeypatch: pytest.MonkeyPatch) -> None:
    # Guards the test above: a new public function of flaxgraph is reported.
    import flaxgraph

    def brand_new_function() -> None:
        """A public name that no group lists."""

    monkeypatch.setattr(flaxgraph, "brand_new_function", brand_new_function, raising=False)
    assert "brand_new_function" in public_names("flaxgraph")
    with pytest.raises(AssertionError, match="brand_new_function"):
        test_every_public_name_has_an_api_entry("flaxgraph")


# -- the build's docstring checks -----------------------------------------------------------


def _house_style(lines: list[str]) -> list[str]:
    conf = _load("conf")
    conf._house_style(None, "function", "f", None, None, lines)
    return lines


def test_several_parameter_names_over_several_lines_become_one_entry() -> None:
    lines = [
        "Args:",
        "  x: the input.",
        "  use_bias, dtype,",
        "  rngs: as in ``Linear``.",
        "  in_shardings, out_shardings,",
        "    donate_argnums: as in ``jit``.",
        "  *args, **kwargs: passed on; the ``State``s stay, ``True`` walks ``node``.",
    ]
    assert _house_style(lines) == [
        "Args:",
        "  x: the input.",
        "  use_bias, dtype, rngs: as in ``Linear``.",
        "  in_shardings, out_shardings, donate_argnums: as in ``jit``.",
        "  \\*args, \\*\\*kwargs: passed on; the ``State``\\ s stay, ``True`` walks ``node``.",
    ]


def _sphinx_project(tmp_path: Path, docstring: str) -> subprocess.CompletedProcess[str]:
    """A one-page Sphinx build, with the site's configuration, of a function whose
    docstring is ``docstring`` (in ``tmp_path/docmod.py``)."""
    (tmp_path / "docmod.py").write_text(
        f'def sample(x):\n    """{docstring}"""\n    return x\n', encoding="utf-8"
    )
    src = tmp_path / "src"
    src.mkdir()
    (src / "index.rst").write_text(
        "Sample\n======\n\n.. autofunction:: docmod.sample\n\n.. autofunction:: flaxgraph.split\n",
        encoding="utf-8",
    )
    env = {"PYTHONPATH": str(tmp_path), "PATH": "/usr/bin:/bin"}
    command = [
        sys.executable, "-m", "sphinx", "-b", "html", "-c", str(DOCS), "-W", "--keep-going",
        "-n", "-q", "-E", str(src), str(tmp_path / "out"),
    ]  # fmt: skip
    return subprocess.run(command, capture_output=True, text=True, env=env, timeout=600)


@pytest.mark.parametrize(
    ("docstring", "complaint"),
    [
        (
            "Like :func:`flaxgraph.no_such_function`.\n\n    Args:\n      x: a value.\n    ",
            "no_such_function",
        ),
        ("Like ``split`.\n\n    Args:\n      x: a value.\n    ", "Inline literal start-string"),
    ],
    ids=["broken-reference", "invalid-markup"],
)
def test_a_bad_docstring_fails_the_build_naming_file_and_line(
    tmp_path: Path, docstring: str, complaint: str
) -> None:
    pytest.importorskip("sphinx", reason="pip install -e '.[docs]'")
    result = _sphinx_project(tmp_path, docstring)
    assert result.returncode != 0
    assert complaint in result.stderr
    assert f"{tmp_path / 'docmod.py'}:docstring of docmod.sample:1" in result.stderr, result.stderr


def test_a_good_reference_builds_as_a_link(tmp_path: Path) -> None:
    pytest.importorskip("sphinx", reason="pip install -e '.[docs]'")
    result = _sphinx_project(tmp_path, "Like :func:`flaxgraph.split`.\n    ")
    assert result.returncode == 0, result.stderr
    page = (tmp_path / "out" / "index.html").read_text(encoding="utf-8")
    assert 'href="#flaxgraph.split"' in page
