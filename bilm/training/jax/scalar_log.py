"""The TensorBoard scalars of a training run on JAX: the tags and moments of TensorFlow's loop
(`bilm.training.run.policies.progress_report`), in an event file written without TensorFlow
(`bilm.io.formats.tensorboard_events`)."""
import collections
import math

from bilm.io.formats.tensorboard_events import EventFileWriter

# The steps whose losses make the training perplexity, as TensorFlow's progress line.
LOSS_WINDOW = 20


class ScalarLog:
    """Every `summary_every` steps, `train_perplexity` (exp of the mean loss of the last 20 steps),
    `gradient_norm` (the step's, before clipping) and `learning_rate`; `heldout_perplexity` when measured.

    A step's values are read from the device one step late (once the next step is queued), so the device never
    waits for them. The event file is created with the first scalars, so a call refused or stopped before any
    leaves none. With `log_dir` None nothing is written or read.

    Args:
        log_dir: the run's TensorBoard folder (a new event file there), or None.
        summary_every: steps between scalars.
        learning_rate: the run's learning rate.
    """

    def __init__(self, log_dir, summary_every, learning_rate):
        self.log_dir = log_dir
        self.writer = None
        self.summary_every = max(1, int(summary_every))
        self.learning_rate = float(learning_rate)
        self.losses = collections.deque(maxlen=LOSS_WINDOW)
        self.pending = None

    def after_step(self, step, metrics):
        """After step number `step` (counted from the run's start, 1 the first) was queued, with its metrics
        (`{"loss", "norm", ...}`, arrays on the device)."""
        if self.log_dir is None:
            return
        self._write_pending()
        self.losses.append(metrics["loss"])
        if step % self.summary_every == 0:
            self.pending = step, list(self.losses), metrics["norm"]

    def heldout(self, step, perplexity):
        if self.log_dir is not None:
            self._write_pending()
            self._scalars(step, {"heldout_perplexity": perplexity})

    def close(self, after_error=False):
        """Writes what is pending and closes the file. `after_error`: the run is ending with an exception, which
        this must not hide: pending figures that cannot be read (the device that computed them failed) are
        dropped instead of raising."""
        try:
            self._write_pending()
        except Exception:
            if not after_error:
                raise
        finally:
            if self.writer is not None:
                self.writer.close()

    def _scalars(self, step, values):
        if self.writer is None:
            self.writer = EventFileWriter(self.log_dir)
        self.writer.scalars(step, values)
        self.writer.flush()

    def _write_pending(self):
        if self.pending is None:
            return
        step, losses, norm = self.pending
        self.pending = None
        mean_loss = sum(float(loss) for loss in losses) / len(losses)
        self._scalars(step, {"train_perplexity": math.exp(min(mean_loss, 700.0)), "gradient_norm": float(norm),
                             "learning_rate": self.learning_rate})
