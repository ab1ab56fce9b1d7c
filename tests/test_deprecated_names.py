"""Renamed public names: the new name works, the old one still works with a DeprecationWarning naming the new
one, both at once is one clear error, and files written under the old names still load."""
import os
import re
import warnings
import zipfile

import h5py
import keras
import numpy as np
import pytest
import tensorflow as tf

import bilm
from bilm.beam.model_handler import ELMoModelHandler
from bilm.errors import UserError
from bilm.export import dump_bilm_embeddings, embed_file, export_layer
from bilm.models import BidirectionalLanguageModel, ELMoEmbedding
from helpers import SENTENCES, write_model


@pytest.fixture(scope="module")
def model(tmp_path_factory):
    options_file, weight_file, _ = write_model(tmp_path_factory.mktemp("renamed"))
    return options_file, weight_file


def _tokens():
    width = max(map(len, SENTENCES))
    return tf.constant([s + [""] * (width - len(s)) for s in SENTENCES])


def _bilm_deprecations(caught):
    """The DeprecationWarnings of bilm's old names among `caught` (other libraries' left out)."""
    return [w for w in caught if issubclass(w.category, DeprecationWarning) and " is deprecated; " in str(w.message)]


def _one_deprecation(caught, new_name):
    found = _bilm_deprecations(caught)
    assert len(found) == 1, [str(w.message) for w in found]
    assert new_name in str(found[0].message)
    assert found[0].filename == __file__  # it points at the caller's line
    return found[0]


# === kernel_dtype (inference), formerly matmul_dtype ===

def test_kernel_dtype_is_the_inference_argument_and_attribute(model):
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        elmo = bilm.ELMo(*model, start="zeros", kernel_dtype="int8")
        layer = ELMoEmbedding.from_files(*model, start="zeros", kernel_dtype="bfloat16")
        lm = BidirectionalLanguageModel(*model, stateful=False, start="zeros", kernel_dtype="bfloat16")
        handler = ELMoModelHandler("m", kernel_dtype="int8")
    assert _bilm_deprecations(caught) == []
    assert elmo.kernel_dtype == "int8" and "kernel_dtype='int8'" in repr(elmo)
    assert layer.kernel_dtype == "bfloat16" and lm.kernel_dtype == "bfloat16"
    assert handler.kernel_dtype == "int8" and "kernel_dtype='int8'" in repr(handler)
    assert elmo.keras_layer(start="zeros").kernel_dtype == "int8"
    config = layer.get_config()
    assert config["kernel_dtype"] == "bfloat16" and "matmul_dtype" not in config
    assert bilm.ELMo(*model, start="zeros").kernel_dtype == "float32"


@pytest.mark.parametrize("make", [
    lambda model, **kw: bilm.ELMo(*model, start="zeros", **kw),
    lambda model, **kw: bilm.load(os.path.dirname(model[0]), start="zeros", **kw),
    lambda model, **kw: BidirectionalLanguageModel(*model, stateful=False, start="zeros", **kw),
    lambda model, **kw: ELMoEmbedding.from_files(*model, start="zeros", **kw),
    lambda model, **kw: ELMoModelHandler("m", **kw),
], ids=["ELMo", "load", "BidirectionalLanguageModel", "ELMoEmbedding", "ELMoModelHandler"])
def test_matmul_dtype_still_works_warns_and_reads_back(model, make):
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        made = make(model, matmul_dtype="bfloat16")
    message = str(_one_deprecation(caught, "kernel_dtype='bfloat16'").message)
    assert message == "matmul_dtype= is deprecated; pass kernel_dtype='bfloat16' instead."
    assert made.kernel_dtype == "bfloat16"
    with pytest.warns(DeprecationWarning, match=r"\.matmul_dtype is deprecated; use \.kernel_dtype"):
        assert made.matmul_dtype == "bfloat16"
    with pytest.raises(UserError, match=r"^matmul_dtype= is the old name of kernel_dtype=; pass kernel_dtype= only"):
        make(model, kernel_dtype="float32", matmul_dtype="float32")


