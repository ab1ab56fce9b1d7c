"""What a training call's run is to the loop, on every backend: the interface `bilm.training.run.loop.run_steps`
and the policies drive, and the parts of it written once (messages, the progress line, TensorBoard's scalars,
the bookkeeping of saves, the stop on a signal)."""
from bilm.io.formats.tensorboard_events import EventFileWriter, check_available
from bilm.training.run import run_checkpoint
from bilm.training.run.stop_signals import TrainingInterrupted
from bilm.utils.progress import Progress


class BaseRun:
    """A training call's run: its step count and data position, its saves, its messages and scalars.

    A backend's run (`bilm.training.run.training_run.TrainingRun` on
    TensorFlow, `bilm.training.jax.training_run.JaxTrainingRun` on JAX)
    holds the model's state and supplies what touches it: `current_step`,
    `consumed`, `advance`, `write_checkpoint` (into `save_dir`'s checkpoint,
    `bilm.training.run.run_checkpoint`), `heldout`, `has_boundary_state` and
    `measure_boundary_state`, and sets `save_dir`.

    Args:
        settings: the run's `TrainingSettings`.
        log_dir: TensorBoard's folder (None: no scalars); the event file is
            created with the first scalars, so a call that writes none
            leaves none.
        verbose: messages and the progress line (1) or silence (0).
        save_timer: the `SaveTimer` that every save resets.
        chief: this worker writes the run's files and messages.
        continue_with: how to continue after a stop, for `TrainingInterrupted`'s message (None: its default).
    """

    def __init__(self, settings, log_dir, verbose, save_timer, *, chief=True, continue_with=None):
        self.settings = settings
        self.chief = chief
        self.log_dir = log_dir if chief else None
        if self.log_dir is not None:
            check_available()  # before any step
        self.writer = None
        self.verbose = verbose and chief
        self.progress = None  # while the loop runs, messages go through its progress line
        self.save_timer = save_timer
        self.last_saved = None
        self.continue_with = continue_with

    def open_progress(self, total):
        """Opens the progress line (`bilm.utils.progress.Progress`) of batches up to `total`; messages go
        through it until `close_progress`."""
        self.progress = Progress(total, unit="batch", verbose=self.verbose)

    def close_progress(self):
        """Ends the progress line, if one is open (before any message or error that follows the steps)."""
        if self.progress is not None:
            self.progress.close()
            self.progress = None

    def report(self, message):
        if self.progress is not None:
            self.progress.write(message)
        elif self.verbose:
            print(message, flush=True)

    def scalars(self, values):
        """TensorBoard scalars `{tag: number}` at the current step (chief only)."""
        if self.log_dir is None:
            return
        if self.writer is None:
            self.writer = EventFileWriter(self.log_dir)
        self.writer.scalars(self.current_step, values)
        self.writer.flush()

    def checkpoint_path(self):
        """The run's checkpoint file in `save_dir`."""
        return run_checkpoint.checkpoint_path(self.save_dir)

    def last_saved_checkpoint(self):
        """The run's checkpoint file, once `save_dir` holds one (None: none yet)."""
        meta = run_checkpoint.read_meta(self.save_dir)
        return None if meta is None else meta["path"]

    def save(self):
        """Saves the current step (`write_checkpoint`) and resets the save timer."""
        self.write_checkpoint()
        self.last_saved = self.current_step
        self.save_timer.reset()

    def stop(self, received, by_peer, phase=None):
        """Saves the step reached (unless just saved) and closes; the `TrainingInterrupted` to raise (`phase`:
        what the call was doing when the signal came, if not a step)."""
        if self.last_saved != self.current_step:
            self.report(f"{received.name}: saving step {self.current_step}, then stopping.")
            self.save()
        self.close()
        return TrainingInterrupted(received, self.current_step, self.checkpoint_path(), by_peer=by_peer,
                                   continue_with=self.continue_with, phase=phase)

    def close(self):
        if self.writer is not None:
            self.writer.close()
