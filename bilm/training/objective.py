"""The biLM as it is trained: `build_bilm`'s layers, the shared softmax, Adagrad.

Training differs from prediction in its wiring, not in its layers: the
backward stack reads its own stream (the sentences with their tokens
reversed, cut into windows independently of the forward stream) left to
right, so that its LSTM state can carry from one batch to the next. The
layers, and so the variables and the weight file, are those of
`build_bilm(..., padded=False)`.
"""
import dataclasses
import math

import keras
import tensorflow as tf

from bilm.layers.stateless_dropout import StatelessDropout, dropout_site
from bilm.models.network import DIRECTIONS, build_bilm, state_keys
from bilm.ops.matmul_dtype import check_matmul_dtype
from bilm.ops.sampled_softmax import full_softmax_loss, log_uniform_candidates, sampled_softmax_loss
from bilm.options import OptionsError, load_options

TRAINING_N_CHARACTERS = 261
# Folded into the step's seed (plus the direction index) for the negative
# samples; far from the dropout sites (`dropout_site`).
SAMPLER_SITE = 1 << 20

# bilm-tf's defaults for the training keys that may be left out.
DEFAULTS = {
    "bidirectional": True,
    "dropout": 0.1,
    "all_clip_norm_val": 10.0,
    "learning_rate": 0.2,
    "sample_softmax": True,
    "share_embedding_softmax": False,
    "n_epochs": 10,
    "matmul_dtype": "float32",
}


@dataclasses.dataclass(frozen=True)
class TrainingSettings:
    """The training keys of `options.json`, validated (see SPEC.md, "Training").

    `batch_size` is per replica (per GPU), as in bilm-tf.
    """

    n_tokens_vocab: int
    batch_size: int
    unroll_steps: int
    bidirectional: bool
    dropout: float
    sample_softmax: bool
    n_negative_samples_batch: int
    share_embedding_softmax: bool
    learning_rate: float
    all_clip_norm_val: float
    n_epochs: int
    n_train_tokens: int
    matmul_dtype: str


def training_settings(options, need_schedule=True):
    """Parses and checks the training keys of `options` (dict, path or `BiLMOptions`).

    Args:
        need_schedule: require `n_train_tokens` (training needs it to count
            epochs; evaluation does not).

    Returns:
        `(BiLMOptions, TrainingSettings)`.

    Raises:
        OptionsError naming the options source and the key.
    """
    options = load_options(options)
    source = options.source
    cnn = options.char_cnn
    if cnn is not None and cnn.n_characters != TRAINING_N_CHARACTERS:
        raise OptionsError(
            f"{source}: 'char_cnn.n_characters' is {cnn.n_characters}, but training reads unshifted "
            f"character ids and needs {TRAINING_N_CHARACTERS}. Set it to {TRAINING_N_CHARACTERS} "
            "(262 is the prediction layout that dump_weights writes).")

    def integer(key, required=True, minimum=1):
        value = options.get(key, DEFAULTS.get(key))
        if value is None and not required:
            return 0
        if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
            raise OptionsError(f"{source}: training key '{key}' must be an integer >= {minimum}, got {value!r}.")
        return value

    def number(key, low, high):
        value = options.get(key, DEFAULTS.get(key))
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not low <= value < high:
            raise OptionsError(f"{source}: training key '{key}' must be a number in [{low}, {high}), got {value!r}.")
        return float(value)

    sample_softmax = bool(options.get("sample_softmax", DEFAULTS["sample_softmax"]))
    share = bool(options.get("share_embedding_softmax", DEFAULTS["share_embedding_softmax"]))
    if share and cnn is not None:
        raise OptionsError(
            f"{source}: 'share_embedding_softmax' ties the softmax to the token embedding, which only "
            "token inputs have; remove 'char_cnn' or set share_embedding_softmax to false.")
    try:
        matmul_dtype = check_matmul_dtype(options.get("matmul_dtype", DEFAULTS["matmul_dtype"]),
                                          where=f"{source}: training key 'matmul_dtype'")
    except ValueError as error:
        raise OptionsError(f"{error} \"bfloat16\" runs the largest matmuls with bfloat16 operands "
                           "(see bilm.ops.matmul_dtype); \"float32\" is the original arithmetic.") from None
    n_tokens_vocab = integer("n_tokens_vocab")
    n_negative = integer("n_negative_samples_batch", required=sample_softmax)
    if sample_softmax and n_negative > n_tokens_vocab:
        raise OptionsError(
            f"{source}: 'n_negative_samples_batch' ({n_negative}) exceeds 'n_tokens_vocab' "
            f"({n_tokens_vocab}); lower it or set sample_softmax to false.")
    settings = TrainingSettings(
        n_tokens_vocab=n_tokens_vocab,
        batch_size=integer("batch_size"),
        unroll_steps=integer("unroll_steps"),
        bidirectional=bool(options.get("bidirectional", DEFAULTS["bidirectional"])),
        dropout=number("dropout", 0.0, 1.0),
        sample_softmax=sample_softmax,
        n_negative_samples_batch=n_negative,
        share_embedding_softmax=share,
        learning_rate=number("learning_rate", 1e-12, math.inf),
        all_clip_norm_val=number("all_clip_norm_val", 1e-12, math.inf),
        n_epochs=integer("n_epochs"),
        n_train_tokens=integer("n_train_tokens", required=need_schedule),
        matmul_dtype=matmul_dtype,
    )
    return options, settings


