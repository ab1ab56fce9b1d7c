"""The checks a batch of biLM ids passes before it runs: its shape, its rows against the state buffers, and
each id's range, so that bad input is one clear error rather than a failure deep in the network."""
import numpy as np

from bilm.errors import UserError
from bilm.text.batching import check_id_shape
from bilm.utils.backend import on_tensorflow


def check_id_values(values, options, width, n_token_vocab, max_rows=None):
    """Checks a NumPy batch of ids for a prediction biLM of `options`.

    Args:
        values: int `(batch, time, width)` char ids or `(batch, time)` token ids.
        width: `options.token_id_width` for char ids, None for token ids.
        n_token_vocab: rows of a token model's table (token ids only).
        max_rows: the most rows a batch may have (a stateful model's buffers), or None.
    """
    check_id_shape(values.shape, width)
    if max_rows is not None and values.shape[0] > max_rows:
        refuse_batch(values.shape[0], max_rows)
    if not values.size:
        return
    if width is None:
        _check_id_range(values, n_token_vocab, "")
        return
    checked = values
    if options.word_embedding is not None:
        checked = values[..., :-1]
        _check_id_range(values[..., -1], options.word_embedding.dictionary.n_ids + 1, "word ")
    _check_id_range(checked, options.char_cnn.n_characters, "")


def check_rows(batch, max_batch_size, who):
    """No more rows than `max_batch_size` in a batch of `batch` rows (an int, or a traced scalar): at once where
    the batch is known, else as TensorFlow's graph runs (`who` starts the message)."""
    message = (f"{who}: the batch has more rows than max_batch_size={max_batch_size}; "
               "split the batch or raise max_batch_size")
    if isinstance(batch, int):
        if batch > max_batch_size:
            raise UserError(message)
    elif on_tensorflow():
        import tensorflow as tf

        tf.debugging.assert_less_equal(batch, max_batch_size, message=message)


def refuse_batch(rows, max_batch_size):
    raise UserError(f"A batch of {rows} sentences exceeds max_batch_size={max_batch_size}; "
                    "split the batch or build the model with a larger max_batch_size.")


def _check_id_range(ids, n_ids, what):
    low, high = int(np.min(ids)), int(np.max(ids))
    if low < 0 or high >= n_ids:
        raise UserError(f"{what}ids must lie in [0, {n_ids}). Received values in [{low}, {high}].")
