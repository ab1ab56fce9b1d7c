"""TensorFlow's optimizer updates of `tf.Variable`s, the reference the array step's updates
(`bilm.training.arrays.optimizers`) are tested against: each optimizer's rule (`values_update` and the rule
functions of `bilm.optimizers`) applied to variables, sparse gradients as deduplicated `IndexedSlices` whose
rows are scattered, dense ones in one compiled pass for a large variable, under a `tf.distribute` strategy.
bilm trained with them until every backend's runs moved to the array step."""
import functools

import tensorflow as tf

from bilm.optimizers import optimizer_class
from bilm.optimizers.adagrad import INITIAL_ACCUMULATOR_VALUE, SparseAdagrad, adagrad_rule
from bilm.optimizers.adam import SparseAdam, adam_rule, adam_step_size

# Variables of at least this many elements get the compiled pass.
COMPILED_MIN_ELEMENTS = 1 << 18


def deduplicate(gradient):
    """Sums the rows of an `IndexedSlices` that share an index (dense: unchanged).

    While a function compiled with XLA is traced, whose shapes cannot
    depend on the indices, the result keeps the number of rows it was
    given: the distinct indices (ascending) with their sums, then rows of
    zeros at index `dense_shape[0]`, past the end. XLA skips a scatter
    to such a row and clamps a gather from it, so the optimizers' sparse
    updates leave every variable as the sums alone would.
    """
    if not isinstance(gradient, tf.IndexedSlices):
        return gradient
    from bilm.ops.placement import compiling_with_xla

    if compiling_with_xla():
        return _deduplicate_in_place(gradient)
    unique, positions = tf.unique(gradient.indices)
    values = tf.math.unsorted_segment_sum(gradient.values, positions, tf.shape(unique)[0])
    return tf.IndexedSlices(values, unique, gradient.dense_shape)


def _deduplicate_in_place(gradient):
    """`deduplicate` with the shapes of `gradient` (see there): a stable
    sort of the indices puts equal ones together, in their order."""
    indices = gradient.indices
    n = tf.shape(indices)[0]
    order = tf.argsort(indices, stable=True)
    ascending = tf.gather(indices, order)
    first = tf.concat([[True], ascending[1:] != ascending[:-1]], axis=0)
    slot = tf.cumsum(tf.cast(first, tf.int32)) - 1
    values = tf.math.unsorted_segment_sum(tf.gather(gradient.values, order), slot, n)
    past_the_end = tf.fill([n], tf.cast(gradient.dense_shape[0], indices.dtype))
    # Equal indices write the same value to their slot.
    unique = tf.tensor_scatter_nd_update(past_the_end, slot[:, tf.newaxis], ascending)
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


def scaled(gradient, scale):
    """`gradient * scale`, or zeros where `scale` is 0 (even for non-finite values)."""
    return tf.where(scale > 0, gradient * scale, tf.zeros_like(gradient))


def dense_update(function):
    """`function` (tensors in, tensors out: its first operand the size of
    the variable, e.g. a slot) as a dense update.

    Where that operand has at least `COMPILED_MIN_ELEMENTS` elements the
    update runs compiled with XLA, one pass over memory instead of one per
    op, each with a temporary the size of the variable. Smaller variables
    fit in cache, where those passes cost little, and run as plain ops: XLA
    compiles once per shape, and a model has a dozen small shapes (biases,
    char CNN kernels), whose compilations made most of a short run's first
    step. The compiled function is the update's `compiled` attribute, made
    at its first use (so that the module imports without TensorFlow).
    """
    return _DenseUpdate(function)


class _DenseUpdate:
    def __init__(self, function):
        functools.update_wrapper(self, function)
        self.function = function
        self._compiled = None

    @property
    def compiled(self):
        if self._compiled is None:
            self._compiled = tf.function(self.function, jit_compile=True, autograph=False)
        return self._compiled

    def __call__(self, *tensors):
        size = tensors[0].shape.num_elements()
        if size is None or size >= COMPILED_MIN_ELEMENTS:
            return self.compiled(*tensors)
        return self.function(*tensors)


