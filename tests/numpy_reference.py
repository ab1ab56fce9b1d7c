"""Pure-NumPy reference implementation ("oracle") of the original ELMo biLM.

Written independently from the format description in ``docs/formats.md``; it imports neither
``bilm`` nor TensorFlow, so the TF implementation can be compared against it.
All computations are done in float64 (weights are stored as float32 in the
HDF5 files); results are returned as float64 arrays.

Conventions
-----------
B = batch size, T = padded number of tokens (boundary tokens included),
C = max characters per token, P = projection_dim, dim = LSTM cell size,
F = sum of the CNN filter counts, L = number of LSTM layers.

State dictionaries (``init_states`` / ``final_states``) are keyed by
``(direction, layer)`` with direction 0 = forward, 1 = backward, and map to
``(c, h)`` with ``c`` of shape (B, dim) and ``h`` of shape (B, P).
"""
import h5py
import numpy as np

BOS_CHAR = 256          # begin of sentence (in the boundary token)
EOS_CHAR = 257          # end of sentence (in the boundary token)
BOW_CHAR = 258          # begin of word
EOW_CHAR = 259          # end of word
PAD_CHAR = 260          # padding within a token

LSTM_PREFIX = "RNN_{d}/RNN/MultiRNNCell/Cell{l}/LSTMCell/"


# --------------------------------------------------------------------------
# Options and weight files
# --------------------------------------------------------------------------
def make_options(char_cnn=True, activation="relu", n_highway=1,
                 filters=((1, 4), (2, 5), (3, 6)), char_dim=3, max_chars=7,
                 n_characters=262, lstm_dim=8, projection_dim=6, n_layers=2,
                 use_skip_connections=True, cell_clip=3.0, proj_clip=3.0):
    """Options dict in the options.json format (docs/formats.md).

    ``{"lstm": {...}, "char_cnn": {...}}``; no ``"char_cnn"`` key when
    ``char_cnn`` is False. A clip of ``None`` means "no clipping" and the key
    is then left out of the ``"lstm"`` dict (the original code reads it with
    ``.get``). Filters are stored as a list of ``[width, num]`` lists.
    """
    lstm = {"dim": int(lstm_dim), "projection_dim": int(projection_dim),
            "n_layers": int(n_layers),
            "use_skip_connections": bool(use_skip_connections)}
    if cell_clip is not None:
        lstm["cell_clip"] = cell_clip
    if proj_clip is not None:
        lstm["proj_clip"] = proj_clip
    options = {"lstm": lstm}
    if char_cnn:
        options["char_cnn"] = {
            "activation": activation,
            "embedding": {"dim": int(char_dim)},
            "filters": [[int(w), int(n)] for w, n in filters],
            "max_characters_per_token": int(max_chars),
            "n_characters": int(n_characters),
            "n_highway": int(n_highway),
        }
    return options


def _dims(options):
    """(dim, P, n_layers, F or None) from an options dict."""
    lstm = options["lstm"]
    dim = lstm["dim"]
    proj = lstm.get("projection_dim", dim)
    F = None
    if "char_cnn" in options:
        F = sum(n for _, n in options["char_cnn"]["filters"])
    return dim, proj, lstm["n_layers"], F


def expected_weight_shapes(options):
    """Dict dataset name -> shape for the original weight file layout (docs/formats.md).

    Character datasets only when ``options`` has ``char_cnn``.
    """
    dim, P, n_layers, F = _dims(options)
    shapes = {}
    if "char_cnn" in options:
        cc = options["char_cnn"]
        char_dim = cc["embedding"]["dim"]
        shapes["char_embed"] = (261, char_dim)
        for i, (width, num) in enumerate(cc["filters"]):
            shapes["CNN/W_cnn_%d" % i] = (1, width, char_dim, num)
            shapes["CNN/b_cnn_%d" % i] = (num,)
        for k in range(cc["n_highway"]):
            shapes["CNN_high_%d/W_carry" % k] = (F, F)
            shapes["CNN_high_%d/W_transform" % k] = (F, F)
            shapes["CNN_high_%d/b_carry" % k] = (F,)
            shapes["CNN_high_%d/b_transform" % k] = (F,)
        if F != P:
            shapes["CNN_proj/W_proj"] = (F, P)
            shapes["CNN_proj/b_proj"] = (P,)
    for d in range(2):
        for l in range(n_layers):
            prefix = LSTM_PREFIX.format(d=d, l=l)
            shapes[prefix + "W_0"] = (P + P, 4 * dim)
            shapes[prefix + "B"] = (4 * dim,)
            if P < dim:
                shapes[prefix + "W_P_0"] = (dim, P)
    return shapes


