"""Sanity tests of the pure-NumPy oracle (tests/numpy_reference.py)."""
import json
import math

import h5py
import numpy as np
import pytest

import numpy_reference as R

# --------------------------------------------------------------------------
# helpers
# --------------------------------------------------------------------------
SENTENCES = [["the", "cat", "sat", "on", "the", "mat"],
             ["Héllo", "wörld"],
             ["a"],
             []]


def _model(tmp_path, seed=0, **kw):
    options = R.make_options(**kw)
    path = str(tmp_path / ("w%d.hdf5" % seed))
    R.write_random_weights(path, options, seed=seed)
    return options, R.read_weights(path)


def _ids(options, sentences=SENTENCES):
    return R.char_ids(sentences,
                      options["char_cnn"]["max_characters_per_token"])


# --------------------------------------------------------------------------
# options and files
# --------------------------------------------------------------------------
def test_make_options_format():
    o = R.make_options()
    assert set(o) == {"lstm", "char_cnn"}
    assert o["lstm"] == {"dim": 8, "projection_dim": 6, "n_layers": 2,
                         "use_skip_connections": True, "cell_clip": 3.0,
                         "proj_clip": 3.0}
    assert o["char_cnn"] == {"activation": "relu", "embedding": {"dim": 3},
                             "filters": [[1, 4], [2, 5], [3, 6]],
                             "max_characters_per_token": 7,
                             "n_characters": 262, "n_highway": 1}
    json.dumps(o)  # serialisable as options.json
    o = R.make_options(char_cnn=False, cell_clip=None, proj_clip=None)
    assert "char_cnn" not in o
    assert "cell_clip" not in o["lstm"] and "proj_clip" not in o["lstm"]


def _rnn(d, l, n):
    return "RNN_%d/RNN/MultiRNNCell/Cell%d/LSTMCell/%s" % (d, l, n)


@pytest.mark.parametrize("kw, has_proj, has_wp", [
    (dict(), True, True),                                     # F=15 != P=6
    (dict(filters=((1, 2), (2, 4)), projection_dim=6), False, True),
    (dict(lstm_dim=6, projection_dim=6), True, False),        # P == dim
    (dict(n_highway=0, n_layers=1, lstm_dim=6), True, False),
    (dict(n_highway=2, n_layers=3, activation="tanh"), True, True),
])
def test_written_file_layout(tmp_path, kw, has_proj, has_wp):
    options, w = _model(tmp_path, **kw)
    o = R.make_options(**kw)
    cc, lstm = o["char_cnn"], o["lstm"]
    e, P, dim = cc["embedding"]["dim"], lstm["projection_dim"], lstm["dim"]
    F = sum(n for _, n in cc["filters"])
    expected = {"char_embed": (261, e)}
    for i, (width, num) in enumerate(cc["filters"]):
        expected["CNN/W_cnn_%d" % i] = (1, width, e, num)
        expected["CNN/b_cnn_%d" % i] = (num,)
    for k in range(cc["n_highway"]):
        for n in ("W_carry", "W_transform"):
            expected["CNN_high_%d/%s" % (k, n)] = (F, F)
        for n in ("b_carry", "b_transform"):
            expected["CNN_high_%d/%s" % (k, n)] = (F,)
    if has_proj:
        expected["CNN_proj/W_proj"] = (F, P)
        expected["CNN_proj/b_proj"] = (P,)
    for d in range(2):
        for l in range(lstm["n_layers"]):
            expected[_rnn(d, l, "W_0")] = (2 * P, 4 * dim)
            expected[_rnn(d, l, "B")] = (4 * dim,)
            if has_wp:
                expected[_rnn(d, l, "W_P_0")] = (dim, P)
    assert {k: v.shape for k, v in w.items()} == expected
    assert all(v.dtype == np.float32 for v in w.values())
    assert all(np.std(v) > 0 for v in w.values())
    with h5py.File(str(tmp_path / "w0.hdf5"), "r") as f:
        assert set(f.keys()) <= {"char_embed", "CNN", "CNN_proj", "RNN_0",
                                 "RNN_1"} | {"CNN_high_%d" % k
                                             for k in range(3)}


def test_token_input_files(tmp_path):
    o = R.make_options(char_cnn=False)
    path = str(tmp_path / "w.hdf5")
    R.write_random_weights(path, o)
    w = R.read_weights(path)
    assert all(k.startswith("RNN_") for k in w) and len(w) == 2 * 2 * 3
    epath = str(tmp_path / "emb.hdf5")
    emb = R.write_random_token_embeddings(epath, 11, 6, seed=3)
    assert R.read_weights(epath).keys() == {"embedding"}
    np.testing.assert_array_equal(R.read_weights(epath)["embedding"], emb)
    assert emb.shape == (11, 6) and emb.dtype == np.float32
    table = R.token_embedding_lookup(emb, np.array([[1, 11, 0]]))
    np.testing.assert_allclose(table[0], np.stack([emb[0], emb[10],
                                                   np.zeros(6)]))