class VariableUpdates:
    """The side of an optimizer that updates `tf.Variable`s: `__init__(variables, learning_rate)` (its state
    created in the current distribution scope), `slots(name)` (the state variables of one variable),
    `update(variable, gradient, *slots, gradient_scale)` and `apply`.

    Attributes:
        accumulators: `{name: tf.Variable}`, the optimizer's state (what a
            TensorFlow checkpoint holds under `optimizer/`).
    """

    def slots(self, name):
        """The state variables of variable `name`, in `update`'s order."""
        raise NotImplementedError

    def update(self, variable, gradient, *slots_and_scale):
        """Applies one gradient to one variable (per device): `slots_and_scale` is
        `slots(name)` then `gradient_scale`, which multiplies the gradient first."""
        raise NotImplementedError

    def finish_step(self, strategy, gradient_scale):
        """Called after every variable's update of a step (e.g. to count the step)."""

    def apply(self, variables, gradients, strategy=None, gradient_scale=1.0):
        """Updates `variables` `{name: var}` with `gradients` `{name: grad or None}`, each times
        `gradient_scale` (a float scalar >= 0; 0 changes nothing, even for non-finite gradients). Call in
        cross-replica context when distributed: `strategy.extended.update` updates every device's copy."""
        strategy = strategy or tf.distribute.get_strategy()
        for name, variable in variables.items():
            gradient = gradients.get(name)
            if gradient is not None:
                strategy.extended.update(
                    variable, self.update, args=(gradient, *self.slots(name), gradient_scale), group=False)
        self.finish_step(strategy, gradient_scale)


class VariableAdagrad(VariableUpdates, SparseAdagrad):
    """Adagrad on `tf.Variable`s as TF1's `AdagradOptimizer` (no epsilon); an `IndexedSlices` gradient
    (deduplicated) updates only its rows of the variable and of the accumulator."""

    def __init__(self, variables, learning_rate, initial_accumulator_value=INITIAL_ACCUMULATOR_VALUE):
        self.learning_rate = learning_rate
        self.initial_accumulator_value = initial_accumulator_value
        self.accumulators = {}
        for name, variable in variables.items():
            self.accumulators[name] = tf.Variable(
                lambda v=variable: tf.fill(v.shape, tf.constant(initial_accumulator_value, v.dtype)),
                trainable=False, name=name.replace("/", "_") + "_adagrad")

    def slots(self, name):
        return (self.accumulators[name],)

    def update(self, variable, gradient, accumulator, gradient_scale=1.0):
        lr = tf.constant(self.learning_rate, variable.dtype)
        scale = tf.cast(gradient_scale, variable.dtype)
        if isinstance(gradient, tf.IndexedSlices):
            indices, values = gradient.indices, scaled(gradient.values, scale)
            step, accumulated = adagrad_rule(values, tf.gather(accumulator, indices), lr)
            accumulator.scatter_update(tf.IndexedSlices(accumulated, indices))
            return variable.scatter_sub(tf.IndexedSlices(step, indices))
        return _dense_adagrad_update(variable, accumulator, gradient, lr, scale)


def _dense_adagrad_update(variable, accumulator, gradient, learning_rate, gradient_scale):
    """The dense Adagrad step, with the gradient's scaling (`_dense_adagrad_values`,
    one compiled pass for a large variable: see `dense_update`)."""
    # Tensors in, tensors out: under MirroredStrategy, variables passed into
    # the compiled function and assigned there came out wrong.
    accumulator_value, variable_value = _dense_adagrad_values(
        tf.convert_to_tensor(accumulator), tf.convert_to_tensor(variable), gradient, learning_rate,
        gradient_scale)
    accumulator.assign(accumulator_value)
    return variable.assign(variable_value)


@dense_update
def _dense_adagrad_values(accumulator, variable, gradient, learning_rate, gradient_scale):
    step, accumulator = adagrad_rule(scaled(gradient, gradient_scale), accumulator, learning_rate)
    return accumulator, variable - step