# Per-dataset multipliers of ``scale`` (uniform(-m*scale, m*scale)), chosen so
# that with scale=0.5 and clips of 3 (default small config) the cell clip
# and the projection clip each trigger on a few percent of the values, and
# the gate pre-activations are mostly O(1) (median |z| ~ 1.5), so sigmoids
# are not saturated everywhere.
def _scale_factor(name):
    if name == "char_embed":
        return 2.0
    if name.startswith("CNN/"):
        return 1.0
    if "W_carry" in name or "W_transform" in name or "W_proj" in name:
        return 0.8
    if name.endswith("LSTMCell/W_0"):
        return 2.0
    if name.endswith("LSTMCell/W_P_0"):
        return 5.0
    if name.endswith("LSTMCell/B"):
        return 2.0
    return 1.0  # CNN / highway / projection biases


def write_random_weights(path, options, seed=0, scale=0.5):
    """Write random float32 weights for ``options`` to HDF5 file ``path``.

    The layout (names and shapes) is that of ``expected_weight_shapes``.
    Values are uniform(-m*scale, m*scale) with per-dataset multipliers m.
    Returns the dict name -> float32 array that was written.
    """
    rng = np.random.default_rng(seed)
    written = {}
    with h5py.File(path, "w") as f:
        for name, shape in sorted(expected_weight_shapes(options).items()):
            s = scale * _scale_factor(name)
            value = rng.uniform(-s, s, size=shape).astype(np.float32)
            f.create_dataset(name, data=value)
            written[name] = value
    return written


def write_random_token_embeddings(path, n_vocab, projection_dim, seed=0,
                                  scale=1.0):
    """Write a token-embedding file: one float32 dataset ``embedding``
    (n_vocab, projection_dim), uniform(-scale, scale). Returns the array."""
    rng = np.random.default_rng(seed)
    value = rng.uniform(-scale, scale,
                        size=(n_vocab, projection_dim)).astype(np.float32)
    with h5py.File(path, "w") as f:
        f.create_dataset("embedding", data=value)
    return value


def read_weights(path):
    """All datasets of an HDF5 file (recursively): dict full name -> array."""
    out = {}

    def visit(name, obj):
        if isinstance(obj, h5py.Dataset):
            out[name] = obj[()]

    with h5py.File(path, "r") as f:
        f.visititems(visit)
    return out


# --------------------------------------------------------------------------
# Inputs
# --------------------------------------------------------------------------
def _word_char_ids(token, max_chars):
    """Unshifted ids (max_chars,) of one token: 258, bytes..., 259, 260..."""
    ids = [PAD_CHAR] * max_chars
    data = token.encode("utf-8", "ignore")[:max_chars - 2]
    ids[0] = BOW_CHAR
    for k, b in enumerate(data):
        ids[k + 1] = b
    ids[len(data) + 1] = EOW_CHAR
    return ids


def _boundary_char_ids(char, max_chars):
    ids = [PAD_CHAR] * max_chars
    ids[0], ids[1], ids[2] = BOW_CHAR, char, EOW_CHAR
    return ids


