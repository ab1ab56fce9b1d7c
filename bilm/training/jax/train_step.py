"""The biLM's training step on JAX: forward and backward pass, sampled softmax, clipping, the optimizer's
update and the new LSTM states, compiled as one XLA program (`jax.jit`).

It computes what `bilm.training.run.train_step.TrainStep` computes with
TensorFlow (one replica): the network of `build_bilm(layout="training")`
(Keras 3 on JAX, `stateless_call`), dropout on each LSTM layer's input and
on each direction's top output, bilm-tf's sampled softmax with its
log-uniform sampler (`bilm.training.jax.sampled_softmax`), the gradient of
`loss * unroll_steps` clipped to the global norm `all_clip_norm_val`, and
Adagrad or Adam (`bilm.training.jax.optimizers`) with row-sparse updates of
the softmax table and biases (and of a token-input model's embedding table:
the rows its batch reads). A step whose loss or norm is not finite
changes nothing. The random numbers are TensorFlow's from the step's seed
(`bilm.ops.jax_random`), so a step is a pure function of its inputs (a
restart repeats it exactly) and drops the units and samples the negatives
that TensorFlow's step does from the same run seed and step.

Needs Keras on JAX (`KERAS_BACKEND=jax`).
"""
import math

import jax
import jax.numpy as jnp
import numpy as np

from bilm.errors import UserError
from bilm.layers.stateless_dropout import dropout_site
from bilm.models.functional_bilm import DIRECTIONS, build_bilm, state_keys
from bilm.ops import jax_random
from bilm.training.jax import optimizers
from bilm.training.jax.sampled_softmax import full_softmax_loss, log_uniform_candidates, sampled_softmax_loss
from bilm.utils.backend import configured_backend

# Folded into the step's seed (plus the direction index) for the negative samples, as on TensorFlow.
SAMPLER_SITE = 1 << 20
SUFFIXES = {"forward": "", "backward": "_reverse"}


