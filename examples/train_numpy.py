#!/usr/bin/env python3
"""A small real training job that honours the scheduler's preemption contract.

It trains a two-layer MLP (ReLU, softmax) with minibatch SGD + momentum on a
synthetic three-class spiral data set, CPU only, numpy only, and:

* prints one progress line per step: ``step 12/200 loss=0.8123 batch_acc=0.625``
  (plus ``eval step 50 val_acc=0.91`` every TRAIN_EVAL_EVERY steps), and reports
  the same through ``gpusched.job`` (step, loss, accuracies, checkpoints; see
  docs/jobs.md), which the job page shows as a progress bar and charts;
* on SIGTERM (or SIGINT) finishes the current step, saves a checkpoint into
  $CHECKPOINT_DIR and exits with status 143;
* with RESUME=1 continues from that checkpoint at the next step. The
  checkpoint holds the weights, the momentum buffers, the step and the
  minibatch generator's state, so an interrupted-and-resumed run computes
  exactly the same weights as an uninterrupted one (no step repeated, none
  skipped) and prints the same final ``params_sha256``.

Reconfiguration: when the scheduler changes the job's plan or GPU count it
stops the job like a preemption and relaunches it with GPUSCHED_PLAN,
GPUSCHED_NUM_GPUS and GPUSCHED_GRAD_ACCUM_STEPS (docs/agent.md). The job prints
them at start (``plan ga on 2 GPUs, 2 accumulation steps: micro-batch 16,
global batch 64``) and keeps the global batch TRAIN_BATCH: each step's
minibatch is cut into GPUs x accumulation micro-batches whose gradients are
summed, weighted by size, into the step's gradient. So a reconfigured run
takes the same steps on the same samples as one that was never
reconfigured (its weights agree up to floating-point rounding), and resumes
at the step after its checkpoint.

Adaptive jobs (submitted with a profile, docs/jobs.md): the scheduler also
chooses the global batch for each allocation and sets GPUSCHED_BATCH_SIZE; the
job then trains with that batch instead of TRAIN_BATCH, and resumes a
checkpoint made with another batch. With TRAIN_STEPS_PER_EPOCH it reports its
epoch (steps / steps per epoch), which the scheduler's batch choice follows.

Checkpoints are written atomically (temp file, fsync, rename) and then the
marker file ``.checkpoint-complete`` is written the same way, which tells the
node agent that a complete checkpoint exists.

Settings (environment variable, or the command-line flag of the same meaning):
  TRAIN_STEPS (--steps, 200)           total optimisation steps
  TRAIN_SLEEP (--sleep, 0.05)          extra seconds per step, to stand in for a bigger model
  TRAIN_SEED (--seed, 0)               seed of the data, the initial weights and the minibatches
  TRAIN_BATCH (--batch, 64)            minibatch size
  TRAIN_LR (--lr, 0.2)                 learning rate
  TRAIN_HIDDEN (--hidden, 64)          hidden units
  TRAIN_EVAL_EVERY (--eval-every, 50)  steps between validation lines (0: only at the end)
  TRAIN_STEPS_PER_EPOCH (--steps-per-epoch, 0)  steps per reported epoch (0: no epoch reported)
  CHECKPOINT_EVERY (--checkpoint-every, 0)  also checkpoint every N steps (0: only on SIGTERM and at the end)
  CHECKPOINT_DIR (--checkpoint-dir, ./checkpoint)
  RESUME                               "1": resume from CHECKPOINT_DIR if a checkpoint is there
  GPUSCHED_PLAN, GPUSCHED_NUM_GPUS (1), GPUSCHED_GRAD_ACCUM_STEPS (1)  the allocation, set by the node agent
  GPUSCHED_BATCH_SIZE                  an adaptive job's global batch, chosen by the scheduler

Run it by hand: ``TRAIN_STEPS=300 python examples/train_numpy.py``; press
Ctrl-C, then ``RESUME=1 TRAIN_STEPS=300 python examples/train_numpy.py``.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import signal
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np

try:
    from gpusched import job
except ImportError:  # run by hand from a checkout where the project is not installed
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
    from gpusched import job

CHECKPOINT_FILE = "train_numpy.npz"
CHECKPOINT_MARKER = ".checkpoint-complete"  # the node agent's marker (cluster/protocol.py)
EXIT_PREEMPTED = 143  # 128 + SIGTERM: stopped on request, checkpoint saved
NUM_CLASSES = 3


@dataclass(frozen=True)
class Settings:
    steps: int
    sleep: float
    seed: int
    batch: int
    lr: float
    hidden: int
    eval_every: int
    checkpoint_every: int
    checkpoint_dir: Path
    resume: bool
    plan: str = ""
    gpus: int = 1
    accum: int = 1
    adaptive: bool = False
    steps_per_epoch: int = 0

    @property
    def shards(self) -> int:
        """Micro-batches per step: one per GPU per accumulation step (at most one sample each)."""
        return max(1, min(self.batch, self.gpus * self.accum))

    def fingerprint(self) -> str:
        """What a checkpoint must match to be resumed (the total step count may grow)."""
        # An adaptive job's batch is the scheduler's to change between attempts.
        batch = None if self.adaptive else self.batch
        return json.dumps({"seed": self.seed, "batch": batch, "lr": self.lr, "hidden": self.hidden})


def parse_settings(argv: list[str] | None = None, env: dict[str, str] | None = None) -> Settings:
    env = dict(os.environ if env is None else env)

    def default(name: str, fallback: str) -> str:
        return env.get(name, fallback)

    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--steps", type=int, default=int(default("TRAIN_STEPS", "200")))
    p.add_argument("--sleep", type=float, default=float(default("TRAIN_SLEEP", "0.05")))
    p.add_argument("--seed", type=int, default=int(default("TRAIN_SEED", "0")))
    p.add_argument("--batch", type=int, default=int(default("TRAIN_BATCH", "64")))
    p.add_argument("--lr", type=float, default=float(default("TRAIN_LR", "0.2")))
    p.add_argument("--hidden", type=int, default=int(default("TRAIN_HIDDEN", "64")))
    p.add_argument("--eval-every", type=int, default=int(default("TRAIN_EVAL_EVERY", "50")))
    p.add_argument("--checkpoint-every", type=int, default=int(default("CHECKPOINT_EVERY", "0")))
    p.add_argument("--steps-per-epoch", type=int, default=int(default("TRAIN_STEPS_PER_EPOCH", "0")))
    p.add_argument("--checkpoint-dir", type=Path, default=Path(default("CHECKPOINT_DIR", "checkpoint")))
    a = p.parse_args(argv)
    for name in ("steps", "batch", "hidden"):
        if getattr(a, name) < 1:
            p.error(f"--{name} must be >= 1")
    for name in ("sleep", "lr", "eval_every", "checkpoint_every", "steps_per_epoch"):
        if getattr(a, name) < 0:
            p.error(f"--{name.replace('_', '-')} must be >= 0")
    counts = {}
    for name in ("GPUSCHED_NUM_GPUS", "GPUSCHED_GRAD_ACCUM_STEPS", "GPUSCHED_BATCH_SIZE"):
        try:
            counts[name] = int(env.get(name) or "1")
        except ValueError:
            p.error(f"{name}={env.get(name)!r} is not an integer")
        if counts[name] < 1:
            p.error(f"{name} must be >= 1")
    adaptive = bool(env.get("GPUSCHED_BATCH_SIZE"))
    return Settings(
        steps=a.steps, sleep=a.sleep, seed=a.seed, batch=counts["GPUSCHED_BATCH_SIZE"] if adaptive else a.batch,
        lr=a.lr, hidden=a.hidden, adaptive=adaptive, steps_per_epoch=a.steps_per_epoch,
        eval_every=a.eval_every, checkpoint_every=a.checkpoint_every,
        checkpoint_dir=a.checkpoint_dir, resume=env.get("RESUME") == "1",
        plan=env.get("GPUSCHED_PLAN", ""), gpus=counts["GPUSCHED_NUM_GPUS"],
        accum=counts["GPUSCHED_GRAD_ACCUM_STEPS"],
    )


# ----- data and model ----------------------------------------------------------


def make_spirals(seed: int, per_class: int = 500, noise: float = 0.2) -> tuple[np.ndarray, np.ndarray]:
    """Three interleaved 2-D spirals: not linearly separable, easy for a small MLP."""
    rng = np.random.default_rng(seed)
    xs, ys = [], []
    for c in range(NUM_CLASSES):
        r = np.linspace(0.05, 1.0, per_class)
        theta = np.linspace(c * 4.0, (c + 1) * 4.0, per_class) + rng.normal(0.0, noise, per_class)
        xs.append(np.column_stack([r * np.sin(theta), r * np.cos(theta)]))
        ys.append(np.full(per_class, c))
    x, y = np.concatenate(xs), np.concatenate(ys)
    order = rng.permutation(len(y))
    return x[order], y[order]


def init_params(seed: int, hidden: int) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed + 1)
    return {
        "W1": rng.normal(0.0, np.sqrt(2.0 / 2), (2, hidden)),
        "b1": np.zeros(hidden),
        "W2": rng.normal(0.0, np.sqrt(2.0 / hidden), (hidden, NUM_CLASSES)),
        "b2": np.zeros(NUM_CLASSES),
    }


def forward(params: dict[str, np.ndarray], x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    h = np.maximum(0.0, x @ params["W1"] + params["b1"])
    logits = h @ params["W2"] + params["b2"]
    logits -= logits.max(axis=1, keepdims=True)
    p = np.exp(logits)
    return h, p / p.sum(axis=1, keepdims=True)


def gradients(params, x, y) -> tuple[dict[str, np.ndarray], float, int]:
    """Summed (not averaged) gradients of the loss over the samples, the summed loss, and the correct count."""
    h, probs = forward(params, x)
    n = len(y)
    loss = float(-np.log(probs[np.arange(n), y] + 1e-12).sum())
    correct = int((probs.argmax(axis=1) == y).sum())
    d = probs.copy()
    d[np.arange(n), y] -= 1.0
    grads = {"W2": h.T @ d, "b2": d.sum(axis=0)}
    dh = (d @ params["W2"].T) * (h > 0)
    grads["W1"] = x.T @ dh
    grads["b1"] = dh.sum(axis=0)
    return grads, loss, correct


def sgd_step(params, velocity, x, y, lr: float, momentum: float = 0.9, shards: int = 1) -> tuple[float, float]:
    """One momentum-SGD step on a minibatch, computed as ``shards`` micro-batches (GPUs x
    accumulation steps) whose summed gradients make the minibatch's mean gradient;
    returns (loss, accuracy) before the update."""
    n = len(y)
    grads: dict[str, np.ndarray] = {k: np.zeros_like(v) for k, v in params.items()}
    loss = 0.0
    correct = 0
    for part in np.array_split(np.arange(n), shards):
        g, part_loss, part_correct = gradients(params, x[part], y[part])
        for k in grads:
            grads[k] += g[k]
        loss += part_loss
        correct += part_correct
    for k in grads:
        grads[k] /= n
    loss, acc = loss / n, correct / n
    for k in params:
        velocity[k] = momentum * velocity[k] - lr * grads[k]
        params[k] += velocity[k]
    return loss, acc


def accuracy(params, x, y) -> float:
    return float((forward(params, x)[1].argmax(axis=1) == y).mean())


def params_digest(params: dict[str, np.ndarray]) -> str:
    h = hashlib.sha256()
    for k in sorted(params):
        h.update(np.ascontiguousarray(params[k]).tobytes())
    return h.hexdigest()[:16]


# ----- checkpoints ---------------------------------------------------------------


def _atomic_write(path: Path, write) -> None:
    tmp = path.with_name(f".{path.name}.tmp")
    with open(tmp, "wb") as f:
        write(f)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)


def save_checkpoint(s: Settings, step: int, params, velocity, rng: np.random.Generator) -> None:
    s.checkpoint_dir.mkdir(parents=True, exist_ok=True)
    arrays = {f"p_{k}": v for k, v in params.items()} | {f"v_{k}": v for k, v in velocity.items()}
    meta = json.dumps({"step": step, "rng": rng.bit_generator.state, "fingerprint": s.fingerprint()})
    _atomic_write(s.checkpoint_dir / CHECKPOINT_FILE, lambda f: np.savez(f, meta=np.array(meta), **arrays))
    _atomic_write(s.checkpoint_dir / CHECKPOINT_MARKER, lambda f: f.write(f"{step}\n".encode()))


def load_checkpoint(s: Settings, rng: np.random.Generator):
    """(step, params, velocity) from CHECKPOINT_DIR, restoring ``rng``; None if absent."""
    path = s.checkpoint_dir / CHECKPOINT_FILE
    if not path.exists():
        return None
    with np.load(path) as data:
        meta = json.loads(str(data["meta"]))
        if meta["fingerprint"] != s.fingerprint():
            raise SystemExit(f"checkpoint {path} was made with other settings ({meta['fingerprint']}); refusing to resume")
        params = {k[2:]: data[k].copy() for k in data.files if k.startswith("p_")}
        velocity = {k[2:]: data[k].copy() for k in data.files if k.startswith("v_")}
    rng.bit_generator.state = meta["rng"]
    return meta["step"], params, velocity


# ----- main loop -------------------------------------------------------------------


class StopFlag:
    """Set by SIGTERM/SIGINT; the training loop checks it between steps."""

    def __init__(self) -> None:
        self.signum: int | None = None
        for sig in (signal.SIGTERM, signal.SIGINT):
            signal.signal(sig, self._set)

    def _set(self, signum, _frame) -> None:
        self.signum = signum

    def sleep(self, seconds: float) -> None:
        """Sleep, but return early once a stop was requested."""
        end = time.monotonic() + seconds
        while self.signum is None and (left := end - time.monotonic()) > 0:
            time.sleep(min(left, 0.02))


def train(s: Settings) -> int:
    x, y = make_spirals(s.seed)
    split = int(0.8 * len(y))
    x_train, y_train, x_val, y_val = x[:split], y[:split], x[split:], y[split:]
    rng = np.random.default_rng(s.seed + 2)
    stop = StopFlag()
    step = 0
    loaded = load_checkpoint(s, rng) if s.resume else None
    if loaded is not None:
        step, params, velocity = loaded
        print(f"resumed from checkpoint at step {step} in {s.checkpoint_dir}", flush=True)
    else:
        if s.resume:
            print(f"RESUME=1 but no checkpoint in {s.checkpoint_dir}; starting from step 1", flush=True)
        params = init_params(s.seed, s.hidden)
        velocity = {k: np.zeros_like(v) for k, v in params.items()}
    micro = -(-s.batch // s.shards)
    print(f"plan {s.plan or '-'} on {s.gpus} GPU{'s' if s.gpus != 1 else ''}, {s.accum} accumulation "
          f"step{'s' if s.accum != 1 else ''}: micro-batch {micro}, global batch {s.batch}", flush=True)
    while step < s.steps:
        batch = rng.integers(0, len(y_train), s.batch)
        loss, acc = sgd_step(params, velocity, x_train[batch], y_train[batch], s.lr, shards=s.shards)
        stop.sleep(s.sleep)
        step += 1
        print(f"step {step}/{s.steps} loss={loss:.4f} batch_acc={acc:.3f}", flush=True)
        epoch = step / s.steps_per_epoch if s.steps_per_epoch else None
        job.progress(step=step, total_steps=s.steps, epoch=epoch, metrics={"loss": loss, "batch_acc": acc})
        if s.eval_every and step % s.eval_every == 0:
            val_acc = accuracy(params, x_val, y_val)
            print(f"eval step {step} val_acc={val_acc:.3f}", flush=True)
            job.progress(step=step, metrics={"val_acc": val_acc})
        if stop.signum is not None:
            save_checkpoint(s, step, params, velocity, rng)
            job.checkpoint(step=step, path=s.checkpoint_dir)
            print(f"checkpoint saved at step {step} ({signal.Signals(stop.signum).name}); exiting", flush=True)
            return EXIT_PREEMPTED
        if s.checkpoint_every and step % s.checkpoint_every == 0:
            save_checkpoint(s, step, params, velocity, rng)
            job.checkpoint(step=step, path=s.checkpoint_dir)
    save_checkpoint(s, step, params, velocity, rng)
    job.checkpoint(step=step, path=s.checkpoint_dir)
    print(f"done step={step} val_acc={accuracy(params, x_val, y_val):.3f} params_sha256={params_digest(params)}", flush=True)
    return 0


def main(argv: list[str] | None = None) -> int:
    return train(parse_settings(argv))


if __name__ == "__main__":
    sys.exit(main())