def char_ids(tokens_batch, max_chars):
    """Model input for a batch of tokenised sentences.

    tokens_batch: list of B lists of str tokens (without boundaries).
    Returns int32 (B, max_len + 2, max_chars): per row the begin-of-sentence
    token, the tokens, the end-of-sentence token, all ids shifted by +1;
    rows beyond a sentence's length + 2 are all zero.
    """
    B = len(tokens_batch)
    max_len = max((len(s) for s in tokens_batch), default=0)
    out = np.zeros((B, max_len + 2, max_chars), dtype=np.int32)
    for b, sentence in enumerate(tokens_batch):
        rows = [_boundary_char_ids(BOS_CHAR, max_chars)]
        rows += [_word_char_ids(tok, max_chars) for tok in sentence]
        rows.append(_boundary_char_ids(EOS_CHAR, max_chars))
        out[b, :len(rows)] = np.asarray(rows, dtype=np.int32) + 1
    return out


def sequence_lengths(ids):
    """Row lengths: (B,) number of tokens with any nonzero id.

    ids: (B, T, C) char ids or (B, T) token ids.
    """
    ids = np.asarray(ids)
    if ids.ndim == 3:
        nonzero = (ids > 0).any(axis=2)
    else:
        nonzero = ids > 0
    return nonzero.sum(axis=1).astype(np.int64)


# --------------------------------------------------------------------------
# Token encoders
# --------------------------------------------------------------------------
def _sigmoid(x):
    return 1.0 / (1.0 + np.exp(-x))


def _f64(x):
    return np.asarray(x, dtype=np.float64)


def token_encoder(weights, options, char_ids):
    """Character CNN token encoder.

    weights: dict name -> array (original layout); char_ids: int (B, T, C),
    already shifted (0 = padding). Returns float64 (B, T, P) -- or (B, T, F)
    when F == P (no projection). Padding tokens are NOT zeroed here.
    """
    cc = options["char_cnn"]
    ids = np.asarray(char_ids)
    table = np.concatenate([np.zeros((1, cc["embedding"]["dim"])),
                            _f64(weights["char_embed"])], axis=0)  # (262, e)
    emb = table[ids]                                       # (B, T, C, e)
    C = ids.shape[2]
    act = {"relu": lambda v: np.maximum(v, 0.0), "tanh": np.tanh}[
        cc["activation"]]
    features = []
    for i, (width, num) in enumerate(cc["filters"]):
        kernel = _f64(weights["CNN/W_cnn_%d" % i])[0]      # (width, e, num)
        bias = _f64(weights["CNN/b_cnn_%d" % i])           # (num,)
        n_pos = C - width + 1
        conv = np.zeros(ids.shape[:2] + (n_pos, num))
        for k in range(width):  # valid convolution (cross-correlation)
            conv += emb[:, :, k:k + n_pos, :] @ kernel[k]  # (B, T, n_pos, num)
        conv += bias
        features.append(act(conv.max(axis=2)))            # max, then act
    x = np.concatenate(features, axis=-1)                  # (B, T, F)
    for k in range(cc["n_highway"]):
        pre = "CNN_high_%d/" % k
        g = _sigmoid(x @ _f64(weights[pre + "W_carry"])
                     + _f64(weights[pre + "b_carry"]))
        t = np.maximum(x @ _f64(weights[pre + "W_transform"])
                       + _f64(weights[pre + "b_transform"]), 0.0)
        x = g * t + (1.0 - g) * x
    if "CNN_proj/W_proj" in weights:
        x = x @ _f64(weights["CNN_proj/W_proj"]) + _f64(
            weights["CNN_proj/b_proj"])
    return x


def token_embedding_lookup(embedding, token_ids):
    """Token-input encoder: (n_vocab, P) table, int ids (B, T) with 0 =
    padding and id k > 0 -> row k - 1 of ``embedding`` (a zero row is
    prepended). Returns float64 (B, T, P)."""
    embedding = _f64(embedding)
    table = np.concatenate([np.zeros((1, embedding.shape[1])), embedding], 0)
    return table[np.asarray(token_ids)]


