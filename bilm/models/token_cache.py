"""Token encodings kept across calls, so each distinct token is encoded once."""
import threading

import numpy as np

from bilm.errors import UserError


class TokenEncodingCache:
    """Char-CNN token encodings by char-id row, shared by every call.

    The token encoder (char CNN, highway, projection) sees one token at a
    time, so its output for a token never changes; natural text repeats a
    few thousand tokens over and over. Each call encodes only the distinct
    tokens it has not seen before and gathers the rest from the cache.
    Once `max_size` tokens are stored, new tokens are still encoded (every
    call) but no longer stored, so memory stays bounded by
    `max_size * dim` floats; the first tokens seen, in Zipfian text the
    frequent ones, are the ones kept.

    Args:
        encode: `(n, max_chars)` int32 char ids -> `(n, dim)` float32
            numpy; called with the tokens to encode.
        dim: size of one encoding.
        max_size: the most tokens kept.
    """

    def __init__(self, encode, dim, max_size):
        if max_size < 0:
            raise UserError(f"max_size must be >= 0. Received: max_size={max_size}")
        self._encode = encode
        self._slots = {}
        self._table = np.zeros([min(max_size, 1024), dim], np.float32)
        self.max_size = max_size
        self.hits = 0
        self.misses = 0
        self._lock = threading.Lock()

    def __len__(self):
        return len(self._slots)

    def clear(self):
        """Forgets every stored encoding and the counts: the next calls encode their tokens afresh (a cold
        cache, as a new model's; or after the encoder's weights change)."""
        with self._lock:
            self._slots.clear()
            self.hits = self.misses = 0

    def encodings(self, char_ids):
        """`(..., max_chars)` int char ids -> `(..., dim)` float32 encodings
        (all-zero rows, i.e. batch padding, are encoded like any token)."""
        distinct, index = self.distinct_encodings(char_ids)
        return distinct[index]

    def distinct_encodings(self, char_ids):
        """`(..., max_chars)` int char ids -> `(distinct encodings (n, dim),
        index (...))`: position p holds `distinct[index[p]]`."""
        char_ids = np.asarray(char_ids)
        flat = np.ascontiguousarray(char_ids.reshape(-1, char_ids.shape[-1]), dtype=np.int32)
        # Rows as single opaque values, so that np.unique compares whole rows.
        rows = flat.view(np.dtype((np.void, flat.shape[1] * flat.itemsize))).ravel()
        unique_rows, first, inverse = np.unique(rows, return_index=True, return_inverse=True)
        keys = [row.tobytes() for row in unique_rows]
        with self._lock:
            unique_encodings = self._lookup_or_encode(keys, flat[first])
        return unique_encodings, inverse.reshape(char_ids.shape[:-1]).astype(np.int32)

    def _lookup_or_encode(self, keys, distinct_ids):
        """`(n, dim)` encodings of the distinct char-id rows `distinct_ids`, whose bytes are `keys`."""
        slots = np.fromiter((self._slots.get(key, -1) for key in keys), np.int64, len(keys))
        unique_encodings = np.empty([len(keys), self._table.shape[1]], np.float32)
        cached = slots >= 0
        unique_encodings[cached] = self._table[slots[cached]]
        missing = np.flatnonzero(~cached)
        if missing.size:
            encoded = np.asarray(self._encode(distinct_ids[missing]), np.float32)
            unique_encodings[missing] = encoded
            self._store([keys[i] for i in missing], encoded)
        self.hits += int(cached.sum())
        self.misses += int(missing.size)
        return unique_encodings

    def _store(self, keys, encoded):
        n = min(len(keys), self.max_size - len(self._slots))
        if n <= 0:
            return
        start = len(self._slots)
        if start + n > self._table.shape[0]:
            grown = np.zeros([min(self.max_size, max(2 * self._table.shape[0], start + n)),
                              self._table.shape[1]], np.float32)
            grown[:start] = self._table[:start]
            self._table = grown
        self._table[start:start + n] = encoded[:n]
        self._slots.update(zip(keys[:n], range(start, start + n)))
