"""dump_weights: a checkpoint's weights, dumped, give BidirectionalLanguageModel the training model's outputs."""
import numpy as np
import pytest
import tensorflow as tf

from bilm.io.formats.weight_file import read_boundary_state
from bilm.models.bidirectional_lm import BidirectionalLanguageModel
from bilm.models.functional_bilm import state_keys
from bilm.options import load_options
from bilm.text.batching import Batcher, TokenBatcher
from bilm.training.convert.weight_export import dump_weights
from bilm.training.run.loop import train
from bilm.training.run.run_checkpoint import CheckpointError
from bilm.training.run.run_directory import latest_checkpoint
from tensorflow_reference.checkpoints import load_training_model
from training_helpers import MAX_CHARS, WORDS, open_data, tiny_options


@pytest.mark.slow
@pytest.mark.parametrize("char", [True, False])
def test_dumped_weights_load_in_bidirectional_language_model(tmp_path, training_corpus, char):
    options = tiny_options(char=char)
    save_dir = tmp_path / "ckpt"
    train(options, open_data(options, training_corpus), 1, save_dir, None, max_steps=3, verbose=0)
    with pytest.raises(CheckpointError, match="already holds a run's checkpoint.*restart"):
        train(options, open_data(options, training_corpus), 1, save_dir, None, max_steps=1, verbose=0)
    written = dump_weights(str(save_dir), str(save_dir / "weights.hdf5"))
    prediction = load_options(written["options_file"])
    lm = load_training_model(str(save_dir / "options.json"), latest_checkpoint(save_dir))

    sentences = [WORDS[0:4], WORDS[5:9], WORDS[16:20]]  # same length: full rows for padded=False
    if char:
        assert prediction.char_cnn.n_characters == 262
        shifted = Batcher(training_corpus["vocab"], MAX_CHARS).batch_sentences(sentences)
        model = BidirectionalLanguageModel(written["options_file"], written["weight_file"], stateful=False,
                                           start="zeros")
        inputs = {"token_characters": tf.constant(shifted - 1),
                  "token_characters_reverse": tf.constant(shifted[:, ::-1] - 1)}
    else:
        assert prediction.char_cnn is None
        shifted = TokenBatcher(training_corpus["vocab"]).batch_sentences(sentences)
        model = BidirectionalLanguageModel(
            written["options_file"], written["weight_file"], use_character_inputs=False,
            embedding_weight_file=written["embedding_weight_file"], stateful=False, start="zeros")
        inputs = {"token_ids": tf.constant(shifted - 1), "token_ids_reverse": tf.constant(shifted[:, ::-1] - 1)}
    assert shifted.min() > 0
    # Training ids are the prediction ids minus one (no padding row); the
    # backward stack reads the reversed window, its outputs in that order.
    reference = lm.network({**inputs, **lm.zero_states(len(sentences))})
    out = model(shifted)
    p = prediction.projection_dim
    np.testing.assert_allclose(out["token_embeddings"].numpy(), reference["token_embeddings"].numpy(), atol=1e-5)
    for layer in range(prediction.n_layers):
        top = out["lm_embeddings"].numpy()[:, layer + 1]
        np.testing.assert_allclose(top[..., :p], reference[f"forward_{layer}"].numpy()[:, 1:-1], atol=1e-5)
        np.testing.assert_allclose(top[..., p:], reference[f"backward_{layer}"].numpy()[:, ::-1][:, 1:-1],
                                   atol=1e-5)
    assert np.abs(out["lm_embeddings"].numpy()).max() > 0.01
    # The training run stored its boundary state, which the file carries and
    # a stateless model starts from unless told otherwise.
    state, n_starts = read_boundary_state(written["weight_file"])
    assert n_starts > 0 and state.keys() == {key for key, _, _ in state_keys(prediction)}
    for key, variable in lm.boundary_state.items():
        np.testing.assert_array_equal(state[key], variable.numpy())
    assert model.boundary_state is not None and BidirectionalLanguageModel(
        written["options_file"], written["weight_file"], stateful=False,
        use_character_inputs=char, embedding_weight_file=written.get("embedding_weight_file")).start == "warm"


@pytest.mark.slow  # over 3 s on two busy cores
def test_an_existing_options_file_is_replaced_only_if_it_holds_the_same_options(tmp_path, training_corpus):
    options = tiny_options()
    save_dir = tmp_path / "ckpt"
    train(options, open_data(options, training_corpus), 1, save_dir, None, max_steps=1, verbose=0)
    user_options = tmp_path / "my_options.json"
    user_options.write_text('{"mine": true}\n')
    vocab_before = open(training_corpus["vocab"]).read()
    for options_outfile in (user_options, training_corpus["vocab"]):
        with pytest.raises(ValueError, match="already exists .*never replaced without --overwrite"):
            dump_weights(save_dir, tmp_path / "w.hdf5", options_outfile)
    assert user_options.read_text() == '{"mine": true}\n' and open(training_corpus["vocab"]).read() == vocab_before
    assert not (tmp_path / "w.hdf5").exists()
    first = dump_weights(save_dir, tmp_path / "w.hdf5")
    again = dump_weights(save_dir, tmp_path / "w.hdf5")  # the same options: nothing is lost
    assert again == first and load_options(first["options_file"]).char_cnn.n_characters == 262
    dump_weights(save_dir, tmp_path / "w.hdf5", user_options, overwrite=True)
    assert load_options(str(user_options)).projection_dim == options["lstm"]["projection_dim"]
