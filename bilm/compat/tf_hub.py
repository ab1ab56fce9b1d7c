"""TF-Hub's ELMo module (`google/elmo/3`) as `tensorflow_hub` code calls it, on bilm: code written for it runs
after one changed import, `from bilm.compat import tf_hub as hub`.

    elmo = hub.load("allennlp:original")                      # anything bilm.load opens: a TF-Hub module's
    outputs = elmo.signatures["default"](tf.constant(["the cat is on the mat", "dogs are in the fog"]))
    outputs["elmo"]                                           # (2, 6, 1024)
    outputs = elmo.signatures["tokens"](tokens=tf.constant([["the", "cat"], ["dogs", ""]]),
                                        sequence_len=tf.constant([2, 1]))
    elmo = hub.Module("elmo_module_dir", trainable=True)     # TF1 style
    embeddings = elmo(["the cat is on the mat"], signature="default", as_dict=True)["elmo"]
    layer = hub.KerasLayer("elmo_module_dir", signature="default", output_key="elmo", trainable=True)

As TF-Hub's module computes them, each signature returns `word_emb`
`(batch, time, P)` (the character-based token encodings), `lstm_outputs1`,
`lstm_outputs2`, ... `(batch, time, 2P)`, `elmo` `(batch, time, 2P)` (the
layers' learned mix: a TF-Hub module's own, which bilm converts with its
weights, else equal weights) and `default` `(batch, 2P)` (the mean of `elmo`
over each sentence's tokens), with `sequence_len` int32 `(batch,)` and
`mask` bool `(batch, time)` beside them; sequence outputs are zero past each
sentence's length, and every sentence starts from zero LSTM states, as
there. `default` splits each string on whitespace; `tokens` reads `tokens`
strings `(batch, time)` up to each row's `sequence_len`. With `trainable`,
the mix's weights train (TF-Hub's 4 scalars); the biLM stays fixed.

Text is TensorFlow's (string ops): Keras on TensorFlow only, as TF-Hub.
"""
import keras
import tensorflow as tf

from bilm.errors import UserError
from bilm.io.sources.model_files import locate_model
from bilm.models.elmo_embedding import ELMoEmbedding
from bilm.models.text_inputs import tokens_to_ids
from bilm.text.graph_batching import sentences_to_tokens
from bilm.utils.backend import require_tensorflow

SIGNATURES = ("default", "tokens")


def _elmo_layer(handle, trainable, name=None):
    """The `ELMoEmbedding` (every output, zero start states) of the model at `handle` (anything `bilm.load`
    opens)."""
    require_tensorflow("bilm.compat.tf_hub (TF-Hub's text signatures)")
    files = locate_model(handle)
    return ELMoEmbedding.from_files(files.options_file, files.weight_file, output="all", input_type="tokens",
                                    trainable_mix=trainable, start="zeros", name=name or "elmo")


def _check_signature(signature):
    if signature not in SIGNATURES:
        raise UserError(f"signature must be one of {SIGNATURES} (TF-Hub's ELMo signatures). "
                        f"Received: signature={signature!r}")


def _outputs(layer, signature, inputs):
    """The dict of outputs of `signature` for its inputs: `default` a string tensor `(batch,)`; `tokens` a dict
    with `tokens` `(batch, time)` and `sequence_len` `(batch,)`."""
    if signature == "default":
        if isinstance(inputs, dict):
            inputs = inputs.get("text", next(iter(inputs.values())))
        tokens, sequence_len = sentences_to_tokens(tf.convert_to_tensor(inputs, tf.string)), None
    else:
        if not isinstance(inputs, dict) or set(inputs) != {"tokens", "sequence_len"}:
            raise UserError("The tokens signature takes a dict of 'tokens' (strings, (batch, time)) and "
                            "'sequence_len' (int32, (batch,)).")
        tokens = tf.convert_to_tensor(inputs["tokens"], tf.string)
        sequence_len = tf.cast(tf.convert_to_tensor(inputs["sequence_len"]), tf.int32)
    ids = tokens_to_ids(tokens, layer.options, layer.use_character_inputs, layer.text_tables, sequence_len)
    return layer.embed_ids(ids, training=False)