class JaxTrainStep:
    """The training step of one biLM, and the state it steps.

    Args:
        options: `BiLMOptions` of a training model (char inputs: 261 rows).
        settings: `TrainingSettings`; `batch_size` rows per device.
        seed: int, the run's seed: step `s` draws from `(seed, s)`.
        devices: the JAX devices to train on (None: the first one). With
            several, the step is one program over the global batch
            (`batch_size` rows per device, stacked), split along the batch
            by JAX's sharding: the weights are replicated, the batch and the
            LSTM states are sharded. It computes what one device computes on
            the stacked batch (one set of negatives for the global batch).

    The state (`initial_state`) is a dict of arrays, what a checkpoint
    holds: `"bilm"` (the network's trainable weights, in its order),
    `"non_trainable"`, `"softmax"` (`{"W", "b"}`), `"optimizer"` and
    `"lstm"` (`{state key: (batch_size, size)}`, carried between steps).
    """

    def __init__(self, options, settings, seed=0, devices=None):
        if configured_backend() != "jax":
            raise UserError("JaxTrainStep needs Keras on JAX (KERAS_BACKEND=jax).")
        self.options = options
        self.settings = settings
        self.seed = int(seed)
        self.use_character_inputs = options.char_cnn is not None
        self.directions = DIRECTIONS[: 2 if settings.bidirectional else 1]
        self.input_key = "token_characters" if self.use_character_inputs else "token_ids"
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
        self.devices = list(devices) if devices else jax.devices()[:1]
        self.global_batch_size = settings.batch_size * len(self.devices)
        mesh = jax.sharding.Mesh(np.array(self.devices), ("data",))
        self._rows = jax.sharding.NamedSharding(mesh, jax.sharding.PartitionSpec("data"))
        self._replicated = jax.sharding.NamedSharding(mesh, jax.sharding.PartitionSpec())
        self._steps = {warmup: jax.jit(lambda state, batch, step, warmup=warmup: self._step(state, batch, step,
                                                                                               warmup),
                                       donate_argnums=0)
                       for warmup in (False, True)}

    def initial_state(self, softmax_seed=0):
        """The state before the first step: the network's current weights, a softmax drawn from
        N(0, 1/sqrt(projection_dim)) (`softmax_seed`), the optimizer's start and zero LSTM states."""
        settings, dim = self.settings, self.options.projection_dim
        rng = np.random.default_rng(softmax_seed)
        softmax = {"b": jnp.zeros((settings.n_tokens_vocab,), jnp.float32)}
        if not self.shares_embedding:
            softmax["W"] = jnp.asarray(rng.normal(0.0, 1.0 / math.sqrt(dim), (settings.n_tokens_vocab, dim)),
                                       jnp.float32)
        bilm = [jnp.asarray(v.value) for v in self.network.trainable_variables]
        state = {"bilm": bilm, "non_trainable": [jnp.asarray(v.value) for v in self.network.non_trainable_variables],
                 "softmax": softmax,
                 "optimizer": optimizers.initial_state(settings.optimizer, self._parameters(bilm, softmax)),
                 "lstm": {key: jnp.zeros((self.global_batch_size, size), jnp.float32) for key, _, size in
                          self.state_keys}}
        return self.place(state)

    def place(self, state):
        """`state` on the step's devices: the LSTM states split along the batch, the rest replicated."""
        lstm = {key: jax.device_put(value, self._rows) for key, value in state["lstm"].items()}
        rest = jax.device_put({key: value for key, value in state.items() if key != "lstm"}, self._replicated)
        return {**rest, "lstm": lstm}

    def __call__(self, state, batch, step):
        """`(new state, {"loss", "norm", "forward"[, "backward"]})` of step number `step` (an int) over
        `batch` (the data pipeline's dict of int32 arrays, `global_batch_size` rows); `state` is consumed (its
        buffers are reused)."""
        warmup = step < self.settings.softmax_warmup_steps
        batch = {key: jax.device_put(np.asarray(batch[key]), self._rows) for key in self.batch_keys()}
        return self._steps[warmup](state, batch, jnp.asarray(step, jnp.int32))

    def parameter_counts(self):
        """`(biLM parameters, softmax parameters)` (softmax without a shared table), as `TrainingLM`'s."""
        bilm = sum(math.prod(v.shape) for v in self.network.trainable_weights)
        n_vocab, dim = self.settings.n_tokens_vocab, self.options.projection_dim
        return int(bilm), int(n_vocab + (0 if self.shares_embedding else n_vocab * dim))

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

    def _step(self, state, batch, step, warmup):
        settings = self.settings
        seed = jax_random.fold_in(jax_random.seed_words(self.seed, step), 0)
        tops_of = self._tops_function(state["non_trainable"], batch, state["lstm"], seed)
        labels = {d: batch["next_token_id" + SUFFIXES[d]].reshape(-1) for d in self.directions}
        softmax, table = state["softmax"], self.softmax_table(state)
        if settings.sample_softmax:
            candidates = {d: log_uniform_candidates(labels[d], settings.n_negative_samples_batch,
                                                    settings.n_tokens_vocab,
                                                    jax_random.fold_in_int32(seed, SAMPLER_SITE + i))
                          for i, d in enumerate(self.directions)}
            ids = {d: jnp.concatenate([labels[d], candidates[d][0]]) for d in self.directions}
            differentiated = {"W": {d: table[ids[d]] for d in self.directions},
                              "b": {d: softmax["b"][ids[d]] for d in self.directions}}
        else:
            candidates, ids, differentiated = None, None, {"W": table, "b": softmax["b"]}

        def loss_of(bilm, softmax_parts):
            tops, finals = tops_of(bilm)
            per_direction = {}
            for d in self.directions:
                outputs = tops[d].reshape(-1, self.options.projection_dim)
                if candidates is None:
                    rows = full_softmax_loss(softmax_parts["W"], softmax_parts["b"], outputs, labels[d])
                else:
                    rows = sampled_softmax_loss(softmax_parts["W"][d], softmax_parts["b"][d], outputs, labels[d],
                                                candidates[d], settings.matmul_dtype, rows_given=True)
                per_direction[d] = jnp.mean(rows)
            loss = sum(per_direction.values()) / len(per_direction)
            return loss * float(settings.unroll_steps), (loss, per_direction, finals)

        if warmup:  # the softmax alone; the biLM's backward pass is not computed
            grad_softmax, (loss, per_direction, finals) = jax.grad(
                lambda parts: loss_of(state["bilm"], parts), has_aux=True)(differentiated)
            grad_bilm = None
        else:
            (grad_bilm, grad_softmax), (loss, per_direction, finals) = jax.grad(
                loss_of, argnums=(0, 1), has_aux=True)(state["bilm"], differentiated)
        dense, sparse = self._gradients(batch, grad_bilm, grad_softmax, ids)
        squares = [jnp.sum(g * g) for g in dense.values()] + [jnp.sum(v * v) for _, v in sparse.values()]
        norm = jnp.sqrt(sum(squares))
        clip = settings.all_clip_norm_val
        scale = clip * jnp.minimum(1.0 / norm, 1.0 / clip)
        scale = jnp.where(jnp.isfinite(loss) & jnp.isfinite(norm), scale, 0.0)
        parameters = self._parameters(state["bilm"], softmax)
        parameters, optimizer_state = optimizers.apply(settings.optimizer, settings.learning_rate, parameters,
                                                       state["optimizer"], dense, sparse, scale)
        new_state = {"bilm": [parameters[name] for name in self.names], "non_trainable": state["non_trainable"],
                     "softmax": {part: parameters[f"softmax/{part}"] for part in softmax},
                     "optimizer": optimizer_state, "lstm": {key: finals[key] for key in state["lstm"]}}
        return new_state, {"loss": loss, "norm": norm, **per_direction}

    def _gradients(self, batch, grad_bilm, grad_softmax, ids):
        """`(dense, sparse)` gradients by parameter name (`optimizers.apply`'s): the biLM's (None in the softmax's
        warm-up), and the softmax's, whole (`ids` None: the full softmax) or the rows of `ids`
        (`{direction: (n,)}`, the labels and negatives). The token embedding's are the rows the batch reads,
        with the softmax's rows added where it is the softmax's table too; a warm-up leaves a shared table
        alone, as on TensorFlow (the softmax's biases alone)."""
        n_vocab = self.settings.n_tokens_vocab
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
            all_ids = jnp.concatenate([ids[d] for d in self.directions])
            rows_of = {part: jnp.concatenate([grad_softmax[part][d] for d in self.directions]) for part in ("W", "b")}
            sparse["softmax/b"] = optimizers.distinct_rows(all_ids, rows_of["b"], n_vocab)
            if not self.shares_embedding:
                sparse["softmax/W"] = optimizers.distinct_rows(all_ids, rows_of["W"], n_vocab)
        if grad_bilm is not None and self.embedding_name is not None:
            read = jnp.concatenate([batch[self.input_key + SUFFIXES[d]].reshape(-1) for d in self.directions])
            table = dense.pop(self.embedding_name)
            rows = jnp.unique(read, size=read.shape[0], fill_value=n_vocab)
            values = table.at[rows].get(mode="fill", fill_value=0.0)
            if self.shares_embedding:  # the sampled softmax's rows of the same table, summed with the batch's
                rows, values = optimizers.distinct_rows(jnp.concatenate([rows, all_ids]),
                                                        jnp.concatenate([values, rows_of["W"]]), n_vocab)
            sparse[self.embedding_name] = rows, values
        return dense, sparse

    def _tops_function(self, non_trainable, batch, lstm_states, seed):
        """`tops(bilm weights) -> ({direction: top layer (batch, time, P)}, {state key: final state})`, with
        dropout on the tops as on TensorFlow (`TrainingLM.run`)."""
        settings, n_layers = self.settings, self.options.n_layers
        inputs = {self.input_key: batch[self.input_key], **lstm_states}
        if "backward" in self.directions:
            inputs[self.input_key + "_reverse"] = batch[self.input_key + "_reverse"]
        if settings.dropout > 0:
            inputs["dropout_seed"] = seed

        def tops(bilm):
            outputs, _ = self.network.stateless_call(bilm, non_trainable, inputs, training=True)
            result = {}
            for d, direction in enumerate(self.directions):
                top = outputs[f"{direction}_{n_layers - 1}"]
                if settings.dropout > 0:
                    site = dropout_site(d, n_layers, n_layers)
                    top = jax_random.dropout(top, settings.dropout, jax_random.fold_in_int32(seed, site))
                result[direction] = top
            return result, {key: outputs[output_key] for key, output_key, _ in self.state_keys}

        return tops
