"""ELMo as a TensorFlow SavedModel that takes text (TF-Hub ELMo's signatures).

The SavedModel has two signatures, each returning a dict of
`word_emb` `(batch, time, P)`, `lstm_outputs1`, `lstm_outputs2`, ...
`(batch, time, 2P)`, `elmo` `(batch, time, 2P)`, `default` `(batch, 2P)`,
`mask` bool `(batch, time)` and `sequence_len` int32 `(batch,)`:

- `default`: `sentences` string `(batch,)`, split on whitespace;
- `tokens`: `tokens` string `(batch, time)` and `sequence_len` int32
  `(batch,)`; tokens at or beyond a row's `sequence_len` are ignored.

Reload with `tf.saved_model.load(export_dir)` (call `.default(sentences)`
or `.tokens(tokens, sequence_len)`, or use `.signatures[...]`) or with
`keras.layers.TFSMLayer(export_dir, call_endpoint="default")`.
"""
import contextlib
import os

import tensorflow as tf

from bilm.errors import UserError
from bilm.io.formats.output_files import OutputFileError, atomic_output, check_output_directory, writer_lock
from bilm.models.elmo_embedding import ELMoEmbedding
from bilm.models.text_inputs import tokens_to_ids
from bilm.ops.lowbit_matmul import stock_kernels
from bilm.text.graph_batching import sentences_to_tokens


class ELMoModule(tf.Module):
    """The `tf.Module` that is saved: an `ELMoEmbedding` and two `tf.function`s.

    Args:
        layer: an `ELMoEmbedding` taking text (a character biLM, or a
            token-input biLM with a `vocab_file`). Its current mix weights
            are exported (e.g. after training).
    """

    def __init__(self, layer):
        super().__init__(name="elmo")
        if not isinstance(layer, ELMoEmbedding):
            raise TypeError(f"layer must be an ELMoEmbedding. Received: {layer!r}")
        if not layer.use_character_inputs and layer.vocab_table is None:
            raise UserError(
                "Exporting a token-input biLM needs its vocabulary: build the ELMoEmbedding with vocab_file=.")
        if not layer.built:
            layer.build()
        self.layer = layer
        if layer.vocab_table is not None:
            # The SavedModel must own the lookup tables the functions use.
            self.vocab_lookup = layer.vocab_table.table
        if layer.dictionary_tables is not None:
            self.dictionary_lookups = layer.dictionary_tables.tables

    @tf.function(input_signature=[tf.TensorSpec([None], tf.string, name="sentences")])
    def default(self, sentences):
        return self._embed(sentences_to_tokens(sentences), None)

    @tf.function(input_signature=[tf.TensorSpec([None, None], tf.string, name="tokens"),
                                  tf.TensorSpec([None], tf.int32, name="sequence_len")])
    def tokens(self, tokens, sequence_len):
        return self._embed(tokens, sequence_len)

    def _embed(self, tokens, sequence_len):
        layer = self.layer
        ids = tokens_to_ids(tokens, layer.options, layer.use_character_inputs, layer.text_tables, sequence_len)
        return layer.embed_ids(ids, training=False)


def export_layer(layer, export_dir, overwrite=False):
    """Writes an `ELMoEmbedding` (its current weights) as a SavedModel.

    The SavedModel is written to a temporary directory next to
    `export_dir` and renamed at the end.

    Args:
        layer: `ELMoEmbedding` (see `ELMoModule`).
        export_dir: directory to create.
        overwrite: replace an existing `export_dir` that holds a SavedModel
            and nothing else (a directory holding any other file is never
            replaced: OutputFileError).

    Returns:
        `export_dir`.
    """
    export_dir = os.path.abspath(os.fspath(export_dir))
    check_output_directory(os.path.dirname(export_dir))
    with writer_lock(export_dir):
        _check_replaceable(export_dir, overwrite)
        module = ELMoModule(layer)
        # Stock ops only: the SavedModel must load where only TensorFlow is installed.
        with atomic_output(export_dir, directory=True) as tmp, _trainable_flags_saved(layer), stock_kernels():
            tf.saved_model.save(module, tmp, signatures={
                "default": module.default.get_concrete_function(),
                "tokens": module.tokens.get_concrete_function(),
            })
    return export_dir