class VariableAdam(VariableUpdates, SparseAdam):
    """Adam on `tf.Variable`s, lazy on sparse rows (the moments of rows a gradient does not touch keep their
    values); a step with `gradient_scale` 0 changes nothing, not even the moments or the step count."""

    def __init__(self, variables, learning_rate, beta_1=SparseAdam.BETA_1, beta_2=SparseAdam.BETA_2,
                 epsilon=SparseAdam.EPSILON):
        self.learning_rate = learning_rate
        self.beta_1, self.beta_2, self.epsilon = beta_1, beta_2, epsilon
        self.iterations = tf.Variable(0, dtype=tf.int64, trainable=False, name="adam_iterations")
        self.accumulators = {"iterations": self.iterations}
        for name, variable in variables.items():
            for moment in ("m", "v"):
                self.accumulators[f"{name}/{moment}"] = tf.Variable(
                    lambda v=variable: tf.zeros(v.shape, v.dtype), trainable=False,
                    name=name.replace("/", "_") + f"_adam_{moment}")

    def slots(self, name):
        return self.accumulators[f"{name}/m"], self.accumulators[f"{name}/v"]

    def _step_size(self, variable, taken):
        t = tf.cast(self.iterations + taken, variable.dtype)
        return adam_step_size(self.learning_rate, tf.constant(self.beta_1, variable.dtype),
                              tf.constant(self.beta_2, variable.dtype), t)

    def update(self, variable, gradient, first, second, gradient_scale=1.0):
        scale = tf.cast(gradient_scale, variable.dtype)
        taken = tf.cast(scale > 0, tf.int64)  # this step counts when it is taken
        step_size = self._step_size(variable, taken)
        b1, b2 = tf.constant(self.beta_1, variable.dtype), tf.constant(self.beta_2, variable.dtype)
        if isinstance(gradient, tf.IndexedSlices):
            indices, values = gradient.indices, scaled(gradient.values, scale)
            step, m_new, v_new = adam_rule(values, tf.gather(first, indices), tf.gather(second, indices), scale > 0,
                                           step_size, b1, b2, tf.constant(self.epsilon, variable.dtype))
            first.scatter_update(tf.IndexedSlices(m_new, indices))
            second.scatter_update(tf.IndexedSlices(v_new, indices))
            return variable.scatter_sub(tf.IndexedSlices(step, indices))
        # Tensors in and out (as adagrad's dense update); one compiled pass for a large variable.
        m_new, v_new, variable_value = _dense_adam_values(
            tf.convert_to_tensor(first), tf.convert_to_tensor(second), tf.convert_to_tensor(variable), gradient,
            scale, step_size, b1, b2, tf.constant(self.epsilon, variable.dtype))
        first.assign(m_new)
        second.assign(v_new)
        return variable.assign(variable_value)

    def finish_step(self, strategy, gradient_scale):
        # After the variables (which read it): one more step where this one was taken.
        strategy.extended.update(
            self.iterations, lambda iterations, scale: iterations.assign_add(tf.cast(scale > 0, tf.int64)),
            args=(gradient_scale,), group=False)


@dense_update
def _dense_adam_values(first, second, variable, gradient, scale, step_size, beta_1, beta_2, epsilon):
    step, first_new, second_new = adam_rule(scaled(gradient, scale), first, second, scale > 0, step_size, beta_1,
                                            beta_2, epsilon)
    return first_new, second_new, variable - step


VARIABLE_OPTIMIZERS = {"adagrad": VariableAdagrad, "adam": VariableAdam}


def make_optimizer(settings, variables):
    """The optimizer `settings.optimizer` names, over `variables` `{name: tf.Variable}`, at `settings.learning_rate`."""
    optimizer_class(settings.optimizer)  # a registered name
    return VARIABLE_OPTIMIZERS[settings.optimizer](variables, settings.learning_rate)
