"""The training windows as a prefetching `tf.data.Dataset`."""
from bilm.errors import UserError
from bilm.training.data.lm_dataset import REVERSE_SUFFIX, BidirectionalLMDataset, check_positive
from bilm.utils.lazy_tensorflow import tf
from tensorflow_reference.interpreter_exit import ends_at_exit

# Batches made ahead while the training step runs (one generator makes
# them, so more would not come faster).
PREFETCH_BATCHES = 4


def batch_signature(lm_dataset, batch_size, num_steps):
    """`tf.TensorSpec`s of the batches of `lm_dataset`, None-valued keys left out."""
    specs = {
        "token_ids": tf.TensorSpec((batch_size, num_steps), tf.int32),
        "next_token_id": tf.TensorSpec((batch_size, num_steps), tf.int32),
    }
    if lm_dataset.max_word_length is not None:
        specs["token_characters"] = tf.TensorSpec(
            (batch_size, num_steps, lm_dataset.max_word_length), tf.int32
        )
    if isinstance(lm_dataset, BidirectionalLMDataset):
        specs.update({key + REVERSE_SUFFIX: spec for key, spec in list(specs.items())})
    return specs


def make_tf_dataset(lm_dataset, batch_size, num_steps, keys=None, skip=0):
    """A prefetching `tf.data.Dataset` of `lm_dataset.iter_batches(batch_size, num_steps)`.

    Elements are dicts of int32 tensors as in `iter_batches`, without the
    `token_characters` keys for a token-only vocabulary. Batches are
    prepared in the background while the training step runs. The stream
    ends once the interpreter begins to exit, so that an iterator left
    half-read cannot hang the exit (`bilm.utils.interpreter_exit`).

    Args:
        keys: the keys to keep (all by default); a key the dataset cannot
            give is a `ValueError` before any batch is read.
        skip: batches of the stream to pass over first (a restart on the
            same data continues where the checkpoint stopped).
    """
    batch_size = check_positive("batch_size", batch_size)
    num_steps = check_positive("num_steps", num_steps)
    signature = batch_signature(lm_dataset, batch_size, num_steps)
    if keys is not None:
        missing = [key for key in keys if key not in signature]
        if missing:
            raise UserError(
                f"The data batches lack {missing} (they have {sorted(signature)}); char-input options need a "
                "vocabulary loaded with max_word_length, and a bidirectional model needs "
                "BidirectionalLMDataset.")
        signature = {key: signature[key] for key in keys}

    def generate():
        for batch in ends_at_exit(lm_dataset.iter_batches(batch_size, num_steps, skip=skip)):
            yield {key: batch[key] for key in signature}

    dataset = tf.data.Dataset.from_generator(generate, output_signature=signature).prefetch(PREFETCH_BATCHES)
    # Without autotuning: an iterator left before its stream's end (the
    # end of a training call) then goes at once; with it, leaving waited
    # for tf.data's tuning thread, up to ten seconds.
    options = tf.data.Options()
    options.autotune.enabled = False
    return dataset.with_options(options)
