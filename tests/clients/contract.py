"""The client contract: released Tunix, qwix and MaxText compute the same on flaxgraph as on Flax.

``make clients`` (``--subset all``) and ``make clients-ci`` (``--subset ci``, the bounded subset
CI runs: every client, under 15 minutes on 2 cores including building the environments) run:

1. the environments (``environments.py``): ``.venv-clients`` for Tunix and qwix, and
   ``.venv-clients-maxtext`` (Python 3.12) for MaxText, each client installed by name and version
   from the package registry;
2. for Tunix and qwix, their scenarios (``programs_tunix.py``, ``programs_qwix.py``), each side in
   a fresh interpreter (``programs.py``): once on real Flax 0.12.8 and once with ``flax.nnx`` bound
   to flaxgraph by ``flaxgraph.install_as_flax_nnx()``, the two sides at the same time; each
   scenario's numbers must agree (``agreement.py``: the same tree paths and dtypes, values within
   rtol 1e-5);
3. for MaxText, ``maxtext_trainer.check(venv, subset)``: its trainer from the wheel on both
   libraries (equal losses and checkpoint trees).

It prints, per client, a table of the scenarios run and whether each agreed, and exits 1 if any
did not. ``--mutation skip-write-back`` runs the Tunix and qwix scenarios on a deliberately wrong
flaxgraph (``mutation.py``) to show that the contract then fails.

Example::

    python tests/clients/contract.py --subset ci
    python tests/clients/contract.py --clients qwix --only ptq,lora
"""

from __future__ import annotations

import argparse
import concurrent.futures
import importlib
import inspect
import json
import os
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from agreement import agree  # noqa: E402
from environments import CLIENTS, ENVIRONMENTS, build  # noqa: E402
from programs import CLIENT_MODULES  # noqa: E402
from scenario_outcomes import ScenarioOutcome  # noqa: E402

SIDE_TIMEOUT = 1800  # seconds for one side of one client's scenarios
SIDES = ("flax", "flaxgraph")


def scenario_names(client: str, subset: str) -> list[str]:
    """The names of ``client``'s scenarios in ``subset`` ("ci" or "all"), in their order."""
    scenarios = importlib.import_module(CLIENT_MODULES[client]).SCENARIOS
    return [name for name, s in scenarios.items() if subset == "all" or s.ci]


def run_side(
    venv: Path, client: str, side: str, names: Sequence[str], out: Path, mutation: str | None
) -> tuple[dict[str, dict[str, object]] | None, str]:
    """One side's results (None if its process failed) and the tail of its output."""
    cmd = [str(venv / "bin" / "python"), str(HERE / "programs.py"), "--client", client]
    cmd += ["--flax-nnx", side, "--only", ",".join(names)]
    if mutation and side == "flaxgraph":
        cmd += ["--mutation", mutation]
    env = {**os.environ, "JAX_PLATFORMS": "cpu", "TOKENIZERS_PARALLELISM": "false"}
    env |= {"HF_HUB_OFFLINE": "1", "PYTHONPYCACHEPREFIX": str(venv / "pycache")}
    env.pop("XLA_FLAGS", None)
    env.pop("PYTHONPATH", None)
    try:
        done = subprocess.run(
            [*cmd, str(out)], capture_output=True, text=True, env=env, timeout=SIDE_TIMEOUT
        )
    except subprocess.TimeoutExpired:
        return None, f"timed out after {SIDE_TIMEOUT}s"
    tail = (done.stdout + done.stderr)[-2000:]
    if done.returncode != 0 or not out.exists():
        return None, f"exit {done.returncode}: {tail}"
    return json.loads(out.read_text(encoding="utf-8")), tail


