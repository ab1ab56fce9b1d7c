"""The boundary state: the LSTM state the biLM has at a sentence start in its training stream.

In training every row of a batch reads a running stream of sentences, and
`</S>` (forward) or `<S>` (backward) is only ever a target, never an input:
the forward LSTMs begin a sentence's `<S>` in the state the previous
sentence's last word left, and the backward LSTMs begin its `</S>` in the
state the next sentence's first word left. A sentence embedded from zero
states starts where the model never was in training; one embedded from the
mean of those start states (the boundary state) starts where it usually
was, and its vectors still depend on that sentence only.

`compute_boundary_state` runs a prediction network over consecutive
sentences as training does (each row a stream, states carried from one
sentence to the next) and averages the states at the sentence starts. The
state is stored in weight files as extra datasets, which readers of the
original layout ignore (`bilm.io.formats.weight_file.read_boundary_state`); where a
model starts each sentence is decided by `bilm.models.start_state`.
"""
import itertools

import numpy as np

from bilm.backend import backend_module
from bilm.errors import UserError
from bilm.models.functional_bilm import state_keys
from bilm.models.network_calls import inference_call, padded_ids, to_numpy

# Sentences averaged by default (warm_up from text, the end of training).
DEFAULT_N_SENTENCES = 1000
# Parallel streams of sentences, and the first sentences of each stream
# left out of the mean (they start from zero states).
ROWS = 16
BURN_IN = 2
# `shared_length`'s bound on the positions one length adds: padding runs the char CNN and the LSTMs' input
# products, not the steps past a batch's longest row, and each length would compile a program of its own
# (docs/performance.md).
SHARED_LENGTH_COST = 1.5


def compute_boundary_state(network, options, sentences, to_ids, n_sentences=DEFAULT_N_SENTENCES, rows=ROWS,
                           bidirectional=True):
    """The mean LSTM state at sentence starts, with states carried line to line.

    Args:
        network: a prediction-layout `build_bilm` model with its weights.
        options: its `BiLMOptions`.
        sentences: an iterable of sentences (lists of tokens) in text
            order; blank ones are skipped (training skips blank lines). The
            first `n_sentences + rows * BURN_IN` are read.
        to_ids: `(list of token lists) -> (batch, time + 2[, C])` ids with
            `<S>` and `</S>` and 0 padding (`Batcher.batch_sentences`).
        n_sentences: sentence starts averaged (at most; fewer if the text
            has fewer).
        rows: parallel streams, each reading a contiguous part of the text.
        bidirectional: the network has a backward stack.

    Returns:
        `({state key: float32 (size,)}, number of starts averaged)`, keys
        as in `state_keys(options)` (`forward_0_c`, ...).

    Raises:
        ValueError: fewer than two sentences.
    """
    text = [list(s) for s in itertools.islice((s for s in sentences if len(s)), n_sentences + rows * BURN_IN)]
    if len(text) < 2:
        raise UserError(f"Computing the boundary state needs at least 2 sentences; received {len(text)}.")
    # Few rows for a short text, so that most of it counts after the burn-in.
    rows = max(1, min(rows, len(text) // (4 * BURN_IN)))
    burn_in = min(BURN_IN, len(text) // rows - 1)
    per_row = len(text) // rows
    streams = [text[r * per_row:(r + 1) * per_row] for r in range(rows)]
    keys = state_keys(options, bidirectional)
    input_key = "token_characters" if options.char_cnn is not None else "token_ids"
    states = {key: np.zeros([rows, size], np.float32) for key, _, size in keys}
    sums = {key: np.zeros([size], np.float64) for key, _, size in keys}
    count = 0
    # One trace for every batch: each has its own number of time steps. The
    # rows are known, which spares the LSTMs a branch for larger batches.
    def signature():
        import tensorflow as tf

        return {input_key: tf.TensorSpec([rows, None] + ([] if input_key == "token_ids" else [None]), tf.int32),
                **{key: tf.TensorSpec([rows, size], tf.float32) for key, _, size in keys}}

    run = inference_call(network, signature)
    # A step's ids hold its longest sentence and <S> and </S> (forward), or one of them (backward).
    longest = [max(len(stream[step]) for stream in streams) for step in range(per_row)]
    length = shared_length([n + 2 for n in longest] + [n + 1 for n in longest])
    for step in range(per_row):
        if step >= burn_in:
            # The rows are read in turn until n_sentences starts are summed.
            take = min(rows, n_sentences - count)
            for key in sums:
                sums[key] += states[key][:take].sum(axis=0)
            count += take
            if count >= n_sentences:
                break
        ids = np.asarray(to_ids([stream[step] for stream in streams]), np.int32)
        lengths = np.count_nonzero(ids.reshape(ids.shape[0], ids.shape[1], -1).any(axis=-1), axis=1)
        # As in training, the forward LSTMs never read `</S>` and the
        # backward ones never read `<S>`.
        forward_ids = ids.copy()
        forward_ids[np.arange(rows), lengths - 1] = 0
        backward_ids = ids[:, 1:]
        for direction, direction_ids in (("forward", forward_ids), ("backward", backward_ids))[:1 + bidirectional]:
            outputs = run({input_key: padded_ids(direction_ids, length), **states})
            for key, output_key, _ in keys:
                if key.startswith(direction):
                    states[key] = to_numpy(outputs[output_key])
    return {key: (total / count).astype(np.float32) for key, total in sums.items()}, count


def shared_length(lengths):
    """The one length calls of `lengths` time steps are all padded to where the backend compiles a program per
    length (JAX): the longest's `padded_length`, one program instead of one per padded length, where that adds
    at most `SHARED_LENGTH_COST` times the positions each call's own padding has; None elsewhere (each call
    padded to its own)."""
    padded_length = backend_module("inference").padded_length
    if padded_length(1) == 1:  # a backend that compiles nothing per shape pads nothing
        return None
    padded = [padded_length(n) for n in lengths]
    return max(padded) if max(padded) * len(padded) <= SHARED_LENGTH_COST * sum(padded) else None


def check_boundary_state(state, options, source):
    """Checks that `state` has one vector of the right size per LSTM state of `options`."""
    expected = {key: size for key, _, size in state_keys(options)}
    found = {key: tuple(np.shape(value)) for key, value in state.items()}
    if found != {key: (size,) for key, size in expected.items()}:
        raise UserError(f"{source}: the boundary state does not match the model: it holds {found}, the options "
                         f"need {{key: (size,)}} for {expected}.")
    return state
