"""When a training run saves: every N steps, at each epoch's end, and on the clock (the same step on every worker)."""


class CheckpointPolicy:
    """Decides after each step whether the run saves.

    A run saves every `every_steps` steps, at each epoch's end, and after
    the first step that ends once `timer` (`bilm.training.run.run_schedule.SaveTimer`)
    is due. With several workers the clock is each worker's own, so
    "due" is agreed: the loop passes `requests()` (this worker's flag)
    through the step's all-reduce and gives the agreed flags to
    `should_save`, true on every worker at the same step if any worker's
    time was up. Saves on signals and at the run's end are the loop's
    (`TrainingRun.stop`, `TrainingRun.save`).

    Args:
        every_steps: save when the run's step count is a multiple of it.
        timer: a `SaveTimer`; the run resets it at each save.
    """

    def __init__(self, every_steps, timer):
        self.every_steps = every_steps
        self.timer = timer

    def requests(self):
        """This worker's flags for the step's all-reduce: `[time is up]`."""
        return [float(self.timer.due())]

    def should_save(self, step, end_of_epoch, agreed):
        """Whether to save after `step`; `agreed`: `requests()`' flags as the workers agreed (true: one raised it)."""
        (time_is_up,) = agreed
        return end_of_epoch or time_is_up or step % self.every_steps == 0
