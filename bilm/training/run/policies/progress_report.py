"""What a user sees of a training run's steps: the progress line and the TensorBoard scalars."""
import collections
import math
import time

import numpy as np

from bilm.training.run.policies.policy import CONTINUE, Policy
from bilm.training.run.run_summary import perplexity_label


class ProgressReport(Policy):
    """The progress line (perplexity of the recent training loss, tokens/sec) and the scalars every N steps.

    The progress line's perplexity is exp(training loss) over the last 20
    steps, with the sampled softmax and dropout when training has them
    (`bilm.training.run.run_summary` says so before the first step).
    Tokens/sec leaves out a call's first step, which also traces the step
    function.

    Args:
        settings: the run's `TrainingSettings`.
        schedule: its `Schedule` (tokens per batch, the run's end).
        summary_every: TensorBoard scalars every this many steps.

    Attributes:
        steps: the steps of this call so far.
        mean_loss: the mean loss of the last steps (None before any), in
            `train`'s result as `loss`.
    """

    name = "progress"

    def __init__(self, settings, schedule, summary_every):
        self.settings = settings
        self.schedule = schedule
        self.summary_every = summary_every
        self.label = perplexity_label(settings)
        self.losses = collections.deque(maxlen=20)
        self.seconds = collections.deque(maxlen=20)
        self.steps = 0
        self.call_started = None

    @classmethod
    def from_context(cls, context):
        return cls(context.training, context.schedule, context.settings.summary_every)

    def on_run_start(self, run):
        """Says what the first step waits for, and opens the progress line of the batches from
        `run.consumed` to the run's end."""
        run.report("The first step traces and compiles the training step (once a call), then the progress line "
                   "starts.")
        self.call_started = time.perf_counter()
        run.open_progress(self.schedule.run_end(run.consumed, run.current_step))

    def after_step(self, run, step):
        """Updates the line after a step, and writes the scalars when due."""
        self.steps += 1
        self.losses.append(step.loss)
        values = [(self.label, math.exp(np.mean(self.losses)))]
        if self.steps == 1 and self.call_started is not None:
            run.report(f"First step done in {time.perf_counter() - self.call_started:.1f} s (tracing and compiling "
                       "included).")
        if self.steps > 1:
            self.seconds.append(step.seconds)
            values.append(("tokens/sec", self.schedule.tokens_per_batch / np.mean(self.seconds)))
        if run.progress is not None:
            run.progress.update(run.consumed, values)
        if step.step % self.summary_every == 0:
            run.scalars({"train_perplexity": values[0][1], "gradient_norm": step.norm,
                         "learning_rate": self.settings.learning_rate})
        return CONTINUE

    @property
    def mean_loss(self):
        return float(np.mean(self.losses)) if self.losses else None

    def result(self):
        return {"loss": self.mean_loss}
