"""TF1 Hub modules of ELMo (TF-Hub's google/elmo 1-3, DeepPavlov's Russian modules) in bilm's options and weights.

Such a module is bilm-tf's prediction graph saved by `tensorflow_hub`
(docs/formats.md, "TF-Hub modules"): `tfhub_module.pb`, `saved_model.pb`
and a TF checkpoint, `variables/variables.{index,data-*}`, read here with
TensorFlow's checkpoint reader. Its variables are the weight file's
datasets under `bilm/` (`bilm/char_embed`, `bilm/CNN/W_cnn_0`, ...), with
two differences: `char_embed` may hold the prediction graph's zero row in
front (262 rows), and the LSTM variables bear TF 1.x's later names,
`.../Cell{l}/rnn/lstm_cell/kernel`, `bias` and `projection/kernel` for
`LSTMCell/W_0`, `B` and `W_P_0` (which are read too). Beside them is the
module's learned scalar mix: TF-Hub's `aggregation/weights` and
`aggregation/scaling`, or DeepPavlov's `aggregation/elmo_output_ELMo_W`
and `aggregation/elmo_output_ELMo_gamma`; it becomes bilm's `scalar_mix`
(the start of `ELMoEmbedding`'s mix).

The sizes come from the variables' shapes; what no variable holds is that
of every bilm-tf release (`BILM_TF_RELEASE`): clips of 3, skip
connections, relu, 50 characters per token.
"""
import os

import numpy as np

from bilm.io.formats.weight_file import SCALAR_MIX_GROUP
from bilm.io.sources.model_cache import ModelFileError
from bilm.utils.backend import require_tensorflow

SCOPE = "bilm/"
CHECKPOINT_PREFIX = os.path.join("variables", "variables")
MARKERS = ("tfhub_module.pb", "saved_model.pb")
BILM_TF_RELEASE = {"cell_clip": 3, "proj_clip": 3, "use_skip_connections": True, "activation": "relu",
                   "max_characters_per_token": 50}
# (weights, scale) names of a module's learned scalar mix.
SCALAR_MIX_NAMES = (("aggregation/weights", "aggregation/scaling"),
                    ("aggregation/elmo_output_ELMo_W", "aggregation/elmo_output_ELMo_gamma"))
# The LSTM variables' names in a module -> in the weight file.
LSTM_NAMES = {"rnn/lstm_cell/kernel": "LSTMCell/W_0", "rnn/lstm_cell/bias": "LSTMCell/B",
              "rnn/lstm_cell/projection/kernel": "LSTMCell/W_P_0",
              "LSTMCell/W_0": "LSTMCell/W_0", "LSTMCell/B": "LSTMCell/B", "LSTMCell/W_P_0": "LSTMCell/W_P_0"}


class TFHubModuleError(ModelFileError):
    """A TF-Hub module that is not one of bilm-tf's ELMo graph, or whose variables contradict each other."""


def is_elmo_module(directory):
    """Whether `directory` holds a TF1 Hub module of bilm-tf's ELMo (a checkpoint with `bilm/CNN/W_cnn_0`)."""
    prefix = os.path.join(os.fspath(directory), CHECKPOINT_PREFIX)
    if not os.path.isfile(prefix + ".index"):
        return False
    require_tensorflow(f"Reading the TF-Hub module {os.fspath(directory)} (a TensorFlow checkpoint)")
    import tensorflow as tf

    try:
        return SCOPE + "CNN/W_cnn_0" in tf.train.load_checkpoint(prefix).get_variable_to_shape_map()
    except (tf.errors.OpError, ValueError):
        return False


