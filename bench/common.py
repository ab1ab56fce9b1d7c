"""What the benches measure with: the biLM's FLOP counts (from an options dict, as options.json holds it, or
bilm's `Options`), the recurrent matmuls' floors (NumPy; the packed one TensorFlow, imported by it alone), the
relative deviation of vectors from a reference's, a random model, a synthetic training corpus and synthetic
sentences, and the clocks of training's steps (`timed_steps`) and of a function's calls (`PartTimer`)."""
import contextlib
import os
import time
from unittest import mock

import numpy as np
from machine import best_seconds


def recurrent_matmul_seconds(batch, steps, units, output_dim, repeats=5):
    """Seconds for one LSTM's per-step float32 matmuls alone over `steps` steps at this batch size (`(batch, P) @
    (P, 4U)`, then `(batch, U) @ (U, P)` if projected), by NumPy's BLAS (the rate `machine.matmul_rate` measures):
    a floor under any recurrence, since each step needs the previous step's output. At small batches it is bound
    by streaming the kernels from memory rather than by arithmetic. The mean of `repeats` after one untimed."""
    rng = np.random.default_rng(0)
    w_h = rng.standard_normal((output_dim, 4 * units), dtype=np.float32) * 0.01
    w_p = rng.standard_normal((units, output_dim), dtype=np.float32) * 0.01 if output_dim != units else None

    def loop(h):
        for _ in range(steps):
            m = (h @ w_h)[:, :units]
            h = m @ w_p if w_p is not None else m
        return h

    h = rng.standard_normal((batch, output_dim), dtype=np.float32)
    return best_seconds(lambda: loop(h), repeats) / repeats


def rows_per_step(lengths):
    """Rows of a batch of sentences of `lengths` tokens still inside their sentence (boundaries included) at each
    step."""
    lengths = np.asarray(lengths) + 2
    return [int(np.sum(lengths > t)) for t in range(lengths.max())]


def packed_recurrent_matmul_seconds(rows_per_step, units, output_dim, kernel_dtype="float32", repeats=3):
    """Seconds of one LSTM's step-by-step matmuls alone, `rows_per_step[t]` rows at step t (`(rows, P) @ (P, 4U)`,
    then `(rows, U) @ (U, P)`), in a TensorFlow graph loop, with kernels of `kernel_dtype` multiplied as bilm's
    inference multiplies them (`inference_kernel_matmul`): the floor of a recurrence that computes only the rows
    still inside their length (bilm's packed inference loop), since each step needs the previous step's output."""
    import tensorflow as tf

    from bilm.ops.lowbit_matmul import inference_kernel_matmul

    w_h = tf.cast(tf.random.normal([output_dim, 4 * units], stddev=0.01), kernel_dtype)
    w_p = tf.cast(tf.random.normal([units, output_dim], stddev=0.01), kernel_dtype)
    rows = tf.constant(rows_per_step, tf.int32)

    @tf.function(autograph=False)
    def loop(h):
        def step(t, h):
            m = inference_kernel_matmul(h[:rows[t]], w_h)[:, :units]
            return t + 1, tf.concat([inference_kernel_matmul(m, w_p), h[rows[t]:]], axis=0)
        return tf.while_loop(lambda t, h: t < tf.size(rows), step, (tf.constant(0), h),
                             shape_invariants=(tf.TensorShape([]), tf.TensorShape([None, output_dim])))[1]

    h = tf.random.normal([max(rows_per_step), output_dim])
    return best_seconds(lambda: loop(h).numpy(), repeats) / repeats


def recurrent_matmul_floor(options, groups, kernel_dtype="float32"):
    """Seconds of every LSTM's step-by-step matmuls alone on these batches (`groups`: lists of sentences, each a
    list of tokens), computing only each step's rows inside their sentence."""
    lstm = _as_dict(options)["lstm"]
    return 2 * lstm["n_layers"] * sum(
        packed_recurrent_matmul_seconds(rows_per_step([len(s) for s in group]), lstm["dim"], lstm["projection_dim"],
                                        kernel_dtype)
        for group in groups)


