"""Where a new softmax starts when a run on TensorFlow adapts a trained biLM: what the fit reads of its
`TrainingLM` (the top layer's outputs on the start of the text, the words' encodings); the fit itself is the
NumPy one every backend uses (`bilm.training.model.softmax_init.fit_softmax`)."""
import numpy as np

from bilm.models.token_encoding import build_token_encoder
from bilm.training.model.softmax_init import DEFAULT_SAMPLE_POSITIONS, fit_softmax, positions_of_stream
from bilm.utils.lazy_tensorflow import tf
from tensorflow_reference.tf_dataset import make_tf_dataset

_SUFFIXES = {"forward": "", "backward": "_reverse"}


def initialize_softmax(lm, data, method, n_positions=DEFAULT_SAMPLE_POSITIONS, frequency_bias=False):
    """Sets `lm`'s softmax (`W` `(n_tokens_vocab, P)`, `b`) as `method` says (`bilm.training.model.softmax_init`).

    Args:
        lm: a `TrainingLM` holding the trained biLM, character inputs.
        data: the training stream (its vocabulary: `data.vocab`, a
            `UnicodeCharsVocabulary` of `n_tokens_vocab` words), read from
            its beginning for `n_positions` target positions, or for one
            pass over its text when that is shorter (a second pass would
            repeat what the fit has seen, and the scale's share of the
            positions would no longer be text the fit did not use).
        method: one of `SOFTMAX_INITS`.
        frequency_bias: also start the bias at the words' log frequencies
            in the sample, for any method.

    Returns:
        `fit_softmax`'s report.
    """
    softmax, report = fit_softmax(TensorFlowBiLM(lm), data, method, n_positions, frequency_bias)
    if "W" in softmax:
        lm.softmax_weights.assign(softmax["W"])
    if "b" in softmax:
        lm.softmax_bias.assign(softmax["b"])
    return report


class TensorFlowBiLM:
    """A `TrainingLM` as the `TrainedBiLM` the fit reads (TensorFlow)."""

    def __init__(self, lm):
        self.lm = lm
        self.settings = lm.settings
        self._encoder = None

    def top_outputs(self, data, n_positions):
        lm, settings = self.lm, self.settings
        run = tf.function(lambda batch, states: lm.run(batch, states), reduce_retracing=True, autograph=False)

        def per_batch():
            states = lm.zero_states(settings.batch_size)
            for batch in make_tf_dataset(data, settings.batch_size, settings.unroll_steps, keys=lm.batch_keys()):
                tops, states = run(batch, states)
                yield [(top.numpy(), batch["next_token_id" + _SUFFIXES[direction]].numpy())
                       for direction, top in tops.items()]

        return positions_of_stream(per_batch(), n_positions)

    def encode_words(self, char_ids):
        if self._encoder is None:
            self._encoder = build_token_encoder(self.lm.network, self.lm.options)
        return self._encoder(char_ids[np.newaxis])[0].numpy()
