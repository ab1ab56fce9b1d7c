"""A run on JAX or PyTorch that starts from a published model (`bin/train_elmo.py --init_from` with
`KERAS_BACKEND=jax` or `torch`):
what `bilm.training.model.adaptation` describes, as a `start_state` of `train_on_jax`.

The run's options are `adaptation_options` (the model's architecture, the
caller's training keys); its first state takes the char CNN, highway,
projection and LSTM weights from the model's weight file and a new softmax
over the run's vocabulary (`bilm.training.jax.softmax_init`), with the
optimizer's start and LSTM states from zeros. The checkpoint holds all of
it, so a restart continues without the model.

Needs Keras on JAX or PyTorch (`KERAS_BACKEND=jax` or `torch`).
"""
from bilm.io.formats.weight_file import read_entries, weight_table
from bilm.training.jax.softmax_init import initialize_softmax_on_jax
from bilm.training.model.softmax_init import DEFAULT_SAMPLE_POSITIONS, DEFAULT_SOFTMAX_INIT, check_softmax_init


def adapted_start(model, data, softmax_init=DEFAULT_SOFTMAX_INIT, n_positions=DEFAULT_SAMPLE_POSITIONS, verbose=1):
    """The `start_state` of `train_on_jax` for a run adapted from `model`.

    Args:
        model: the `ModelToAdapt` (`open_model_to_adapt`) whose options gave the run's (`adaptation_options`).
        data: the run's training stream; the softmax fit reads its start.
        softmax_init: where the new softmax starts (`SOFTMAX_INITS`).
        n_positions: the most target positions the fit reads (`initialize_softmax`).
        verbose: 1 reports what was loaded and how the softmax starts.

    Returns:
        `start(step, state) -> state`: `state` (a `JaxTrainStep`'s initial
        state) with `"bilm"` and `"non_trainable"` the weight file's and
        `"softmax"` the new one. It also sets `step.network`'s variables to
        the file's.

    Raises:
        UserError for an unknown `softmax_init` (at once); the start raises
        `WeightFileError` listing the datasets the file lacks or shapes otherwise.
    """
    check_softmax_init(softmax_init)

    def start(step, state):
        n_loaded = load_model_weights_on_jax(step, model)
        network = step.network
        state = {**state, "bilm": [step.backend.copy(v.value) for v in network.trainable_variables],
                 "non_trainable": [step.backend.copy(v.value) for v in network.non_trainable_variables]}
        if verbose:
            print(f"Adapting {model.source} ({model.files.weight_file}): char CNN, highway, projection and LSTM "
                  f"weights loaded ({n_loaded} datasets); a new softmax over the training vocabulary.", flush=True)
        state, started = initialize_softmax_on_jax(step, state, data, softmax_init, n_positions)
        if verbose:
            print(describe_softmax_start(softmax_init, started), flush=True)
        return state

    return start


def load_model_weights_on_jax(step, model):
    """Sets the variables of `step.network` (a `JaxTrainStep` of `adaptation_options`) to `model`'s weight file;
    returns the number of datasets read (`weight_table`'s, every one the file must hold)."""
    entries = weight_table(step.network)
    arrays = read_entries(model.files.weight_file, entries)
    for entry in entries:
        entry.set(arrays[entry.name])
    return len(entries)


def describe_softmax_start(softmax_init, started):
    """One line about the softmax's start, from `fit_softmax`'s report."""
    if softmax_init == "random":
        return "The softmax starts random (softmax_init='random'), as from scratch."
    return (f"The softmax starts from the model's {'outputs' if softmax_init == 'fit' else 'encodings'} "
            f"(softmax_init={softmax_init!r}, fitted on {started['positions']:,} positions of the training text). "
            f"Full-softmax perplexity on positions kept apart: {started['frequency_perplexity']:.2f} with the "
            f"words' frequencies in its bias, against {started['unigram_perplexity']:.2f} for the frequencies "
            f"alone; it starts without them ({started['sample_perplexity']:.2f}).")
