"""What ELMoEmbedding accepts: the input type decided, inputs turned into the biLM's ids, TokenMask."""
import numpy as np
import pytest
import tensorflow as tf

import numpy_reference as R
from bilm.models.text_inputs import TokenMask, inputs_to_ids, output_time_shape, resolve_input_type
from bilm.options import load_options
from bilm.text.batching import Batcher, TokenBatcher
from bilm.text.graph_batching import token_vocab_table
from helpers import write_vocab
from layer_testing import run_layer_test

MAX_CHARS = 7
OPTIONS = load_options(R.make_options(max_chars=MAX_CHARS))
SENTENCES = [["The", "cat", "sat"], ["Hi"], []]
TOKENS = tf.constant([s + [""] * (3 - len(s)) for s in SENTENCES])
LINES = tf.constant([" ".join(s) for s in SENTENCES])
CHAR_IDS = Batcher(None, MAX_CHARS).batch_sentences(SENTENCES)  # (3, 5, 7), boundaries included
MASK = [[True, True, True], [True, False, False], [False, False, False]]


@pytest.fixture(scope="module")
def vocab_file(tmp_path_factory):
    return write_vocab(tmp_path_factory.mktemp("vocab"), ["The", "cat", "sat", "Hi"])


@pytest.mark.parametrize("input_type, inputs, use_character_inputs, shape", [
    ("auto", TOKENS, True, (3, 3)),
    ("tokens", TOKENS, True, (3, 3)),
    ("sentences", LINES, True, (3, None)),
    ("auto", CHAR_IDS, True, (3, 3)),
    ("token_ids", np.array([[1, 5, 2, 0], [1, 2, 0, 0]], np.int32), False, (2, 2)),
])
def test_token_mask_contract(input_type, inputs, use_character_inputs, shape):
    run_layer_test(TokenMask, {"input_type": input_type, "use_character_inputs": use_character_inputs}, inputs,
                   expected_output_shape=shape, expected_output_dtype="bool")


@pytest.mark.parametrize("input_type, inputs", [
    ("tokens", TOKENS), ("sentences", LINES), ("char_ids", CHAR_IDS), ("auto", CHAR_IDS)])
def test_token_mask_marks_the_real_tokens_of_every_input_type(input_type, inputs):
    np.testing.assert_array_equal(TokenMask(input_type)(inputs).numpy(), MASK)


def test_token_mask_of_token_ids_drops_the_boundaries(vocab_file):
    ids = TokenBatcher(vocab_file).batch_sentences(SENTENCES)
    np.testing.assert_array_equal(TokenMask(use_character_inputs=False)(ids).numpy(), MASK)


@pytest.mark.parametrize("inputs, use_character_inputs, expected", [
    (TOKENS, True, "tokens"), (TOKENS, False, "tokens"), (LINES, True, "sentences"),
    (CHAR_IDS, True, "char_ids"), (tf.constant([[1, 2]]), False, "token_ids")])
def test_auto_is_decided_by_the_dtype_and_rank(inputs, use_character_inputs, expected):
    assert resolve_input_type("auto", tf.convert_to_tensor(inputs), use_character_inputs) == expected
    assert resolve_input_type("tokens", tf.convert_to_tensor(inputs), use_character_inputs) == "tokens"


def test_output_time_shape_drops_the_two_boundaries_of_ids():
    assert output_time_shape("tokens", (4, 9)) == (4, 9)
    assert output_time_shape("sentences", (4,)) == (4, None)
    assert output_time_shape("char_ids", (4, 9, 50)) == (4, 7)
    assert output_time_shape("token_ids", (None, None)) == (None, None)


def test_text_and_ids_become_the_batchers_ids(vocab_file):
    expected_chars = CHAR_IDS
    for inputs in (TOKENS, LINES, CHAR_IDS):
        ids = inputs_to_ids(inputs, "auto", OPTIONS, True)
        assert ids.dtype == tf.int32
        np.testing.assert_array_equal(ids.numpy(), expected_chars)
    expected_tokens = TokenBatcher(vocab_file).batch_sentences(SENTENCES)
    table = token_vocab_table(vocab_file)
    np.testing.assert_array_equal(inputs_to_ids(TOKENS, "auto", OPTIONS, False, table).numpy(), expected_tokens)
    np.testing.assert_array_equal(inputs_to_ids(expected_tokens, "auto", OPTIONS, False).numpy(), expected_tokens)
    # sequence_len: every token inside the length is real, even ''.
    with_empty = inputs_to_ids(tf.constant([["a", ""]]), "tokens", OPTIONS, True, sequence_len=tf.constant([2]))
    np.testing.assert_array_equal(with_empty.numpy(), Batcher(None, MAX_CHARS).batch_sentences([["a", ""]]))


@pytest.mark.parametrize("inputs, kwargs, error, message", [
    (tf.constant([[1, 2, 3]]), {"requested_type": "tokens"}, TypeError,
     r"Who: input_type='tokens' needs a string tensor \(padding ''\). Received dtype int32, shape \(1, 3\)"),
    (TOKENS, {"use_character_inputs": False}, ValueError, "Who: a token-input biLM given text needs vocab_file="),
    (LINES, {"sequence_len": tf.constant([1, 1, 0])}, ValueError, "Who: sequence_len is only for input_type='tokens'"),
    (CHAR_IDS, {"sequence_len": tf.constant([1, 1, 0])}, ValueError, "Who: sequence_len is only for string tokens"),
    (np.zeros((2, 4, MAX_CHARS), np.float32), {}, TypeError,
     r"Who takes string tokens .* integer char_ids from Batcher \(input_type='auto'\). Received dtype float32"),
    (CHAR_IDS, {"requested_type": "token_ids"}, ValueError,
     "Who: this is a character biLM; it reads 'char_ids', not 'token_ids'"),
    (np.zeros((2, 4, MAX_CHARS + 1), np.int32), {}, ValueError,
     r"Who: char ids must have shape \(batch, time \+ 2, 7\) as Batcher gives them"),
])
def test_bad_inputs_are_clear_errors(inputs, kwargs, error, message):
    arguments = {"requested_type": "auto", "options": OPTIONS, "use_character_inputs": True, "who": "Who", **kwargs}
    with pytest.raises(error, match=message):
        inputs_to_ids(inputs, **arguments)
