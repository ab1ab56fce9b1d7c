"""Converting a bilm-tf (TF1) training checkpoint, written here with the original names."""
import json
import os

import numpy as np
import pytest
import tensorflow as tf

import numpy_reference as R
from backend_processes import json_result, run_on_backend
from bilm.training.convert.tf1_checkpoint import convert_tf1_checkpoint
from bilm.training.convert.weight_export import dump_weights
from bilm.training.run import run_checkpoint
from bilm.training.run.loop import train
from bilm.training.run.run_checkpoint import CheckpointError, read_arrays, read_file_meta
from training_helpers import checkpoint_arrays, open_data, tiny_options, write_corpus

N_VOCAB, P = 23, 8


def _tf1_arrays(options, seed=0, token_inputs=False):
    """Random values under bilm-tf's names (from the NumPy oracle's own table), slots included."""
    rng = np.random.default_rng(seed)
    shapes = {name: shape for name, shape in R.expected_weight_shapes(options).items()}
    if token_inputs:
        shapes["embedding"] = (N_VOCAB, P)
    shapes.update({"softmax/W": (N_VOCAB, P), "softmax/b": (N_VOCAB,)})
    arrays = {}
    for name, shape in shapes.items():
        arrays[f"lm/{name}"] = rng.uniform(-0.5, 0.5, size=shape).astype(np.float32)
        arrays[f"lm/{name}/Adagrad"] = rng.uniform(1.0, 3.0, size=shape).astype(np.float32)
    arrays["global_step"] = np.array(1234.0, np.float32)  # bilm-tf's global_step is a float
    return arrays


def _write_tf1_checkpoint(prefix, arrays):
    """A TF1-style checkpoint whose keys are exactly the given names (no object graph)."""
    names = sorted(arrays)
    tf.raw_ops.SaveV2(prefix=prefix, tensor_names=names, shape_and_slices=[""] * len(names),
                      tensors=[tf.constant(arrays[name]) for name in names])
    assert sorted(name for name, _ in tf.train.list_variables(prefix)) == names
    return prefix


CONVERT = """
import json, sys
from bilm.training import convert_tf1_checkpoint
print(json.dumps(convert_tf1_checkpoint(sys.argv[1], json.loads(sys.argv[2]), sys.argv[3])))
"""


def _published_options(token_inputs=False):
    options = tiny_options(char=not token_inputs)
    del options["n_tokens_vocab"]
    if not token_inputs:
        options["char_cnn"]["n_characters"] = 262  # published options are prediction options
    return options


@pytest.mark.slow
def test_char_checkpoint_round_trip_and_fine_tuning(tmp_path):
    options = _published_options()
    arrays = _tf1_arrays(options)
    assert "lm/RNN_1/RNN/MultiRNNCell/Cell0/LSTMCell/W_P_0" in arrays and "lm/CNN_high_0/W_carry" in arrays
    prefix = _write_tf1_checkpoint(str(tmp_path / "tf1" / "model.ckpt-1234"), arrays)
    options_file = tmp_path / "published_options.json"
    options_file.write_text(json.dumps(options))
    save_dir = tmp_path / "converted"

    path = convert_tf1_checkpoint(prefix, str(options_file), save_dir)
    assert path == str(save_dir / "checkpoint.npz") and read_file_meta(path)["step"] == 1234
    saved_options = json.loads((save_dir / "options.json").read_text())
    assert saved_options["char_cnn"]["n_characters"] == 261 and saved_options["n_tokens_vocab"] == N_VOCAB

    # The weight file written from the converted checkpoint holds the TF1 values, bit for bit.
    written = dump_weights(str(save_dir), str(tmp_path / "weights.hdf5"))
    dumped = R.read_weights(written["weight_file"])
    assert sorted(dumped) == sorted(R.expected_weight_shapes(options))
    for name, value in dumped.items():
        np.testing.assert_array_equal(value, arrays[f"lm/{name}"], err_msg=name)

    ours = checkpoint_arrays(path)
    key = "{}/{}/.ATTRIBUTES/VARIABLE_VALUE".format
    np.testing.assert_array_equal(ours[key("softmax", "W")], arrays["lm/softmax/W"])
    np.testing.assert_array_equal(ours[key("optimizer", "softmax.SW")], arrays["lm/softmax/W/Adagrad"])
    np.testing.assert_array_equal(ours[key("optimizer", "char_cnn.Schar_embedding")], arrays["lm/char_embed/Adagrad"])
    np.testing.assert_array_equal(ours[key("optimizer", "char_cnn.Skernel_0")][np.newaxis],
                                  arrays["lm/CNN/W_cnn_0/Adagrad"])
    w_0 = arrays["lm/RNN_1/RNN/MultiRNNCell/Cell1/LSTMCell/W_0/Adagrad"]
    np.testing.assert_array_equal(ours[key("optimizer", "backward_lstm_1.Sinput_kernel")], w_0[:P])
    np.testing.assert_array_equal(ours[key("optimizer", "backward_lstm_1.Srecurrent_kernel")], w_0[P:])

    corpus = write_corpus(tmp_path, n_train=200, n_heldout=10)
    result = train(saved_options, open_data(saved_options, corpus), 1, save_dir, None, restart_ckpt_file=path,
                   max_steps=2, verbose=0)
    assert result["step"] == 1236
    tuned = checkpoint_arrays(result["checkpoint"])
    accumulator = tuned[key("optimizer", "softmax.SW")]
    before = arrays["lm/softmax/W/Adagrad"]
    assert np.all(accumulator >= before) and np.any(accumulator > before)


