"""The boundary state: the mean LSTM state at sentence starts of a stream, against the NumPy reference."""
import numpy as np
import pytest

import numpy_reference as R
from bilm.models.bidirectional_lm import BidirectionalLanguageModel
from bilm.models.boundary_state import BURN_IN, compute_boundary_state
from bilm.text.batching import Batcher
from helpers import SENTENCES, write_model

STREAM = [s for s in SENTENCES if s] * 2  # 8 non-empty sentences in text order
MAX_CHARS = 7


def _forward_row(sentences):
    """Shifted char ids `<S> s0 <S> s1 ...` in one row: the forward training
    stream, where `</S>` is only ever a target."""
    rows = []
    for sentence in sentences:
        rows.append(R._boundary_char_ids(R.BOS_CHAR, MAX_CHARS))
        rows += [R._word_char_ids(token, MAX_CHARS) for token in sentence]
    return np.asarray(rows, np.int32)[np.newaxis] + 1


def _backward_row(sentences):
    """The row whose right-to-left reading is the backward training stream
    `</S> rev(s0) </S> rev(s1) ...` (where `<S>` is only ever a target):
    `(s_k </S>) ... (s_0 </S>)` for the sentences in reverse order."""
    rows = []
    for sentence in reversed(sentences):
        rows += [R._word_char_ids(token, MAX_CHARS) for token in sentence]
        rows.append(R._boundary_char_ids(R.EOS_CHAR, MAX_CHARS))
    return np.asarray(rows, np.int32)[np.newaxis] + 1


def _reference_starts(weights, options):
    """The state entering every sentence start of the two training streams,
    each computed from scratch over the whole stream before it: forward
    `<S> s0 <S> s1 ...`, backward `</S> rev(s0) </S> rev(s1) ...`."""
    starts = {}
    for k in range(BURN_IN, len(STREAM)):
        forward = R.bilm_forward(weights, options, _forward_row(STREAM[:k]))
        backward = R.bilm_forward(weights, options, _backward_row(STREAM[:k]))
        for (d, layer), (c, h) in forward["final_states"].items():
            if d == 0:
                starts.setdefault(f"forward_{layer}_c", []).append(c[0])
                starts.setdefault(f"forward_{layer}_h", []).append(h[0])
        for (d, layer), (c, h) in backward["final_states"].items():
            if d == 1:
                starts.setdefault(f"backward_{layer}_c", []).append(c[0])
                starts.setdefault(f"backward_{layer}_h", []).append(h[0])
    return {key: np.mean(values, axis=0) for key, values in starts.items()}


def test_the_boundary_state_is_the_mean_state_at_sentence_starts_of_the_training_streams(tmp_path):
    options_file, weight_file, options = write_model(tmp_path)
    model = BidirectionalLanguageModel(options_file, weight_file, stateful=False, start="zeros")
    state, n_starts = compute_boundary_state(model.network, model.options, STREAM,
                                             Batcher(None, MAX_CHARS).batch_sentences, rows=1)
    assert n_starts == len(STREAM) - BURN_IN
    reference = _reference_starts(R.read_weights(weight_file), options)
    assert state.keys() == reference.keys()
    for key in state:
        assert state[key].dtype == np.float32
        np.testing.assert_allclose(state[key], reference[key], atol=1e-5, err_msg=key)
    assert max(np.abs(v).max() for v in state.values()) > 0.01


@pytest.mark.slow
def test_parallel_rows_read_contiguous_parts_and_blank_sentences_are_skipped(tmp_path):
    options_file, weight_file, _ = write_model(tmp_path)
    model = BidirectionalLanguageModel(options_file, weight_file, stateful=False, start="zeros")
    to_ids = Batcher(None, MAX_CHARS).batch_sentences
    text = STREAM * 2
    with_blanks = [s for sentence in text for s in (sentence, [])]
    two_rows, n_two = compute_boundary_state(model.network, model.options, with_blanks, to_ids, rows=2)
    halves = [compute_boundary_state(model.network, model.options, part, to_ids, rows=1)
              for part in (text[:len(text) // 2], text[len(text) // 2:])]
    assert n_two == sum(n for _, n in halves) == len(text) - 2 * BURN_IN
    for key in two_rows:
        np.testing.assert_allclose(two_rows[key], (halves[0][0][key] + halves[1][0][key]) / 2, atol=1e-6)
    limited, n_limited = compute_boundary_state(model.network, model.options, text, to_ids, n_sentences=5, rows=1)
    assert n_limited == 5
    # A short text cuts the rows down (and so the burn-in reads fewer sentences): still at most n_sentences.
    for n_sentences in (3, 6, 7):
        _, n_counted = compute_boundary_state(model.network, model.options, text * 4, to_ids, n_sentences=n_sentences)
        assert n_counted == n_sentences
    with pytest.raises(ValueError, match="at least 2 sentences"):
        compute_boundary_state(model.network, model.options, [["a"], []], to_ids)


def test_the_measure_pads_every_call_to_one_length_where_that_adds_few_positions(monkeypatch):
    from bilm.backend.jax import inference
    from bilm.models import boundary_state

    assert boundary_state.shared_length([10, 40]) is None  # this process's TensorFlow pads nothing
    monkeypatch.setattr(boundary_state, "backend_module", lambda name: inference)  # JAX's lengths
    # Padded to 12, 24, 32 and 32 each (100 positions), or all to 32 (128): one program.
    assert boundary_state.shared_length([10, 20, 26, 25]) == 32
    # 12, 12, 12 and 48 (84), or 192 at one length: each call its own.
    assert boundary_state.shared_length([10, 10, 10, 40]) is None
