"""Training with the array step (JAX, PyTorch, and TensorFlow's one-replica runs): its side of the one training driver
(`bilm.training.run.loop.run_training`), the trainer (its devices) and the run it opens (the state of
`ArrayTrainStep` that its steps replace, its restore, adaptation and held-out evaluation); messages, checkpoints,
the progress line and TensorBoard's scalars are `BaseRun`'s.

Runs on Keras's TensorFlow, JAX and PyTorch backends.
"""
import itertools
import os
import warnings

from bilm.backend import training_ops
from bilm.models.functional_bilm import WEIGHTS_FOLLOW
from bilm.training.arrays.boundary_state_measure import measure_boundary_state
from bilm.training.arrays.evaluation import evaluate_starts, heldout_perplexity
from bilm.training.arrays.softmax_init import initialize_softmax_of_state
from bilm.training.arrays.train_step import ArrayTrainStep
from bilm.training.config.settings import training_settings
from bilm.training.model.adaptation import load_model_weights
from bilm.training.run import run_directory
from bilm.training.run.base_run import BaseRun
from bilm.training.run.evaluation_starts import checked_starts, figures_as_asked
from bilm.training.run.stop_signals import PhaseInterrupted
from bilm.utils.python_random import seeded_python_random

# The first batches of a run whose distinct tokens together bound its first compiled step
# (`ArrayTrainStep.expect`).
EXPECTED_BATCHES = 16


class Trainer:
    """What trains with the array step: its `placement` (`training_ops().training_placement`: `n_gpus` devices
    of the default kind, or on TensorFlow a `tf.distribute` strategy's replicas, default `make_strategy(n_gpus)`),
    `batch_size` rows each. Only the chief writes the run's files. A phase (the softmax's fit, the boundary
    state's measure) is interruptible where a signal may raise inside the backend's calls (`training_ops`'
    `INTERRUPTIBLE_CALLS`: not on JAX) and one worker trains; elsewhere a signal is acted on between them (with
    several workers, at the step they agree on)."""

    def __init__(self, config, n_gpus, strategy=None):
        note = training_ops().JIT_COMPILE_NOTES.get(config.settings.jit_compile)
        if note is not None:
            warnings.warn(note, stacklevel=4)
        self.placement = training_ops().training_placement(n_gpus, strategy)
        self.n_replicas, self.chief = self.placement.n_replicas, self.placement.chief
        self.interruptible_phases = training_ops().INTERRUPTIBLE_CALLS and self.placement.n_workers == 1

    def open_run(self, config, save_dir, log_dir, loop, save_timer, stop_signals):
        """The call's `ArrayTrainingRun`: the network's initial weights and the softmax's start from the seed."""
        seed = loop.seed or 0
        with seeded_python_random(seed):  # the network's initial weights, a function of the seed
            step = ArrayTrainStep(config.options, config.settings, seed, self.placement)
        return ArrayTrainingRun(step, step.initial_state(softmax_seed=seed), stop_signals=stop_signals,
                                save_dir=save_dir, log_dir=log_dir, verbose=loop.verbose, save_timer=save_timer,
                                options=config.options.to_dict(), seed=seed, max_to_keep=loop.max_to_keep,
                                data_fingerprints=config.data_fingerprints,
                                vocabulary=None if config.vocabulary is None else config.vocabulary.fingerprint,
                                chief=self.chief)


def evaluate_checkpoint(meta, options, data, batch_size, verbose, start, unroll_steps=1):
    """The average perplexity of the checkpoint `meta` describes (`run_directory.checkpoint_meta`), a model of
    `options`, on `data` in windows of `unroll_steps` (`evaluate_state`); for a list or tuple of starts,
    `{start: average perplexity}`, the model built and the checkpoint read once (`evaluate_starts`). With
    `"warm"` and no boundary state in the checkpoint, one measured on `data`'s text."""
    starts = checked_starts(start, unroll_steps)
    options, settings = training_settings(options, need_schedule=False)
    with WEIGHTS_FOLLOW.on():  # nothing drawn: the checkpoint sets every weight
        step = ArrayTrainStep(options, settings, meta["seed"] or 0)
    save_dir = os.path.dirname(meta["path"])
    # The weights alone (not the optimizer's state): the network's variables and the softmax, held once.
    softmax = run_directory.read_network_weights(save_dir, meta, step.network, settings.optimizer,
                                                 step.softmax_shapes)
    state = {"bilm": step.backend.hold_in(step.network.trainable_variables),
             "non_trainable": step.backend.hold_in(step.network.non_trainable_variables),
             "softmax": {part: step.backend.copy(value) for part, value in softmax.items()}}
    boundary_state = run_directory.read_boundary_state(save_dir, meta)
    if "warm" in starts and boundary_state is None:
        boundary_state = measure_boundary_state(step, state, data)
        if verbose:
            print(f"{meta['path']} holds no boundary state; measured one at {boundary_state[1]:,} sentence starts "
                  "of the evaluation text.")
    metrics = evaluate_starts(step, state, data, starts, batch_size, unroll_steps, boundary_state, verbose)
    return figures_as_asked(start, {each: metrics[each]["perplexity"] for each in starts})


