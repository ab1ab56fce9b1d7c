"""Converting an original bilm-tf (TF1) training checkpoint into a run's checkpoint
(`bilm.training.run.run_checkpoint`), which every backend continues.

bilm-tf keeps the model under the variable scope `lm/` with the names of
the HDF5 weight file (`lm/char_embed`, `lm/CNN/W_cnn_0`,
`lm/RNN_0/RNN/MultiRNNCell/Cell0/LSTMCell/W_0`, ...), plus `lm/embedding`
(token inputs), `lm/softmax/W`, `lm/softmax/b`, the Adagrad slots
`<name>/Adagrad` and `global_step`. The name map is `weight_table` of
`bilm/weights_hdf5.py` with `lm/` in front, plus the rows below; its hooks
(conv kernel shape, `W_0` split) are the weight file's. The LSTM states
were fed, not stored, so the converted states start at zero.
"""
import os

import numpy as np

from bilm.io.formats.output_files import check_output_file
from bilm.io.formats.tensorflow_checkpoint import (
    TensorflowCheckpointError,
    listed_checkpoints,
    read_tensorflow_checkpoint,
)
from bilm.io.formats.weight_file import WeightEntry, weight_table
from bilm.models.functional_bilm import WEIGHTS_FOLLOW
from bilm.optimizers import ORIGINAL_RECIPE, optimizer_class
from bilm.options import holds_options, load_options, save_options
from bilm.presets import TRAINING_DEFAULTS
from bilm.training.arrays.train_step import ArrayTrainStep
from bilm.training.config.settings import training_settings
from bilm.training.run import run_checkpoint, run_directory
from bilm.training.run.run_checkpoint import OPTIONS_FILE, CheckpointError

SCOPE = "lm/"
SLOT_SUFFIX = "/Adagrad"
GLOBAL_STEP = "global_step"


def _variable_entry(name, variable):
    return WeightEntry(name, tuple(variable.shape), variable.numpy, variable.assign)


def _array_entry(name, arrays, key):
    """The entry of `arrays[key]`, a NumPy array replaced when set."""
    return WeightEntry(name, arrays[key].shape, lambda: arrays[key],
                       lambda value: arrays.__setitem__(key, np.asarray(value, np.float32)))


def tf1_table(step, softmax):
    """`[WeightEntry]` named as in bilm-tf's checkpoint, without the `lm/` scope.

    Covers every parameter the optimizer trains: the weight-file datasets of
    `step.network` (an `ArrayTrainStep`'s), `embedding` (token inputs), and
    `softmax/W` (unless shared) and `softmax/b` of `softmax` (`{part: NumPy
    array}`, whose arrays setting replaces).
    """
    entries = list(weight_table(step.network))
    if not step.use_character_inputs:
        entries.append(_variable_entry("embedding", step.network.get_layer("token_embedding").embeddings))
    entries += [_array_entry(f"softmax/{part}", softmax, part) for part in sorted(softmax)]
    return entries


def _read(stored, entries, suffix, required):
    """`{entry name: array}` of the entries found in `stored` (`{checkpoint name: array}`); a list of problems."""
    arrays, problems = {}, []
    for entry in entries:
        key = SCOPE + entry.name + suffix
        if key not in stored:
            if required:
                problems.append(f"missing '{key}' (expected shape {entry.shape})")
        elif tuple(stored[key].shape) != tuple(entry.shape):
            problems.append(f"'{key}' has shape {tuple(stored[key].shape)}, expected {tuple(entry.shape)}")
        else:
            arrays[entry.name] = stored[key]
    return arrays, problems


def training_options_for(options, stored):
    """The options (`BiLMOptions`) as training needs them.

    `n_characters` 261, `n_tokens_vocab` from the softmax table when absent,
    and bilm-tf's training defaults for the other training keys it lacks.
    """
    options = load_options(options).for_training()
    keys = {key: value for key, value in TRAINING_DEFAULTS.items() if options.get(key) is None}
    if options.get("n_tokens_vocab") is None:
        for key in (SCOPE + "softmax/W", SCOPE + "embedding"):
            if key in stored:
                keys["n_tokens_vocab"] = int(stored[key].shape[0])
                break
    return options.updated(**keys)


