"""The biLM's training step on every backend, written once in `keras.ops`: forward and backward pass, sampled
softmax, clipping, the optimizer's update and the new LSTM states; on JAX compiled as one XLA program
(`jax.jit`), on PyTorch run eagerly with torch autograd, on TensorFlow one `tf.function` over variables updated
in place.

It computes what TensorFlow's own step computed with TensorFlow's autodiff
(`TrainStep`, now the tests' reference, `tests/tensorflow_reference/train_step.py`):
the network of `build_bilm(layout="training")` (`stateless_direct_call`), dropout on each LSTM layer's input and
on each direction's top output, bilm-tf's sampled softmax with its
log-uniform sampler (`bilm.training.model.softmax_losses`), the gradient of
`loss * unroll_steps` clipped to the global norm `all_clip_norm_val`, and
Adagrad or Adam (`bilm.training.arrays.optimizers`) with row-sparse updates of
the softmax table and biases (and of a token-input model's embedding table:
the rows its batch reads). A step whose loss or norm is not finite
changes nothing. The random numbers are TensorFlow's from the step's seed
(the backend's `random`), so a step is a pure function of its inputs (a
restart repeats it exactly) and drops the units and samples the negatives
that TensorFlow's step does from the same run seed and step. What each
backend does its own way (the gradient, compiling, rows of a table, the
sampler, devices) is `bilm.backend.training_ops()`.

Runs on Keras's TensorFlow, JAX and PyTorch backends (TensorFlow's one-replica runs train with it).
"""
import functools
import math

import numpy as np
from keras import ops

from bilm.backend import training_ops
from bilm.backend.direct_call import stateless_direct_call
from bilm.layers.initializers import softmax_initializer
from bilm.layers.stateless_dropout import dropout_site
from bilm.models.functional_bilm import DIRECTIONS, build_bilm, state_keys
from bilm.models.token_encoding import widest_filter
from bilm.training.arrays import optimizers
from bilm.training.model.softmax_losses import full_softmax_loss, sampled_softmax_loss

# Folded into the step's seed (plus the direction index) for the negative samples, as on TensorFlow.
SAMPLER_SITE = 1 << 20
SUFFIXES = {"forward": "", "backward": "_reverse"}


