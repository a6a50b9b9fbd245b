"""A pytest plugin that runs a test suite with ``flax.nnx`` bound to flaxgraph.

Usage, for any project whose tests write ``from flax import nnx``::

    pytest -p flaxgraph.pytest_plugin --flax-nnx=flaxgraph tests/

``--flax-nnx=flaxgraph`` binds with :func:`flaxgraph.install_as_flax_nnx` before any
conftest (in every xdist worker; a real ``flax.nnx`` imported first stops the run with its
``RuntimeError``); ``flax`` (the default) binds nothing. The report header says which ran.

Source: pytest's plugin hooks (``pytest_load_initial_conftests``); ``guides/tunix.md``."""

from __future__ import annotations

from typing import Any

import pytest

from flaxgraph.flax_surface.drop_in import install_as_flax_nnx, is_installed

CHOICES = ("flax", "flaxgraph")


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.getgroup("flaxgraph").addoption(
        "--flax-nnx",
        choices=CHOICES,
        default="flax",
        help="what `flax.nnx` is for this run: the real Flax (default) or flaxgraph, bound "
        "with flaxgraph.install_as_flax_nnx() before conftests and tests are imported",
    )


@pytest.hookimpl(tryfirst=True)
def pytest_load_initial_conftests(early_config: pytest.Config, parser: Any, args: Any) -> None:
    if early_config.known_args_namespace.flax_nnx == "flaxgraph":
        install_as_flax_nnx()


def pytest_report_header(config: pytest.Config) -> str:
    if is_installed():
        import flaxgraph

        return f"flax.nnx: flaxgraph {flaxgraph.__version__} (flaxgraph.install_as_flax_nnx)"
    return "flax.nnx: the real Flax (no binding; --flax-nnx=flaxgraph binds flaxgraph)"
