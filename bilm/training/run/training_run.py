"""What one call of `train` holds: the model, its optimizer state, checkpoints, summaries and messages."""
import os
import shutil

import tensorflow as tf

from bilm.optimizers import make_optimizer
from bilm.training.model.boundary_state_measure import measure_boundary_state
from bilm.training.model.training_lm import TrainingLM
from bilm.training.run import checkpoints
from bilm.training.run.base_run import BaseRun
from bilm.training.run.checkpoints import CHECKPOINT_NAME, OPTIONS_FILE
from bilm.training.run.distribution import is_chief
from bilm.training.run.evaluation import evaluate_lm


class TrainingRun(BaseRun):
    """What one call of `train` holds on TensorFlow: the model, its optimizer state, checkpoints (the loop's
    interface: `BaseRun`).

    `config` is the run's `TrainingConfig`; `save_timer` the `SaveTimer` a save resets.

    Variables are created in the strategy's scope; the step counter and the
    data position are plain variables updated from Python.
    """

    def __init__(self, config, strategy, global_batch, save_dir, log_dir, max_to_keep, verbose, save_timer,
                 vocabulary=None):
        settings = config.settings
        super().__init__(settings, log_dir, verbose, save_timer, chief=is_chief(strategy))
        self.save_dir = save_dir
        self.options_file = os.path.join(save_dir, OPTIONS_FILE)
        self.data_fingerprint = checkpoints.data_fingerprint(config.data_source)
        # The checkpoint the run continues, if any (the last good one before its first save).
        self.restored_from = config.origin.checkpoint
        with strategy.scope():
            self.lm = TrainingLM(config.options, settings)
            self.optimizer = make_optimizer(settings, self.lm.trainable_variables())
            self.lstm_states = {
                key: tf.Variable(tf.zeros([global_batch, size]), trainable=False, name=f"state_{key}")
                for key, _, size in self.lm.state_keys}
        self.step = tf.Variable(0, dtype=tf.int64, trainable=False, name="step")
        self.data_position = {"batches": tf.Variable(0, dtype=tf.int64, trainable=False, name="data_batches"),
                              "source": tf.Variable(0, dtype=tf.int64, trainable=False, name="data_source")}
        # Every worker saves (collective variables); only the chief into save_dir.
        self.checkpoint_dir = save_dir if self.chief else os.path.join(
            save_dir, f".worker_{strategy.cluster_resolver.task_id}")
        # The fingerprint of the training vocabulary (None: the data has no vocabulary file).
        self.vocabulary = None if vocabulary is None else tf.Variable(
            vocabulary.fingerprint, dtype=tf.int64, trainable=False, name="vocabulary")
        self.manager = tf.train.CheckpointManager(
            checkpoints.build_checkpoint(self.lm, self.optimizer, self.step, self.lstm_states, self.data_position,
                                         self.vocabulary),
            self.checkpoint_dir, max_to_keep=max_to_keep, checkpoint_name=CHECKPOINT_NAME)

    @property
    def current_step(self):
        return int(self.step.numpy())

    @property
    def consumed(self):
        """Batches of the current data stream already trained on."""
        return int(self.data_position["batches"].numpy())

    def restore(self, ckpt_file, source):
        """Restores a checkpoint; a new data source restarts the stream and the LSTM states."""
        states_restored = checkpoints.restore_training(
            ckpt_file, self.lm, self.optimizer, self.step, self.lstm_states, self.data_position, source)
        self.report(f"Restored {ckpt_file} (step {self.current_step}).")
        if not states_restored:
            self.report("The saved LSTM states have another number of rows (batch size or replicas changed); "
                     "they start from zeros.")
        if int(self.data_position["source"].numpy()) != source:
            self.report("New training data: starting at its beginning.")
            self.data_position["batches"].assign(0)
            for state in self.lstm_states.values():
                state.assign(tf.zeros_like(state))
        else:
            self.report(f"Same training data: skipping the {self.consumed} batches already consumed.")

    def advance(self):
        self.step.assign_add(1)
        self.data_position["batches"].assign_add(1)

    def write_checkpoint(self):
        self.manager.save(checkpoint_number=self.current_step)

    def checkpoint_path(self):
        """The prefix of the current step's checkpoint in `save_dir` (the chief's copy)."""
        return os.path.join(self.save_dir, f"{CHECKPOINT_NAME}-{self.current_step}")

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

    def last_saved_checkpoint(self):
        """The newest checkpoint this run's directory holds (None: none yet)."""
        return self.manager.latest_checkpoint

    def close(self):
        super().close()
        if not self.chief:
            shutil.rmtree(self.checkpoint_dir, ignore_errors=True)