class TrainingLM:
    """The biLM of `build_bilm(padded=False)` with the softmax used to train it.

    Args:
        options: `BiLMOptions` (character table of 261 rows for char inputs).
        settings: `TrainingSettings`.

    Attributes:
        bilm: the functional model of `build_bilm` (its variables are the
            ones in the weight file); `layers` its layers by name.
        softmax_weights: `(n_tokens_vocab, projection_dim)` variable,
            N(0, 1/sqrt(projection_dim)), shared by both directions (the
            token embedding itself with `share_embedding_softmax`).
        softmax_bias: `(n_tokens_vocab,)` zeros.

    Create it inside a `tf.distribute` strategy's scope to distribute it.
    """

    def __init__(self, options, settings):
        self.options = options
        self.settings = settings
        self.use_characters = options.char_cnn is not None
        self.directions = DIRECTIONS[: 2 if settings.bidirectional else 1]
        # Dropout masks come from a (seed, step, replica) seed input, so they
        # are the same after a restart and differ between replicas.
        self.bilm = build_bilm(
            options, n_token_vocab=None if self.use_characters else settings.n_tokens_vocab,
            bidirectional=settings.bidirectional, dropout=settings.dropout, padded=False,
            separate_backward_stream=True, matmul_dtype=settings.matmul_dtype, name="bilm")
        # Dropout on each direction's top output, before the softmax.
        self.top_dropout = {
            direction: StatelessDropout(settings.dropout, dropout_site(d, options.n_layers, options.n_layers))
            for d, direction in enumerate(self.directions)
        }
        self.state_keys = state_keys(options, settings.bidirectional)
        self.layers = {layer.name: layer for layer in self.bilm.layers}
        projection_dim = options.projection_dim
        if settings.share_embedding_softmax:
            self.softmax_weights = self.layers["token_embedding"].embeddings.value
        else:
            init = keras.initializers.RandomNormal(stddev=1.0 / math.sqrt(projection_dim))
            self.softmax_weights = tf.Variable(
                init((settings.n_tokens_vocab, projection_dim)), name="softmax_W")
        self.softmax_bias = tf.Variable(tf.zeros([settings.n_tokens_vocab]), name="softmax_b")
        self.evaluation_step = tf.function(self._evaluation_losses, reduce_retracing=True, autograph=False)

    # === Variables, by stable name ===

    def bilm_variables(self):
        """`{path: tf.Variable}` of the biLM (`"char_cnn/char_embedding"`, ...)."""
        return {v.path: v.value for v in self.bilm.weights}

    def softmax_variables(self):
        """`{"W": ..., "b": ...}`; no `"W"` when it is the token embedding."""
        parts = {"b": self.softmax_bias}
        if not self.settings.share_embedding_softmax:
            parts["W"] = self.softmax_weights
        return parts

    def trainable_variables(self):
        """`{name: tf.Variable}` of everything the optimizer updates."""
        named = {v.path: v.value for v in self.bilm.trainable_weights}
        named.update({f"softmax/{k}": v for k, v in self.softmax_variables().items()})
        return named

    def parameter_counts(self):
        """`(biLM parameters, softmax parameters)` (softmax without a shared table)."""
        bilm = sum(math.prod(v.shape) for v in self.bilm.trainable_weights)
        softmax = sum(math.prod(v.shape) for v in self.softmax_variables().values())
        return int(bilm), int(softmax)

    def batch_keys(self):
        """The keys of a data batch that `losses` reads."""
        keys = ["tokens_characters" if self.use_characters else "token_ids", "next_token_id"]
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
        key = "tokens_characters" if self.use_characters else "token_ids"
        model_key = "token_characters" if self.use_characters else "token_ids"
        inputs = {model_key: batch[key], **initial_states}
        if "backward" in self.directions:
            inputs[model_key + "_reverse"] = batch[key + "_reverse"]
        if dropout_seed is None:
            dropout_seed = tf.zeros([2], tf.int64)
        if self.settings.dropout > 0:
            inputs["dropout_seed"] = dropout_seed
        # training=True also selects the LSTM recurrence with the hand-written
        # backward pass.
        outputs = self.bilm(inputs, training=training)
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
                `tokens_characters` `(batch, time, max_chars)` (char inputs),
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
                    tf.random.experimental.stateless_fold_in(seed, SAMPLER_SITE + d))
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


# === Gradients and the optimizer ===

def deduplicate(gradient):
    """Sums the rows of an `IndexedSlices` that share an index (dense: unchanged)."""
    if not isinstance(gradient, tf.IndexedSlices):
        return gradient
    unique, positions = tf.unique(gradient.indices)
    values = tf.math.unsorted_segment_sum(gradient.values, positions, tf.shape(unique)[0])
    return tf.IndexedSlices(values, unique, gradient.dense_shape)