@pytest.mark.slow
def test_matmul_dtype_of_the_keras_layer_and_the_file_functions(model, tmp_path):
    elmo = bilm.ELMo(*model, start="zeros")
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        assert elmo.keras_layer(matmul_dtype="int8").kernel_dtype == "int8"
    _one_deprecation(caught, "kernel_dtype='int8'")
    input_file = tmp_path / "in.txt"
    input_file.write_text("The cat\nHi\n", encoding="utf-8")
    for write in embed_file, dump_bilm_embeddings:
        arguments = ((str(input_file), str(tmp_path / "out.hdf5"), *model) if write is embed_file else
                     (None, str(input_file), *model, str(tmp_path / "out.hdf5")))
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            assert write(*arguments, start="zeros", matmul_dtype="bfloat16", verbose=0, overwrite=True,
                         resume=False) == 2
        _one_deprecation(caught, "kernel_dtype='bfloat16'")
        with pytest.raises(UserError, match="pass kernel_dtype= only"):
            write(*arguments, start="zeros", kernel_dtype="bfloat16", matmul_dtype="bfloat16")


def _keras_file_with_old_names(path, old_path):
    """A copy of the .keras file at `path` whose configs say `matmul_dtype`, as files saved before the rename."""
    with zipfile.ZipFile(path) as source, zipfile.ZipFile(old_path, "w") as target:
        for item in source.infolist():
            data = source.read(item.filename)
            if item.filename == "config.json":
                data = data.decode("utf-8").replace('"kernel_dtype"', '"matmul_dtype"').encode("utf-8")
                assert b'"matmul_dtype"' in data
            target.writestr(item, data)


@pytest.mark.slow
def test_keras_files_with_matmul_dtype_load_without_a_warning_and_saving_warns_of_nothing(model, tmp_path):
    tokens = keras.Input(shape=(None,), dtype="string")
    layer = ELMoEmbedding.from_files(*model, start="zeros", kernel_dtype="bfloat16")
    tagger = keras.Model(tokens, keras.layers.Dense(2)(layer(tokens)))
    expected = tagger(_tokens()).numpy()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        tagger.save(tmp_path / "new.keras")
        _keras_file_with_old_names(tmp_path / "new.keras", tmp_path / "old.keras")
        restored = keras.models.load_model(tmp_path / "old.keras")
    assert _bilm_deprecations(caught) == []
    restored_layer = [lay for lay in restored.layers if isinstance(lay, ELMoEmbedding)][0]
    assert restored_layer.kernel_dtype == "bfloat16"
    np.testing.assert_array_equal(restored(_tokens()).numpy(), expected)
    for got, want in zip(restored.weights, tagger.weights):
        np.testing.assert_array_equal(np.asarray(got.numpy(), np.float32), np.asarray(want.numpy(), np.float32))
    with zipfile.ZipFile(tmp_path / "new.keras") as archive:
        assert '"kernel_dtype"' in archive.read("config.json").decode("utf-8")


# === .network: the Keras network of the biLM, wherever one is held ===

def test_network_is_the_keras_network_and_the_old_names_warn(model):
    elmo = bilm.ELMo(*model, start="zeros")
    layer = ELMoEmbedding.from_files(*model, start="zeros")
    for network in elmo.network, layer.network:
        assert isinstance(network, keras.Model) and network.name == "bilm"
    assert isinstance(elmo.language_model, BidirectionalLanguageModel)
    assert elmo.network is elmo.language_model.network
    for holder, old, new in [(elmo, "bilm", "language_model"), (elmo.language_model, "model", "network"),
                             (layer, "bilm", "network")]:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            assert getattr(holder, old) is getattr(holder, new)
        message = str(_one_deprecation(caught, f".{new}").message)
        assert message == f"{type(holder).__name__}.{old} is deprecated; use .{new} instead."
        with pytest.raises(AttributeError):
            setattr(holder, old, None)  # read-only


