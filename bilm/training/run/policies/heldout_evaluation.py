"""Held-out evaluation during a training run: every N steps, at each epoch's end and at the call's last step."""
from bilm.training.run.policies.policy import CONTINUE, Policy, interrupt
from bilm.training.run.stop_signals import PhaseInterrupted


class HeldoutEvaluation(Policy):
    """Evaluates the held-out stream (the chief alone, `ArrayTrainingRun.heldout`) when due: at each epoch's end,
    every `every_steps` steps and after the call's last step (so that a call of `max_steps` ends with a figure);
    a signal during the evaluation stops it and interrupts the call.

    Args:
        data: the held-out stream (test mode, so it ends), or None.
        every_steps: also evaluate when the step count is a multiple of it
            (None: at epoch ends only).
        batch_size: rows of the evaluation batches.
        stop_signals: the call's `StopSignals` (the evaluation is one of its interruptible phases).

    Attributes:
        perplexity: the last perplexity measured (None before any), in
            `train`'s result as `heldout_perplexity`.
    """

    name = "heldout_evaluation"

    def __init__(self, data, every_steps, batch_size, stop_signals):
        self.data = data
        self.every_steps = every_steps
        self.batch_size = batch_size
        self.stop_signals = stop_signals
        self.perplexity = None

    @classmethod
    def from_context(cls, context):
        settings = context.settings
        return cls(context.heldout_data, settings.heldout_every,
                   settings.heldout_batch_size or context.training.batch_size, context.stop_signals)

    def due(self, step, end_of_epoch, last=False):
        return end_of_epoch or last or bool(self.every_steps and step % self.every_steps == 0)

    def after_step(self, run, step):
        if not self.due(step.step, step.end_of_epoch, step.last):
            return CONTINUE
        tag = f"Epoch {step.epoch}" if step.end_of_epoch else f"Step {step.step}"
        try:
            with self.stop_signals.interruptible():
                perplexity = run.heldout(self.data, self.batch_size, tag)
        except PhaseInterrupted as interrupted:
            run.report(f"{interrupted.signal.name}: held-out evaluation stopped.")
            return interrupt(interrupted.signal)
        if perplexity is not None:
            self.perplexity = perplexity
        return CONTINUE

    def result(self):
        return {} if self.perplexity is None else {"heldout_perplexity": self.perplexity}