def read_tf_hub_module(directory):
    """The ELMo module in `directory`, in bilm's layout.

    Returns:
        `(options dict, {HDF5 dataset name: float32 array})`, the weight
        file's names plus `scalar_mix/W` and `scalar_mix/gamma`.

    Raises:
        TFHubModuleError: the checkpoint is unreadable, or its variables
            are not those of one biLM (naming what is missing or wrong).
    """
    prefix = os.path.join(os.fspath(directory), CHECKPOINT_PREFIX)
    require_tensorflow(f"Reading the TF-Hub module {os.fspath(directory)} (a TensorFlow checkpoint)")
    import tensorflow as tf

    try:
        reader = tf.train.load_checkpoint(prefix)
    except (tf.errors.OpError, ValueError) as error:
        raise TFHubModuleError(f"Cannot read the variables of the TF-Hub module {directory} ({prefix}): {error}") \
            from None
    shapes = reader.get_variable_to_shape_map()
    names = {}  # weight file name -> module name
    for name in shapes:
        if name.startswith(SCOPE):
            inner = name[len(SCOPE):]
            rnn, _, rest = inner.partition("/RNN/MultiRNNCell/")
            if rest:
                cell, _, variable = rest.partition("/")
                if variable in LSTM_NAMES:
                    names[f"{rnn}/RNN/MultiRNNCell/{cell}/{LSTM_NAMES[variable]}"] = name
            elif inner == "char_embed" or inner.startswith(("CNN/", "CNN_high_", "CNN_proj/")):
                names[inner] = name
    arrays = {file_name: np.asarray(reader.get_tensor(name), np.float32) for file_name, name in names.items()}
    options = _options(arrays, directory)
    missing = [name for name in _weight_names(options) if name not in arrays]
    if missing:
        raise TFHubModuleError(
            f"{directory}: the module lacks {', '.join(missing[:8])} (the weight file's names, under {SCOPE}) of the "
            "biLM its other variables describe.")
    if arrays["char_embed"].shape[0] == 262:  # the prediction graph's zero padding row
        arrays["char_embed"] = arrays["char_embed"][1:]
    for weights_name, scale_name in SCALAR_MIX_NAMES:
        if weights_name in shapes and scale_name in shapes:
            arrays[f"{SCALAR_MIX_GROUP}/W"] = np.asarray(reader.get_tensor(weights_name), np.float32)
            arrays[f"{SCALAR_MIX_GROUP}/gamma"] = np.asarray(reader.get_tensor(scale_name), np.float32).reshape(1)
            if arrays[f"{SCALAR_MIX_GROUP}/W"].shape != (options["lstm"]["n_layers"] + 1,):
                raise TFHubModuleError(f"{directory}: {weights_name} has shape {shapes[weights_name]}, not one "
                                       "weight per layer of the biLM.")
            break
    return options, arrays


def _weight_names(options):
    """The weight file's datasets of the biLM that `options` describe (the module's names of them)."""
    cnn, lstm = options["char_cnn"], options["lstm"]
    n_filters = sum(number for _, number in cnn["filters"])
    names = ["char_embed"] + [f"CNN/{kind}_cnn_{i}" for i in range(len(cnn["filters"])) for kind in ("W", "b")]
    names += [f"CNN_high_{k}/{name}" for k in range(cnn["n_highway"])
              for name in ("W_carry", "b_carry", "W_transform", "b_transform")]
    names += ["CNN_proj/W_proj", "CNN_proj/b_proj"] if n_filters != lstm["projection_dim"] else []
    parts = ("W_0", "B", "W_P_0") if lstm["projection_dim"] < lstm["dim"] else ("W_0", "B")
    return names + [f"RNN_{d}/RNN/MultiRNNCell/Cell{layer}/LSTMCell/{part}"
                    for d in range(2) for layer in range(lstm["n_layers"]) for part in parts]


def _options(arrays, directory):
    """bilm's options of the biLM whose weight-file arrays are `arrays`, from their shapes."""
    def shape(name):
        if name not in arrays:
            raise TFHubModuleError(f"{directory}: the module has no variable {SCOPE}{name}; it is not bilm-tf's "
                                   "character biLM.")
        return arrays[name].shape

    rows, char_dim = shape("char_embed")
    filters = []
    while f"CNN/W_cnn_{len(filters)}" in arrays:
        _, width, _, number = shape(f"CNN/W_cnn_{len(filters)}")
        filters.append([int(width), int(number)])
    n_highway = 0
    while f"CNN_high_{n_highway}/W_carry" in arrays:
        n_highway += 1
    n_filters = sum(number for _, number in filters)
    projection_dim = shape("CNN_proj/W_proj")[1] if "CNN_proj/W_proj" in arrays else n_filters
    cell = "RNN_0/RNN/MultiRNNCell/Cell{}/LSTMCell/"
    n_layers = 0
    while cell.format(n_layers) + "W_0" in arrays:
        n_layers += 1
    dim = shape(cell.format(0) + "B")[0] // 4
    lstm_out = shape(cell.format(0) + "W_P_0")[1] if cell.format(0) + "W_P_0" in arrays else dim
    if rows not in (261, 262) or not filters or n_layers == 0 or lstm_out != projection_dim:
        raise TFHubModuleError(
            f"{directory}: the module's variables do not make one biLM (char_embed {rows} rows, {len(filters)} "
            f"convolutions, {n_layers} LSTM layers of output {lstm_out} over token encodings of {projection_dim}).")
    release = BILM_TF_RELEASE
    return {"lstm": {"dim": int(dim), "projection_dim": int(projection_dim), "n_layers": n_layers,
                     "cell_clip": release["cell_clip"], "proj_clip": release["proj_clip"],
                     "use_skip_connections": release["use_skip_connections"]},
            "char_cnn": {"activation": release["activation"], "embedding": {"dim": int(char_dim)}, "filters": filters,
                         "max_characters_per_token": release["max_characters_per_token"], "n_characters": 262,
                         "n_highway": n_highway}}
