"""NumPy forward pass of an ELMoForManyLangs model, written from that project's code (`elmoformanylangs`).

Independent of bilm: it reads the model as the original `Embedder` does
(the dictionaries line by line, the architecture, the state dicts in
PyTorch's layout) and runs it in float64, one sentence at a time from zero
LSTM states (the original's first batch):

- `read_list`: `<bos>`, the tokens cut to `max_characters_per_token - 2`
  characters, `<eos>`;
- `create_one_batch`: word ids (`<oov>` for unknown words); character rows
  that start with the id of `<eow>` and end with that of `<bow>` (it reads
  the two names into each other's variables), `<oov>` for unknown
  characters, `<pad>` after; `<bos>`/`<eos>` as `[that, its id, this]`;
- `ConvTokenEmbedder`: Conv1d per filter, max over positions, activation,
  `Highway` (`gate * x + (1 - gate) * relu(...)`), the word vector before
  the CNN features, the projection;
- `ElmobiLm` / `LstmCellWithProjection`: gates `i, f, g, o` from
  `input_linearity(x) + state_linearity(h)`, no forget-bias offset, clipped
  memory, clipped projection, skip connections above layer 0, the backward
  cell over the sentence reversed;
- `Model.forward` / `sents2elmo`: layer 0 is `[x, x]`, and each sentence's
  vectors drop `<bos>` and `<eos>`.
"""
import numpy as np


def read_dictionary(path):
    """`{entry: id}`, as `Embedder.get_model` reads `char.dic` / `word.dic`."""
    ids = {}
    with open(path, encoding="utf-8", newline="") as f:
        for line in f.read().splitlines():
            tokens = line.strip().split("\t")
            if len(tokens) == 1:
                tokens.insert(0, "\u3000")
            token, i = tokens
            ids[token] = int(i)
    return ids


def _sigmoid(x):
    return 1.0 / (1.0 + np.exp(-x))


def _rows(sentence, char2id, word2id, max_chars):
    """`create_one_batch` for one sentence of `read_list`: `(word ids or None, char ids (T, max_chars))`."""
    tokens = ["<bos>"] + [t[:max_chars - 2] if len(t) + 2 > max_chars else t for t in sentence] + ["<eos>"]
    words = None if word2id is None else np.array([word2id.get(t, word2id["<oov>"]) for t in tokens])
    bow_id, eow_id, oov_id, pad_id = [char2id.get(key) for key in ("<eow>", "<bow>", "<oov>", "<pad>")]
    chars = np.full((len(tokens), max_chars), pad_id)
    for j, token in enumerate(tokens):
        chars[j, 0] = bow_id
        if token in ("<bos>", "<eos>"):
            chars[j, 1], chars[j, 2] = char2id[token], eow_id
        else:
            for k, c in enumerate(token):
                chars[j, k + 1] = char2id.get(c, oov_id)
            chars[j, len(token) + 1] = eow_id
    return words, chars


def _token_embedding(words, chars, te, arch):
    """`ConvTokenEmbedder.forward` for one sentence: `(T, projection_dim)`."""
    emb = te["char_emb_layer.embedding.weight"][chars]  # (T, C, char_dim)
    activation = np.tanh if arch["activation"] == "tanh" else (lambda v: np.maximum(v, 0.0))
    convs = []
    for i, (width, _) in enumerate(arch["filters"]):
        weight, bias = te[f"convolutions.{i}.weight"], te[f"convolutions.{i}.bias"]
        positions = emb.shape[1] - width + 1
        out = np.stack([np.einsum("tkc,ock->to", emb[:, p:p + width], weight) for p in range(positions)], -1)
        convs.append(activation((out + bias[None, :, None]).max(axis=-1)))
    x = np.concatenate(convs, axis=-1)
    n = x.shape[1]
    for k in range(arch["n_highway"]):
        projected = x @ te[f"highways._layers.{k}.weight"].T + te[f"highways._layers.{k}.bias"]
        gate = _sigmoid(projected[:, n:])
        x = gate * x + (1 - gate) * np.maximum(projected[:, :n], 0.0)
    if words is not None:
        x = np.concatenate([te["word_emb_layer.embedding.weight"][words], x], axis=-1)
    return x @ te["projection.weight"].T + te["projection.bias"]


def _lstm(inputs, encoder, prefix, encoder_arch):
    """`LstmCellWithProjection` over `(T, in)` from zero states: `(T, projection_dim)`."""
    w_in = encoder[f"{prefix}.input_linearity.weight"]
    w_state, b_state = encoder[f"{prefix}.state_linearity.weight"], encoder[f"{prefix}.state_linearity.bias"]
    w_proj = encoder[f"{prefix}.state_projection.weight"]
    cell = w_state.shape[0] // 4
    memory, state, outputs = np.zeros(cell), np.zeros(w_proj.shape[0]), []
    for x in inputs:
        z = w_in @ x + w_state @ state + b_state
        i, f = _sigmoid(z[:cell]), _sigmoid(z[cell:2 * cell])
        g, o = np.tanh(z[2 * cell:3 * cell]), _sigmoid(z[3 * cell:])
        memory = i * g + f * memory
        if encoder_arch.get("cell_clip"):
            memory = np.clip(memory, -encoder_arch["cell_clip"], encoder_arch["cell_clip"])
        state = w_proj @ (o * np.tanh(memory))
        if encoder_arch.get("proj_clip"):
            state = np.clip(state, -encoder_arch["proj_clip"], encoder_arch["proj_clip"])
        outputs.append(state)
    return np.array(outputs)


def embed_sentence(sentence, model):
    """The original's `sents2elmo(..., output_layer=-2)` vectors of one sentence (a token list), from zero
    states: `(n_layers + 1, len(sentence), 2 * projection_dim)` float64.

    `model`: a dict with `architecture` (the config_path file's dict), `char2id`, `word2id` (None without a
    word embedding), `token_embedder` and `encoder` (`{name: array}` in PyTorch's layout).
    """
    arch = model["architecture"]
    te_arch, enc_arch = arch["token_embedder"], arch["encoder"]
    words, chars = _rows(sentence, model["char2id"], model["word2id"], te_arch["max_characters_per_token"])
    te = {k: np.asarray(v, np.float64) for k, v in model["token_embedder"].items()}
    enc = {k: np.asarray(v, np.float64) for k, v in model["encoder"].items()}
    x = _token_embedding(words, chars, te, te_arch)
    layers, forward, backward = [np.concatenate([x, x], axis=-1)], x, x
    for layer in range(enc_arch["n_layers"]):
        new_forward = _lstm(forward, enc, f"forward_layer_{layer}", enc_arch)
        new_backward = _lstm(backward[::-1], enc, f"backward_layer_{layer}", enc_arch)[::-1]
        if layer != 0:
            new_forward, new_backward = new_forward + forward, new_backward + backward
        forward, backward = new_forward, new_backward
        layers.append(np.concatenate([forward, backward], axis=-1))
    return np.stack(layers)[:, 1:-1]