# --------------------------------------------------------------------------
# LSTM
# --------------------------------------------------------------------------
def lstm_cell_step(x, c, h, W_0, B, W_P_0=None, cell_clip=None,
                   proj_clip=None):
    """One TF1 LSTMCell step (forget bias 1.0, no peepholes).

    x: (N, in), c: (N, dim), h: (N, P). Returns (new_c, new_h).
    """
    z = np.concatenate([x, h], axis=-1) @ _f64(W_0) + _f64(B)
    i, j, f, o = np.split(z, 4, axis=-1)
    new_c = _sigmoid(f + 1.0) * c + _sigmoid(i) * np.tanh(j)
    if cell_clip is not None:
        new_c = np.clip(new_c, -cell_clip, cell_clip)
    m = _sigmoid(o) * np.tanh(new_c)
    if W_P_0 is not None:
        new_h = m @ _f64(W_P_0)
        if proj_clip is not None:
            new_h = np.clip(new_h, -proj_clip, proj_clip)
    else:
        new_h = m
    return new_c, new_h


def lstm_layer(x, lengths, W_0, B, W_P_0, cell_clip, proj_clip, reverse,
               init_c=None, init_h=None):
    """Run one LSTM layer over a padded batch, step by step.

    x: (B, T, in); lengths: (B,) ints. W_0: (in + P, 4*dim); B: (4*dim,);
    W_P_0: (dim, P) or None (then P = dim). Rows only advance for
    t < length. reverse=True reads each row's first ``length`` steps in
    reverse order and puts the outputs back in the original order.

    Returns (outputs (B, T, P) -- zero beyond each row's length,
             final_c (B, dim), final_h (B, P) -- the state after the row's
             last valid step, i.e. the initial state when length == 0).
    """
    x, W_0, B = _f64(x), _f64(W_0), _f64(B)  # once, not at every step
    W_P_0 = None if W_P_0 is None else _f64(W_P_0)
    lengths = np.asarray(lengths, dtype=np.int64)
    n_rows, T = x.shape[:2]
    dim = np.shape(B)[0] // 4
    P = dim if W_P_0 is None else np.shape(W_P_0)[1]
    c = np.zeros((n_rows, dim)) if init_c is None else _f64(init_c).copy()
    h = np.zeros((n_rows, P)) if init_h is None else _f64(init_h).copy()
    outputs = np.zeros((n_rows, T, P))
    rows = np.arange(n_rows)
    # Every row at once: step k reads each row's position k (reverse: its
    # length - 1 - k); a row whose length is k or less keeps its state.
    for k in range(int(lengths.max(initial=0))):
        active = k < lengths
        t = np.clip(lengths - 1 - k if reverse else np.full(n_rows, k), 0, T - 1)
        new_c, new_h = lstm_cell_step(x[rows, t], c, h, W_0, B, W_P_0,
                                      cell_clip, proj_clip)
        c = np.where(active[:, None], new_c, c)
        h = np.where(active[:, None], new_h, h)
        outputs[rows[active], t[active]] = new_h[active]
    return outputs, c, h


# --------------------------------------------------------------------------
# biLM
# --------------------------------------------------------------------------
def zero_states(options, batch_size):
    """Zero state dict {(d, l): (c (N, dim), h (N, P))}."""
    dim, P, n_layers, _ = _dims(options)
    return {(d, l): (np.zeros((batch_size, dim)), np.zeros((batch_size, P)))
            for d in range(2) for l in range(n_layers)}


def remove_sentence_boundaries(x, lengths):
    """x: (B, T, ...) with boundaries; lengths (B,) including them.

    Returns (B, T - 2, ...): out[b, k] = x[b, k + 1] for k < lengths[b] - 2,
    zeros elsewhere.
    """
    out = np.zeros((x.shape[0], x.shape[1] - 2) + x.shape[2:], dtype=x.dtype)
    for b, n in enumerate(lengths):
        n = int(n)
        if n > 2:
            out[b, :n - 2] = x[b, 1:n - 1]
    return out