# --------------------------------------------------------------------------
# char ids
# --------------------------------------------------------------------------
def test_char_ids_spec_examples():
    ids = R.char_ids([["th", "thhhhh", chr(256) + "t"]], 5)
    assert ids.dtype == np.int32 and ids.shape == (1, 5, 5)
    unshifted = ids[0] - 1
    assert unshifted[0].tolist() == [258, 256, 259, 260, 260]
    assert unshifted[1].tolist() == [258, 116, 104, 259, 260]
    assert unshifted[2].tolist() == [258, 116, 104, 104, 259]
    assert unshifted[3].tolist() == [258, 196, 128, 116, 259]
    assert unshifted[4].tolist() == [258, 257, 259, 260, 260]


def test_char_ids_ragged_batch_padding():
    ids = R.char_ids([["ab", "c"], [], ["d"]], 6)
    assert ids.shape == (3, 4, 6)
    assert (ids[1, 2:] == 0).all() and (ids[2, 3:] == 0).all()
    assert (ids[0] > 0).all()
    assert (ids[1, 0] - 1).tolist() == [258, 256, 259, 260, 260, 260]
    assert (ids[1, 1] - 1).tolist() == [258, 257, 259, 260, 260, 260]
    assert (ids[2, 1] - 1).tolist() == [258, 100, 259, 260, 260, 260]
    assert R.sequence_lengths(ids).tolist() == [4, 2, 3]


# --------------------------------------------------------------------------
# LSTM
# --------------------------------------------------------------------------
def _sig(v):
    return 1.0 / (1.0 + math.exp(-v))


