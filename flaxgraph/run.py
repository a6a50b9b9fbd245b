"""``python -m flaxgraph.run``: run an unmodified Flax NNX program on flaxgraph.

Usage::

    python -m flaxgraph.run script.py [args...]
    python -m flaxgraph.run -m package.module [args...]

As ``python script.py`` / ``python -m package.module`` (``sys.argv``, ``sys.path[0]``,
``__main__``, exit status, errors), with ``flax.nnx`` bound to flaxgraph first
(:func:`flaxgraph.install_as_flax_nnx`)::

    $ cat train.py
    from flax import nnx
    print(nnx.__name__)
    $ python -m flaxgraph.run train.py
    flaxgraph

Source: Python's ``runpy`` (``run_path``, ``run_module``); ``guides/tunix.md``.
"""

from __future__ import annotations

import os
import runpy
import sys

from flaxgraph.flax_surface.drop_in import install_as_flax_nnx

USAGE = """usage: python -m flaxgraph.run script.py [args...]
       python -m flaxgraph.run -m module [args...]

Run a Python script or module with flax.nnx bound to flaxgraph
(flaxgraph.install_as_flax_nnx), as `python script.py` / `python -m module` would.
"""


def main(argv: list[str] | None = None) -> None:
    """Bind ``flax.nnx`` to flaxgraph, then run the script or module ``argv`` names.

    Args:
      argv: ``["script.py", *args]`` or ``["-m", "module", *args]`` (default ``sys.argv[1:]``).

    Raises:
      SystemExit: the program's own status; 0 after ``-h``; 2 for a bad command line or a
        missing script.
    """
    argv = sys.argv[1:] if argv is None else list(argv)
    if argv[:1] in (["-h"], ["--help"]):
        sys.stdout.write(USAGE)
        raise SystemExit(0)
    if argv[:1] == ["-m"] and len(argv) >= 2:
        install_as_flax_nnx()
        sys.argv = [argv[1], *argv[2:]]  # runpy puts the module's file in sys.argv[0]
        runpy.run_module(argv[1], run_name="__main__", alter_sys=True)
        return
    if not argv or argv[0].startswith("-"):
        sys.stderr.write(USAGE + "error: give a script or -m MODULE\n")
        raise SystemExit(2)
    script = argv[0]
    if not os.path.isfile(script):
        sys.stderr.write(f"python -m flaxgraph.run: can't open file {script!r}: no such file\n")
        raise SystemExit(2)
    install_as_flax_nnx()
    sys.argv = list(argv)
    # As `python script.py`: the script's directory first on the path, not the working one
    # that `python -m flaxgraph.run` put there.
    here = os.path.dirname(os.path.abspath(script))
    if sys.path and sys.path[0] in ("", os.getcwd()):
        sys.path[0] = here
    else:
        sys.path.insert(0, here)
    runpy.run_path(script, run_name="__main__")


if __name__ == "__main__":
    main()
