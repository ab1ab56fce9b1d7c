"""The contract every optimizer of `bilm.optimizers` keeps."""


class Optimizer:
    """An optimizer's rule and what training needs to know of it.

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

    and implements `values_update`: its rule, once for every backend, in
    `keras.ops`, on the values of a parameter or of some of its rows, as
    the training step (`bilm.training.arrays.optimizers`) applies it.
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