def test_token_checkpoint_embedding(tmp_path):
    options = _published_options(token_inputs=True)
    arrays = _tf1_arrays(options, seed=1, token_inputs=True)
    prefix = _write_tf1_checkpoint(str(tmp_path / "model.ckpt-1234"), arrays)
    path = convert_tf1_checkpoint(prefix, options, tmp_path / "converted")
    ours = checkpoint_arrays(path)
    np.testing.assert_array_equal(ours["model/token_embedding.Sembeddings/.ATTRIBUTES/VARIABLE_VALUE"],
                                  arrays["lm/embedding"])
    np.testing.assert_array_equal(ours["optimizer/token_embedding.Sembeddings/.ATTRIBUTES/VARIABLE_VALUE"],
                                  arrays["lm/embedding/Adagrad"])


def test_missing_and_misshaped_variables_are_listed(tmp_path):
    options = _published_options()
    arrays = _tf1_arrays(options)
    del arrays["lm/CNN/W_cnn_1"]
    arrays["lm/CNN_proj/W_proj"] = np.zeros((3, 3), np.float32)
    prefix = _write_tf1_checkpoint(str(tmp_path / "model.ckpt-7"), arrays)
    with pytest.raises(CheckpointError) as error:
        convert_tf1_checkpoint(prefix, options, tmp_path / "converted")
    message = str(error.value)
    assert "missing 'lm/CNN/W_cnn_1' (expected shape (1, 2, 4, 8))" in message
    assert "'lm/CNN_proj/W_proj' has shape (3, 3), expected (32, 8)" in message
    (tmp_path / "empty").mkdir()
    with pytest.raises(CheckpointError, match="No TF1 checkpoint"):
        convert_tf1_checkpoint(tmp_path / "empty", options, tmp_path / "other")
    with pytest.raises(CheckpointError, match="Cannot read the TF1 checkpoint"):
        convert_tf1_checkpoint(tmp_path / "model.ckpt-8", options, tmp_path / "other")
    with pytest.raises(CheckpointError, match="bilm-tf trained with Adagrad, .* whose 'optimizer' is \"adagrad\" "
                                              "\\(they say 'adam'\\)"):
        convert_tf1_checkpoint(prefix, {**options, "optimizer": "adam"}, tmp_path / "adam")
    assert not (tmp_path / "adam").exists()


def test_converting_into_a_save_dir_that_holds_a_run_is_refused_and_changes_nothing(tmp_path):
    options = _published_options()
    prefix = _write_tf1_checkpoint(str(tmp_path / "model.ckpt-1234"), _tf1_arrays(options))
    run = tmp_path / "run"
    convert_tf1_checkpoint(prefix, options, run)
    before = {name: (run / name).read_bytes() for name in os.listdir(run)}
    with pytest.raises(CheckpointError, match=f"{run} already holds a run's checkpoint .*step 1234.*into a new "
                                              "--save_dir"):
        convert_tf1_checkpoint(prefix, options, run)
    assert {name: (run / name).read_bytes() for name in os.listdir(run)} == before
    # An options.json of another model there, without a checkpoint: refused too, before anything is written.
    other = tmp_path / "other"
    other.mkdir()
    (other / "options.json").write_text('{"my": "options"}')
    with pytest.raises(ValueError, match="options.json"):
        convert_tf1_checkpoint(prefix, options, other)
    assert os.listdir(other) == ["options.json"] and (other / "options.json").read_text() == '{"my": "options"}'


def test_a_conversion_stopped_before_its_checkpoint_is_written_converts_when_run_again(tmp_path, monkeypatch):
    options = _published_options()
    prefix = _write_tf1_checkpoint(str(tmp_path / "model.ckpt-1234"), _tf1_arrays(options))

    def stopped(*args, **kwargs):
        raise KeyboardInterrupt

    with monkeypatch.context() as patch:
        patch.setattr(run_checkpoint, "save_checkpoint", stopped)
        with pytest.raises(KeyboardInterrupt):
            convert_tf1_checkpoint(prefix, options, tmp_path / "run")
    assert os.listdir(tmp_path / "run") == ["options.json"]
    path = convert_tf1_checkpoint(prefix, options, tmp_path / "run")
    assert read_file_meta(path)["step"] == 1234
    assert sorted(os.listdir(tmp_path / "run")) == ["checkpoint.npz", "options.json"]


@pytest.mark.slow
@pytest.mark.parametrize("backend", ["jax", "torch"])
def test_jax_and_pytorch_convert_without_tensorflow_to_the_same_checkpoint(tmp_path, backend):
    """The TF1 checkpoint is read with NumPy: on JAX and PyTorch (TensorFlow not importable) the conversion
    writes the arrays TensorFlow's writes, bit for bit; given the folder, its `checkpoint` file names the newest."""
    options = _published_options()
    prefix = _write_tf1_checkpoint(str(tmp_path / "tf1" / "model.ckpt-1234"), _tf1_arrays(options, seed=2))
    (tmp_path / "tf1" / "checkpoint").write_text('model_checkpoint_path: "model.ckpt-1234"\n'
                                                 'all_model_checkpoint_paths: "model.ckpt-1234"\n')
    here = convert_tf1_checkpoint(prefix, options, tmp_path / "tensorflow")
    there = json_result(run_on_backend(backend, CONVERT, tmp_path / "tf1", json.dumps(options), tmp_path / backend))
    assert there == str(tmp_path / backend / "checkpoint.npz")
    want, got = read_arrays(here), read_arrays(there)
    assert sorted(got) == sorted(want) and len(want) > 20
    for key, value in want.items():
        np.testing.assert_array_equal(got[key], value, err_msg=key)
    assert read_file_meta(there)["step"] == read_file_meta(here)["step"] == 1234
