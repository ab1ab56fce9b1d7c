"""A `BidirectionalLanguageModel`'s calls on the portable path (every backend; TensorFlow's own are
`bilm.backend.tensorflow.language_model_calls`): the network compiled as its backend compiles it
(`inference_call`), over NumPy ids, with the state buffers read and written in between."""
import keras
import numpy as np
from keras import ops

from bilm.models.elmo_outputs import elmo_outputs
from bilm.models.id_checks import check_id_values
from bilm.models.network_calls import inference_call, padded_ids


class PortableCalls:
    """The calls of `language_model` (a `BidirectionalLanguageModel`) in `keras.ops`.

    Attributes:
        state_buffers: `{state key: keras.Variable (max_batch_size, size)}`.
        token_cache: None (each call encodes its batch, compiled).
    """

    token_cache = None

    def __init__(self, language_model, token_cache_size=0):
        del token_cache_size  # no cache on this path
        self.language_model = lm = language_model
        self.state_buffers = {key: keras.Variable(np.zeros([lm.max_batch_size, size], np.float32), trainable=False,
                                                  name=f"state_{key}")
                              for key, _, size in lm.state_keys}
        self._run = inference_call(lm.network)

    def check_ids(self, ids):
        """`ids` (integers, any array) as int32 NumPy, their values checked (`bilm.models.id_checks`)."""
        ids = np.asarray(keras.ops.convert_to_numpy(ids), np.int32)
        check_id_values(ids, self.language_model.options, *self.language_model.id_limits())
        return ids

    def __call__(self, ids, stateful, start):
        """The ELMo outputs (`elmo_outputs`) of checked `ids`: from and into the state buffers when `stateful`,
        else from the start states of `start` (None: the model's)."""
        lm = self.language_model
        batch, time = ids.shape[:2]
        inputs = {lm.input_key: padded_ids(ids)}
        starts = None if stateful else lm.start_states(start)
        for key, _, size in lm.state_keys:
            if stateful:
                inputs[key] = self.state_buffers[key].value[:batch]
            else:
                inputs[key] = np.broadcast_to(starts[key], (batch, size))
        outputs = self._run(inputs)
        per_row = {output_key for _, output_key, _ in lm.state_keys} | {"lengths"}
        outputs = {key: value if key in per_row else value[:, :time] for key, value in outputs.items()}
        if stateful:
            for key, output_key, _ in lm.state_keys:
                buffer = self.state_buffers[key]
                buffer.assign(ops.slice_update(buffer.value, (0, 0), outputs[output_key]))
        return elmo_outputs(outputs, lm.options.n_layers)
