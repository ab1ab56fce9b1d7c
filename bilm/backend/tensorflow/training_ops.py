"""What a training step does its own way on TensorFlow, behind the names every backend's `training_ops` exports
(`bilm.backend.training_ops`): the gradient (`tf.GradientTape`), the step as one `tf.function` whose state is
held in `tf.Variable`s and updated in place (TensorFlow donates no buffers: a step that returned new tables
would copy the softmax's and its slots every step), rows of a table read and written with fixed shapes (XLA
compiles them too), the sampler and TensorFlow's random numbers.

The step's state is consumed as on PyTorch: `compile_step`'s call makes each array of the state a variable (the
first call, or after a restore), writes the step's new values into those variables (rows of a table scattered
in place, the rest assigned) and returns the same variables.
"""
import contextlib

import keras
import tensorflow as tf

from bilm.backend.tensorflow import random  # noqa: F401 (one of the shared names)
from bilm.backend.tensorflow.distribution import is_chief, make_strategy, n_workers
from bilm.errors import UserError
from bilm.ops.placement import device_type
from bilm.ops.sampled_softmax import log_uniform_candidates  # noqa: F401 (one of the shared names)

# Row indices: the step's ids and rows.
INDEX_DTYPE = "int32"

# Whether a signal may raise inside this backend's calls (a phase's work dropped at once): on TensorFlow it is
# raised between its ops.
INTERRUPTIBLE_CALLS = True

# What the training key jit_compile asks for that this backend does not do: {value: the warning}.
JIT_COMPILE_NOTES = {}


def compile_step(step, jit_compile="auto", placement=None):
    """`step(state, batch, step_number) -> (state, metrics)` as one `tf.function` over variables, compiled with
    XLA as the training key `jit_compile` says (`compiles_whole_step`): the call makes `state`'s arrays
    variables (those that are not), writes the step's new state into them and returns `(those variables,
    metrics)`; `state` is consumed. Over a strategy's replicas (`placement`), XLA compiles each replica's
    gradients (`Placement.each_replica`: it compiles no all-reduce across the strategy's devices)."""

    def run(variables, batch, step_number):
        new_state, metrics = step(variables, batch, step_number)
        for variable, value in zip(keras.tree.flatten(variables), keras.tree.flatten(new_state), strict=True):
            if value is not variable:  # a table's rows were written in place (`set_rows`, `add_rows`)
                variable.assign(value)
        return metrics

    whole = compiles_whole_step(jit_compile) and (placement is None or placement.strategy is None)
    function = tf.function(run, jit_compile=True if whole else None,
                           reduce_retracing=True, autograph=False)

    def call(state, batch, step_number):
        with contextlib.nullcontext() if placement is None else placement.scope():
            variables = keras.tree.map_structure(_variable, state)
        return variables, function(variables, batch, step_number)

    call.function = function  # the `tf.function` (its programs: `get_concrete_function`)
    return call


# Whether `jit_compile: "auto"` compiles the step with XLA on a CPU
# (docs/performance.md, "The training step under XLA").
COMPILED_ON_CPU = False


def compiles_whole_step(choice):
    """Whether a training step runs compiled with XLA: `choice` (the training key `jit_compile`) True or False
    as it says; `"auto"` on a GPU or other accelerator (`bilm.ops.placement.device_type`), and on a CPU as
    `COMPILED_ON_CPU` says."""
    if choice == "auto":
        return device_type() != "CPU" or COMPILED_ON_CPU
    return bool(choice)


def _variable(value):
    return value if isinstance(value, tf.Variable) else tf.Variable(value, trainable=False)


def compile_inference(function):
    """`function` as a `tf.function`, for calls that compute no gradient."""
    return tf.function(function, reduce_retracing=True, autograph=False)


def distinct_tokens_bound(char_ids, devices, widest_filter=None):
    """None: TensorFlow's char CNN encodes each distinct token once itself (its fast path), no bound asked."""
    return None


def distinct_tokens_at_most(bound):
    """Nothing to set (`distinct_tokens_bound`)."""
    return contextlib.nullcontext()


def gradients(loss, arguments):
    """`(gradients, aux)` of `loss(*arguments) -> (scalar, aux)`: `gradients` a tuple, one tree of the shapes
    of each argument (zeros where the loss does not depend on it; a table read by rows, dense)."""
    # Each use its own gradient, as on JAX: a variable passed again (a table that is the softmax's too) is read
    # into a tensor of its own; one passed once is watched as it is (a read would copy a table updated by rows).
    leaves, seen = [], set()
    for leaf in keras.tree.flatten(arguments):
        leaves.append(tf.identity(leaf) if id(leaf) in seen else leaf)
        seen.add(id(leaf))
    with tf.GradientTape(watch_accessed_variables=False) as tape:
        for leaf in leaves:
            tape.watch(leaf)
        value, aux = loss(*keras.tree.pack_sequence_as(arguments, leaves))
    found = tape.gradient(value, leaves, unconnected_gradients=tf.UnconnectedGradients.ZERO)
    grads = [tf.convert_to_tensor(g) for g in found]
    return tuple(keras.tree.pack_sequence_as(arguments, grads)), aux


