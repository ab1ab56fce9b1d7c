"""Held-out evaluation during a training run: every N steps and at each epoch's end."""
from bilm.training.run.stop_signals import PhaseInterrupted


class HeldoutEvaluation:
    """Evaluates the held-out stream (the chief alone) when due; a signal during it stops it.

    Args:
        data: the held-out stream (test mode, so it ends), or None.
        every_steps: also evaluate when the step count is a multiple of it
            (None: at epoch ends only).
        batch_size: rows of the evaluation batches.

    Attributes:
        perplexity: the last perplexity measured (None before any).
    """

    def __init__(self, data, every_steps, batch_size):
        self.data = data
        self.every_steps = every_steps
        self.batch_size = batch_size
        self.perplexity = None

    def due(self, step, end_of_epoch):
        return end_of_epoch or bool(self.every_steps and step % self.every_steps == 0)

    def evaluate(self, run, tag, stop_signals):
        """Measures and reports the held-out perplexity; returns the signal that stopped it, else None."""
        try:
            with stop_signals.interruptible():
                perplexity = run.heldout(self.data, self.batch_size, tag)
        except PhaseInterrupted as interrupted:
            run.report(f"{interrupted.signal.name}: held-out evaluation stopped.")
            return interrupted.signal
        if perplexity is not None:
            self.perplexity = perplexity
        return None