def global_norm_scale(gradients, clip_norm, summed_over=1):
    """The factor of `tf.clip_by_global_norm` for gradients that may be sparse.

    Args:
        gradients: list of dense tensors, deduplicated `IndexedSlices`, or None.
        clip_norm: float.
        summed_over: the gradients are sums over this many replicas; the
            norm and the scale are those of their mean (which the scale
            includes, so no pass divides the gradients).

    Returns:
        `(scale, global norm)`, float scalars: the gradients times `scale`
        are their mean, clipped to a global norm of at most `clip_norm`.
        The norm of an `IndexedSlices` is that of its values (right once
        indices are unique). Each squared norm is one `l2_loss` (one pass,
        no temporary).
    """
    half_squares = [tf.nn.l2_loss(g.values if isinstance(g, tf.IndexedSlices) else g)
                    for g in gradients if g is not None]
    norm = tf.sqrt(2.0 * tf.add_n(half_squares)) / summed_over
    return clip_norm * tf.minimum(1.0 / norm, 1.0 / clip_norm) / summed_over, norm


def _scaled(gradient, scale):
    """`gradient * scale`, or zeros where `scale` is 0 (even for non-finite values)."""
    return tf.where(scale > 0, gradient * scale, tf.zeros_like(gradient))


class SparseAdagrad:
    """Adagrad on `tf.Variable`s as TF1's `AdagradOptimizer` (no epsilon).

    `accum += g * g; var -= learning_rate * g / sqrt(accum)`. An
    `IndexedSlices` gradient (deduplicated) updates only its rows of the
    variable and of the accumulator, so the cost of a step does not grow
    with the vocabulary.

    Args:
        variables: `{name: tf.Variable}`; accumulators are created for each,
            in the current distribution scope.
        learning_rate: float.
        initial_accumulator_value: float.

    Attributes:
        accumulators: `{name: tf.Variable}`, the optimizer's slots.
    """

    def __init__(self, variables, learning_rate, initial_accumulator_value=1.0):
        self.learning_rate = learning_rate
        self.initial_accumulator_value = initial_accumulator_value
        self.accumulators = {}
        for name, variable in variables.items():
            self.accumulators[name] = tf.Variable(
                lambda v=variable: tf.fill(v.shape, tf.constant(initial_accumulator_value, v.dtype)),
                trainable=False, name=name.replace("/", "_") + "_adagrad")

    def update(self, variable, gradient, accumulator, gradient_scale=1.0):
        """Applies one gradient (per device: plain variables, plain tensors),
        first multiplied by `gradient_scale` (see `apply`)."""
        lr = tf.constant(self.learning_rate, variable.dtype)
        scale = tf.cast(gradient_scale, variable.dtype)
        if isinstance(gradient, tf.IndexedSlices):
            indices, values = gradient.indices, _scaled(gradient.values, scale)
            accumulator.scatter_add(tf.IndexedSlices(tf.square(values), indices))
            step = lr * values * tf.math.rsqrt(tf.gather(accumulator, indices))
            return variable.scatter_sub(tf.IndexedSlices(step, indices))
        return _dense_adagrad_update(variable, accumulator, gradient, lr, scale)

    def apply(self, variables, gradients, strategy=None, gradient_scale=1.0):
        """Updates `variables` `{name: var}` with `gradients` `{name: grad or None}`.

        `gradient_scale` (a float scalar >= 0, e.g. from
        `global_norm_scale`) multiplies every gradient inside the update,
        so that scaling takes no pass over the gradients of its own; where
        it is 0 the step adds zeros, even for non-finite gradients (a
        skipped step).

        Call in cross-replica context (e.g. inside `merge_call`) when
        distributed; `strategy.extended.update` runs the update on every
        device's copy.
        """
        strategy = strategy or tf.distribute.get_strategy()
        for name, variable in variables.items():
            gradient = gradients.get(name)
            if gradient is not None:
                strategy.extended.update(
                    variable, self.update, args=(gradient, self.accumulators[name], gradient_scale), group=False)


def _dense_adagrad_update(variable, accumulator, gradient, learning_rate, gradient_scale):
    """The dense Adagrad step, with the gradient's scaling, in one compiled
    pass (`_dense_adagrad_values`); as separate ops it is seven passes,
    each with a temporary the size of the variable (original size, five
    of them: ~135 -> ~90 ms per step on 2 cores)."""
    # Tensors in, tensors out: under MirroredStrategy, variables passed into
    # the compiled function and assigned there came out wrong.
    accumulator_value, variable_value = _dense_adagrad_values(
        tf.convert_to_tensor(accumulator), tf.convert_to_tensor(variable), gradient, learning_rate,
        gradient_scale)
    accumulator.assign(accumulator_value)
    return variable.assign(variable_value)


@tf.function(jit_compile=True)
def _dense_adagrad_values(accumulator, variable, gradient, learning_rate, gradient_scale):
    gradient = _scaled(gradient, gradient_scale)
    accumulator = accumulator + gradient * gradient
    return accumulator, variable - learning_rate * gradient * tf.math.rsqrt(accumulator)