class ELMoHubObject(tf.Module):
    """What `load` returns: TF-Hub's loaded ELMo, its `signatures` (`"default"`, `"tokens"`) each a
    `tf.function` returning the dict of outputs (the module docstring).

    Attributes:
        signatures: `{"default": f(text), "tokens": f(tokens, sequence_len)}`;
            the arguments by position or by name.
        layer: the `ELMoEmbedding` underneath (its `mix` holds the trainable
            weights).
    """

    def __init__(self, handle):
        super().__init__(name="elmo")
        self.layer = _elmo_layer(handle, trainable=True)
        self.layer.build()
        default = tf.function(lambda text: _outputs(self.layer, "default", text),
                              input_signature=[tf.TensorSpec([None], tf.string, name="text")])
        tokens = tf.function(lambda tokens, sequence_len: _outputs(
            self.layer, "tokens", {"tokens": tokens, "sequence_len": sequence_len}),
            input_signature=[tf.TensorSpec([None, None], tf.string, name="tokens"),
                             tf.TensorSpec([None], tf.int32, name="sequence_len")])
        self.signatures = {"default": default, "tokens": tokens}


def load(handle, tags=None, options=None):
    """`hub.load(handle)` of an ELMo module: an `ELMoHubObject` of the model at `handle` (a TF-Hub module's
    folder, which bilm converts, or anything else `bilm.load` opens); `tags` and `options` are TF-Hub's
    SavedModel ones, unused."""
    del tags, options
    return ELMoHubObject(handle)


class Module:
    """TF1's `hub.Module(spec, trainable=False)` of an ELMo module, called as
    `module(inputs, signature="default", as_dict=False)`: the `default` output, or with `as_dict` the dict
    of every output (the module docstring). `variables` and `trainable_variables`: the mix's (trainable
    only with `trainable`)."""

    def __init__(self, spec, trainable=False, name="module", tags=None):
        del tags
        self.layer = _elmo_layer(spec, trainable, name=name)
        self.layer.build()

    @property
    def variables(self):
        return self.layer.weights

    @property
    def trainable_variables(self):
        return self.layer.trainable_weights

    def __call__(self, inputs=None, _sentinel=None, signature=None, as_dict=None):
        signature = signature or "default"
        _check_signature(signature)
        outputs = _outputs(self.layer, signature, inputs)
        return outputs if as_dict else outputs["default"]


class KerasLayer(keras.layers.Layer):
    """`hub.KerasLayer(handle, signature=..., output_key=..., signature_outputs_as_dict=...)` of an ELMo module.

    Call arguments:
        inputs: `default`: strings `(batch,)`; `tokens`: a dict of `tokens`
            `(batch, time)` and `sequence_len` `(batch,)`.

    Returns:
        the output `output_key` names, or every output as a dict with
        `signature_outputs_as_dict` (one of them is needed).
    """

    def __init__(self, handle, trainable=False, arguments=None, signature="default", signature_outputs_as_dict=None,
                 output_key=None, output_shape=None, **kwargs):
        del arguments, output_shape
        super().__init__(trainable=trainable, **kwargs)
        _check_signature(signature)
        if (output_key is None) == (not signature_outputs_as_dict):
            raise UserError("Give one of output_key= (e.g. 'elmo') and signature_outputs_as_dict=True, as "
                            "TF-Hub's KerasLayer asks for a module with several outputs.")
        self.signature, self.output_key = signature, output_key
        self.elmo = _elmo_layer(handle, trainable, name=f"{self.name}_elmo")

    def build(self, input_shape=None):
        self.elmo.build()
        self.built = True

    def call(self, inputs):
        outputs = _outputs(self.elmo, self.signature, inputs)
        return outputs if self.output_key is None else outputs[self.output_key]