# What a SavedModel directory holds (TensorFlow's and Keras's writers); `overwrite=True` replaces only
# a directory holding nothing else.
SAVED_MODEL_ENTRIES = ("saved_model.pb", "saved_model.pbtxt", "fingerprint.pb", "keras_metadata.pb", "variables",
                       "assets", "assets.extra")


def _check_replaceable(export_dir, overwrite):
    """Raises unless `export_dir` is missing, or `overwrite` and it is a SavedModel's directory."""
    if not os.path.lexists(export_dir):
        return
    if not overwrite:
        raise FileExistsError(f"{export_dir} already exists; pass overwrite=True or choose another directory.")
    if os.path.islink(export_dir) or not os.path.isdir(export_dir):
        raise OutputFileError(f"{export_dir} exists and is not a directory; overwrite=True replaces only a "
                              "SavedModel's directory. Choose another directory.")
    others = sorted(set(os.listdir(export_dir)) - set(SAVED_MODEL_ENTRIES))
    variables = os.path.join(export_dir, "variables")
    if os.path.isdir(variables):
        others += [os.path.join("variables", name) for name in sorted(os.listdir(variables))
                   if not name.startswith("variables.")]
    if others:
        shown = ", ".join(others[:5]) + (", ..." if len(others) > 5 else "")
        raise OutputFileError(f"{export_dir} holds files that are not a SavedModel's ({shown}); overwrite=True "
                              "replaces only a SavedModel's directory, never other files. Move them, or choose "
                              "another directory.")


@contextlib.contextmanager
def _trainable_flags_saved(layer):
    """Gives each TensorFlow variable its Keras variable's trainable flag while saving.

    A Keras layer frozen after it was built (a biLM with
    `trainable_bilm=False`) only marks its Keras variables; the TensorFlow
    variables beneath stay trainable, and the SavedModel records theirs, so
    `keras.layers.TFSMLayer` would fine-tune the whole biLM. The flag has no
    public setter, hence the private attribute, restored on the way out.
    """
    changed = []
    for variable in layer.weights:
        tf_variable = variable.value
        if tf_variable.trainable != variable.trainable:
            changed.append((tf_variable, tf_variable.trainable))
            tf_variable._trainable = variable.trainable
    try:
        yield
    finally:
        for tf_variable, flag in changed:
            tf_variable._trainable = flag


def export_saved_model(options_file, weight_file, export_dir, do_layer_norm=False, use_top_only=False,
                       embedding_weight_file=None, vocab_file=None, overwrite=False, start=None, warm_up=None):
    """Writes a pretrained biLM (with the initial, uniform mix) as a SavedModel.

    Args:
        options_file, weight_file: the biLM's `options.json` and HDF5 weights.
        export_dir: directory to create (see the module docstring for its
            signatures).
        do_layer_norm, use_top_only: how `elmo` mixes the layers (see
            `WeightLayers`); the mix starts uniform, `W = 0`, `gamma = 1`.
        embedding_weight_file, vocab_file: for a token-input biLM.
        overwrite: replace an existing `export_dir` that holds a SavedModel
            and nothing else.
        start, warm_up: where each sentence starts, as in `ELMoEmbedding`;
            the start state travels inside the SavedModel.

    Returns:
        `export_dir`.

    Example:
    ```python
    export_saved_model("options.json", "weights.hdf5", "elmo_savedmodel")
    elmo = tf.saved_model.load("elmo_savedmodel")
    elmo.default(tf.constant(["The cat sat ."]))["elmo"]  # (1, 4, 2P)
    ```
    """
    _check_replaceable(os.path.abspath(os.fspath(export_dir)), overwrite)  # before the model is read
    layer = ELMoEmbedding.from_files(options_file, weight_file, output="all", do_layer_norm=do_layer_norm,
                                     use_top_only=use_top_only, embedding_weight_file=embedding_weight_file,
                                     vocab_file=vocab_file, start=start, warm_up=warm_up, name="elmo")
    return export_layer(layer, export_dir, overwrite=overwrite)
