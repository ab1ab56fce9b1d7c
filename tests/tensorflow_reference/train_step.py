"""TensorFlow's own training step, the reference the array step (`bilm.training.arrays.train_step`, which trains
on every backend) is tested against: `TrainingLM`'s losses differentiated with `tf.GradientTape`, the gradients
as `IndexedSlices` where TensorFlow makes them, and the optimizers' updates of `tf.Variable`s (`optimizers`), under a
`tf.distribute` strategy. bilm trained with it until every backend's runs moved to the array step."""
import functools

import tensorflow as tf

from bilm.backend.tensorflow.training_ops import compiles_whole_step
from bilm.ops import stateless_random
from tensorflow_reference.optimizers import deduplicate, global_norm_scale


class TrainStep:
    """One compiled optimizer step over the global batch, for any strategy.

    Replica r takes rows `[r * batch_size, (r + 1) * batch_size)` of the
    global batch and of the LSTM state variables, as bilm-tf's towers did.
    Gradients of `loss * unroll_steps` are averaged over replicas
    (`IndexedSlices` stay sparse), deduplicated, clipped to the global norm
    and applied by the run's optimizer (`optimizers`). A step whose loss or gradient norm is
    not finite changes no weight.

    With `settings.jit_compile` (`compiles_whole_step`) one replica's step
    is one XLA program: forward and backward pass, sampled softmax,
    clipping, the optimizer's update and the new LSTM states. Several
    replicas compile each one's forward and backward pass, and reduce and
    apply the gradients outside XLA (which compiles no all-reduce across
    the strategy's devices). The compiled step equals the uncompiled one
    to float32 round-off: its random numbers (negative samples, dropout
    masks) come from `bilm.ops.stateless_random`, the same under XLA.

    The first `settings.softmax_warmup_steps` steps (by the run's step
    count) differentiate and update the softmax alone: the biLM stays as it
    is and its backward pass is not computed.

    A step also carries the training loop's requests (stop, save) across
    workers: the flags each worker passes are averaged in the all-reduce
    the step makes anyway, so every worker learns at the same step that
    some worker raised one, without a collective of its own.
    """

    def __init__(self, lm, optimizer, lstm_states, strategy, settings, seed):
        self.lm = lm
        self.optimizer = optimizer
        self.lstm_states = lstm_states
        self.strategy = strategy
        self.settings = settings
        self.seed = int(seed)
        self.variables = lm.trainable_variables()
        self.jit_compile = compiles_whole_step(settings.jit_compile)
        # The whole step under XLA with one replica; each replica's gradients with several.
        self.compiles_whole = self.jit_compile and strategy.num_replicas_in_sync == 1
        self.function = self._step_function(self.variables)
        self.warmup_function = None
        if settings.softmax_warmup_steps:
            softmax = {name: v for name, v in self.variables.items() if name.startswith("softmax/")}
            self.warmup_function = self._step_function(softmax)

    def _step_function(self, variables):
        """The step's `tf.function`, updating `variables` (`{name: tf.Variable}`)."""
        gradients_of = functools.partial(self._gradients, variables=variables)
        if self.jit_compile and not self.compiles_whole:
            gradients_of = tf.function(gradients_of, jit_compile=True, reduce_retracing=True, autograph=False)
        step = functools.partial(self._step, variables=variables, gradients_of=gradients_of)
        return tf.function(step, jit_compile=True if self.compiles_whole else None, reduce_retracing=True,
                           autograph=False)

    def __call__(self, batch, step, requests=None):
        """Returns `{"loss", "norm", "forward"[, "backward"]}` scalars.

        With `requests`, a sequence of this worker's 0/1 flags, also
        `"requests"`: a float32 vector `(len(requests),)` of each flag's
        mean over all replicas of all workers, the same on every worker
        (positive when any worker raised the flag).
        """
        function = self.function
        if self.warmup_function is not None and step < self.settings.softmax_warmup_steps:
            function = self.warmup_function
        if requests is None:
            return function(batch, tf.constant(step, tf.int64))
        return function(batch, tf.constant(step, tf.int64), tf.constant(requests, tf.float32))

    def _step(self, batch, step, requests=None, *, variables, gradients_of):
        replica_step = functools.partial(self._replica_step, variables=variables, gradients_of=gradients_of)
        outputs = self.strategy.run(replica_step, args=(batch, step, requests))
        return tf.nest.map_structure(lambda x: self.strategy.experimental_local_results(x)[0], outputs)

    def _replica_step(self, batch, step, requests, *, variables, gradients_of):
        context = tf.distribute.get_replica_context()
        replica = context.replica_id_in_sync_group
        n_replicas = context.num_replicas_in_sync
        rows = self.settings.batch_size
        start = replica * rows
        local = {key: value[start:start + rows] for key, value in batch.items()}
        initial = {key: state[start:start + rows] for key, state in self.lstm_states.items()}
        seed = stateless_random.fold_in(
            tf.stack([tf.constant(self.seed, tf.int64), step]), tf.cast(replica, tf.int64))
        names = list(variables)
        loss, per_direction, finals, gradients = gradients_of(local, initial, seed)
        if n_replicas > 1:
            present = [i for i, g in enumerate(gradients) if g is not None]
            reduced = context.all_reduce(tf.distribute.ReduceOp.SUM, [gradients[i] for i in present])
            for i, g in zip(present, reduced):
                gradients[i] = g  # a sum; the scale below takes the mean
            if requests is None:
                loss, per_direction = context.all_reduce(tf.distribute.ReduceOp.MEAN, (loss, per_direction))
            else:
                # The identity places the input on this replica's device, which collectives need.
                loss, per_direction, requests = context.all_reduce(
                    tf.distribute.ReduceOp.MEAN, (loss, per_direction, tf.identity(requests)))
            finals = context.all_gather(finals, axis=0)
        gradients = [deduplicate(g) for g in gradients]
        scale, norm = global_norm_scale(gradients, self.settings.all_clip_norm_val, summed_over=n_replicas)
        # A step with a non-finite loss or norm changes nothing (scale 0).
        finite = tf.logical_and(tf.math.is_finite(loss), tf.math.is_finite(norm))
        scale = tf.where(finite, scale, tf.zeros_like(scale))
        context.merge_call(self._apply, args=(dict(zip(names, gradients)), scale, finals))
        outputs = {"loss": loss, "norm": norm, **per_direction}
        if requests is not None:
            outputs["requests"] = requests
        return outputs

    def _gradients(self, batch, initial, seed, *, variables):
        """`(loss, {direction: loss}, {state key: final state}, [gradient of loss * unroll_steps])`
        of one replica's rows, the gradients in the order of `variables` (None where one has none)."""
        with tf.GradientTape() as tape:
            loss, per_direction, finals = self.lm.losses(batch, initial, training=True, seed=seed)
            scaled_loss = loss * float(self.settings.unroll_steps)
        return loss, per_direction, finals, tape.gradient(scaled_loss, list(variables.values()))

    def _apply(self, strategy, gradients, gradient_scale, finals):
        self.optimizer.apply(self.variables, gradients, strategy, gradient_scale)
        for key, variable in self.lstm_states.items():
            strategy.extended.update(variable, _assign, args=(finals[key],), group=False)


def _assign(variable, value):
    return variable.assign(value)
