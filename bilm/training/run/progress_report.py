"""What a user sees of a training run's steps: the progress line and the TensorBoard scalars."""
import collections
import math
import time

import numpy as np

from bilm.optimizers import OPTIMIZERS
from bilm.utils.progress import Progress


class ProgressReport:
    """The progress line (perplexity of the recent training loss, tokens/sec) and the scalars every N steps.

    The progress line's perplexity is exp(training loss) over the last 20
    steps, with the sampled softmax and dropout when training has them, so
    `start` says that it is not the held-out perplexity. Tokens/sec leaves
    out a call's first step, which also traces the step function.

    Args:
        settings: the run's `TrainingSettings`.
        schedule: its `Schedule` (tokens per batch, the run's end).
        summary_every: TensorBoard scalars every this many steps.
    """

    def __init__(self, settings, schedule, summary_every):
        self.settings = settings
        self.schedule = schedule
        self.summary_every = summary_every
        self.label = "sampled-softmax perplexity" if settings.sample_softmax else "training perplexity"
        self.losses = collections.deque(maxlen=20)
        self.seconds = collections.deque(maxlen=20)
        self.steps = 0
        self.tick = None
        self.call_started = None

    def describe(self, run):
        """Says what the progress line's perplexity is (before the first step)."""
        settings = self.settings
        run.report(f"The progress line's {self.label} is exp(training loss) over the last batches"
                   + (f" ({settings.n_negative_samples_batch:,} sampled negatives" if settings.sample_softmax
                      else " (")
                   + (", dropout on)" if settings.dropout else ")")
                   + ": not comparable with the held-out perplexity of --heldout_prefix and run_test.py (full "
                   "softmax, no dropout).")

    def start(self, run):
        """Says what the first step waits for, and opens the progress line of the batches from
        `run.consumed` to the run's end."""
        run.report("The first step traces and compiles the training step (once a call), then the progress line "
                   "starts.")
        self.call_started = time.perf_counter()
        run.progress = Progress(self.schedule.run_end(run.consumed, run.current_step), unit="batch",
                                verbose=run.verbose)

    def step_started(self):
        self.tick = time.perf_counter()

    def step_ended(self, run, loss, norm):
        """Updates the line after a step of `loss` and gradient `norm`, and writes the scalars when due."""
        self.steps += 1
        self.losses.append(loss)
        values = [(self.label, math.exp(np.mean(self.losses)))]
        if self.steps == 1 and self.call_started is not None:
            run.report(f"First step done in {time.perf_counter() - self.call_started:.1f} s (tracing and compiling "
                       "included).")
        if self.steps > 1:
            self.seconds.append(time.perf_counter() - self.tick)
            values.append(("tokens/sec", self.schedule.tokens_per_batch / np.mean(self.seconds)))
        if run.progress is not None:
            run.progress.update(run.consumed, values)
        if run.current_step % self.summary_every == 0:
            run.scalars({"train_perplexity": values[0][1], "gradient_norm": norm,
                         "learning_rate": self.settings.learning_rate})

    @property
    def mean_loss(self):
        """The mean loss of the last steps (None before any)."""
        return float(np.mean(self.losses)) if self.losses else None

    def close(self, run):
        if run.progress is not None:
            run.progress.close()
            run.progress = None


def describe_run(report, lm, options, settings, n_replicas, schedule):
    """The start-of-training summary: parameters, the big memory items, how long the run is."""
    n_bilm, n_softmax = lm.parameter_counts()
    mib = 4.0 / 2 ** 20
    samples = settings.n_negative_samples_batch if settings.sample_softmax else settings.n_tokens_vocab
    logits = len(lm.directions) * settings.batch_size * settings.unroll_steps * (samples + 1)
    report(f"Parameters: {n_bilm:,} in the biLM, {n_softmax:,} in the softmax, {n_bilm + n_softmax:,} in all.")
    slots = OPTIMIZERS[settings.optimizer].slots_per_variable
    report(f"Memory estimate per replica (float32): softmax {n_softmax * mib:,.1f} MiB, {settings.optimizer} "
        f"state {slots * (n_bilm + n_softmax) * mib:,.1f} MiB, softmax logits {logits * mib:,.1f} MiB per step.")
    epochs = (f"{settings.n_epochs} epoch(s)" if "n_epochs" in options.raw
              else f"{settings.n_epochs} epochs (the default n_epochs; --n_epochs or --max_steps to change)")
    bound = f", at most {settings.max_steps:,} steps in all (max_steps)" if settings.max_steps else ""
    report(f"{n_replicas} replica(s) x {settings.batch_size} rows x {settings.unroll_steps} steps; "
        f"{schedule.batches_per_epoch} batches per epoch, {epochs}: {schedule.batches_total} batches{bound}.")
    if settings.matmul_dtype != "float32":
        report(f"The large matmuls (highway, LSTM input half, softmax) take {settings.matmul_dtype} operands "
            "in training steps (matmul_dtype); weights, optimizer, recurrence and evaluation stay float32.")
