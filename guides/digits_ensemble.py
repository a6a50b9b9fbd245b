# ---
# jupyter:
#   jupytext:
#     formats: py:percent
#     text_representation:
#       extension: .py
#       format_name: percent
# ---

# %% [markdown]
# # An ensemble of residual MLPs on handwritten digits
#
# This is flaxgraph's main job (`make demo`): a user's first hour, end to end.
#
# * **Data**: the 8x8 handwritten digits bundled with scikit-learn (1,797 images,
#   10 classes), split once into train and test with a fixed seed.
# * **Model**: an ensemble of 8 MLPs. Each MLP is an input projection, a *stack*
#   of residual blocks (Linear -> LayerNorm -> Dropout) and a classifier head.
#   The stack is created with `nnx.vmap` over `__init__` (one set of weights per
#   block, keys split with `nnx.split_rngs`) and applied with `nnx.scan`. The 8
#   members are created the same way: `nnx.vmap` over the MLP's `__init__`.
# * **Training**: `nnx.jit` + `nnx.value_and_grad` + `nnx.Optimizer(optax.adamw)`,
#   with a progress bar.
# * **Results**: per-member and ensemble test accuracy, parameter count, wall
#   time, a training-curve plot, and an orbax checkpoint saved and reloaded into a
#   freshly built model that must give identical predictions.
#
# The script exits with status 1 if the ensemble's test accuracy is below 0.95.
# It runs as a plain Python script and opens as a notebook (jupytext percent format).

# %%
from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import jax
import jax.numpy as jnp
import matplotlib
import numpy as np
import optax
import orbax.checkpoint as ocp
from sklearn.datasets import load_digits
from tqdm import tqdm

import flaxgraph as nnx

matplotlib.use("Agg")
import matplotlib.pyplot as plt

START = time.perf_counter()

parser = argparse.ArgumentParser(description=__doc__)
parser.add_argument("--epochs", type=int, default=40)
parser.add_argument("--members", type=int, default=8)
parser.add_argument("--blocks", type=int, default=3)
parser.add_argument("--width", type=int, default=128)
parser.add_argument("--batch-size", type=int, default=128)
parser.add_argument("--out", type=Path, default=Path("outputs/digits_ensemble"))
parser.add_argument("--min-accuracy", type=float, default=0.95)
args, _ = parser.parse_known_args(None if "ipykernel" not in sys.modules else [])
args.out.mkdir(parents=True, exist_ok=True)

# %% [markdown]
# ## Data

# %%
digits = load_digits()
images = (digits.data / 16.0).astype(np.float32)  # (1797, 64), pixel values in [0, 1]
labels = digits.target.astype(np.int32)  # (1797,), classes 0..9
order = np.random.default_rng(0).permutation(len(images))
n_test = 360
test_idx, train_idx = order[:n_test], order[n_test:]
x_train, y_train = jnp.asarray(images[train_idx]), jnp.asarray(labels[train_idx])
x_test, y_test = jnp.asarray(images[test_idx]), jnp.asarray(labels[test_idx])
print(f"train: {x_train.shape[0]} images, test: {x_test.shape[0]} images, {images.shape[1]} pixels")

# %% [markdown]
# ## The model
#
# A residual block is an ordinary Module. `Blocks` builds `n` of them at once:
# `nnx.split_rngs` gives each one its own keys and `nnx.vmap` over `__init__`
# stacks their weights on a leading axis. `nnx.scan` then runs the stack, the
# activations being the carry.


# %%
class Block(nnx.Module):
    def __init__(self, width: int, *, rngs: nnx.Rngs):
        self.linear = nnx.Linear(width, width, rngs=rngs)
        self.norm = nnx.LayerNorm(width, rngs=rngs)
        self.dropout = nnx.Dropout(0.1, rngs=rngs)

    def __call__(self, x: jax.Array) -> jax.Array:
        return x + self.dropout(jax.nn.gelu(self.norm(self.linear(x))))


class MLP(nnx.Module):
    def __init__(self, din: int, width: int, n_blocks: int, n_classes: int, *, rngs: nnx.Rngs):
        self.embed = nnx.Linear(din, width, rngs=rngs)

        @nnx.split_rngs(splits=n_blocks)
        @nnx.vmap(in_axes=0, out_axes=0)
        def make_blocks(rngs: nnx.Rngs) -> Block:
            return Block(width, rngs=rngs)

        self.blocks = make_blocks(rngs)
        self.head = nnx.Linear(width, n_classes, rngs=rngs)

    def __call__(self, x: jax.Array) -> jax.Array:
        @nnx.scan(in_axes=(nnx.Carry, 0), out_axes=nnx.Carry)
        def run_blocks(h: jax.Array, block: Block) -> jax.Array:
            return block(h)

        return self.head(run_blocks(self.embed(x), self.blocks))


def make_ensemble(seed: int) -> MLP:
    @nnx.split_rngs(splits=args.members)
    @nnx.vmap(in_axes=0, out_axes=0)
    def create(rngs: nnx.Rngs) -> MLP:
        return MLP(images.shape[1], args.width, args.blocks, 10, rngs=rngs)

    return create(nnx.Rngs(params=seed, dropout=seed + 1))


@nnx.vmap(in_axes=(0, None), out_axes=0)
def ensemble_logits(model: MLP, x: jax.Array) -> jax.Array:
    return model(x)  # (members, batch, 10)


