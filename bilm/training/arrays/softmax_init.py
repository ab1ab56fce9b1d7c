"""Where a new softmax of the array step starts: what the fit reads of the biLM (its top outputs on the start of
the text, the words' encodings), computed by the training step's network from a state's weights; the fit itself is the
NumPy one TensorFlow's runs use (`bilm.training.model.softmax_init.fit_softmax`).

Runs on Keras's TensorFlow, JAX and PyTorch backends.
"""
import numpy as np
from keras import ops

from bilm.backend.direct_call import stateless_direct_call
from bilm.models.token_encoding import build_token_encoder
from bilm.training.arrays.train_step import SUFFIXES
from bilm.training.model.softmax_init import DEFAULT_SAMPLE_POSITIONS, fit_softmax, positions_of_stream

# Words encoded at once are padded to a power of two of at least this many, so that few shapes compile.
_MIN_ENCODED_ROWS = 64


def initialize_softmax_of_state(step, state, data, method, n_positions=DEFAULT_SAMPLE_POSITIONS,
                                frequency_bias=False):
    """`state` with its softmax started as `method` says, and the fit's report (`fit_softmax`).

    Args:
        step: the run's `ArrayTrainStep` (character inputs).
        state: its state (`ArrayTrainStep.initial_state` or later): the
            biLM's weights the fit reads; `"softmax"` `{"W" (V, P), "b" (V,)}`
            is replaced (only `"b"`, or nothing, for `"random"`).
        data, method, n_positions, frequency_bias: as in
            `bilm.training.model.softmax_init.fit_softmax`.

    Returns:
        `(new state, report)`; the other entries of `state` are its own.
    """
    softmax, report = fit_softmax(StateBiLM(step, state), data, method, n_positions, frequency_bias)
    new_softmax = {**state["softmax"], **{key: ops.convert_to_tensor(value) for key, value in softmax.items()}}
    return {**state, "softmax": new_softmax}, report


class StateBiLM:
    """The `TrainedBiLM` that `fit_softmax` reads: `step`'s network with the weights of `state`.

    Args:
        step: an `ArrayTrainStep`.
        state: its state; the biLM's weights are read, not changed.
    """

    def __init__(self, step, state):
        self.step = step
        self.settings = step.settings
        self._weights = step.placement.first((state["bilm"], state["non_trainable"]))
        self._tops = None
        self._encode = None

    def top_outputs(self, data, n_positions):
        step, settings = self.step, self.settings
        if self._tops is None:
            self._tops = step.backend.compile_inference(self._tops_function())
        bilm, non_trainable = self._weights

        def per_batch():
            lstm = {key: ops.zeros((settings.batch_size, size), "float32") for key, _, size in step.state_keys}
            for batch in data.iter_batches(settings.batch_size, settings.unroll_steps):
                tops, lstm = self._tops(bilm, non_trainable, lstm,
                                        step.placement.first({key: batch[key] for key in step.batch_keys()}))
                yield [(ops.convert_to_numpy(tops[direction]), np.asarray(batch["next_token_id" + SUFFIXES[direction]]))
                       for direction in step.directions]

        return positions_of_stream(per_batch(), n_positions)

    def encode_words(self, char_ids):
        if self._encode is None:
            self._encode = self._encode_function()
        n = len(char_ids)
        rows = max(_MIN_ENCODED_ROWS, 1 << max(0, n - 1).bit_length())
        padded = np.zeros((rows, *char_ids.shape[1:]), np.int32)
        padded[:n] = char_ids
        return ops.convert_to_numpy(self._encode(padded[np.newaxis]))[0, :n].astype(np.float32)

    def _tops_function(self):
        """`tops(bilm, non_trainable, lstm, batch) -> ({direction: (batch, time, P)}, {state key: final})`:
        the network without dropout, the LSTM states carried."""
        step = self.step
        network, key, n_layers = step.network, step.input_key, step.options.n_layers

        def tops(bilm, non_trainable, lstm, batch):
            inputs = {key: batch[key], **lstm}
            if "backward" in step.directions:
                inputs[key + "_reverse"] = batch[key + "_reverse"]
            if step.settings.dropout > 0:
                inputs["dropout_seed"] = step.backend.random.seed_words(0, 0)
            outputs = stateless_direct_call(network, bilm, non_trainable, inputs, training=False)
            return ({d: outputs[f"{d}_{n_layers - 1}"] for d in step.directions},
                    {state_key: outputs[output_key] for state_key, output_key, _ in step.state_keys})

        return tops

    def _encode_function(self):
        """`encode(char_ids (1, n, max_chars)) -> (1, n, P)`: the network's token encoder with the state's
        weights (its variables are the network's, found by path)."""
        step = self.step
        encoder = build_token_encoder(step.network, step.options)
        bilm, non_trainable = self._weights
        trainable = dict(zip(step.names, bilm))
        non_trainable = dict(zip([v.path for v in step.network.non_trainable_variables], non_trainable))
        weights = ([trainable[v.path] for v in encoder.trainable_variables],
                   [non_trainable[v.path] for v in encoder.non_trainable_variables])
        run = step.backend.compile_inference(
            lambda weights, char_ids: stateless_direct_call(encoder, *weights, char_ids, training=False))
        return lambda char_ids: run(weights, step.placement.first(char_ids))
