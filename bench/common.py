"""What the benches measure with: the biLM's FLOP counts (from an options dict, as options.json holds it, or
bilm's `Options`), the recurrent matmuls' floor (TensorFlow, imported by those functions alone) and synthetic
sentences."""
import time

import numpy as np


def recurrent_matmul_seconds(batch, steps, units, output_dim, repeats=5, dtype="float32"):
    """Seconds for one LSTM's per-step matmuls alone over `steps` steps at
    this batch size (`(batch, P) @ (P, 4U)`, then `(batch, U) @ (U, P)` if
    projected), in a compiled loop: a floor under any recurrence, since each
    step needs the previous step's output. At small batches this is bound by
    streaming the kernels from memory rather than by arithmetic. `dtype`:
    the operands' (`"bfloat16"`: bfloat16 kernels, as bfloat16 inference)."""
    import tensorflow as tf

    w_h, w_p = _recurrent_kernels(units, output_dim, dtype)

    @tf.function
    def loop(h):
        def body(t, h):
            m = tf.matmul(h, w_h)[:, :units]
            return t + 1, tf.matmul(m, w_p) if w_p is not None else m
        return tf.while_loop(lambda t, h: t < steps, body, (tf.constant(0), h))[1]

    return _seconds_per_call(loop, tf.cast(tf.random.normal([batch, output_dim]), w_h.dtype), repeats)


def packed_recurrent_matmul_seconds(rows_per_step, units, output_dim, repeats=5, dtype="float32"):
    """As `recurrent_matmul_seconds`, with `rows_per_step[t]` rows at step
    t: the floor of a recurrence that computes only the rows still inside
    their length (bilm's packed inference loop)."""
    import tensorflow as tf

    w_h, w_p = _recurrent_kernels(units, output_dim, dtype)
    rows = tf.constant(rows_per_step, tf.int32)

    @tf.function
    def loop(h):
        def body(t, h):
            m = tf.matmul(h[:rows[t]], w_h)[:, :units]
            m = tf.matmul(m, w_p) if w_p is not None else m
            return t + 1, tf.concat([m, h[rows[t]:]], axis=0)
        return tf.while_loop(lambda t, h: t < tf.size(rows), body, (tf.constant(0), h),
                             shape_invariants=(tf.TensorShape([]), tf.TensorShape([None, output_dim])))[1]

    h = tf.cast(tf.random.normal([max(rows_per_step, default=0), output_dim]), w_h.dtype)
    return _seconds_per_call(loop, h, repeats)


def _recurrent_kernels(units, output_dim, dtype):
    """Random `(P, 4U)` recurrent and `(U, P)` projection kernels (None
    without a projection) in `dtype`."""
    import tensorflow as tf

    dtype = tf.as_dtype(dtype)
    w_h = tf.cast(tf.random.normal([output_dim, 4 * units], stddev=0.01), dtype)
    w_p = tf.cast(tf.random.normal([units, output_dim], stddev=0.01), dtype) if output_dim != units else None
    return w_h, w_p


def _seconds_per_call(loop, h, repeats):
    """Mean seconds of `loop(h)` over `repeats` calls, after one untimed (tracing) call."""
    loop(h).numpy()
    start = time.perf_counter()
    for _ in range(repeats):
        loop(h).numpy()
    return (time.perf_counter() - start) / repeats


def memory_read_bandwidth(n_bytes=256 * 2 ** 20, trials=5):
    """This machine's memory-read rate in bytes/sec: the fastest of `trials` float32 sums (TensorFlow's
    `reduce_sum`, on its threads) over `n_bytes`, far more than any cache holds."""
    import tensorflow as tf

    data = tf.random.uniform([n_bytes // 4])
    total = tf.function(tf.reduce_sum)
    float(total(data))
    best = float("inf")
    for _ in range(trials):
        start = time.perf_counter()
        float(total(data))
        best = min(best, time.perf_counter() - start)
    return n_bytes / best


def _as_dict(options):
    """The options dict of `options` (a dict as options.json holds it, or bilm's `Options`)."""
    return options if isinstance(options, dict) else options.to_dict()


def char_convolution_flops_per_token(options):
    """Multiply-adds x 2 of one token through the char CNN's convolutions (0 for a token model)."""
    cnn = _as_dict(options).get("char_cnn")
    if cnn is None:
        return 0
    chars, dim = cnn["max_characters_per_token"], cnn["embedding"]["dim"]
    return sum(2 * (chars - w + 1) * w * dim * num for w, num in cnn["filters"])


def encoder_flops_per_token(options):
    """Multiply-adds x 2 of one token through the char CNN, highway and projection (0 for a token model)."""
    options = _as_dict(options)
    cnn = options.get("char_cnn")
    if cnn is None:
        return 0
    f, p = sum(num for _, num in cnn["filters"]), options["lstm"]["projection_dim"]
    flops = char_convolution_flops_per_token(options) + cnn["n_highway"] * 2 * 2 * f * f
    return flops + (2 * f * p if f != p else 0)


def forward_flops_per_token(options):
    """Multiply-adds x 2 of one token through the biLM (char CNN counted per token)."""
    options = _as_dict(options)
    p, units = options["lstm"]["projection_dim"], options["lstm"]["dim"]
    per_layer = 2 * (p + p) * 4 * units + (2 * units * p if p != units else 0)
    return encoder_flops_per_token(options) + 2 * options["lstm"]["n_layers"] * per_layer


def zipf_sentences(n_sentences, mean_length=25, vocab_size=20000, seed=0):
    """Synthetic sentences of made-up words with Zipfian frequencies."""
    rng = np.random.default_rng(seed)
    letters = np.array(list("abcdefghijklmnopqrstuvwxyz"))
    words = ["".join(rng.choice(letters, size=rng.integers(2, 11))) for _ in range(vocab_size)]
    ranks = rng.zipf(1.2, size=n_sentences * mean_length * 2) % vocab_size
    sentences, pos = [], 0
    for _ in range(n_sentences):
        length = max(1, int(rng.normal(mean_length, 5)))
        sentences.append([words[r] for r in ranks[pos:pos + length]])
        pos += length
    return sentences
