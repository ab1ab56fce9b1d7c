"""Gradients and the optimizers: deduplicated sparse gradients, global-norm clipping, Adagrad (the original's), Adam."""
import tensorflow as tf

INITIAL_ACCUMULATOR_VALUE = 1.0


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
    each with a temporary the size of the variable."""
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


class SparseAdam:
    """Adam (Kingma and Ba) on `tf.Variable`s, lazy on sparse rows.

    `m = b1 m + (1 - b1) g; v = b2 v + (1 - b2) g^2;
    var -= lr sqrt(1 - b2^t) / (1 - b1^t) * m / (sqrt(v) + epsilon)`, with
    `t` the steps taken. An `IndexedSlices` gradient (deduplicated) updates
    only its rows of the variable and of both moments (the moments of rows
    it does not touch keep their values, as in "lazy" Adam), so the cost of a
    step does not grow with the vocabulary. A step with `gradient_scale` 0
    changes nothing, not even the moments or `t`.

    Args:
        variables: `{name: tf.Variable}`; moments are created for each, in
            the current distribution scope.
        learning_rate, beta_1, beta_2, epsilon: floats.

    Attributes:
        accumulators: `{name + "/m" or "/v": tf.Variable, "iterations": int64
            variable}`, the optimizer's state (what a checkpoint holds).
    """

    def __init__(self, variables, learning_rate, beta_1=0.9, beta_2=0.999, epsilon=1e-7):
        self.learning_rate = learning_rate
        self.beta_1, self.beta_2, self.epsilon = beta_1, beta_2, epsilon
        self.iterations = tf.Variable(0, dtype=tf.int64, trainable=False, name="adam_iterations")
        self.accumulators = {"iterations": self.iterations}
        for name, variable in variables.items():
            for moment in ("m", "v"):
                self.accumulators[f"{name}/{moment}"] = tf.Variable(
                    lambda v=variable: tf.zeros(v.shape, v.dtype), trainable=False,
                    name=name.replace("/", "_") + f"_adam_{moment}")

    def _step_size(self, variable, taken):
        t = tf.cast(self.iterations + taken, variable.dtype)
        return (self.learning_rate * tf.sqrt(1.0 - tf.pow(tf.constant(self.beta_2, variable.dtype), t))
                / (1.0 - tf.pow(tf.constant(self.beta_1, variable.dtype), t)))

    def update(self, variable, gradient, first, second, gradient_scale=1.0):
        """Applies one gradient (per device), first multiplied by `gradient_scale`."""
        scale = tf.cast(gradient_scale, variable.dtype)
        taken = tf.cast(scale > 0, tf.int64)  # this step counts when it is taken
        step_size = self._step_size(variable, taken)
        b1, b2 = tf.constant(self.beta_1, variable.dtype), tf.constant(self.beta_2, variable.dtype)
        if isinstance(gradient, tf.IndexedSlices):
            indices, values = gradient.indices, _scaled(gradient.values, scale)
            m = tf.gather(first, indices)
            v = tf.gather(second, indices)
            m_new = tf.where(scale > 0, b1 * m + (1 - b1) * values, m)
            v_new = tf.where(scale > 0, b2 * v + (1 - b2) * tf.square(values), v)
            first.scatter_update(tf.IndexedSlices(m_new, indices))
            second.scatter_update(tf.IndexedSlices(v_new, indices))
            step = tf.where(scale > 0, step_size * m_new / (tf.sqrt(v_new) + self.epsilon), tf.zeros_like(m_new))
            return variable.scatter_sub(tf.IndexedSlices(step, indices))
        # One compiled pass, tensors in and out (as _dense_adagrad_update).
        m_new, v_new, variable_value = _dense_adam_values(
            tf.convert_to_tensor(first), tf.convert_to_tensor(second), tf.convert_to_tensor(variable), gradient,
            scale, step_size, b1, b2, tf.constant(self.epsilon, variable.dtype))
        first.assign(m_new)
        second.assign(v_new)
        return variable.assign(variable_value)

    def apply(self, variables, gradients, strategy=None, gradient_scale=1.0):
        """Updates `variables` `{name: var}` with `gradients` `{name: grad or None}`; as `SparseAdagrad.apply`."""
        strategy = strategy or tf.distribute.get_strategy()
        for name, variable in variables.items():
            gradient = gradients.get(name)
            if gradient is not None:
                strategy.extended.update(
                    variable, self.update,
                    args=(gradient, self.accumulators[f"{name}/m"], self.accumulators[f"{name}/v"], gradient_scale),
                    group=False)
        # After the variables (which read it): one more step where this one was taken.
        strategy.extended.update(
            self.iterations, lambda iterations, scale: iterations.assign_add(tf.cast(scale > 0, tf.int64)),
            args=(gradient_scale,), group=False)


@tf.function(jit_compile=True)
def _dense_adam_values(first, second, variable, gradient, scale, step_size, beta_1, beta_2, epsilon):
    taken = scale > 0
    gradient = _scaled(gradient, scale)
    first_new = tf.where(taken, beta_1 * first + (1 - beta_1) * gradient, first)
    second_new = tf.where(taken, beta_2 * second + (1 - beta_2) * tf.square(gradient), second)
    step = tf.where(taken, step_size * first_new / (tf.sqrt(second_new) + epsilon), tf.zeros_like(first_new))
    return first_new, second_new, variable - step


def make_optimizer(settings, variables):
    """The optimizer `settings.optimizer` names, over `variables` `{name: tf.Variable}`:
    `SparseAdagrad` with the original's initial accumulator, or `SparseAdam`."""
    if settings.optimizer == "adam":
        return SparseAdam(variables, settings.learning_rate)
    return SparseAdagrad(variables, settings.learning_rate, INITIAL_ACCUMULATOR_VALUE)