def adapted_state(step, state, model, data, softmax_init):
    """`(state, fit_softmax's report)`: `state` (of `ArrayTrainStep` `step`, a run of `adaptation_options`) with
    `model`'s weight file in its biLM (char CNN, highway, projection, LSTMs; `step.network`'s variables set to
    them) and a new softmax as `softmax_init` says (`initialize_softmax_of_state`, on `data`'s start); a
    `WeightFileError` lists the datasets the file lacks or shapes otherwise."""
    load_model_weights(step, model)
    network = step.network
    state = {**state, "bilm": step.backend.hold_in(network.trainable_variables),
             "non_trainable": step.backend.hold_in(network.non_trainable_variables)}
    return initialize_softmax_of_state(step, state, data, softmax_init)


class ArrayTrainingRun(BaseRun):
    """A call's run with the array step: the state its steps replace.

    Args:
        train_step: the run's `ArrayTrainStep`; `state` its state (placed on its devices).
        stop_signals: the call's `StopSignals`: a signal stops the held-out evaluation between its batches.
        run: `BaseRun`'s arguments (`save_dir`, `options`, `seed`, ...).
    """

    def __init__(self, train_step, state, *, stop_signals, log_dir, verbose, save_timer, **run):
        super().__init__(train_step.settings, log_dir, verbose, save_timer, **run)
        self.train_step = train_step
        self.state = state
        self.boundary_state = None
        self.stop_signals = stop_signals

    @property
    def model(self):
        """What the start-of-training summary counts (`parameter_counts`, `directions`)."""
        return self.train_step

    def restore(self, meta):
        """Restores the checkpoint `meta` describes; new data restarts the stream and the LSTM states."""
        step = self.train_step
        # Written into the state's arrays where the backend's are mutable: the state is held once.
        state, lstm_restored = run_directory.load_state(self.save_dir, meta, self.state, step.network,
                                                         self.settings.optimizer, step.backend.write_into)
        self.boundary_state = run_directory.read_boundary_state(self.save_dir, meta)
        if not self.resume(meta, lstm_restored):
            state = {**state, "lstm": {key: 0 * value for key, value in state["lstm"].items()}}
        network = step.network  # the weights where the backend holds them (`hold_in`)
        state = {**state, "bilm": step.backend.hold_in(network.trainable_variables, state["bilm"]),
                 "non_trainable": step.backend.hold_in(network.non_trainable_variables, state["non_trainable"])}
        self.state = step.place(state)

    def adapt(self, model, data, softmax_init):
        """Starts from `model`'s weights with a new softmax (`adapted_state`); `fit_softmax`'s report."""
        state, started = adapted_state(self.train_step, self.state, model, data, softmax_init)
        self.state = self.train_step.place(state)
        return started

    def step_function(self, seed):
        """The loop's step (`seed` is the step's own, `ArrayTrainStep`'s): the state moves on; `{"loss", "norm",
        "requests"}` (the workers' agreed flags: `Placement.agree`)."""
        def take_step(batch, step, requests):
            self.state, metrics = self.train_step(self.state, batch, step)
            agreed = self.train_step.placement.agree(requests)
            return {"loss": metrics["loss"], "norm": metrics["norm"], "requests": [] if agreed is None else agreed}
        return take_step

    def batches(self, data, skip):
        """The stream's global batches after the first `skip`. Where the step is compiled per distinct-token bound
        (JAX on one CPU, character inputs), the first `EXPECTED_BATCHES` are read ahead, so that it compiles for
        what they need together (`ArrayTrainStep.expect`)."""
        stream = iter(data.iter_batches(self.train_step.global_batch_size, self.settings.unroll_steps, skip=skip))
        first = list(itertools.islice(stream, 1))  # what the first step reads anyway
        if self.train_step.expect(first) is not None:  # a step compiled per bound: the first batches' together
            more = list(itertools.islice(stream, EXPECTED_BATCHES - 1))
            self.train_step.expect(more)
            first += more
        return itertools.chain(first, stream)

    def state_arrays(self):
        return self.state

    def boundary_state_arrays(self):
        return self.boundary_state

    def has_boundary_state(self):
        return self.boundary_state is not None

    def measure_boundary_state(self, data):
        """Measures the boundary state on `data`'s text (the next checkpoint holds it); returns the starts read."""
        self.boundary_state = measure_boundary_state(self.train_step, self.state, data)
        return self.boundary_state[1]

    def heldout(self, data, batch_size, tag):
        """Held-out perplexity with `batch_size` rows (None when there is no held-out data, and on a worker other
        than the chief); a signal stops it between its batches (`PhaseInterrupted`), never inside one of JAX's
        calls."""
        if data is None or not self.chief:
            return None

        def between_batches():
            if self.stop_signals.received is not None:
                raise PhaseInterrupted(self.stop_signals.received)

        perplexity = heldout_perplexity(self.train_step, self.state, data, batch_size, between_batches)
        self.report(f"{tag}: held-out perplexity {perplexity:.3f}")
        self.scalars({"heldout_perplexity": perplexity})
        return perplexity