def take_rows(table, ids):
    """`table[ids]` (every id a row of `table`), differentiated as the rows read."""
    return tf.gather(table, ids)


def _distinct(rows, n_rows):
    """`(distinct, index)`: the distinct ids of int `rows` `(n,)` ascending, then `n_rows` up to `n` entries;
    `index[i]` the entry of `rows[i]` in `distinct`."""
    n = tf.shape(rows)[0]
    order = tf.argsort(rows, stable=True)
    ordered = tf.gather(rows, order)
    first = tf.logical_or(tf.not_equal(ordered, tf.roll(ordered, 1, 0)), tf.range(n) == 0)
    position = tf.cumsum(tf.cast(first, rows.dtype)) - 1
    # Entries of one id write the same value.
    distinct = tf.tensor_scatter_nd_update(tf.fill([n], tf.cast(n_rows, rows.dtype)), position[:, None], ordered)
    return distinct, tf.scatter_nd(order[:, None], position, [n])


def unique_rows(rows, n_rows):
    """The distinct ids of int `rows` `(n,)` ascending, then `n_rows` (no row) up to `n` entries."""
    return _distinct(rows, n_rows)[0]


def distinct_rows(rows, values, n_rows):
    """`(distinct rows, their summed values)` of a row-sparse gradient, each with `rows`' length: the distinct
    rows ascending, then `n_rows` (no row), whose values are zeros."""
    distinct, index = _distinct(rows, n_rows)
    return distinct, tf.math.unsorted_segment_sum(values, index, tf.shape(rows)[0])


def _inside(table, rows):
    """`(inside, mask)`: whether each of `rows` is a row of `table`, `(n,)` and broadcastable to its rows."""
    n_rows = table.shape[0] if table.shape[0] is not None else tf.shape(table)[0]  # static: a variable not read
    inside = rows < tf.cast(n_rows, rows.dtype)
    return inside, tf.reshape(inside, [-1] + [1] * (len(table.shape) - 1))


def gather_rows(table, rows, fill):
    """`table[rows]`, `fill` where a row is past the table's end."""
    inside, mask = _inside(table, rows)
    values = tf.gather(table, tf.where(inside, rows, tf.zeros_like(rows)))
    return tf.where(mask, values, tf.cast(fill, values.dtype))


def set_rows(table, rows, values):
    """`table` with `table[rows] = values` (distinct rows); rows past the end are dropped. A variable's rows are
    written in place (the variable returned)."""
    values = tf.cast(values, table.dtype)
    inside, mask = _inside(table, rows)
    # A row past the end writes again what another entry writes: the first row inside, or row 0 as it is.
    any_inside = tf.reduce_any(inside)
    first = tf.argmax(tf.cast(inside, tf.int32), output_type=rows.dtype)
    again_row = tf.where(any_inside, rows[first], tf.zeros_like(rows[0]))
    again_value = tf.where(any_inside, values[first], tf.gather(table, 0))
    rows = tf.where(inside, rows, again_row)
    values = tf.where(mask, values, again_value[None])
    if isinstance(table, tf.Variable):
        table.scatter_update(tf.IndexedSlices(values, rows))  # a mirrored variable's too (every copy)
        return table
    return tf.tensor_scatter_nd_update(table, rows[:, None], values)


def add_rows(table, rows, values):
    """`table` with `values` added at `rows`; rows past the end are dropped. A variable's rows are updated in
    place (the variable returned)."""
    values = tf.cast(values, table.dtype)
    inside, mask = _inside(table, rows)
    rows = tf.where(inside, rows, tf.zeros_like(rows))
    values = tf.where(mask, values, tf.zeros_like(values))
    if isinstance(table, tf.Variable):
        table.scatter_add(tf.IndexedSlices(values, rows))
        return table
    return tf.tensor_scatter_nd_add(table, rows[:, None], values)


def copy(value):
    """A new variable of `value` (a Keras variable's value, a tensor or a NumPy array): a state's array, which
    the step then updates in place (no second copy of a table)."""
    return tf.Variable(value, trainable=False)


def hold_in(variables, values=None):
    """The state's arrays of a network's Keras `variables`, holding `values` (arrays of their shapes; None: their
    own values): the variables' own `tf.Variable`s, `values` written into them. The step updates its state in
    place, so the network's weights are held once, not once by the network and again by the state."""
    held = [variable.value for variable in variables]
    if values is not None:
        for variable, value in zip(held, values, strict=True):
            if value is not variable:
                write_into(variable, value)
    return held


def write_into(array, value):
    """The state's `array` holding `value` (an array of its shape and dtype), returned: a variable (what a state
    holds here) written in place, so that a restore holds the state once, not twice."""
    if isinstance(array, tf.Variable):
        array.assign(value)
        return array
    return tf.convert_to_tensor(value)