class ArrayTrainStep:
    """The training step of one biLM, and the state it steps.

    Args:
        options: `BiLMOptions` of a training model (char inputs: 261 rows).
        settings: `TrainingSettings`; `batch_size` rows per device.
        seed: int, the run's seed: step `s` draws from `(seed, s)`.
        placement: where the step runs, the backend's `training_ops().Placement` (None: `Placement()`, one
            device), `batch_size` rows per replica, stacked in the global batch. On JAX over several devices
            the step is one program over the global batch, split along the batch by JAX's sharding (the
            weights replicated, the batch and the LSTM states sharded): what one device computes on the stacked
            batch (one set of negatives for the global batch). On TensorFlow over a `tf.distribute` strategy's
            replicas, each replica differentiates its rows with its own random numbers (the step's seed folded
            with the replica's number, as bilm-tf's towers drew theirs), the gradients are averaged across
            replicas and every replica (every worker) applies the same update.

    The state (`initial_state`) is a dict of arrays, what a checkpoint
    holds: `"bilm"` (the network's trainable weights, in its order),
    `"non_trainable"`, `"softmax"` (`{"W", "b"}`), `"optimizer"` and
    `"lstm"` (`{state key: (batch_size, size)}`, carried between steps).
    """

    def __init__(self, options, settings, seed=0, placement=None):
        self.backend = training_ops()
        self.options = options
        self.settings = settings
        self.seed = int(seed)
        self.use_character_inputs = options.char_cnn is not None
        self.directions = DIRECTIONS[: 2 if settings.bidirectional else 1]
        self.input_key = "token_characters" if self.use_character_inputs else "token_ids"
        self.placement = placement or self.backend.Placement()
        with self.placement.scope():  # the network's variables where the step's replicas read them
            self.network = build_bilm(
                options, n_token_vocab=None if self.use_character_inputs else settings.n_tokens_vocab,
                bidirectional=settings.bidirectional, dropout=settings.dropout, layout="training",
                training_matmul_dtype=settings.matmul_dtype, name="bilm")
        self.state_keys = state_keys(options, settings.bidirectional)
        self.names = [v.path for v in self.network.trainable_variables]
        # Token inputs: the embedding table is updated by the rows the batch reads, as on TensorFlow (whose
        # gradient of a lookup is row-sparse; lazy for Adam). With `share_embedding_softmax` it is the softmax's
        # table too, and the state's softmax holds the biases alone.
        self.embedding_name = None if self.use_character_inputs else next(
            name for name in self.names if name.startswith("token_embedding/"))
        self.shares_embedding = bool(settings.share_embedding_softmax)
        self.devices = self.placement.devices
        self.global_batch_size = settings.batch_size * self.placement.n_replicas
        self._steps = {}  # {(warmup, distinct tokens bound): the compiled step}
        self._expected = None  # the bound the run's first batches need together (`expect`)

    @property
    def softmax_shapes(self):
        """`{part: shape}` of the state's softmax: `"b"` `(n_tokens_vocab,)`, and `"W"` `(n_tokens_vocab,
        projection_dim)` unless the embedding table is the softmax's (`share_embedding_softmax`)."""
        n_vocab = self.settings.n_tokens_vocab
        return {"b": (n_vocab,), **({} if self.shares_embedding else {"W": (n_vocab, self.options.projection_dim)})}

    def initial_state(self, softmax_seed=0):
        """The state before the first step: the network's current weights (`training_ops.hold_in`: the arrays
        the network's variables hold, so the weights are held once; on JAX the steps then donate them, and
        `write_weights` gives the network weights again), a softmax drawn from
        N(0, 1/sqrt(projection_dim)) (`softmax_seed`), the optimizer's start and zero LSTM states. What is not
        the network's is made in NumPy and copied in (`training_ops.copy`: on JAX an op would compile a program
        for each shape)."""
        settings, dim = self.settings, self.options.projection_dim
        copy = self.backend.copy
        bilm = self.backend.hold_in(self.network.trainable_variables)
        with self.placement.scope():  # made where the network's variables are
            softmax = {part: copy(np.zeros(shape, np.float32) if part == "b" else
                                  softmax_initializer(dim, softmax_seed)(shape))
                       for part, shape in self.softmax_shapes.items()}
            state = {"bilm": bilm, "non_trainable": self.backend.hold_in(self.network.non_trainable_variables),
                     "softmax": softmax,
                     "optimizer": optimizers.initial_state(settings.optimizer, self._parameters(bilm, softmax),
                                                           copy),
                     "lstm": {key: copy(np.zeros((self.global_batch_size, size), np.float32)) for key, _, size in
                              self.state_keys}}
        return self.place(state)

    def place(self, state):
        """`state` on the step's devices: the LSTM states split along the batch, the rest replicated."""
        lstm = self.placement.rows(state["lstm"])
        rest = self.placement.replicated({key: value for key, value in state.items() if key != "lstm"})
        return {**rest, "lstm": lstm}

    def __call__(self, state, batch, step):
        """`(new state, {"loss", "norm", "forward"[, "backward"]})` of step number `step` (an int) over
        `batch` (the data pipeline's dict of int32 arrays, `global_batch_size` rows); `state` is consumed (its
        buffers are reused). `state` is `initial_state()`'s, a step's, or arrays put where they belong by `place`:
        on JAX, arrays placed otherwise compile the step again."""
        warmup = step < self.settings.softmax_warmup_steps
        batch = {key: np.asarray(batch[key]) for key in self.batch_keys()}
        bound = self._distinct_tokens_bound(batch)
        if bound is not None:  # a step compiled for larger bounds serves too: fewer compilations
            serving = [b for w, b in self._steps if w == warmup and b is not None and b.serves(bound)]
            if serving:
                bound = min(serving, key=lambda b: (b.rows, b.columns or self.options.token_id_width))
            elif self._expected is not None and self._expected.serves(bound):
                bound = self._expected
        key = (warmup, bound)
        if key not in self._steps:
            self._steps[key] = self.backend.compile_step(
                lambda state, batch, step, warmup=key[0], bound=key[1]: self._step(state, batch, step, warmup, bound),
                self.settings.jit_compile, self.placement)
        return self._steps[key](state, self.placement.rows(batch), ops.convert_to_tensor(step, "int32"))

    def compiled_bounds(self):
        """The distinct-token bounds (`DistinctTokens`; None: every token encoded) of the steps compiled so far,
        one per program (a warm-up's and a full step's apart)."""
        return [bound for _, bound in self._steps]

    def expect(self, batches):
        """Notes the bound that `batches` (a run's first batches, before their steps) need together with those
        noted before: a step compiled for a batch that this bound serves is compiled for it. A short run's
        batches, whose distinct tokens vary around one of the bounds' values, then share one program rather than
        compiling one for each value they reach (several seconds each). Returns the bound noted so far: None where
        the step is compiled for none."""
        bounds = [self._distinct_tokens_bound({key: np.asarray(batch[key]) for key in self.batch_keys()})
                  for batch in batches]
        bounds = [bound for bound in [self._expected, *bounds] if bound is not None]
        self._expected = functools.reduce(lambda a, b: a.union(b), bounds) if bounds else None
        return self._expected

    def _distinct_tokens_bound(self, batch):
        """The bound on the batch's distinct tokens its step is compiled for (`training_ops`'
        `distinct_tokens_bound`: JAX's on one CPU; the char CNN then encodes each distinct token once), or None:
        token inputs, other devices, PyTorch (which finds them eagerly)."""
        if not self.use_character_inputs:
            return None
        # The char CNN's columns are trimmed where a row holds characters only (not a word's id after them).
        widest = None if self.options.word_embedding is not None else widest_filter(self.options)
        return self.backend.distinct_tokens_bound(
            [batch[key] for key in self.batch_keys() if key.startswith(self.input_key)], self.devices, widest)

    def parameter_counts(self):
        """`(biLM parameters, softmax parameters)` (softmax without a shared table)."""
        bilm = sum(math.prod(v.shape) for v in self.network.trainable_weights)
        return int(bilm), int(sum(math.prod(shape) for shape in self.softmax_shapes.values()))

    def batch_keys(self):
        """The keys of a data batch that a step reads."""
        keys = [self.input_key, "next_token_id"]
        if "backward" in self.directions:
            keys += [key + "_reverse" for key in keys]
        return keys

    def write_weights(self, state):
        """Sets the Keras network's variables to the state's weights (before saving them to a file)."""
        for variable, value in zip(self.network.trainable_variables, state["bilm"]):
            variable.assign(value)
        for variable, value in zip(self.network.non_trainable_variables, state["non_trainable"]):
            variable.assign(value)

    # === The step ===

    def softmax_table(self, state):
        """The softmax's `(n_tokens_vocab, projection_dim)` table of `state` (a state or a checkpoint's
        weights): its own, or the token embedding it shares."""
        if self.shares_embedding:
            return state["bilm"][self.names.index(self.embedding_name)]
        return state["softmax"]["W"]

    def _parameters(self, bilm, softmax):
        return {**dict(zip(self.names, bilm)), **{f"softmax/{part}": value for part, value in softmax.items()}}

    def _step(self, state, batch, step, warmup, distinct_bound=None):
        with self.backend.distinct_tokens_at_most(distinct_bound):  # while the step is traced
            return self._step_of(state, batch, step, warmup)

    def _step_of(self, state, batch, step, warmup):
        settings = self.settings

        def replica_gradients(rows, lstm, replica):
            return self._replica_gradients({**state, "lstm": lstm}, rows, step, warmup, replica)

        (loss, per_direction, dense), sparse, finals = self.placement.each_replica(
            replica_gradients, batch, state["lstm"], settings.n_tokens_vocab, settings.jit_compile)
        squares = [ops.sum(g * g) for g in dense.values()] + [ops.sum(v * v) for _, v in sparse.values()]
        norm = ops.sqrt(sum(squares))
        clip = settings.all_clip_norm_val
        scale = clip * ops.minimum(1.0 / norm, 1.0 / clip)
        scale = ops.where(ops.logical_and(ops.isfinite(loss), ops.isfinite(norm)), scale, 0.0)
        softmax = state["softmax"]
        parameters = self._parameters(state["bilm"], softmax)
        parameters, optimizer_state = optimizers.apply(self.backend, settings.optimizer, settings.learning_rate,
                                                       parameters, state["optimizer"], dense, sparse, scale)
        new_state = {"bilm": [parameters[name] for name in self.names], "non_trainable": state["non_trainable"],
                     "softmax": {part: parameters[f"softmax/{part}"] for part in softmax},
                     "optimizer": optimizer_state, "lstm": {key: finals[key] for key in state["lstm"]}}
        return new_state, {"loss": loss, "norm": norm, **per_direction}

    def _replica_gradients(self, state, batch, step, warmup, replica):
        """`((loss, {direction: loss}, dense gradients), row-sparse gradients, {state key: final state})` of one
        replica's rows `batch` (its LSTM states in `state["lstm"]`), drawing from the step's seed folded with
        `replica` (the replica's number); the gradients are `_gradients`', of `loss * unroll_steps`."""
        settings, backend = self.settings, self.backend
        random = backend.random
        seed = random.fold_in(random.seed_words(self.seed, step), replica)
        # A token model's table is differentiated as the rows its batch reads (never a vocabulary-sized
        # gradient), but where the full softmax reads all of a shared one.
        embedding_rows = None
        if self.embedding_name is not None and not warmup and (settings.sample_softmax or not self.shares_embedding):
            embedding_rows = backend.unique_rows(self._read_ids(batch), settings.n_tokens_vocab)
        tops_of = self._tops_function(state, batch, seed, embedding_rows)
        labels = {d: ops.cast(ops.reshape(batch["next_token_id" + SUFFIXES[d]], (-1,)), backend.INDEX_DTYPE)
                  for d in self.directions}
        softmax, table = state["softmax"], self.softmax_table(state)
        if settings.sample_softmax:
            candidates = {d: backend.log_uniform_candidates(labels[d], settings.n_negative_samples_batch,
                                                            settings.n_tokens_vocab,
                                                            random.fold_in_int32(seed, SAMPLER_SITE + i))
                          for i, d in enumerate(self.directions)}
            ids = {d: ops.concatenate([labels[d], candidates[d][0]]) for d in self.directions}
            # The rows read, differentiated as rows (no fill mode's masks).
            differentiated = {"W": {d: backend.take_rows(table, ids[d]) for d in self.directions},
                              "b": {d: backend.take_rows(softmax["b"], ids[d]) for d in self.directions}}
        else:
            candidates, ids, differentiated = None, None, {"W": table, "b": softmax["b"]}

        def loss_of(bilm, softmax_parts):
            tops, finals = tops_of(bilm)
            per_direction = {}
            for d in self.directions:
                outputs = ops.reshape(tops[d], (-1, self.options.projection_dim))
                if candidates is None:
                    rows = full_softmax_loss(softmax_parts["W"], softmax_parts["b"], outputs, labels[d])
                else:
                    rows = sampled_softmax_loss(softmax_parts["W"][d], softmax_parts["b"][d], outputs, labels[d],
                                                candidates[d], settings.matmul_dtype, rows_given=True)
                per_direction[d] = ops.mean(rows)
            loss = sum(per_direction.values()) / len(per_direction)
            return loss * float(settings.unroll_steps), (loss, per_direction, finals)

        if warmup:  # the softmax alone; the biLM's backward pass is not computed
            (grad_softmax,), (loss, per_direction, finals) = backend.gradients(
                lambda parts: loss_of(state["bilm"], parts), (differentiated,))
            grad_bilm = None
        else:
            bilm = list(state["bilm"])
            if embedding_rows is not None:  # the rows read in the table's place
                index = self.names.index(self.embedding_name)
                bilm[index] = backend.gather_rows(bilm[index], embedding_rows, 0.0)
            (grad_bilm, grad_softmax), (loss, per_direction, finals) = backend.gradients(
                loss_of, (bilm, differentiated))
        dense, sparse = self._gradients(grad_bilm, grad_softmax, ids, embedding_rows)
        return (loss, per_direction, dense), sparse, finals

    def _gradients(self, grad_bilm, grad_softmax, ids, embedding_rows):
        """`(dense, sparse)` gradients by parameter name (`optimizers.apply`'s): the biLM's (None in the softmax's
        warm-up), and the softmax's, whole (`ids` None: the full softmax) or the rows of `ids`
        (`{direction: (n,)}`, the labels and negatives). The token embedding's are those of `embedding_rows`
        (the distinct ids the batch reads, `unique_rows`': the biLM's gradient holds their rows), with the
        softmax's rows added where it is the softmax's table too; a warm-up leaves a shared table alone, as on
        TensorFlow (the softmax's biases alone)."""
        n_vocab, backend = self.settings.n_tokens_vocab, self.backend
        dense, sparse = {}, {}
        if grad_bilm is not None:
            dense.update(zip(self.names, grad_bilm))
        if ids is None:
            dense["softmax/b"] = grad_softmax["b"]
            if not self.shares_embedding:
                dense["softmax/W"] = grad_softmax["W"]
            elif grad_bilm is not None:  # every row of the shared table has a gradient: updated whole
                dense[self.embedding_name] = dense[self.embedding_name] + grad_softmax["W"]
                return dense, sparse
        else:
            all_ids = ops.concatenate([ids[d] for d in self.directions])
            rows_of = {part: ops.concatenate([grad_softmax[part][d] for d in self.directions]) for part in ("W", "b")}
            sparse["softmax/b"] = backend.distinct_rows(all_ids, rows_of["b"], n_vocab)
            if not self.shares_embedding:
                sparse["softmax/W"] = backend.distinct_rows(all_ids, rows_of["W"], n_vocab)
        if embedding_rows is not None:
            rows, values = embedding_rows, dense.pop(self.embedding_name)
            if self.shares_embedding:  # the sampled softmax's rows of the same table, summed with the batch's
                rows, values = backend.distinct_rows(ops.concatenate([rows, all_ids]),
                                                     ops.concatenate([values, rows_of["W"]]), n_vocab)
            sparse[self.embedding_name] = rows, values
        return dense, sparse

    def _read_ids(self, batch):
        """A token model's batch's ids, every direction's, flat `(n,)` of `INDEX_DTYPE`."""
        return ops.concatenate([ops.cast(ops.reshape(batch[self.input_key + SUFFIXES[d]], (-1,)),
                                         self.backend.INDEX_DTYPE) for d in self.directions])

    def _tops_function(self, state, batch, seed, embedding_rows=None):
        """`tops(bilm weights) -> ({direction: top layer (batch, time, P)}, {state key: final state})`, with
        dropout on the tops as bilm-tf's. With `embedding_rows` (`unique_rows` of the
        batch's ids), `bilm`'s token embedding is the table's rows `embedding_rows` (the rest `state`'s): the
        lookup reads a token's row there."""
        settings, n_layers = self.settings, self.options.n_layers
        inputs = {self.input_key: batch[self.input_key], **state["lstm"]}
        if "backward" in self.directions:
            inputs[self.input_key + "_reverse"] = batch[self.input_key + "_reverse"]
        if settings.dropout > 0:
            inputs["dropout_seed"] = seed
        index = None if embedding_rows is None else self.names.index(self.embedding_name)

        def tops(bilm):
            calls = None
            if index is not None:
                rows_read = bilm[index]
                bilm = [*bilm[:index], state["bilm"][index], *bilm[index + 1:]]

                def lookup(ids):  # the rows' entry of each id: the rows are ascending
                    at = ops.searchsorted(embedding_rows, ops.cast(ops.reshape(ids, (-1,)), embedding_rows.dtype))
                    return ops.reshape(self.backend.take_rows(rows_read, at), (*ops.shape(ids), -1))
                calls = {self.network.get_layer("token_embedding"): lookup}
            outputs = stateless_direct_call(self.network, bilm, state["non_trainable"], inputs, training=True,
                                            calls=calls)
            result = {}
            for d, direction in enumerate(self.directions):
                top = outputs[f"{direction}_{n_layers - 1}"]
                if settings.dropout > 0:
                    site = dropout_site(d, n_layers, n_layers)
                    top = self.backend.random.dropout(top, settings.dropout,
                                                      self.backend.random.fold_in_int32(seed, site))
                result[direction] = top
            return result, {key: outputs[output_key] for key, output_key, _ in self.state_keys}

        return tops
