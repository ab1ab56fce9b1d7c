"""What a training call's run is to the loop, on every backend: the interface `bilm.training.run.loop.run_steps`
and the policies drive, and the parts of it written once (messages, the progress line, TensorBoard's scalars,
the bookkeeping of saves, the stop on a signal)."""
from bilm.io.formats.tensorboard_events import EventFileWriter, check_available
from bilm.training.run import run_checkpoint
from bilm.training.run.stop_signals import TrainingInterrupted
from bilm.utils.progress import Progress


class BaseRun:
    """A training call's run: its step count and data position, its checkpoint, its messages and scalars.

    The run (`bilm.training.arrays.training_run.ArrayTrainingRun`, on every
    backend) holds the model's state and supplies what touches it:
    `state_arrays` and `boundary_state_arrays` (what the checkpoint holds),
    `heldout`, `has_boundary_state` and `measure_boundary_state`.

    Args:
        settings: the run's `TrainingSettings`.
        log_dir: TensorBoard's folder (None: no scalars); the event file is
            created with the first scalars, so a call that writes none
            leaves none.
        verbose: messages and the progress line (1) or silence (0).
        save_timer: the `SaveTimer` that every save resets.
        save_dir: the run's directory, where the chief writes its checkpoint
            (`bilm.training.run.run_checkpoint`); `max_to_keep`: the
            checkpoints kept there.
        options: the run's options dict; `seed`: its seed (None: none);
            `data_fingerprints`: the stream's
            (`bilm.training.config.training_config.data_fingerprints`: the
            first is recorded, a checkpoint of any of them continues);
            `vocabulary`: its vocabulary's (None: the data has no vocabulary
            file). Each checkpoint records them.
        taken: steps taken before this call; `consumed`: batches of this
            stream already trained on (a restart sets both).
        chief: this worker writes the run's files and messages.
        continue_with: how to continue after a stop, for `TrainingInterrupted`'s message (None: its default).
    """

    def __init__(self, settings, log_dir, verbose, save_timer, *, save_dir, max_to_keep, options, seed,
                 data_fingerprints, vocabulary, taken=0, consumed=0, chief=True, continue_with=None):
        self.settings = settings
        self.save_dir = save_dir
        self.max_to_keep = max_to_keep
        self.options = options
        self.seed = seed
        self.data_fingerprints = tuple(data_fingerprints)
        self.vocabulary = vocabulary
        self.step_count = taken
        self.batches_consumed = consumed
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
        self.restored_from = None  # the checkpoint the call continues (`resume`), the last good one before a save

    @property
    def current_step(self):
        """Steps the run has taken, in all its calls."""
        return self.step_count

    @property
    def consumed(self):
        """Batches of the current data stream already trained on."""
        return self.batches_consumed

    def advance(self):
        """Counts a step taken, on one more batch of the stream."""
        self.step_count += 1
        self.batches_consumed += 1

    def resume(self, meta, lstm_restored):
        """Takes the step and data position of the checkpoint `meta` restored (`run_directory.checkpoint_meta`)
        and says so; returns whether the stream continues (the same data) or starts anew, its LSTM states from
        zeros (new data; the backend's run zeroes them)."""
        self.restored_from = meta["path"]
        self.step_count = meta["step"]
        self.report(f"Restored {meta['path']} (step {self.current_step}).")
        if not lstm_restored:
            self.report("The saved LSTM states have another number of rows (batch size, replicas or devices "
                        "changed); they start from zeros.")
        if meta["data_source"] is not None and meta["data_source"] not in self.data_fingerprints:
            self.report("New training data: starting at its beginning.")
            return False
        self.batches_consumed = meta["data_batches"]
        self.report(f"Same training data: skipping the {self.consumed} batches already consumed.")
        return True

    def state_arrays(self):
        """`{state key: array}` or a nest of arrays (the backend's tensors or variables, read as they are
        written): the run's training state, as its checkpoint holds it."""
        raise NotImplementedError

    def boundary_state_arrays(self):
        """`({state key: (size,)}, n_starts)`, the measured boundary state, or None: none yet."""
        raise NotImplementedError

    def write_checkpoint(self):
        """Saves the run's checkpoint; only the chief writes it (the other workers' state is the same)."""
        if self.chief:
            run_checkpoint.save_checkpoint(
                self.save_dir, self.state_arrays(), self.step_count, self.options, self.seed,
                self.boundary_state_arrays(),
                data_batches=self.batches_consumed, data_source=self.data_fingerprints[0], vocabulary=self.vocabulary,
                max_to_keep=self.max_to_keep)

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
