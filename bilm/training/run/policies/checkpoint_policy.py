"""When a training run saves: every N steps, at each epoch's end, and on the clock (the same step on every worker)."""
from bilm.training.run.policies.policy import CONTINUE, SAVE, Policy


class CheckpointPolicy(Policy):
    """Saves every `every_steps` steps, at each epoch's end, and after the first step that ends once `timer`
    (`bilm.training.run.run_schedule.SaveTimer`) is due.

    With several workers the clock is each worker's own, so its flag
    `time_is_up` is agreed: every worker saves at the same step if any
    worker's time was up. Saves on signals and at the call's end are the
    loop's (`BaseRun.stop`, `BaseRun.save`); each save resets the
    timer, and so does the call's first step.
    """

    name = "checkpoints"
    flags = ("time_is_up",)

    def __init__(self, every_steps, timer):
        self.every_steps = every_steps
        self.timer = timer

    @classmethod
    def from_context(cls, context):
        return cls(context.settings.checkpoint_every, context.save_timer)

    def requests(self):
        return {"time_is_up": self.timer.due()}

    def on_run_start(self, run):
        self.timer.reset()

    def after_step(self, run, step):
        due = step.end_of_epoch or step.agreed["time_is_up"] or step.step % self.every_steps == 0
        return SAVE if due else CONTINUE