model = make_ensemble(seed=0)
n_params = sum(int(np.prod(p.shape)) for p in jax.tree.leaves(nnx.state(model, nnx.Param)))
print(f"{args.members} members x {args.blocks} blocks of width {args.width}: {n_params:,} parameters")
print("kernel of the blocks, stacked (members, blocks, in, out):", model.blocks.linear.kernel.shape)

# %% [markdown]
# ## Training

# %%
optimizer = nnx.Optimizer(model, optax.adamw(2e-3, weight_decay=1e-4), wrt=nnx.Param)


def loss_fn(model: MLP, x: jax.Array, y: jax.Array) -> tuple[jax.Array, jax.Array]:
    logits = ensemble_logits(model, x)
    losses = optax.softmax_cross_entropy_with_integer_labels(logits, y[None, :])
    return losses.mean() * args.members, logits  # each member learns from its own loss


@nnx.jit
def train_step(model: MLP, optimizer: nnx.Optimizer, x: jax.Array, y: jax.Array):
    (loss, logits), grads = nnx.value_and_grad(loss_fn, has_aux=True)(model, x, y)
    optimizer.update(model, grads)
    accuracy = jnp.mean(jnp.argmax(logits, -1) == y[None, :])
    return loss / args.members, accuracy


@nnx.jit
def predict(model: MLP, x: jax.Array) -> jax.Array:
    return jax.nn.softmax(ensemble_logits(model, x), axis=-1)  # (members, batch, 10)


history: dict[str, list[float]] = {"loss": [], "train_accuracy": [], "test_accuracy": []}
steps_per_epoch = int(np.ceil(len(x_train) / args.batch_size))
data_rng = np.random.default_rng(1)
train_metrics = nnx.MultiMetric(loss=nnx.metrics.Average("loss"), accuracy=nnx.metrics.Average("accuracy"))
progress = tqdm(range(args.epochs), desc="training", unit="epoch", file=sys.stdout, mininterval=0.5)
for _epoch in progress:
    model.train()
    train_metrics.reset()
    perm = data_rng.permutation(len(x_train))
    for s in range(steps_per_epoch):
        idx = perm[s * args.batch_size : (s + 1) * args.batch_size]
        loss, accuracy = train_step(model, optimizer, x_train[idx], y_train[idx])
        train_metrics.update(loss=loss, accuracy=accuracy)
    model.eval()
    test_probs = predict(model, x_test)
    test_acc = float(jnp.mean(jnp.argmax(test_probs.mean(0), -1) == y_test))
    values = train_metrics.compute()
    history["loss"].append(float(values["loss"]))
    history["train_accuracy"].append(float(values["accuracy"]))
    history["test_accuracy"].append(test_acc)
    progress.set_postfix(loss=f"{history['loss'][-1]:.3f}", acc=f"{history['train_accuracy'][-1]:.3f}",
                         test_acc=f"{test_acc:.3f}")
progress.close()

# %% [markdown]
# ## Results

# %%
model.eval()
probs = predict(model, x_test)
member_acc = jnp.mean(jnp.argmax(probs, -1) == y_test[None, :], axis=1)
ensemble_acc = float(jnp.mean(jnp.argmax(probs.mean(0), -1) == y_test))
for i, acc in enumerate(member_acc):
    print(f"member {i}: test accuracy {float(acc):.4f}")
print(f"ensemble: test accuracy {ensemble_acc:.4f}")

fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(10, 4))
ax1.plot(history["loss"])
ax1.set(xlabel="epoch", ylabel="training loss", title="Loss")
ax2.plot(history["train_accuracy"], label="train (members)")
ax2.plot(history["test_accuracy"], label="test (ensemble)")
ax2.set(xlabel="epoch", ylabel="accuracy", title="Accuracy", ylim=(0.0, 1.0))
ax2.legend()
fig.tight_layout()
curve_path = args.out / "training_curve.png"
fig.savefig(curve_path, dpi=100)
print(f"training curve: {curve_path}")

# %% [markdown]
# ## Checkpoint and reload
#
# The trained State goes to an orbax-checkpoint directory: `nnx.state(model)` is a
# pytree of arrays (its RNG keys included), which `ocp.StandardCheckpointer` saves
# as it is. A freshly built ensemble, initialised from another seed, is then
# restored from the directory (the fresh State is the restore target: paths,
# shapes, dtypes and shardings) and must predict exactly the same.

# %%
checkpoint = (args.out / "ensemble_checkpoint").resolve()
with ocp.StandardCheckpointer() as checkpointer:
    checkpointer.save(checkpoint, nnx.state(model), force=True)
fresh = make_ensemble(seed=42)
with ocp.StandardCheckpointer() as checkpointer:
    nnx.update(fresh, checkpointer.restore(checkpoint, nnx.state(fresh)))
fresh.eval()
same = bool(jnp.array_equal(predict(fresh, x_test), probs))
size = sum(f.stat().st_size for f in checkpoint.rglob("*") if f.is_file())
print(f"checkpoint: {args.out / checkpoint.name} ({size / 1e6:.2f} MB, orbax), reloaded model gives identical predictions: {same}")

# %%
wall = time.perf_counter() - START
print(f"parameters: {n_params:,}; wall time: {wall:.1f} s (compilation included)")
ok = same and ensemble_acc >= args.min_accuracy
if not ok:
    print(f"FAILED: ensemble accuracy {ensemble_acc:.4f} < {args.min_accuracy} or reload mismatch")
if __name__ == "__main__" and "ipykernel" not in sys.modules:
    sys.exit(0 if ok else 1)
