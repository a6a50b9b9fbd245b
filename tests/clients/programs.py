"""Runs a client's scenarios in this interpreter, on real Flax or on flaxgraph, and writes their numbers.

``python tests/clients/programs.py --client tunix --flax-nnx flaxgraph OUT.json`` binds
``flax.nnx`` to flaxgraph with the drop-in (``flaxgraph.install_as_flax_nnx()``) before anything
imports Flax, runs the client's scenarios (``programs_tunix.py``, ``programs_qwix.py``) and writes,
per scenario, ``{"values": {key: nested list}, "seconds": s}`` or the error it raised
(``{"error": ..., "where": ...}``); ``--flax-nnx flax`` runs them on real Flax 0.12.8. Each side runs
in a fresh interpreter, so the two never share a module. ``--mutation skip-write-back`` (flaxgraph
side only) applies a deliberately wrong flaxgraph (``mutation.py``). ``agreement.py`` compares two
such files; ``contract.py`` runs both sides and prints the table.
"""

from __future__ import annotations

import argparse
import importlib
import json
import os
import sys
import time
import traceback
from pathlib import Path

HERE = Path(__file__).resolve().parent
CLIENT_MODULES = {"tunix": "programs_tunix", "qwix": "programs_qwix"}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--client", choices=sorted(CLIENT_MODULES), required=True)
    parser.add_argument("--flax-nnx", choices=("flax", "flaxgraph"), required=True)
    parser.add_argument("--only", help="comma-separated scenario names (default: all)")
    parser.add_argument("--mutation", choices=("skip-write-back",))
    parser.add_argument("out", type=Path)
    args = parser.parse_args(argv)
    os.environ.setdefault("JAX_PLATFORMS", "cpu")
    sys.path.insert(0, str(HERE))
    if args.flax_nnx == "flaxgraph":
        import flaxgraph

        if args.mutation:
            from mutation import apply

            apply(args.mutation, flaxgraph)
        flaxgraph.install_as_flax_nnx()
    elif args.mutation:
        parser.error("--mutation applies to the flaxgraph side only")
    scenarios = importlib.import_module(CLIENT_MODULES[args.client]).SCENARIOS
    only = [name for name in (args.only or "").split(",") if name]
    unknown = sorted(set(only) - set(scenarios))
    if unknown:
        parser.error(f"{args.client} has no scenario {unknown}; it has {sorted(scenarios)}")
    results: dict[str, dict[str, object]] = {}
    for name in only or scenarios:
        start = time.time()
        try:
            results[name] = {"values": scenarios[name].run()}
        except Exception as error:  # recorded for the comparison, which reports it
            frames = traceback.extract_tb(error.__traceback__)
            results[name] = {
                "error": f"{type(error).__name__}: {error}"[:2000],
                "where": " <- ".join(f"{f.filename}:{f.lineno}" for f in reversed(frames[-4:])),
            }
        results[name]["seconds"] = round(time.time() - start, 2)
        print(f"{args.client}/{name} on {args.flax_nnx}: {time.time() - start:.1f}s", flush=True)
    import flax.nnx

    results["_binding"] = {"flax.nnx": flax.nnx.__name__}
    args.out.write_text(json.dumps(results), encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