class Placement:
    """Where a step's tensors live: TensorFlow's default device (one replica), or a `tf.distribute` strategy's
    replicas, `n_replicas` of them in all its workers, each differentiating its rows of the global batch.

    With a strategy, the network and the state are made in its scope (`scope`): mirrored variables, a copy on
    each of this worker's devices, which each replica reads (XLA reads no variable of another device). The
    update runs once per worker, outside the replicas, and writes every copy; the gradients are all-reduced,
    so every worker applies the same update and the workers' copies stay equal.

    Args:
        devices: None, or a list of one device name (`training_devices`).
        strategy: None, or a `tf.distribute.Strategy` whose replicas share each batch.
    """

    def __init__(self, devices=None, strategy=None):
        self.strategy = strategy
        if strategy is None:
            self.devices = list(devices) if devices else training_devices(0)
            self.n_replicas, self.chief, self.n_workers = 1, True, 1
        else:
            self.devices = list(strategy.extended.worker_devices)
            self.n_replicas = strategy.num_replicas_in_sync
            self.chief, self.n_workers = is_chief(strategy), n_workers(strategy)
        self._agree = None

    @staticmethod
    def _tensors(tree):
        return keras.tree.map_structure(
            lambda x: x if isinstance(x, (tf.Variable, tf.Tensor)) else tf.convert_to_tensor(x), tree)

    rows = replicated = first = _tensors

    def scope(self):
        """Where the step's network and state are made: the strategy's scope (mirrored variables), or none."""
        return self.strategy.scope() if self.strategy is not None else contextlib.nullcontext()

    def each_replica(self, function, batch, lstm, n_rows, jit_compile="auto"):
        """What one device computes from the global `batch` and LSTM states `lstm` (dicts of arrays, rows
        stacked by replica), by `function(rows, lstm rows, replica) -> (means, sparse, stacked)` on each
        replica's rows (`replica` its number): `means` (a tree of arrays) averaged over the replicas, `sparse`
        (`{name: (rows, values)}`, distinct rows of a table of `n_rows`, padded with `n_rows`) gathered and
        summed by row (`distinct_rows`) then averaged, `stacked` (`{key: (rows, ...)}`) stacked in replica order.
        XLA compiles each replica's `function` as the training key `jit_compile` says (`compiles_whole_step`).
        Without a strategy, `function(batch, lstm, 0)`."""
        if self.strategy is None:
            return function(batch, lstm, 0)
        n_replicas = self.n_replicas
        if compiles_whole_step(jit_compile):
            function = tf.function(function, jit_compile=True, reduce_retracing=True, autograph=False)

        def replica_step(batch, lstm):
            context = tf.distribute.get_replica_context()
            replica = context.replica_id_in_sync_group
            size = tf.shape(next(iter(batch.values())))[0] // n_replicas
            start = replica * size
            rows = {key: value[start:start + size] for key, value in batch.items()}
            lstm_rows = {key: value[start:start + size] for key, value in lstm.items()}
            means, sparse, stacked = function(rows, lstm_rows, tf.cast(replica, tf.int64))
            means = context.all_reduce(tf.distribute.ReduceOp.MEAN, means)
            gathered = context.all_gather(sparse, axis=0) if sparse else {}
            sparse = {name: distinct_rows(rows_of, values / n_replicas, n_rows)
                      for name, (rows_of, values) in gathered.items()}
            return means, sparse, context.all_gather(stacked, axis=0)

        outputs = self.strategy.run(replica_step, args=(batch, lstm))
        return tf.nest.map_structure(lambda x: self.strategy.experimental_local_results(x)[0], outputs)

    def agree(self, requests):
        """The request flags (a sequence of 0/1) averaged over every replica of every worker: the same vector on
        each (positive where some worker raised the flag). One worker's are its own."""
        if self.n_workers == 1 or requests is None:
            return requests
        if self._agree is None:
            def mean(flags):
                context = tf.distribute.get_replica_context()
                # The identity places the flags on this replica's device, which collectives need.
                return context.all_reduce(tf.distribute.ReduceOp.MEAN, tf.identity(flags))

            self._agree = tf.function(lambda flags: self.strategy.experimental_local_results(
                self.strategy.run(mean, args=(flags,)))[0], autograph=False)
        return self._agree(tf.constant(requests, tf.float32)).numpy()


def training_placement(n_gpus, strategy=None):
    """The `Placement` a run trains on: `strategy`'s replicas (default `make_strategy(n_gpus)`: a cluster's workers,
    `n_gpus` GPUs), or TensorFlow's default device where that is the default strategy's one replica."""
    strategy = strategy or make_strategy(n_gpus)
    if strategy is tf.distribute.get_strategy() and strategy.num_replicas_in_sync == 1:
        return Placement()
    return Placement(strategy=strategy)


def training_devices(n_gpus):
    """The device of one replica, TensorFlow's default (`n_gpus` above 1 is refused in one line: several train
    with a strategy, `training_placement`)."""
    if (n_gpus or 0) > 1:
        raise UserError(f"n_gpus is {n_gpus}, and this trains on one device; several replicas train with a "
                        "tf.distribute strategy (bilm.training.train's n_gpus or strategy).")
    return [tf.config.list_logical_devices()[0].name]
