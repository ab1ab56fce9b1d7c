"""When a training run saves on the clock, and how many batches make its epochs and its end."""
import dataclasses
import time
import warnings
from typing import Optional


class SaveTimer:
    """Whether `every_minutes` (None: never) have passed since the last `reset` (a save, the loop's start).

    `clock` gives seconds (tests pass a fake one).
    """

    def __init__(self, every_minutes, clock=time.monotonic):
        if every_minutes is not None and not every_minutes > 0:
            raise ValueError(f"checkpoint_every_minutes must be positive or None. Received: {every_minutes}")
        self.every_seconds = None if every_minutes is None else 60.0 * every_minutes
        self.clock = clock
        self.reset()

    def reset(self):
        self.since = self.clock()

    def due(self):
        return self.every_seconds is not None and self.clock() - self.since >= self.every_seconds


@dataclasses.dataclass(frozen=True)
class Schedule:
    """How many batches make an epoch and the whole run (bilm-tf's arithmetic), and the run's step bound."""

    global_batch: int
    tokens_per_batch: int
    batches_per_epoch: int
    batches_total: int
    max_steps: Optional[int] = None

    @classmethod
    def of(cls, settings, n_replicas):
        global_batch = settings.batch_size * n_replicas
        tokens_per_batch = global_batch * settings.unroll_steps
        per_epoch = settings.n_train_tokens // tokens_per_batch
        if per_epoch < 1:
            # The training stream cycles through the text, so a batch can hold more than all of it.
            warnings.warn(
                f"n_train_tokens ({settings.n_train_tokens:,}) is less than one global batch ({global_batch} rows x "
                f"{settings.unroll_steps} steps = {tokens_per_batch:,} tokens), so each epoch is one batch that "
                "reads the text more than once; a smaller batch_size (--batch_size, or the options' batch_size) "
                "fits a corpus this small better.", stacklevel=3)
            per_epoch = 1
        return cls(global_batch, tokens_per_batch, per_epoch, settings.n_epochs * per_epoch, settings.max_steps)

    def run_end(self, consumed, step):
        """The batch count of the data stream at which the run ends: its epochs, or its `max_steps`."""
        if self.max_steps is None:
            return self.batches_total
        return min(self.batches_total, consumed + max(0, self.max_steps - step))

    def stop_at(self, consumed, step, call_steps=None):
        """Where this call stops: the run's end, or `call_steps` batches on."""
        end = self.run_end(consumed, step)
        return end if call_steps is None else min(end, consumed + call_steps)

    def finished(self, consumed, step):
        return consumed >= self.run_end(consumed, step)