# The benches' small biLM (bench_adapt, bench_learning, bench_downstream): 256 char filters, LSTM 2 x 256 -> 64.
REFERENCE_MODEL = {
    "lstm": {"dim": 256, "projection_dim": 64, "n_layers": 2, "cell_clip": 3, "proj_clip": 3,
             "use_skip_connections": True},
    "char_cnn": {"activation": "relu", "embedding": {"dim": 16}, "filters": [[1, 32], [2, 32], [3, 64], [4, 128]],
                 "max_characters_per_token": 50, "n_characters": 261, "n_highway": 1},
}
# Bytes a kernel weight of each `kernel_dtype` takes.
KERNEL_ITEMSIZE = {"float32": 4, "bfloat16": 2, "float16": 2, "int8": 1}


def kernel_bytes(options, itemsize, column_scales=False):
    """`(bytes read every step, bytes read once a call, of which the token encoder's)` of the biLM's
    kernels at `itemsize` bytes a weight.

    Each step reads every layer-direction's recurrent (`P x 4D`) and
    projection (`D x P`) kernels (with `column_scales`, also their float32
    scale per column: 4 bytes each); each call reads the input kernels
    (`P x 4D`) once, and, when it has words new to the cache, the token
    encoder's highway and projection kernels and convolution filters.
    """
    p, d, directions = options.projection_dim, options.lstm_dim, 2 * options.n_layers
    projection = d * p if p != d else 0
    scales = directions * (4 * d + (p if projection else 0)) * 4 if column_scales else 0
    per_step = directions * (p * 4 * d + projection)
    encoder = 0
    cnn = options.char_cnn
    if cnn is not None:
        f = cnn.n_filters
        encoder = cnn.n_highway * 2 * f * f + (f * p if f != p else 0)
        encoder += sum(w * cnn.embedding_dim * num for w, num in cnn.filters)
    per_call = directions * p * 4 * d + encoder
    return per_step * itemsize + scales, per_call * itemsize, encoder * itemsize


def batch_rows(options, group):
    """`(rows inside their sentence at each step, rows of the first LSTM layer's input half)` of embedding the batch
    `group` (a list of sentences, each a list of tokens) with bilm's `Options` `options`: a character model runs the
    first layer's input half (and its encoder) once per distinct token of the batch, the two boundaries included."""
    rows = rows_per_step([len(sentence) for sentence in group])
    return rows, (len({token for sentence in group for token in sentence}) + 2 if options.char_cnn else sum(rows))


def call_flops(options, groups, encoded):
    """The FLOPs of the products that embedding `groups` (batches of sentences) runs once a call rather than once a
    step: each layer-direction's input half (the first layer's on `batch_rows`' rows, the others' on every row) and
    the encoder's highway and projection on the `encoded` tokens (its convolutions, TensorFlow's table lookups and
    sums, left out)."""
    input_weights = options.projection_dim * 4 * options.lstm_dim  # one layer-direction's input kernel
    flops = encoded * encoder_flops_per_token(options, convolutions=False)
    for group in groups:
        rows, first_layer_rows = batch_rows(options, group)
        flops += 2 * 2 * input_weights * (first_layer_rows + (options.n_layers - 1) * sum(rows))
    return flops


def embedding_flops(options, groups, encoded):
    """The FLOPs of the products of embedding `groups`: every step's rows through every layer-direction's recurrent
    and projection kernels, and `call_flops`."""
    step_weights = kernel_bytes(options, 1)[0]
    return call_flops(options, groups, encoded) + sum(2 * step_weights * sum(batch_rows(options, group)[0])
                                                      for group in groups)


def roofline_seconds(options, groups, encoded, itemsize, bandwidth, rate):
    """The fewest seconds in which this machine could run `embedding_flops(options, groups, encoded)`'s products
    with kernels of `itemsize` bytes a weight: each step the larger of reading every layer-direction's step kernels
    at `bandwidth` (bytes/sec) and computing its rows at `rate` (FLOP/s), and the calls' products (`call_flops`)
    likewise, each batch reading the input kernels and the encoder's read once if it encoded anything. Everything
    else is free: a bound no run can beat."""
    step_bytes, call_bytes, encoder_bytes = kernel_bytes(options, itemsize)
    step_weights = kernel_bytes(options, 1)[0]
    seconds = sum(max(step_bytes / bandwidth, 2 * step_weights * r / rate)
                  for group in groups for r in batch_rows(options, group)[0])
    read = len(groups) * (call_bytes - encoder_bytes) + (encoder_bytes if encoded else 0)
    return seconds + max(read / bandwidth, call_flops(options, groups, encoded) / rate)