@pytest.mark.slow
def test_keras_files_keep_the_network_under_bilm_and_saving_warns_of_nothing(model, tmp_path):
    # Files saved before the rename hold the biLM's weights at `<layer>/bilm/...`: they still do, so those files
    # load as they did (the ELMoEmbedding tests load such files).
    tokens = keras.Input(shape=(None,), dtype="string")
    layer = ELMoEmbedding.from_files(*model, start="zeros")
    tagger = keras.Model(tokens, keras.layers.Dense(2)(layer(tokens)))
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        tagger.save(tmp_path / "tagger.keras")
        tagger.save_weights(tmp_path / "tagger.weights.h5")
        export_layer(layer, str(tmp_path / "saved_model"))
        restored = keras.models.load_model(tmp_path / "tagger.keras")
    assert _bilm_deprecations(caught) == []
    with h5py.File(tmp_path / "tagger.weights.h5", "r") as weights:
        paths = []
        weights.visit(paths.append)
    assert any(path.startswith("layers/el_mo_embedding/bilm/layers/highway/vars") for path in paths)
    assert not any("network" in path for path in paths)
    np.testing.assert_array_equal(restored(_tokens()).numpy(), tagger(_tokens()).numpy())


# === train_on_jax, train_from_files_on_jax, evaluate_from_files_on_jax: the one trainer's earlier names ===

@pytest.mark.parametrize("name, call", [
    ("train_on_jax", lambda f, missing: f({}, None, missing, restart=True)),
    ("train_from_files_on_jax", lambda f, missing: f("train*", "vocab.txt", missing, restart=True)),
    ("evaluate_from_files_on_jax", lambda f, missing: f("heldout*", "vocab.txt", missing)),
])
def test_the_array_trainers_earlier_names_are_the_one_trainers_with_a_warning(tmp_path, name, call):
    from bilm.training.run.run_checkpoint import CheckpointError

    missing = str(tmp_path / "missing")
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        with pytest.raises(CheckpointError, match=f"save_dir {missing} does not exist"):
            call(getattr(bilm.training, name), missing)
    new_name = name.replace("_on_jax", "")
    _one_deprecation(caught, f"bilm.training.{new_name}")
    assert getattr(bilm.training, new_name).__module__.startswith("bilm.training.run.")


# Modules moved to a folder that says what they are: the array trainer (bilm/training/jax/, which trains on
# PyTorch too) and TensorFlow's trainer (once beside the driver in run/, model/ and data/).
EARLIER_MODULES = {f"bilm.training.{old}": f"bilm.training.{new}" for old, new in {
    **{f"jax.{name}": f"arrays.{name}" for name in ("boundary_state_measure", "evaluation", "optimizers",
                                                     "softmax_init", "train_step", "training_run")},
    # bilm-tf's `test` reads a checkpoint of any backend, on any backend, in the one driver's folder.
    "tensorflow.evaluation": "run.evaluation",
    # TensorFlow trains with the array run as every backend does; its strategies are its backend's.
    "run.training_run": "arrays.training_run", "tensorflow.training_run": "arrays.training_run",
}.items()}
EARLIER_MODULES.update({name: "bilm.backend.tensorflow.distribution" for name in (
    "bilm.training.run.distribution", "bilm.training.tensorflow.distribution")})


@pytest.mark.parametrize("old, new", EARLIER_MODULES.items())
def test_a_moved_modules_earlier_path_gives_the_module_itself_with_a_warning(old, new):
    import importlib
    import sys

    sys.modules.pop(old, None)
    with pytest.warns(DeprecationWarning, match=rf"{re.escape(old)} is deprecated; import "
                                                rf"{re.escape(new)} \(the same module, moved"):
        earlier = importlib.import_module(old)
    assert earlier is importlib.import_module(new)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # imported once, it warns once
        exec(f"from {old} import __doc__ as again", {})