def test_lstm_single_step_by_hand():
    rng = np.random.default_rng(0)
    n_in, dim, P = 2, 3, 2
    W = rng.uniform(-2, 2, (n_in + P, 4 * dim))
    B = rng.uniform(-1, 1, 4 * dim)
    WP = rng.uniform(-3, 3, (dim, P))
    x = rng.uniform(-1, 1, (1, 1, n_in))
    c0 = np.array([[2.5, -0.4, 1.0]])
    h0 = np.array([[0.3, -0.7]])
    cell_clip, proj_clip = 1.2, 0.3
    out, c, h = R.lstm_layer(x, [1], W, B, WP, cell_clip, proj_clip, False,
                             init_c=c0, init_h=h0)
    inp = list(x[0, 0]) + list(h0[0])
    z = [sum(inp[r] * W[r, k] for r in range(n_in + P)) + B[k]
         for k in range(4 * dim)]
    exp_c, exp_m = [], []
    for u in range(dim):
        i, j, f, o = z[u], z[dim + u], z[2 * dim + u], z[3 * dim + u]
        cu = _sig(f + 1.0) * c0[0, u] + _sig(i) * math.tanh(j)
        cu = max(-cell_clip, min(cell_clip, cu))
        exp_c.append(cu)
        exp_m.append(_sig(o) * math.tanh(cu))
    exp_h = [max(-proj_clip, min(proj_clip,
                                 sum(exp_m[u] * WP[u, p] for u in range(dim))))
             for p in range(P)]
    np.testing.assert_allclose(c[0], exp_c, rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(h[0], exp_h, rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(out[0, 0], exp_h, rtol=1e-12, atol=1e-12)
    # the clips were exercised in this case
    assert np.isclose(np.abs(c).max(), cell_clip)
    assert np.isclose(np.abs(h).max(), proj_clip)
    # without projection h = m, and no clipping when clips are None
    W2 = rng.uniform(-2, 2, (n_in + dim, 4 * dim))
    out2, c2, h2 = R.lstm_layer(x, [1], W2, B, None, None, None, False)
    z = np.concatenate([x[0, 0], np.zeros(dim)]) @ W2 + B
    i, j, f, o = np.split(z, 4)
    cc = 1 / (1 + np.exp(-i)) * np.tanh(j)
    np.testing.assert_allclose(c2[0], cc, rtol=1e-12)
    np.testing.assert_allclose(h2[0], 1 / (1 + np.exp(-o)) * np.tanh(cc),
                               rtol=1e-12)


def _lstm_weights(seed, n_in=3, dim=5, P=3):
    rng = np.random.default_rng(seed)
    return (rng.uniform(-1.5, 1.5, (n_in + P, 4 * dim)),
            rng.uniform(-1, 1, 4 * dim), rng.uniform(-2, 2, (dim, P)))


def test_lstm_reverse_equals_forward_on_reversed_row():
    W, B, WP = _lstm_weights(1)
    rng = np.random.default_rng(2)
    x = rng.normal(size=(2, 6, 3))
    lengths = np.array([4, 6])
    out_r, c_r, h_r = R.lstm_layer(x, lengths, W, B, WP, 3.0, 3.0, True)
    for b, n in enumerate(lengths):
        x_rev = x[b:b + 1, :n][:, ::-1]
        out_f, c_f, h_f = R.lstm_layer(x_rev, [n], W, B, WP, 3.0, 3.0, False)
        np.testing.assert_allclose(out_r[b, :n], out_f[0, ::-1], atol=1e-12)
        np.testing.assert_allclose(c_r[b], c_f[0], atol=1e-12)
        np.testing.assert_allclose(h_r[b], h_f[0], atol=1e-12)
        assert (out_r[b, n:] == 0).all()
    # reversal matters
    out_f_all, _, _ = R.lstm_layer(x, lengths, W, B, WP, 3.0, 3.0, False)
    assert not np.allclose(out_f_all[0, :4], out_r[0, :4])


def test_lstm_layer_is_each_row_stepped_alone_through_the_cell():
    """lstm_layer runs every row at once: each row's outputs and final state are those of its own steps through
    lstm_cell_step, in reading order (reversed for the backward direction), from its own initial state; an
    empty row keeps its state. Clipping binds."""
    W, B, WP = _lstm_weights(5)
    rng = np.random.default_rng(6)
    x = rng.normal(size=(4, 6, 3))
    c0, h0 = rng.normal(size=(4, 5)), rng.normal(size=(4, 3))
    lengths = [3, 0, 6, 1]
    for reverse in (False, True):
        out, c, h = R.lstm_layer(x, lengths, W, B, WP, 0.5, 0.4, reverse, init_c=c0, init_h=h0)
        for b, n in enumerate(lengths):
            cb, hb = c0[b:b + 1], h0[b:b + 1]
            for t in (range(n - 1, -1, -1) if reverse else range(n)):
                cb, hb = R.lstm_cell_step(x[b:b + 1, t], cb, hb, W, B, WP, 0.5, 0.4)
                np.testing.assert_allclose(out[b, t], hb[0], rtol=0, atol=1e-12)
            np.testing.assert_allclose(c[b], cb[0], rtol=0, atol=1e-12)
            np.testing.assert_allclose(h[b], hb[0], rtol=0, atol=1e-12)
            assert (out[b, n:] == 0).all()
        stepped = [b for b, n in enumerate(lengths) if n]  # the empty row keeps its unclipped state
        assert np.abs(c[stepped]).max() == pytest.approx(0.5) and np.abs(h[stepped]).max() == pytest.approx(0.4)


def test_lstm_padding_and_zero_length():
    W, B, WP = _lstm_weights(3)
    rng = np.random.default_rng(4)
    x = rng.normal(size=(3, 5, 3))
    c0, h0 = rng.normal(size=(3, 5)), rng.normal(size=(3, 3))
    lengths = [0, 2, 5]
    for reverse in (False, True):
        out, c, h = R.lstm_layer(x, lengths, W, B, WP, 3.0, 3.0, reverse,
                                 init_c=c0, init_h=h0)
        np.testing.assert_array_equal(c[0], c0[0])
        np.testing.assert_array_equal(h[0], h0[0])
        assert (out[0] == 0).all() and (out[1, 2:] == 0).all()
        assert (out[2] != 0).all()
        # final state = state at the last valid step; padded steps ignored
        out1, c1, h1 = R.lstm_layer(x[1:2, :2], [2], W, B, WP, 3.0, 3.0,
                                    reverse, init_c=c0[1:2], init_h=h0[1:2])
        np.testing.assert_allclose(c[1], c1[0], atol=1e-12)
        np.testing.assert_allclose(h[1], h1[0], atol=1e-12)
        np.testing.assert_allclose(out[1, :2], out1[0], atol=1e-12)
        idx = 0 if reverse else 1
        np.testing.assert_allclose(h[1], out[1, idx], atol=1e-12)


# --------------------------------------------------------------------------
# token encoder
# --------------------------------------------------------------------------
@pytest.mark.parametrize("activation", ["relu", "tanh"])
def test_token_encoder_brute_force(tmp_path, activation):
    o, w = _model(tmp_path, activation=activation, n_highway=2)
    ids = _ids(o, [["ab", "héllo"]])
    out = R.token_encoder(w, o, ids)
    assert out.shape == (1, 4, 6)
    act = np.tanh if activation == "tanh" else (lambda v: max(v, 0.0))
    table = np.vstack([np.zeros((1, 3)), w["char_embed"].astype(float)])
    for t in range(4):
        emb = table[ids[0, t]]                               # (C, e)
        feats = []
        for i, (width, num) in enumerate(o["char_cnn"]["filters"]):
            K, b = w["CNN/W_cnn_%d" % i][0], w["CNN/b_cnn_%d" % i]
            for n in range(num):
                vals = [sum(emb[p + k, e] * K[k, e, n] for k in range(width)
                            for e in range(3)) + b[n]
                        for p in range(7 - width + 1)]
                feats.append(act(max(vals)))
        x = np.array(feats)
        for k in range(2):
            g = 1 / (1 + np.exp(-(x @ w["CNN_high_%d/W_carry" % k]
                                  + w["CNN_high_%d/b_carry" % k])))
            tr = np.maximum(x @ w["CNN_high_%d/W_transform" % k]
                            + w["CNN_high_%d/b_transform" % k], 0)
            x = g * tr + (1 - g) * x
        x = x @ w["CNN_proj/W_proj"] + w["CNN_proj/b_proj"]
        np.testing.assert_allclose(out[0, t], x, rtol=1e-5, atol=1e-6)


def test_token_encoder_without_projection(tmp_path):
    o, w = _model(tmp_path, filters=((1, 2), (2, 4)), projection_dim=6)
    assert "CNN_proj/W_proj" not in w
    out = R.bilm_forward(w, o, _ids(o))
    assert out["token_embeddings"].shape == (4, 8, 6)


# --------------------------------------------------------------------------
# biLM
# --------------------------------------------------------------------------
def test_bilm_shapes_padding_and_boundary_removal(tmp_path):
    o, w = _model(tmp_path)
    ids = _ids(o)
    out = R.bilm_forward(w, o, ids)
    lengths = np.array([8, 4, 3, 2])
    assert out["lengths"].tolist() == (lengths - 2).tolist()
    assert out["token_embeddings"].shape == (4, 8, 6)
    assert len(out["layers"]) == 3
    assert all(a.shape == (4, 8, 12) for a in out["layers"])
    lm = out["lm_embeddings"]
    assert lm.shape == (4, 3, 6, 12)
    assert out["mask"].dtype == bool
    np.testing.assert_array_equal(
        out["mask"], np.arange(6)[None] < (lengths - 2)[:, None])
    for b, n in enumerate(lengths):
        assert (out["token_embeddings"][b, n:] == 0).all()
        assert (np.abs(out["token_embeddings"][b, :n]).sum(-1) > 0).all()
        for l in range(3):
            assert (out["layers"][l][b, n:] == 0).all()
            np.testing.assert_array_equal(lm[b, l, :n - 2],
                                          out["layers"][l][b, 1:n - 1])
            assert (lm[b, l, n - 2:] == 0).all()
    x = out["token_embeddings"]
    np.testing.assert_array_equal(out["layers"][0], np.concatenate([x, x], -1))
    # a row of a padded batch equals the same sentence alone
    alone = R.bilm_forward(w, o, _ids(o, [SENTENCES[1]]))
    np.testing.assert_allclose(alone["lm_embeddings"][0],
                               lm[1, :, :2], atol=1e-12)
    for k, (c, h) in out["final_states"].items():
        np.testing.assert_allclose(alone["final_states"][k][0][0], c[1],
                                   atol=1e-12)
        np.testing.assert_allclose(alone["final_states"][k][1][0], h[1],
                                   atol=1e-12)


def test_clipping_is_exercised(tmp_path):
    o, w = _model(tmp_path)
    out = R.bilm_forward(w, o, _ids(o))
    h = np.concatenate([c_h[1].ravel() for c_h in
                        out["final_states"].values()])
    c = np.concatenate([c_h[0].ravel() for c_h in
                        out["final_states"].values()])
    layer1 = out["layers"][1]
    assert np.isclose(np.abs(layer1).max(), 3.0)       # proj clip
    assert np.isclose(np.abs(c).max(), 3.0)            # cell clip
    assert np.abs(h).max() <= 3.0
    # not degenerate: plenty of values strictly inside the clip range
    assert (np.abs(layer1[layer1 != 0]) < 2.9).mean() > 0.5


def test_directions_are_causal(tmp_path):
    o, w = _model(tmp_path)
    s1 = [["the", "cat", "sat", "on", "it"]]
    s2 = [["the", "cat", "sat", "on", "mat"]]
    a = R.bilm_forward(w, o, _ids(o, s1))["layers"]
    b = R.bilm_forward(w, o, _ids(o, s2))["layers"]
    for l in (1, 2):
        # forward half: positions before the changed token (index 5) agree
        np.testing.assert_allclose(a[l][0, :5, :6], b[l][0, :5, :6])
        assert not np.allclose(a[l][0, 5:, :6], b[l][0, 5:, :6])
        # backward half: only the end token (index 6) agrees
        np.testing.assert_allclose(a[l][0, 6, 6:], b[l][0, 6, 6:])
        assert not np.allclose(a[l][0, :6, 6:], b[l][0, :6, 6:])


def test_residual_connections_only_above_layer_0(tmp_path):
    o, w = _model(tmp_path)
    o_noskip = R.make_options(use_skip_connections=False)
    ids = _ids(o)
    skip = R.bilm_forward(w, o, ids)
    noskip = R.bilm_forward(w, o_noskip, ids)
    np.testing.assert_array_equal(skip["layers"][0], noskip["layers"][0])
    np.testing.assert_array_equal(skip["layers"][1], noskip["layers"][1])
    # layer 2's input (layer 1's output) is identical, so the residual
    # version is exactly the plain one plus that input
    np.testing.assert_allclose(skip["layers"][2],
                               noskip["layers"][2] + skip["layers"][1],
                               atol=1e-12)
    assert not np.allclose(skip["layers"][2], noskip["layers"][2])
    # the states are those of the LSTM itself (no residual in h)
    for k in skip["final_states"]:
        np.testing.assert_allclose(skip["final_states"][k][1],
                                   noskip["final_states"][k][1], atol=1e-12)


def test_no_projection_lstm(tmp_path):
    o, w = _model(tmp_path, lstm_dim=6, projection_dim=6, cell_clip=None,
                  proj_clip=None)
    out = R.bilm_forward(w, o, _ids(o))
    assert out["lm_embeddings"].shape == (4, 3, 6, 12)
    for (c, h) in out["final_states"].values():
        assert c.shape == (4, 6) and h.shape == (4, 6)
        # h = sigmoid(o) * tanh(c) -> |h| < |tanh(c)|
        assert (np.abs(h) <= np.abs(np.tanh(c)) + 1e-12).all()


def test_token_inputs(tmp_path):
    o = R.make_options(char_cnn=False)
    path = str(tmp_path / "w.hdf5")
    R.write_random_weights(path, o, seed=5)
    w = R.read_weights(path)
    emb = R.write_random_token_embeddings(str(tmp_path / "e.hdf5"), 10, 6)
    ids = np.array([[1, 4, 5, 2, 0], [1, 7, 2, 0, 0]])
    out = R.bilm_forward(w, o, ids, token_inputs=True, embedding=emb)
    assert out["lengths"].tolist() == [2, 1]
    np.testing.assert_allclose(out["token_embeddings"][0, 1], emb[3])
    assert (out["token_embeddings"][1, 3:] == 0).all()
    assert out["lm_embeddings"].shape == (2, 3, 3, 12)


def test_stateful_runs(tmp_path):
    o, w = _model(tmp_path)
    b1 = _ids(o, SENTENCES[:3])
    b2 = _ids(o, [["one", "two"], ["three"]])
    results, buffers = R.run_stateful(w, o, [b1, b2, b2], max_batch_size=4)
    first = R.bilm_forward(w, o, b1)
    np.testing.assert_allclose(results[0]["lm_embeddings"],
                               first["lm_embeddings"], atol=1e-12)
    init2 = {k: (c[:2], h[:2]) for k, (c, h) in first["final_states"].items()}
    second = R.bilm_forward(w, o, b2, init_states=init2)
    np.testing.assert_allclose(results[1]["lm_embeddings"],
                               second["lm_embeddings"], atol=1e-12)
    # outputs depend on the earlier batches
    assert not np.allclose(results[1]["lm_embeddings"],
                           results[2]["lm_embeddings"])
    for k, (c, h) in buffers.items():
        assert c.shape == (4, 8) and h.shape == (4, 6)
        np.testing.assert_allclose(c[:2], results[2]["final_states"][k][0])
        np.testing.assert_allclose(h[:2], results[2]["final_states"][k][1])
        # row 2 comes from batch 1, row 3 never used
        np.testing.assert_allclose(c[2], first["final_states"][k][0][2])
        np.testing.assert_allclose(h[2], first["final_states"][k][1][2])
        assert (c[3] == 0).all() and (h[3] == 0).all()
