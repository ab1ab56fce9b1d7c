"""The contract every optimizer of `bilm.optimizers` keeps."""
from bilm.utils.lazy_tensorflow import tf


class Optimizer:
    """An optimizer over named `tf.Variable`s, with sparse (row) updates.

    A subclass in a module of this package is an optimizer of the registry
    (`bilm.optimizers.OPTIMIZERS`) under its `name`. It sets:

    - `name`: the `optimizer` training key's value (and `--optimizer`'s).
    - `default_learning_rate`: the rate when the options give none.
    - `description`: what it is, for `--help`.
    - `slots_per_variable`: float32 copies of every variable its state
      holds (the memory estimate training prints).
    - `checkpoint_signature`: a checkpoint key only this optimizer's state
      writes, or None for the optimizer of checkpoints without any such key
      (by which a restart knows which optimizer wrote a checkpoint).
    - `slot_starts`: `{slot: the value every element starts at}`, its state
      per parameter, and `counts_steps`: its state also counts the steps
      taken.

    and implements `values_update` (its rule, once for every backend: in
    `keras.ops`, on the values of a parameter or of some of its rows, as
    TensorFlow's `update` here and JAX's step, `bilm.training.arrays.optimizers`,
    apply it), `__init__(variables, learning_rate)` (creating its state
    in the current distribution scope), `slots(name)` (the state variables
    of one variable) and `update(variable, gradient, *slots,
    gradient_scale)`.

    Attributes:
        accumulators: `{name: tf.Variable}`, the optimizer's state (what a
            checkpoint holds under `optimizer/`).
    """

    name = None
    default_learning_rate = None
    description = ""
    slots_per_variable = 1
    checkpoint_signature = None
    slot_starts = {}
    counts_steps = False

    @classmethod
    def values_update(cls, gradient, slots, learning_rate, taken, iterations):
        """One step on values, in `keras.ops` (any backend's arrays, inside a compiled step too).

        Args:
            gradient: the gradient of these values, scaled (zeros where the
                step is not taken).
            slots: `{slot: values}` of the state, the shape of `gradient`.
            learning_rate: float.
            taken: bool scalar, whether the step is taken (a zero gradient
                scale skips it).
            iterations: float32 scalar, the steps taken with this one
                (`counts_steps`; None otherwise).

        Returns:
            `(step, new slots)`: the values become `values - step`.
        """
        raise NotImplementedError

    @classmethod
    def accumulator_key(cls, name, slot):
        """The key of variable `name`'s `slot` (of `slot_starts`) in `accumulators`, which a TensorFlow
        checkpoint holds as `optimizer/<key>`: `name` where the optimizer has one slot, else `name/slot`."""
        return name if len(cls.slot_starts) == 1 else f"{name}/{slot}"

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
        """Updates `variables` `{name: var}` with `gradients` `{name: grad or None}`.

        `gradient_scale` (a float scalar >= 0, e.g. from
        `bilm.optimizers.global_norm_scale`) multiplies every
        gradient inside the update, so that scaling takes no pass over the
        gradients of its own; where it is 0 the step changes nothing, even
        for non-finite gradients (a skipped step).

        Call in cross-replica context (e.g. inside `merge_call`) when
        distributed; `strategy.extended.update` runs the update on every
        device's copy.
        """
        strategy = strategy or tf.distribute.get_strategy()
        for name, variable in variables.items():
            gradient = gradients.get(name)
            if gradient is not None:
                strategy.extended.update(
                    variable, self.update, args=(gradient, *self.slots(name), gradient_scale), group=False)
        self.finish_step(strategy, gradient_scale)
