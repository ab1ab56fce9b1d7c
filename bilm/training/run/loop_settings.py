"""How the training loop runs a call of `train`: its bound, cadences, feedback and process-wide choices."""
import dataclasses
from typing import Optional


@dataclasses.dataclass(frozen=True)
class LoopSettings:
    """The loop's settings, one object from `train`/`train_from_files` (which build it from their keyword
    arguments of the same names) to `run_training` and the policies (`bilm.training.run.policies`).

    Unlike the training keys (`TrainingSettings`, saved in options.json),
    these belong to one call: a restart may choose them anew.

    Attributes:
        max_steps: stop after this many steps of this call (then save); None: the run's end.
        checkpoint_every: save every this many steps (and at each epoch's end).
        checkpoint_every_minutes: also save after the first step that starts this many minutes or more after
            the last save (None: only by steps); with several workers, when the first worker's time is up.
        heldout_every: evaluate the held-out data every this many steps (None: at epoch ends only).
        heldout_batch_size: rows of the held-out batches (None: the run's `batch_size`).
        summary_every: TensorBoard scalars every this many steps.
        seed: seeds the global generators and the dropout masks (None: leaves the generators as they are).
        max_to_keep: checkpoints kept in `save_dir` (None: all).
        tune_malloc: first call `bilm.utils.malloc_tuning.keep_freed_memory` (process-wide).
        save_on_signals: SIGINT and SIGTERM finish the step, save it and raise `TrainingInterrupted`
            (process-wide, main thread only).
        verbose: 1 for the progress line and messages, 0 for silence.
    """

    max_steps: Optional[int] = None
    checkpoint_every: int = 1250
    checkpoint_every_minutes: Optional[float] = 30
    heldout_every: Optional[int] = None
    heldout_batch_size: Optional[int] = None
    summary_every: int = 10
    seed: Optional[int] = 0
    max_to_keep: Optional[int] = 5
    tune_malloc: bool = False
    save_on_signals: bool = False
    verbose: int = 1
