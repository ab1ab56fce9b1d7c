"""How a training run begins, its origin: a new model, a checkpoint to continue, or a published model to adapt.

Each origin (`NewRun`, `Restart`, `Adaptation`; chosen by `run_origin`)
gives the run's options from what the caller gave (`options`), checks the
data and vocabulary against what it continues (`same_data`,
`check_vocabulary`) and sets the new run's variables up (`begin`); the
loop does not branch on which origin it has. ("Origin", not "start": a
start in bilm is where an LSTM's state begins, `bilm.models.start_state`.)
"""
import dataclasses
import os
from typing import Optional, Protocol

from bilm.errors import UserError
from bilm.options import load_options
from bilm.training.model.adaptation import ModelToAdapt, adaptation_options, open_model_to_adapt
from bilm.training.model.softmax_init import DEFAULT_SOFTMAX_INIT, check_softmax_init
from bilm.training.run import run_checkpoint, run_directory
from bilm.training.run.stop_signals import PhaseInterrupted, TrainingInterrupted


class RunOrigin(Protocol):
    """What every origin provides (the contract `resolve_training_config` and the loop rely on).

    Attributes:
        checkpoint: the checkpoint the run continues (`Restart`), else None.
    """

    checkpoint: Optional[str]

    def options(self, options):
        """The run's `BiLMOptions` from what the caller gave (a dict, a file, None); raises on contradictions."""

    def same_data(self, fingerprints):
        """Whether the stream of `fingerprints` (`training_config.data_fingerprints`) is the one the origin was
        reading (always true for a new run)."""

    def check_vocabulary(self, options, vocabulary):
        """Raises `CheckpointError` when `vocabulary` cannot be the one the origin was trained with."""

    def begin(self, run, data, stop_signals):
        """Sets the new run's state up (its `restore` or `adapt`); a signal may raise `TrainingInterrupted`."""


@dataclasses.dataclass(frozen=True)
class NewRun:
    """A model from scratch: the caller's options are the run's."""

    checkpoint = None

    def same_data(self, fingerprints):
        return True

    def options(self, options):
        if options is None:
            raise UserError("train needs options (the model and training keys), or init_from= a model to adapt.")
        return load_options(options)

    def check_vocabulary(self, options, vocabulary):
        pass

    def begin(self, run, data, stop_signals):
        pass


@dataclasses.dataclass(frozen=True)
class Restart:
    """A run continued from a checkpoint (optimizer state, step and data position included); `meta` is its
    `run_directory.checkpoint_meta`, `checkpoint` its path.

    On the same data (the same `data_source`) the stream skips the batches
    already consumed; on new data it starts at its beginning.
    """

    meta: dict

    @property
    def checkpoint(self):
        return self.meta["path"]

    def options(self, options):
        return NewRun().options(options)

    def same_data(self, fingerprints):
        """Whether the stream of `fingerprints` (`training_config.data_fingerprints`) is the data the checkpoint
        was reading (a checkpoint that recorded none: its run's data)."""
        saved = self.meta["data_source"]
        return saved is None or saved in fingerprints

    def check_vocabulary(self, options, vocabulary):
        """Raises `CheckpointError` unless `vocabulary` is the one the checkpoint was trained with."""
        if options.get("n_tokens_vocab") not in (None, vocabulary.size):
            raise run_checkpoint.CheckpointError(
                f"{vocabulary.filename} has {vocabulary.size} tokens but the checkpoint in "
                f"{os.path.dirname(self.checkpoint)} was trained with n_tokens_vocab={options.get('n_tokens_vocab')}; "
                "restart with the training vocabulary.")
        run_directory.check_vocabulary(self.meta, vocabulary)

    def begin(self, run, data, stop_signals):
        """Restores the checkpoint as it is now, read again under the run's writer lock: a run that wrote it since
        the call resolved its options (and released the lock) saved a newer step into the same file."""
        meta = run_directory.checkpoint_meta(self.checkpoint)
        run_directory.check_optimizer(meta, run.settings.optimizer)  # a run keeps its optimizer
        run.restore(meta)


@dataclasses.dataclass(frozen=True)
class Adaptation:
    """A new run from a published model's weights (`bilm.training.model.adaptation`): its architecture,
    char CNN, highway, projection and LSTMs, with a new softmax that starts as `softmax_init` says."""

    model: ModelToAdapt
    softmax_init: str = DEFAULT_SOFTMAX_INIT
    checkpoint = None

    def same_data(self, fingerprints):
        return True

    def options(self, options):
        """The model's architecture with the caller's training keys (an `AdaptationError` if they contradict)."""
        return adaptation_options(self.model, options)

    def check_vocabulary(self, options, vocabulary):
        pass

    def begin(self, run, data, stop_signals):
        """Loads the weights and fits the softmax (the run's `adapt`); a signal meanwhile leaves `save_dir` as it
        was (where the backend's phases are not interruptible, once the fit is done)."""
        phase = "fitting the new softmax"
        try:
            with stop_signals.interruptible():
                started = run.adapt(self.model, data, self.softmax_init)
        except PhaseInterrupted as interrupted:
            raise TrainingInterrupted(interrupted.signal, 0, None, phase=phase) from None
        if stop_signals.received is not None:
            raise TrainingInterrupted(stop_signals.received, 0, None, phase=phase)
        model, softmax_init = self.model, self.softmax_init
        run.report(f"Adapting {model.source} ({model.files.weight_file}): char CNN, highway, projection and LSTM "
                   "weights loaded; a new softmax over the training vocabulary.")
        if softmax_init == "random":
            run.report("The softmax starts random (softmax_init='random'), as from scratch.")
            return
        run.report(f"The softmax starts from the model's {'outputs' if softmax_init == 'fit' else 'encodings'} "
                   f"(softmax_init={softmax_init!r}, fitted on {started['positions']:,} positions of the training "
                   f"text). Full-softmax perplexity on positions kept apart: {started['frequency_perplexity']:.2f} "
                   f"with the words' frequencies in its bias, against {started['unigram_perplexity']:.2f} for the "
                   f"frequencies alone; it starts without them ({started['sample_perplexity']:.2f}), which trains "
                   "faster and the first steps learn (see bilm.training.model.softmax_init).")


def run_origin(restart_ckpt_file=None, init_from=None, softmax_init=DEFAULT_SOFTMAX_INIT, cache_dir=None):
    """The origin `train`'s arguments ask for; the model to adapt is opened and checked here, before any work.

    Args:
        restart_ckpt_file: a checkpoint to continue (`Restart`): a run's
            directory, or one of its checkpoints (`run_directory.checkpoint_meta`).
        init_from: a model to adapt (anything `bilm.load` opens, or a
            `ModelToAdapt`) (`Adaptation`); not with `restart_ckpt_file`.
        softmax_init: with `init_from`, where the new softmax starts.

    Returns:
        `NewRun`, `Restart` or `Adaptation`.
    """
    if init_from is None:
        return NewRun() if restart_ckpt_file is None else Restart(run_directory.checkpoint_meta(restart_ckpt_file))
    if restart_ckpt_file is not None:
        raise UserError("init_from starts a new run from a model's weights and restart_ckpt_file continues a "
                        "run from its checkpoint; give one of them.")
    check_softmax_init(softmax_init)
    return Adaptation(open_model_to_adapt(init_from, cache_dir=cache_dir), softmax_init)
