"""What one call of `train` holds: the model, its optimizer state, checkpoints, summaries and messages."""
import os

import tensorflow as tf

from bilm.optimizers import make_optimizer
from bilm.training.model.boundary_state_measure import measure_boundary_state
from bilm.training.model.training_lm import TrainingLM
from bilm.training.run import checkpoints
from bilm.training.run.base_run import BaseRun
from bilm.training.run.checkpoints import OPTIONS_FILE
from bilm.training.run.distribution import is_chief
from bilm.training.run.evaluation import evaluate_lm


class TrainingRun(BaseRun):
    """What one call of `train` holds on TensorFlow: the model, its optimizer state, checkpoints (the loop's
    interface: `BaseRun`).

    `config` is the run's `TrainingConfig`; `save_timer` the `SaveTimer` a save resets; `seed` the run's seed
    (None: none), recorded in its checkpoints as on every backend.

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
        self.options_file = os.path.join(save_dir, OPTIONS_FILE)
        # The checkpoint the run continues, if any (the last good one before its first save).
        self.restored_from = config.origin.checkpoint
        with strategy.scope():
            self.lm = TrainingLM(config.options, settings)
            self.optimizer = make_optimizer(settings, self.lm.trainable_variables())
            self.lstm_states = {
                key: tf.Variable(tf.zeros([global_batch, size]), trainable=False, name=f"state_{key}")
                for key, _, size in self.lm.state_keys}

    def restore(self, ckpt_file):
        """Restores a checkpoint; a new data source restarts the stream and the LSTM states."""
        step = tf.Variable(0, dtype=tf.int64, trainable=False)
        position = {"batches": tf.Variable(0, dtype=tf.int64, trainable=False),
                    "source": tf.Variable(0, dtype=tf.int64, trainable=False)}
        states_restored = checkpoints.restore_training(
            ckpt_file, self.lm, self.optimizer, step, self.lstm_states, position, self.data_source)
        self.step_count = int(step.numpy())
        self.report(f"Restored {ckpt_file} (step {self.current_step}).")
        if not states_restored:
            self.report("The saved LSTM states have another number of rows (batch size or replicas changed); "
                        "they start from zeros.")
        if int(position["source"].numpy()) != self.data_source:
            self.report("New training data: starting at its beginning.")
            for state in self.lstm_states.values():
                state.assign(tf.zeros_like(state))
        else:
            self.batches_consumed = int(position["batches"].numpy())
            self.report(f"Same training data: skipping the {self.consumed} batches already consumed.")

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