def memory_read_bandwidth(n_bytes=256 * 2 ** 20, trials=5):
    """This machine's memory-read rate in bytes/sec: the fastest of `trials` float32 sums (TensorFlow's
    `reduce_sum`, on its threads) over `n_bytes`, far more than any cache holds."""
    import tensorflow as tf

    data = tf.random.uniform([n_bytes // 4])
    total = tf.function(tf.reduce_sum)
    return n_bytes / best_seconds(lambda: float(total(data)), trials=trials)


def random_model(directory, size, weights="weights.hdf5"):
    """`directory/model-<size>`: a random model of the preset `size` (`bilm.models.random_weights`, seed 0, the
    original HDF5 layout, its weight file named `weights`), written once."""
    from bilm.models.random_weights import write_random_model
    from bilm.presets import get_preset

    folder = os.path.join(directory, f"model-{size}")
    if not os.path.isdir(folder):
        write_random_model(folder + ".partial", get_preset(size), seed=0)
        os.replace(os.path.join(folder + ".partial", "weights.hdf5"), os.path.join(folder + ".partial", weights))
        os.replace(folder + ".partial", folder)
    return folder


def model_files(folder):
    """`(options file, weight file)` of the model in `folder` (`options.json`, `weights.hdf5`)."""
    return os.path.join(folder, "options.json"), os.path.join(folder, "weights.hdf5")


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


def encoder_flops_per_token(options, convolutions=True):
    """Multiply-adds x 2 of one token through the char CNN (`convolutions`: its convolutions as dense ones),
    highway and projection (0 for a token model)."""
    options = _as_dict(options)
    cnn = options.get("char_cnn")
    if cnn is None:
        return 0
    f, p = sum(num for _, num in cnn["filters"]), options["lstm"]["projection_dim"]
    flops = (char_convolution_flops_per_token(options) if convolutions else 0) + cnn["n_highway"] * 2 * 2 * f * f
    return flops + (2 * f * p if f != p else 0)


def layer_deviations(got, want):
    """`[(max, mean) per layer]` over all tokens of `|got - want| / |want|`, the relative deviation of a token's
    vector; `got` and `want` are lists of `(layers, tokens, dim)` arrays of the same shapes, a sentence's each
    (as `ELMo.embed` returns them)."""
    per_token = []
    for g, w in zip(got, want):
        if g.shape != w.shape:
            raise ValueError(f"shapes differ: {g.shape} against the reference's {w.shape}")
        g, w = g.astype(np.float64), w.astype(np.float64)
        per_token.append(np.linalg.norm(g - w, axis=-1) / np.maximum(np.linalg.norm(w, axis=-1), 1e-30))
    return [(float(layer.max(initial=0.0)), float(layer.mean())) for layer in np.concatenate(per_token, axis=1)]


def describe_deviations(deviations):
    """One line of `layer_deviations`' figures."""
    return "relative deviation from float32, max / mean over tokens: " + ", ".join(
        f"layer {layer} {top:.2e} / {mean:.2e}" for layer, (top, mean) in enumerate(deviations))


LETTERS = "abcdefghijklmnopqrstuvwxyz"


def word(index):
    """The shortest base-26 spelling of `index`, distinct for every index."""
    letters = []
    index += 1
    while index:
        index, digit = divmod(index - 1, 26)
        letters.append(LETTERS[digit])
    return "".join(reversed(letters))


def made_up_words(n_vocab, rng):
    """`n_vocab` distinct made-up words, in frequency-rank order, with
    English-like lengths: frequent words short, rare ones longer (about
    4.6 letters per running token; the longest in a batch of 1280 tokens
    13-15). Word length sets the char CNN's work on a batch."""
    ranks = np.arange(n_vocab)
    targets = np.clip(np.round(rng.normal(2.5 + 1.3 * np.log10(ranks + 1), 2.0)), 1, 20).astype(int)
    filler = np.array(list(LETTERS))[rng.integers(26, size=(n_vocab, 20))]
    words, seen = [], set()
    for rank in ranks:
        spelled = word(rank)
        candidate = spelled + "".join(filler[rank, :max(0, targets[rank] - len(spelled))])
        while candidate in seen:
            candidate += LETTERS[rng.integers(26)]
        seen.add(candidate)
        words.append(candidate)
    return words


def write_corpus(directory, n_vocab, n_tokens, seed=0):
    """A Zipfian corpus over `n_vocab` words and its vocabulary (ids in frequency order)."""
    rng = np.random.default_rng(seed)
    ranks = (rng.zipf(1.2, size=n_tokens) - 1) % n_vocab
    words = made_up_words(n_vocab, rng)
    lines, position = [], 0
    while position < n_tokens:
        length = max(1, int(rng.normal(25, 5)))
        lines.append(" ".join(words[r] for r in ranks[position:position + length]))
        position += length
    train = os.path.join(directory, f"train_{n_vocab}.txt")
    with open(train, "w") as f:
        f.write("\n".join(lines) + "\n")
    vocab = os.path.join(directory, f"vocab_{n_vocab}.txt")
    with open(vocab, "w") as f:
        f.write("\n".join(["<S>", "</S>", "<UNK>"] + words) + "\n")
    return train, vocab


def zipf_sentences(n_sentences, mean_length=25, vocab_size=20000, seed=0, lengths=None):
    """Synthetic sentences of made-up words with Zipfian frequencies, of about `mean_length` words (normal, sd 5), or
    with `lengths=(shortest, longest)` each of a length drawn from `shortest` to `longest`."""
    rng = np.random.default_rng(seed)
    letters = np.array(list(LETTERS))
    words = ["".join(rng.choice(letters, size=rng.integers(2, 11))) for _ in range(vocab_size)]
    if lengths is not None:
        ranks = rng.zipf(1.2, size=(n_sentences, lengths[1])) % vocab_size
        drawn = rng.integers(lengths[0], lengths[1] + 1, size=n_sentences)
        return [[words[rank] for rank in row[:n]] for row, n in zip(ranks, drawn)]
    ranks = rng.zipf(1.2, size=n_sentences * mean_length * 2) % vocab_size
    sentences, pos = [], 0
    for _ in range(n_sentences):
        length = max(1, int(rng.normal(mean_length, 5)))
        sentences.append([words[r] for r in ranks[pos:pos + length]])
        pos += length
    return sentences


@contextlib.contextmanager
def timed_steps(on_start=None, before_step=None, keep_batches=False):
    """Times each step `bilm.training.train` takes inside the block, on any backend (their one loop,
    `bilm.training.run.loop.run_steps`).

    Yields a list that gets a dict for each step: `begun` and `ended`
    (`time.perf_counter()`; `ended` after the loss is read, which waits for a
    step that JAX or a GPU runs ahead), `loss` (float) and, with
    `keep_batches`, `batch` (the step's arrays by key). `on_start(run)` is
    called before the first step (the run's `BaseRun`); `before_step(steps)`
    before each, with the list so far, and may raise to end the run there
    (before its end-of-run work).
    """
    from bilm.training.run import loop

    steps, run_steps = [], loop.run_steps

    def timed_run_steps(run, step_fn, *args, **kwargs):
        if on_start is not None:
            on_start(run)

        def timed_step(batch, *step_args, **step_kwargs):
            if before_step is not None:
                before_step(steps)
            begun = time.perf_counter()
            outputs = step_fn(batch, *step_args, **step_kwargs)
            loss = float(outputs["loss"])
            steps.append({"begun": begun, "ended": time.perf_counter(), "loss": loss,
                          **({"batch": batch} if keep_batches else {})})
            return outputs

        return run_steps(run, timed_step, *args, **kwargs)

    with mock.patch.object(loop, "run_steps", timed_run_steps):
        yield steps


class PartTimer:
    """Wraps callables to add up the seconds spent in each from now on."""

    def __init__(self):
        self.seconds = {}

    def wrap(self, name, function):
        self.seconds[name] = 0.0

        def timed(*args, **kwargs):
            start = time.perf_counter()
            try:
                return function(*args, **kwargs)
            finally:
                self.seconds[name] += time.perf_counter() - start
        return timed
