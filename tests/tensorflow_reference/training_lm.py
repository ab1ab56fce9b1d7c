"""The biLM as it is trained: `build_bilm`'s network with the shared softmax and the loss.

Training differs from prediction in its wiring, not in its layers: the
backward stack reads its own stream (the sentences with their tokens
reversed, cut into windows independently of the forward stream) left to
right, so that its LSTM state can carry from one batch to the next. The
layers, and so the variables and the weight file, are those of the
prediction network.
"""
import math

import keras
import tensorflow as tf

from bilm.layers.initializers import softmax_initializer
from bilm.layers.stateless_dropout import StatelessDropout, dropout_site
from bilm.models.functional_bilm import DIRECTIONS, WEIGHTS_FOLLOW, build_bilm, state_keys
from bilm.ops import stateless_random
from bilm.ops.sampled_softmax import full_softmax_loss, log_uniform_candidates, sampled_softmax_loss
from bilm.utils.deprecation import deprecated_alias

# Folded into the step's seed (plus the direction index) for the negative
# samples; far from the dropout sites (`dropout_site`).
SAMPLER_SITE = 1 << 20


class TrainingLM:
    """The biLM of `build_bilm(layout="training")` with the softmax used to train it.

    Args:
        options: `BiLMOptions` (character table of 261 rows for char inputs).
        settings: `TrainingSettings`.
        softmax_seed: the softmax table's seed (`softmax_initializer`; the
            run's seed, as on JAX and PyTorch), or None: one from Python's
            `random`.

    Attributes:
        network: the functional model of `build_bilm` (its variables are
            the ones in the weight file; `bilm`: its deprecated old name);
            `layers` its layers by name.
        boundary_state: `{state key: (size,) variable}`, the mean LSTM state
            at sentence starts, and `n_boundary_starts` how many starts it
            averages (0: not computed yet).
        softmax_weights: `(n_tokens_vocab, projection_dim)` variable,
            N(0, 1/sqrt(projection_dim)) from `softmax_seed` (zeros inside `WEIGHTS_FOLLOW.on()`,
            as the network's), shared by both directions (the token
            embedding itself with `share_embedding_softmax`).
        softmax_bias: `(n_tokens_vocab,)` zeros.

    Create it inside a `tf.distribute` strategy's scope to distribute it.
    """

    def __init__(self, options, settings, softmax_seed=None):
        self.options = options
        self.settings = settings
        self.use_character_inputs = options.char_cnn is not None
        self.directions = DIRECTIONS[: 2 if settings.bidirectional else 1]
        # Dropout masks come from a (seed, step, replica) seed input, so they
        # are the same after a restart and differ between replicas.
        self.network = build_bilm(
            options, n_token_vocab=None if self.use_character_inputs else settings.n_tokens_vocab,
            bidirectional=settings.bidirectional, dropout=settings.dropout,
            layout="training", training_matmul_dtype=settings.matmul_dtype, name="bilm")
        # Dropout on each direction's top output, before the softmax.
        self.top_dropout = {
            direction: StatelessDropout(settings.dropout, dropout_site(d, options.n_layers, options.n_layers))
            for d, direction in enumerate(self.directions)
        }
        self.state_keys = state_keys(options, settings.bidirectional)
        self.layers = {layer.name: layer for layer in self.network.layers}
        projection_dim = options.projection_dim
        if settings.share_embedding_softmax:
            self.softmax_weights = self.layers["token_embedding"].embeddings.value
        else:
            init = (keras.initializers.Zeros() if WEIGHTS_FOLLOW.is_on()  # a checkpoint sets it
                    else softmax_initializer(projection_dim, softmax_seed))
            self.softmax_weights = tf.Variable(
                init((settings.n_tokens_vocab, projection_dim)), name="softmax_W")
        self.softmax_bias = tf.Variable(tf.zeros([settings.n_tokens_vocab]), name="softmax_b")
        # The mean state at sentence starts (bilm.models.boundary_state),
        # set by `train` at its end; `n_boundary_starts` 0 means not yet.
        self.boundary_state = {key: tf.Variable(tf.zeros([size]), trainable=False, name=f"boundary_{key}")
                               for key, _, size in self.state_keys}
        self.n_boundary_starts = tf.Variable(0, dtype=tf.int64, trainable=False, name="n_boundary_starts")
        self.evaluation_step = tf.function(self._evaluation_losses, reduce_retracing=True, autograph=False)

    bilm = deprecated_alias("bilm", "network")

    # === Variables, by stable name ===

    def bilm_variables(self):
        """`{path: tf.Variable}` of the biLM (`"char_cnn/char_embedding"`, ...)."""
        return {v.path: v.value for v in self.network.weights}

    def softmax_variables(self):
        """`{"W": ..., "b": ...}`; no `"W"` when it is the token embedding."""
        parts = {"b": self.softmax_bias}
        if not self.settings.share_embedding_softmax:
            parts["W"] = self.softmax_weights
        return parts

    def trainable_variables(self):
        """`{name: tf.Variable}` of everything the optimizer updates."""
        named = {v.path: v.value for v in self.network.trainable_weights}
        named.update({f"softmax/{k}": v for k, v in self.softmax_variables().items()})
        return named

    def parameter_counts(self):
        """`(biLM parameters, softmax parameters)` (softmax without a shared table)."""
        bilm = sum(math.prod(v.shape) for v in self.network.trainable_weights)
        softmax = sum(math.prod(v.shape) for v in self.softmax_variables().values())
        return int(bilm), int(softmax)

    def batch_keys(self):
        """The keys of a data batch that `losses` reads."""
        keys = ["token_characters" if self.use_character_inputs else "token_ids", "next_token_id"]
        if "backward" in self.directions:
            keys += [key + "_reverse" for key in keys]
        return keys

    def zero_states(self, batch_size):
        """`{state key: zeros (batch_size, size)}` for every LSTM state."""
        return {key: tf.zeros([batch_size, size]) for key, _, size in self.state_keys}

    # === Forward pass and loss ===

    def run(self, batch, initial_states, training=False, dropout_seed=None):
        """The biLM over a batch of windows (both streams).

        Args:
            batch: dict from the data pipeline (see `losses`).
            initial_states: `{state key: (batch, size)}`.
            training: apply dropout, and run for gradients.
            dropout_seed: int `(2,)` stateless seed of the dropout masks
                (zeros when None).

        Returns:
            `({direction: top layer (batch, time, projection_dim)},
            {state key: final state})`; each direction's top layer is in its
            own stream's order, with the output dropout applied in training.
        """
        # The data batches and the network name their inputs alike.
        key = "token_characters" if self.use_character_inputs else "token_ids"
        inputs = {key: batch[key], **initial_states}
        if "backward" in self.directions:
            inputs[key + "_reverse"] = batch[key + "_reverse"]
        if dropout_seed is None:
            dropout_seed = tf.zeros([2], tf.int64)
        if self.settings.dropout > 0:
            inputs["dropout_seed"] = dropout_seed
        # training=True also selects the LSTM recurrence with the hand-written
        # backward pass.
        outputs = self.network(inputs, training=training)
        top_layer = self.options.n_layers - 1
        tops = {}
        for direction in self.directions:
            tops[direction] = self.top_dropout[direction](
                outputs[f"{direction}_{top_layer}"], dropout_seed, training=training)
        finals = {key: outputs[output_key] for key, output_key, _ in self.state_keys}
        return tops, finals

    def losses(self, batch, initial_states, training=False, seed=None):
        """The loss of one batch of windows.

        Args:
            batch: dict from the data pipeline: `token_ids` `(batch, time)`,
                `token_characters` `(batch, time, max_chars)` (char inputs),
                `next_token_id` `(batch, time)`, and the same keys with
                `_reverse` for the backward stream.
            initial_states: `{state key: (batch, size)}`.
            training: sampled softmax (when `sample_softmax`) and dropout;
                otherwise the full softmax.
            seed: int `(2,)` stateless seed of the dropout masks and the
                negative samples (None: zeros), so that a step is a pure
                function of its inputs and a restart repeats it exactly.

        Returns:
            `(loss, {direction: mean loss}, {state key: final state})`: loss
            is the mean of the directions' mean losses.
        """
        suffixes = {"forward": "", "backward": "_reverse"}
        seed = tf.zeros([2], tf.int64) if seed is None else tf.cast(seed, tf.int64)
        tops, finals = self.run(batch, initial_states, training, seed)
        per_direction = {}
        for d, (direction, top) in enumerate(tops.items()):
            outputs = tf.reshape(top, [-1, self.options.projection_dim])
            labels = tf.reshape(batch["next_token_id" + suffixes[direction]], [-1])
            if training and self.settings.sample_softmax:
                candidates = log_uniform_candidates(
                    labels, self.settings.n_negative_samples_batch, self.settings.n_tokens_vocab,
                    stateless_random.fold_in(seed, SAMPLER_SITE + d))
                row_losses = sampled_softmax_loss(
                    self.softmax_weights, self.softmax_bias, outputs, labels, candidates,
                    self.settings.matmul_dtype)
            else:
                row_losses = full_softmax_loss(self.softmax_weights, self.softmax_bias, outputs, labels)
            per_direction[direction] = tf.reduce_mean(row_losses)
        loss = tf.add_n(list(per_direction.values())) / len(per_direction)
        return loss, per_direction, finals

    def _evaluation_losses(self, batch, initial_states):
        """`losses` with the full softmax and no dropout, compiled once (`evaluation_step`)."""
        return self.losses(batch, initial_states, training=False)