def convert_tf1_checkpoint(tf1_checkpoint, options, save_dir, max_to_keep=5):
    """Writes a TF1 bilm-tf checkpoint as the run's checkpoint of `save_dir`, which `train` continues on any
    backend. Runs on any backend: the checkpoint is read with NumPy.

    Args:
        tf1_checkpoint: the TF1 checkpoint prefix (`.../model.ckpt-935588`)
            or a directory holding one.
        options: its options (dict or file), completed by
            `training_options_for`.
        save_dir: where the checkpoint and `options.json` are written.

    Returns:
        The new checkpoint's file (`save_dir/checkpoint.npz`).

    Raises:
        CheckpointError listing every missing or mis-shaped variable, or
        when `save_dir` already holds a run's checkpoint (never replaced nor
        mixed with the converted one), checked before any work.
    """
    tf1_checkpoint = os.fspath(tf1_checkpoint)
    save_dir = os.fspath(save_dir)
    held = run_directory.newest_meta(save_dir) if os.path.isdir(save_dir) else None
    if held is not None:
        raise CheckpointError(f"{save_dir} already holds a run's checkpoint ({held['path']}, step {held['step']}); "
                              f"convert {tf1_checkpoint} into a new --save_dir.")
    tf1_checkpoint, stored = _read_tf1_checkpoint(tf1_checkpoint)
    parsed, settings = training_settings(training_options_for(options, stored), need_schedule=False)

    if settings.optimizer != ORIGINAL_RECIPE:
        raise CheckpointError(f"bilm-tf trained with Adagrad, so {tf1_checkpoint} holds Adagrad's state; convert it "
                              f"with options whose 'optimizer' is \"{ORIGINAL_RECIPE}\" (they say "
                              f"{settings.optimizer!r}).")

    options_file = os.path.join(save_dir, OPTIONS_FILE)
    check_output_file(options_file, [tf1_checkpoint], content=holds_options(parsed))  # another run's: refused
    with WEIGHTS_FOLLOW.on():  # nothing drawn: the checkpoint sets every weight
        step = ArrayTrainStep(parsed, settings)
    state = _array_state(step, stored, tf1_checkpoint)

    step_value = int(stored[GLOBAL_STEP]) if GLOBAL_STEP in stored else 0
    os.makedirs(save_dir, exist_ok=True)
    # The options first: a conversion stopped between the two files leaves the options alone, which a rerun
    # accepts (the same options), never a checkpoint that a rerun refuses to replace.
    save_options(parsed, options_file)
    # The stream it read is unknown (source 0): a restart starts its data at the beginning.
    return run_checkpoint.save_checkpoint(save_dir, state, step_value, parsed.to_dict(), None, data_batches=0,
                                          data_source=0, max_to_keep=max_to_keep)


def _read_tf1_checkpoint(tf1_checkpoint):
    """`(prefix, {name: array})`: the TF1 checkpoint `tf1_checkpoint` names (a prefix, or a directory: the newest
    its `checkpoint` file lists), its arrays under `lm/` and its step, read with NumPy (no TensorFlow needed)."""
    if os.path.isdir(tf1_checkpoint):
        found = listed_checkpoints(tf1_checkpoint)
        if not found:
            raise CheckpointError(f"No TF1 checkpoint ('checkpoint' file and *.index) in {tf1_checkpoint}.")
        tf1_checkpoint = found[-1]
    try:
        stored = read_tensorflow_checkpoint(tf1_checkpoint, lambda name: name.startswith(SCOPE) or name == GLOBAL_STEP)
    except (OSError, TensorflowCheckpointError) as e:
        raise CheckpointError(f"Cannot read the TF1 checkpoint {tf1_checkpoint}: {e}") from None
    return tf1_checkpoint, stored


def _array_state(step, stored, prefix):
    """The array step's state (`ArrayTrainStep.initial_state`'s structure, NumPy arrays) of the TF1 arrays
    `stored` (of checkpoint `prefix`): the weights and Adagrad's accumulators through the weight file's entries
    (`tf1_table`, its hooks), the LSTM states at zero; a `CheckpointError` listing every missing or mis-shaped
    array."""
    softmax = {part: np.zeros(shape, np.float32) for part, shape in step.softmax_shapes.items()}
    entries = tf1_table(step, softmax)
    arrays, problems = _read(stored, entries, "", required=True)
    slots, slot_problems = _read(stored, entries, SLOT_SUFFIX, required=False)
    problems += slot_problems
    if problems:
        raise CheckpointError(
            f"{prefix} does not match the options (is it the checkpoint of this model?):\n  "
            + "\n  ".join(problems))

    def parameters():
        """The values the entries set, `(bilm, softmax)` as the array step's state holds them."""
        return ([v.numpy() for v in step.network.trainable_variables],
                {part: value.copy() for part, value in softmax.items()})

    for entry in entries:
        entry.set(arrays[entry.name])
    bilm, softmax_weights = parameters()
    # The accumulators go through the same entries (the same hooks apply); a slot the checkpoint lacks starts
    # where Adagrad's accumulators start.
    start = optimizer_class(ORIGINAL_RECIPE).slot_starts["accumulators"]
    for variable in step.network.trainable_variables:
        variable.assign(np.full(tuple(variable.shape), start, np.float32))
    for part in softmax:
        softmax[part] = np.full(softmax[part].shape, start, np.float32)
    for entry in entries:
        if entry.name in slots:
            entry.set(slots[entry.name])
    bilm_slots, softmax_slots = parameters()
    return {"bilm": bilm, "non_trainable": [v.numpy() for v in step.network.non_trainable_variables],
            "softmax": softmax_weights,
            "optimizer": {"accumulators": {**dict(zip(step.names, bilm_slots)),
                                           **{f"softmax/{part}": value for part, value in softmax_slots.items()}}},
            # The LSTM states were fed, not stored: they start at zero.
            "lstm": {key: np.zeros((step.settings.batch_size, size), np.float32) for key, _, size in step.state_keys}}
