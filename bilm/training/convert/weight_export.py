"""The latest checkpoint of a training directory as a weight file for prediction, on any backend: the run's
checkpoint (`bilm.training.run.run_checkpoint`), or an earlier run's TensorFlow checkpoint where it is newer
(read with NumPy: `bilm.training.convert.tensorflow_state`)."""
import glob
import os
import warnings

from bilm.io.formats.output_files import check_output_file
from bilm.io.formats.weight_file import WEIGHTS_KIND, save_bilm_weights, save_token_embeddings
from bilm.io.sources.model_files import options_file_beside
from bilm.models.functional_bilm import build_bilm
from bilm.options import holds_options, load_options, save_options
from bilm.training.config.settings import training_settings
from bilm.training.run import run_checkpoint, run_directory


def dump_weights(save_dir, outfile, options_outfile=None, overwrite=False):
    """Writes the latest checkpoint's biLM as an original-layout HDF5 weight file.

    Beside it go the options for prediction (`n_characters` 262), named
    `<outfile without .hdf5>_options.json` unless `options_outfile` is
    given, and for token inputs the token embedding file
    `<outfile without .hdf5>_token_embeddings.hdf5`, so that
    `BidirectionalLanguageModel(options_file, outfile, ...)` loads them as
    they are. A forward-only model's file has no backward datasets
    (`RNN_1/...`), which `BidirectionalLanguageModel` needs (a warning says so).
    The checkpoint's boundary state, if it has one, goes into the weight
    file as extra datasets (`boundary_state/...`, see docs/formats.md).

    Each file is written under a temporary name and renamed. None may be a
    file of the training directory; an existing weight or token embedding
    file is only replaced if bilm wrote it as one, an existing options file
    only if it holds these options already (or with `overwrite=True`); all
    of this is checked before the checkpoint is read.

    Every kind of checkpoint (the run's `checkpoint.npz`, and earlier runs'
    `jax_checkpoint.npz` and TensorFlow's `model.ckpt-<step>`) is read on
    any backend, without TensorFlow: the same files come out.

    Returns:
        dict with `weight_file`, `options_file` and, for token inputs,
        `embedding_weight_file`.
    """
    meta = run_directory.run_meta(save_dir)
    path = meta["path"]
    options = load_options(meta["options"])
    char = options.char_cnn is not None
    outfile = os.fspath(outfile)
    inputs = [os.path.join(os.fspath(save_dir), run_checkpoint.OPTIONS_FILE), path,
              *glob.glob(glob.escape(path) + ".*")]
    check_output_file(outfile, inputs, kind=WEIGHTS_KIND, overwrite=overwrite)
    options_outfile = options_outfile or options_file_beside(outfile)
    prediction_options = options.for_prediction(char)
    check_output_file(options_outfile, inputs + [outfile], overwrite=overwrite,
                      content=holds_options(prediction_options))
    embedding_file = _embedding_file(outfile)
    if not char:
        check_output_file(embedding_file, inputs, kind="token_embeddings", overwrite=overwrite)
    _, settings = training_settings(meta["options"])
    network = build_bilm(options, n_token_vocab=None if char else settings.n_tokens_vocab,
                         bidirectional=settings.bidirectional, dropout=settings.dropout,
                         layout="training", kernel_initializer="zeros", name="bilm")
    run_directory.read_network_weights(save_dir, meta, network, settings.optimizer)
    # The boundary state the run measured at its end (None: not yet, or a checkpoint of the first format).
    save_bilm_weights(network, outfile, run_directory.read_boundary_state(save_dir, meta))
    if not settings.bidirectional:
        warnings.warn(f"{save_dir} holds a forward-only biLM: {outfile} has no backward LSTM weights "
                      "(RNN_1/...), so BidirectionalLanguageModel cannot load it.", stacklevel=2)
    written = {"weight_file": outfile}
    if not char:
        save_token_embeddings(embedding_file, network.get_layer("token_embedding").embeddings.numpy())
        written["embedding_weight_file"] = embedding_file
    save_options(prediction_options, options_outfile)
    return {**written, "options_file": options_outfile}


def _embedding_file(outfile):
    """Where a token-input model's embedding table goes, beside its weight file."""
    return f"{outfile[:-5] if outfile.endswith('.hdf5') else outfile}_token_embeddings.hdf5"