def check_programs(
    venv: Path, client: str, names: Sequence[str], mutation: str | None
) -> list[ScenarioOutcome]:
    """``client``'s scenarios ``names`` on both libraries at once, compared."""
    with tempfile.TemporaryDirectory() as folder, concurrent.futures.ThreadPoolExecutor(2) as pool:
        futures = {
            side: pool.submit(
                run_side, venv, client, side, names, Path(folder) / f"{side}.json", mutation
            )
            for side in SIDES
        }
        sides = {side: future.result() for side, future in futures.items()}
    outcomes = []
    for name in names:
        results = {side: (sides[side][0] or {}).get(name) for side in SIDES}
        verdict = agree(results["flax"], results["flaxgraph"])
        detail = verdict.detail
        for side in SIDES:
            if sides[side][0] is None:
                detail += f" [{side} process: {sides[side][1][-300:]}]"
        seconds = sum(float((r or {}).get("seconds", 0.0)) for r in results.values())
        outcomes.append(ScenarioOutcome(client, name, verdict.agreed, detail, seconds))
    binding = (sides["flaxgraph"][0] or {}).get("_binding", {})
    if sides["flaxgraph"][0] is not None and binding.get("flax.nnx") != "flaxgraph":
        outcomes.append(ScenarioOutcome(client, "_binding", False, f"flax.nnx was {binding}", 0.0))
    return outcomes


def check_maxtext(venv: Path, subset: str) -> list[ScenarioOutcome]:
    """MaxText's scenarios: ``maxtext_trainer.check(venv, subset)`` (tests/clients/maxtext_trainer.py)."""
    import maxtext_trainer

    # INTEGRATION POINT: maxtext_trainer.check(venv: Path, subset: str) -> list[ScenarioOutcome].
    if list(inspect.signature(maxtext_trainer.check).parameters)[:2] != ["venv", "subset"]:
        return [
            ScenarioOutcome(
                "maxtext",
                "trainer",
                False,
                "maxtext_trainer.check(venv, subset) -> list[ScenarioOutcome] is not provided yet",
                0.0,
            )
        ]
    return list(maxtext_trainer.check(venv, subset))


def print_table(client: str, outcomes: Sequence[ScenarioOutcome]) -> None:
    agreed = sum(o.agreed for o in outcomes)
    print(f"\n{client}: {agreed} of {len(outcomes)} scenarios agree", flush=True)
    width = max([len(o.name) for o in outcomes] + [8])
    print(f"  {'scenario':<{width}}  {'agrees':<6}  {'seconds':>7}  detail")
    for o in outcomes:
        mark = "yes" if o.agreed else "NO"
        print(f"  {o.name:<{width}}  {mark:<6}  {o.seconds:7.1f}  {o.detail}", flush=True)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--subset", choices=("ci", "all"), default="all")
    parser.add_argument("--clients", default="tunix,qwix,maxtext", help="comma-separated")
    parser.add_argument("--only", help="comma-separated scenario names (Tunix and qwix)")
    parser.add_argument("--mutation", choices=("skip-write-back",))
    args = parser.parse_args(argv)
    clients = [c for c in args.clients.split(",") if c]
    unknown = sorted(set(clients) - set(CLIENTS))
    if unknown:
        parser.error(f"unknown clients {unknown}; choose from {sorted(CLIENTS)}")
    start, outcomes = time.time(), {}
    for environment in ENVIRONMENTS.values():
        members = [c for c in clients if CLIENTS[c].environment == environment.name]
        if not members:
            continue
        began = time.time()
        venv = build(environment)
        print(f"clients: {environment.venv} ready in {time.time() - began:.0f}s", flush=True)
        for client in members:
            if client == "maxtext":
                outcomes[client] = check_maxtext(venv, args.subset)
            else:
                names = scenario_names(client, "all" if args.only else args.subset)
                if args.only:
                    names = [name for name in names if name in args.only.split(",")]
                outcomes[client] = (
                    check_programs(venv, client, names, args.mutation) if names else []
                )
            print_table(client, outcomes[client])
    failed = [o for rows in outcomes.values() for o in rows if not o.agreed]
    total = sum(len(rows) for rows in outcomes.values())
    verdict = "OK" if not failed else f"FAILED ({len(failed)} of {total} scenarios disagree)"
    mutated = f", mutation {args.mutation}" if args.mutation else ""
    print(
        f"\nclients ({args.subset}{mutated}): {verdict} in {time.time() - start:.0f}s", flush=True
    )
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