def bilm_forward(weights, options, ids, init_states=None, token_inputs=False,
                 embedding=None):
    """Full biLM forward pass.

    ids: int (B, T, C) shifted char ids, or (B, T) token ids when
    ``token_inputs`` (then ``embedding`` is the (n_vocab, P) table).
    init_states: None (zeros) or {(d, l): (c (B, dim), h (B, P))}.

    Returns a dict:
      token_embeddings  (B, T, P), zero beyond each row's length
      layers            list of L + 1 arrays (B, T, 2P): [x, x], then
                        [h_fwd_l, h_bwd_l] (residual included for l > 0),
                        zero beyond each row's length
      lm_embeddings     (B, L + 1, T - 2, 2P), boundaries removed per row
      lengths           (B,) int, row length - 2 (negative for empty rows)
      mask              (B, T - 2) bool, k < length - 2
      final_states      {(d, l): (c (B, dim), h (B, P))}
    """
    lstm = options["lstm"]
    n_layers = lstm["n_layers"]
    cell_clip = lstm.get("cell_clip")
    proj_clip = lstm.get("proj_clip")
    skip = lstm.get("use_skip_connections", False)
    ids = np.asarray(ids)
    lengths = sequence_lengths(ids)
    n_rows, T = ids.shape[:2]
    valid = np.arange(T)[None, :] < lengths[:, None]       # (B, T)

    if token_inputs:
        x = token_embedding_lookup(embedding, ids)
    else:
        x = token_encoder(weights, options, ids)
    x = x * valid[:, :, None]

    if init_states is None:
        init_states = zero_states(options, n_rows)

    final_states = {}
    per_direction = []
    for d in range(2):
        layer_input = x
        outs = []
        for l in range(n_layers):
            prefix = LSTM_PREFIX.format(d=d, l=l)
            c0, h0 = init_states[(d, l)]
            h, c_f, h_f = lstm_layer(
                layer_input, lengths, weights[prefix + "W_0"],
                weights[prefix + "B"], weights.get(prefix + "W_P_0"),
                cell_clip, proj_clip, reverse=(d == 1), init_c=c0, init_h=h0)
            if skip and l > 0:
                h = (h + layer_input) * valid[:, :, None]
            final_states[(d, l)] = (c_f, h_f)
            outs.append(h)
            layer_input = h
        per_direction.append(outs)

    layers = [np.concatenate([x, x], axis=-1)]
    for l in range(n_layers):
        layers.append(np.concatenate(
            [per_direction[0][l], per_direction[1][l]], axis=-1))
    lm = np.stack([remove_sentence_boundaries(a, lengths) for a in layers],
                  axis=1)
    mask = np.arange(T - 2)[None, :] < (lengths - 2)[:, None]
    return {"token_embeddings": x, "layers": layers, "lm_embeddings": lm,
            "lengths": lengths - 2, "mask": mask,
            "final_states": final_states}


def run_stateful(weights, options, batches, max_batch_size,
                 token_inputs=False, embedding=None):
    """Simulate stateful inference over a sequence of batches.

    Buffers {(d, l): (c (max_batch_size, dim), h (max_batch_size, P))} start
    at zeros; a batch of B rows starts from rows [0, B) and afterwards rows
    [0, B) are replaced by the batch's final states (rows >= B untouched).

    Returns (list of bilm_forward dicts, one per batch, final buffers).
    """
    buffers = zero_states(options, max_batch_size)
    results = []
    for ids in batches:
        n_rows = np.asarray(ids).shape[0]
        if n_rows > max_batch_size:
            raise ValueError("batch of %d rows > max_batch_size %d"
                             % (n_rows, max_batch_size))
        init = {k: (c[:n_rows].copy(), h[:n_rows].copy())
                for k, (c, h) in buffers.items()}
        out = bilm_forward(weights, options, ids, init_states=init,
                           token_inputs=token_inputs, embedding=embedding)
        results.append(out)
        new = {}
        for k, (c, h) in buffers.items():
            c, h = c.copy(), h.copy()
            c[:n_rows], h[:n_rows] = out["final_states"][k]
            new[k] = (c, h)
        buffers = new
    return results, buffers
