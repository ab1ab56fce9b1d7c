"""TF1 Hub modules of ELMo written for the tests: a bilm-tf weight file's variables under the module's names."""
import os

import h5py
import numpy as np
import tensorflow as tf

TF_HUB_MIX = ("aggregation/weights", "aggregation/scaling")
DEEPPAVLOV_MIX = ("aggregation/elmo_output_ELMo_W", "aggregation/elmo_output_ELMo_gamma")
MIX_W, MIX_GAMMA = np.array([0.5, -1.0, 2.0], np.float32), np.float32(1.7)


def _module_name(name, lstm_names):
    """The module's name of a weight file dataset (TF 1.x's later LSTM names, or the weight file's own)."""
    renamed = {"LSTMCell/W_0": "rnn/lstm_cell/kernel", "LSTMCell/B": "rnn/lstm_cell/bias",
               "LSTMCell/W_P_0": "rnn/lstm_cell/projection/kernel"}
    if lstm_names == "rnn":
        for old, new in renamed.items():
            name = name.replace(old, new)
    return "bilm/" + name


def write_module(folder, weight_file, char_rows=262, lstm_names="rnn", mix=TF_HUB_MIX, drop=()):
    """A TF1 Hub module's files: markers and the variables of `weight_file` under bilm-tf's graph names,
    written with TensorFlow's SaveV2, plus the scalar mix and a state buffer the graph also held."""
    variables = {}
    with h5py.File(weight_file, "r") as f:
        f.visititems(lambda name, item: variables.__setitem__(_module_name(name, lstm_names), item[...])
                     if isinstance(item, h5py.Dataset) else None)
    if char_rows == 262:
        table = variables["bilm/char_embed"]
        variables["bilm/char_embed"] = np.concatenate([np.zeros((1, table.shape[1]), table.dtype), table])
    variables["bilm/Variable"] = np.zeros((4, 6), np.float32)
    if mix is not None:
        variables[mix[0]], variables[mix[1]] = MIX_W, MIX_GAMMA if mix == TF_HUB_MIX else MIX_GAMMA.reshape(1)
    for name in drop:
        del variables[name]
    os.makedirs(os.path.join(folder, "variables"), exist_ok=True)
    names = sorted(variables)
    tf.raw_ops.SaveV2(prefix=os.path.join(folder, "variables", "variables"), tensor_names=names,
                      shape_and_slices=[""] * len(names), tensors=[tf.constant(variables[n]) for n in names])
    for marker in ("saved_model.pb", "tfhub_module.pb"):
        with open(os.path.join(folder, marker), "wb") as f:
            f.write(b"\n\x00")
    return folder
