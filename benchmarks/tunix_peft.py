"""Tunix's PEFT trainer (LoRA through qwix) per step: real Flax NNX against flaxgraph.

Unmodified Tunix (the released ``google-tunix``, the ``clients`` extra) builds its toy
transformer (``tunix.tests.test_common.ToyTransformer``: 4 decoder layers of width 16,
vocabulary 256), applies LoRA to its MLPs with qwix's ``LoraProvider`` (rank 4) and makes its
``PeftTrainer`` with ``optax.sgd``; the timed unit is one step of the trainer's own compiled
train step (``PeftTrainer.jit_train_and_eval_step``: ``nnx.jit`` of its loss, gradient and
optimizer update, bound with ``nnx.cached_partial`` as ``PeftTrainer.train`` calls it), on a
batch of 2 x 16 tokens, blocking on the loss.

``flax.nnx`` is bound for a whole process, so the two sides are two worker processes (this
file with ``--worker flax`` and ``--worker flaxgraph``, the latter binding flaxgraph with
``flaxgraph.install_as_flax_nnx()`` as a user would), both started by one run and driven in
interleaved rounds over a pipe: in every round each worker times ``--steps`` back-to-back
steps, the order alternating, so load drift hits both alike. Reported: the median time per
step of each side and the median of the per-round ratios flaxgraph / Flax.

    python -m benchmarks.tunix_peft [--quick] [--rounds 15] [--steps 20] [--json PATH]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from benchmarks.common import base_parser, busy_warning, format_table, json_path_from_args

SIDES = ("flax", "flaxgraph")


def _worker(side: str) -> int:
    """Builds the trainer, then answers ``<steps>`` lines with the seconds they took."""
    os.environ.setdefault("JAX_PLATFORMS", "cpu")
    if side == "flaxgraph":
        import flaxgraph

        flaxgraph.install_as_flax_nnx()
    import jax
    import jax.numpy as jnp
    import numpy as np
    import optax
    from flax import nnx
    from tunix.sft import peft_trainer
    from tunix.tests import test_common as tc

    base = tc.ToyTransformer(config=tc.ModelConfig(), rngs=nnx.Rngs(0))
    model = tc.get_lora_model(base)
    config = peft_trainer.TrainingConfig(eval_every_n_steps=10**9, max_steps=None)
    trainer = peft_trainer.PeftTrainer(model, optax.sgd(1e-3), config)
    trainer = trainer.with_gen_model_input_fn(
        lambda x: {
            "input_tokens": x.input_tokens,
            "input_mask": x.input_mask,
            "positions": jnp.arange(x.input_tokens.shape[1]),
            "attention_mask": jnp.ones_like(x.input_tokens),
        }
    )
    train_step, _ = trainer.jit_train_and_eval_step(cache_nnx_graph=True)
    tokens = np.arange(32).reshape(2, 16)
    batch = peft_trainer.TrainingInput(input_tokens=tokens, input_mask=np.ones_like(tokens))
    for _ in range(3):  # compile and warm up
        jax.block_until_ready(train_step(batch))
    print(json.dumps({"ready": side, "flax.nnx": nnx.__name__}), flush=True)
    for line in sys.stdin:
        steps = int(line)
        start = time.perf_counter()
        for _ in range(steps):
            loss = train_step(batch)[0]
        jax.block_until_ready(loss)
        print(json.dumps({"seconds": time.perf_counter() - start}), flush=True)
    return 0


class _Worker:
    def __init__(self, side: str) -> None:
        env = {**os.environ, "JAX_PLATFORMS": "cpu", "PYTHONWARNINGS": "ignore"}
        root = Path(__file__).resolve().parent.parent
        env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(root), env.get("PYTHONPATH")]))
        self.side = side
        self.process = subprocess.Popen(
            [sys.executable, "-m", "benchmarks.tunix_peft", "--worker", side],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            text=True,
            cwd=root,
            env=env,
        )
        ready = self._read()
        if ready.get("ready") != side:
            raise RuntimeError(f"the {side} worker did not start: {ready}")
        self.bound = ready["flax.nnx"]

    def _read(self) -> dict[str, Any]:
        assert self.process.stdout is not None
        line = self.process.stdout.readline()
        if not line:
            raise RuntimeError(f"the {self.side} worker exited (code {self.process.wait()})")
        return json.loads(line)

    def time(self, steps: int) -> float:
        assert self.process.stdin is not None
        self.process.stdin.write(f"{steps}\n")
        self.process.stdin.flush()
        return self._read()["seconds"] / steps

    def close(self) -> None:
        if self.process.stdin is not None:
            self.process.stdin.close()
        self.process.wait(timeout=60)


def main(argv: list[str] | None = None) -> int:
    parser = base_parser(__doc__.split("\n\n")[0], "tunix_peft.json")
    parser.add_argument("--worker", choices=SIDES, help=argparse.SUPPRESS)
    parser.add_argument("--rounds", type=int, default=None)
    parser.add_argument("--steps", type=int, default=None, help="steps per sample")
    args = parser.parse_args(argv)
    if args.worker:
        return _worker(args.worker)
    rounds = args.rounds or args.repeat or (3 if args.quick else 15)
    steps = args.steps or (3 if args.quick else 20)
    workers = {side: _Worker(side) for side in SIDES}
    try:
        samples: dict[str, list[float]] = {side: [] for side in SIDES}
        for number in range(rounds):
            order = SIDES if number % 2 == 0 else SIDES[::-1]
            for side in order:
                samples[side].append(workers[side].time(steps))
    finally:
        for worker in workers.values():
            worker.close()
    ratios = [g / f for g, f in zip(samples["flaxgraph"], samples["flax"])]
    result = {
        "rounds": rounds,
        "steps_per_sample": steps,
        "bound": {side: workers[side].bound for side in SIDES},
        "ms_per_step": {side: 1e3 * statistics.median(v) for side, v in samples.items()},
        "ratio_flaxgraph_over_flax": statistics.median(ratios),
        "ratio_spread": [min(ratios), max(ratios)],
        "load_average_1m": os.getloadavg()[0],
    }
    rows = [
        [
            "Tunix PeftTrainer train step (toy transformer, qwix LoRA rank 4)",
            f"{result['ms_per_step']['flax']:.2f}",
            f"{result['ms_per_step']['flaxgraph']:.2f}",
            f"{result['ratio_flaxgraph_over_flax']:.2f}",
        ]
    ]
    print(format_table(["workload", "Flax NNX ms/step", "flaxgraph ms/step", "ratio"], rows))
    print(f"{rounds} interleaved rounds of {steps} steps; ratio = median of per-round ratios")
    warning = busy_warning()
    if warning:
        print(warning)
    path = json_path_from_args(args)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(result, indent=2) + "\n")
    print(f"results: {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
