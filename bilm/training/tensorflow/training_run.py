"""Training on TensorFlow: its side of the one training driver (`bilm.training.run.loop.run_training`), the
trainer (a `tf.distribute` strategy, its replicas and chief) and the run it opens (the model, its optimizer
state, the step and the `tf.data` stream)."""
import keras
import tensorflow as tf

from bilm.optimizers import make_optimizer
from bilm.training.arrays import training_run as array_training_run
from bilm.training.model.adaptation import load_model_weights
from bilm.training.model.boundary_state_measure import measure_boundary_state
from bilm.training.run.base_run import BaseRun
from bilm.training.tensorflow import checkpoints
from bilm.training.tensorflow.distribution import is_chief, make_strategy, n_workers
from bilm.training.tensorflow.evaluation import evaluate_lm
from bilm.training.tensorflow.softmax_init import initialize_softmax
from bilm.training.tensorflow.tf_dataset import make_tf_dataset
from bilm.training.tensorflow.train_step import TrainStep
from bilm.training.tensorflow.training_lm import TrainingLM


class Trainer:
    """What trains on TensorFlow: `strategy` (default `make_strategy(n_gpus)`) and its replicas; only the chief
    writes the run's files. With several workers a signal waits for the next step, which they agree on, so a
    phase (the adaptation's fit, the boundary state's measure) is not interruptible.

    One replica with no strategy given trains with the array step every backend trains with
    (`bilm.training.arrays.training_run.Trainer`: its state in TensorFlow's variables, updated in place); a
    strategy's replicas with `TrainStep`."""

    def __init__(self, config, n_gpus, strategy=None):
        self.array_trainer = None
        self.strategy = strategy or make_strategy(n_gpus)
        self.chief = is_chief(self.strategy)
        self.n_replicas = self.strategy.num_replicas_in_sync
        self.interruptible_phases = n_workers(self.strategy) == 1
        if strategy is None and self.n_replicas == 1:
            self.array_trainer = array_training_run.Trainer(config, n_gpus)
            self.interruptible_phases = self.array_trainer.interruptible_phases  # the run it opens says

    def open_run(self, config, save_dir, log_dir, loop, save_timer, stop_signals):
        """The call's run: the array step's (`ArrayTrainingRun`), or with a strategy's replicas a `TrainingRun`,
        its variables created from the seed (`keras.utils.set_random_seed`)."""
        if self.array_trainer is not None:
            return self.array_trainer.open_run(config, save_dir, log_dir, loop, save_timer, stop_signals)
        if loop.seed is not None:
            keras.utils.set_random_seed(loop.seed)
        return TrainingRun(config, self.strategy, self.n_replicas * config.settings.batch_size, save_dir, log_dir,
                           loop.max_to_keep, loop.verbose, save_timer, config.vocabulary, loop.seed)


# bin/run_test.py's figure of a checkpoint: the array step's evaluation, as on every backend.
evaluate_checkpoint = array_training_run.evaluate_checkpoint


class TrainingRun(BaseRun):
    """What one call of `train` holds on TensorFlow: the model, its optimizer state, checkpoints (the loop's
    interface: `BaseRun`).

    `config` is the run's `TrainingConfig`; `save_timer` the `SaveTimer` a save resets; `seed` the run's seed
    (None: none), recorded in its checkpoints as on every backend; `vocabulary` the stream's (None: none).

    Variables are created in the strategy's scope. Checkpoints are the run's
    checkpoint of every backend (`bilm.training.run.run_checkpoint`), written
    by the chief alone.
    """

    def __init__(self, config, strategy, global_batch, save_dir, log_dir, max_to_keep, verbose, save_timer,
                 vocabulary=None, seed=None):
        settings = config.settings
        super().__init__(settings, log_dir, verbose, save_timer, save_dir=save_dir, max_to_keep=max_to_keep,
                         options=config.options.to_dict(), seed=seed,
                         data_source=checkpoints.data_fingerprint(config.data_source),
                         vocabulary=None if vocabulary is None else vocabulary.fingerprint, chief=is_chief(strategy))
        self.strategy, self.global_batch = strategy, global_batch
        with strategy.scope():
            self.lm = TrainingLM(config.options, settings, softmax_seed=seed)
            self.optimizer = make_optimizer(settings, self.lm.trainable_variables())
            self.lstm_states = {
                key: tf.Variable(tf.zeros([global_batch, size]), trainable=False, name=f"state_{key}")
                for key, _, size in self.lm.state_keys}

    @property
    def model(self):
        """What the start-of-training summary counts (`parameter_counts`, `directions`)."""
        return self.lm

    def restore(self, meta):
        """Restores the checkpoint `meta` describes; new data restarts the stream and the LSTM states."""
        states_restored = checkpoints.restore_training(meta, self.lm, self.optimizer, self.lstm_states)
        if not self.resume(meta, states_restored):
            for state in self.lstm_states.values():
                state.assign(tf.zeros_like(state))

    def adapt(self, model, data, softmax_init):
        """Loads `model`'s weights into the biLM and starts the softmax as `softmax_init` says; `fit_softmax`'s
        report."""
        load_model_weights(self.lm, model)
        return initialize_softmax(self.lm, data, softmax_init)

    def step_function(self, seed):
        """The loop's step: `(batch, step, requests) -> {"loss", "norm", "requests"}` (`TrainStep`)."""
        return TrainStep(self.lm, self.optimizer, self.lstm_states, self.strategy, self.settings, seed)

    def batches(self, data, skip):
        """The stream's global batches after the first `skip`, as a `tf.data` pipeline."""
        return make_tf_dataset(data, self.global_batch, self.settings.unroll_steps, keys=self.lm.batch_keys(),
                               skip=skip)

    def state_arrays(self):
        return checkpoints.training_arrays(self.lm, self.optimizer, self.lstm_states)

    def boundary_state_arrays(self):
        return checkpoints.boundary_state_arrays(self.lm)

    def heldout(self, data, batch_size, tag):
        """Held-out perplexity (chief only); None when there is no held-out data."""
        if data is None or not self.chief:
            return None
        perplexity = evaluate_lm(self.lm, data, batch_size)["perplexity"]
        self.report(f"{tag}: held-out perplexity {perplexity:.3f}")
        self.scalars({"heldout_perplexity": perplexity})
        return perplexity

    def has_boundary_state(self):
        """Whether the model holds a measured boundary state (from this run or the checkpoint it continues)."""
        return int(self.lm.n_boundary_starts.numpy()) > 0

    def measure_boundary_state(self, data):
        """Measures the boundary state on `data`'s text into the model; returns the sentence starts it read."""
        return measure_boundary_state(self.lm, data)
