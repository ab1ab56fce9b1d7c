"""TensorFlow's stateless random numbers on JAX: one seed draws the same numbers on both backends.

A training step is a pure function of its seed on either backend
(`bilm.ops.stateless_random` on TensorFlow). These functions compute
TensorFlow's own numbers on JAX: the Philox-4x32-10 stream of
`tf.random.stateless_uniform` and `tf.nn.experimental.stateless_dropout`,
with the key and counter TensorFlow derives from a seed, in 32-bit integer
operations (JAX's integers are 32-bit unless its x64 mode is on, which this
module never needs). So the same seed drops the same units and samples the
same negatives (`bilm.backend.jax.sampler`) on JAX as on TensorFlow.

A seed is TensorFlow's int64 `(2,)` stateless seed, held on JAX as uint32
`(4,)`: `(word 0 low, word 0 high, word 1 low, word 1 high)`. `seed_words`
makes one; `fold_in` and `fold_in_int32` derive one from another as
`tf.random.experimental.stateless_fold_in` does with int64 and int32 data.
"""
import jax.numpy as jnp
from jax import lax

from bilm.backend.philox import M0, M1, ROUNDS, SCRAMBLE_KEY, W0, W1

# A seed's shape and dtype as a network input (`build_bilm`'s `dropout_seed`): its four 32-bit words (JAX
# has no 64-bit integers without x64).
SEED_SHAPE, SEED_DTYPE = (4,), "uint32"

# At most this many words (a seed's) are drawn with the rounds not unrolled.
_FEW_WORDS = 16


def seed_words(first, second):
    """The seed `(first, second)` as uint32 `(4,)`: each an int (Python or a JAX int32 scalar, sign-extended
    to 64 bits as TensorFlow casts an int32 seed to int64) or already a uint32 `(2,)` (low, high) pair."""
    return jnp.concatenate([_word(first), _word(second)])


def fold_in(seed, data):
    """`tf.random.experimental.stateless_fold_in(seed, data)` with int64 `data` (a Python int or an int32
    scalar, sign-extended): the new seed, uint32 `(4,)`."""
    low, high = _uint64_pairs(random_bits(seed, (2,)))
    return seed_words(jnp.stack([low[0], high[0]]), data)


def fold_in_int32(seed, data):
    """`stateless_fold_in(seed, data)` with int32 `data`: TensorFlow's result is an int32 seed, which its
    kernels sign-extend to int64; here the new seed is already extended, uint32 `(4,)`."""
    bits = random_bits(seed, (1,))[0]
    return seed_words(lax.bitcast_convert_type(bits, jnp.int32), data)


def random_bits(seed, shape):
    """The uint32 `shape` words TensorFlow's stateless ops draw from `seed`
    (`StatelessRandomUniformFullIntV2`, Philox)."""
    key, counter = key_and_counter(seed)
    return philox_words(key, counter, shape)


def uniform(seed, shape):
    """`tf.random.stateless_uniform(shape, seed)`, float32 in `[0, 1)`: the low 23 bits of each word as the
    mantissa of a float in `[1, 2)`, less 1."""
    mantissa = random_bits(seed, shape) & jnp.uint32(0x7FFFFF)
    return mantissa.astype(jnp.float32) * jnp.float32(2.0 ** -23)


def uniform_float64_mantissas(seed, size):
    """The 52-bit integers `M` of `tf.random.stateless_uniform([size], seed, tf.float64)` `= M / 2^52`, as
    `(high 20 bits, low 32 bits)`: int32 `(size,)` and uint32 `(size,)`."""
    low, high = _uint64_pairs(random_bits(seed, (2 * size,)))
    return (low & jnp.uint32(0xFFFFF)).astype(jnp.int32), high


def dropout(x, rate, seed):
    """`tf.nn.experimental.stateless_dropout(x, rate, seed)` for a Python float `rate` in `[0, 1)`:
    `x / (1 - rate)` where a uniform draw of the shape of `x` is at least `rate`, else 0 (float32 `x`)."""
    if rate == 0:
        return x
    keep = uniform(seed, x.shape) >= rate
    scaled = x * jnp.asarray(1.0 / (1.0 - rate), x.dtype)
    return jnp.where(keep, scaled, jnp.zeros_like(scaled))


def key_and_counter(seed):
    """`(key uint32 (2,), counter uint32 (4,))`: the Philox key and counter TensorFlow derives from `seed`,
    low words first. The seed's two 64-bit words are the counter of one Philox block under a fixed key; of
    its four words, the first two are the key and the last two the counter's high half."""
    words = philox_words(jnp.asarray(SCRAMBLE_KEY, jnp.uint32), jnp.asarray(seed, jnp.uint32), (4,))
    zero = jnp.zeros([2], jnp.uint32)
    return words[:2], jnp.concatenate([zero, words[2:]])


def philox_words(key, counter, shape):
    """Philox-4x32-10 from `key` uint32 `(2,)` and the 128-bit `counter` uint32 `(4,)` (low word first):
    block `i` is the counter plus `i`, four words a block, the first `prod(shape)` words in `shape`."""
    size = 1
    for dim in shape:
        size *= int(dim)
    n_blocks = max(-(-size // 4), 1)
    i = jnp.arange(n_blocks, dtype=jnp.uint32)
    c0 = counter[0] + i
    carry = (c0 < i).astype(jnp.uint32)  # the 128-bit addition's carries
    c1 = counter[1] + carry
    carry = carry & (c1 == 0)
    c2 = counter[2] + carry
    carry = carry & (c2 == 0)
    c3 = counter[3] + carry

    def one_round(round_, words):
        c0, c1, c2, c3 = words
        # The key of round r: the key plus r times its increments.
        k0 = key[0] + jnp.uint32(W0) * round_.astype(jnp.uint32)
        k1 = key[1] + jnp.uint32(W1) * round_.astype(jnp.uint32)
        high0, low0 = _multiply_high_low(M0, c0)
        high1, low1 = _multiply_high_low(M1, c2)
        return high1 ^ c1 ^ k0, low1, high0 ^ c3 ^ k1, low0

    # Two passes of five rounds (bench_train.py --backend jax --size small, this CPU, one run each): ten
    # copies took the step's XLA compile from 5.3 s to 15.8 s; one round a pass took 7.6 s a step against
    # 6.9 s; two passes of five compile in 7.9 s and step in 6.9 s.
    # A seed's few words (fold_in, the key and counter) take one round a pass: their time is the loop's, and
    # a step derives dozens of seeds, whose copies of the rounds would each be compiled.
    unroll = 5 if size > _FEW_WORDS else 1
    c0, c1, c2, c3 = lax.fori_loop(0, ROUNDS, one_round, (c0, c1, c2, c3), unroll=unroll)
    return jnp.stack([c0, c1, c2, c3], axis=1).reshape(-1)[:size].reshape(shape)


def _multiply_high_low(constant, x):
    """The high and low 32 bits of the 64-bit product of a 32-bit `constant` and uint32 `x`, in 16-bit
    halves (no 64-bit integers)."""
    a_high, a_low = jnp.uint32(constant >> 16), jnp.uint32(constant & 0xFFFF)
    x_high, x_low = x >> 16, x & jnp.uint32(0xFFFF)
    low_low, low_high, high_low = a_low * x_low, a_low * x_high, a_high * x_low
    middle = (low_low >> 16) + (low_high & 0xFFFF) + (high_low & 0xFFFF)
    high = a_high * x_high + (low_high >> 16) + (high_low >> 16) + (middle >> 16)
    return high, jnp.uint32(constant) * x


def _uint64_pairs(words):
    """Consecutive words as TensorFlow's uint64 draws: `(low words, high words)`, each half as long."""
    return words[0::2], words[1::2]


def _word(value):
    """uint32 `(2,)` (low, high): a 64-bit word from an int (sign-extended) or a uint32 `(2,)` pair."""
    if isinstance(value, int):
        value &= 0xFFFFFFFFFFFFFFFF
        return jnp.asarray([value & 0xFFFFFFFF, value >> 32], jnp.uint32)
    value = jnp.asarray(value)
    if value.shape == (2,):
        return value.astype(jnp.uint32)
    if jnp.issubdtype(value.dtype, jnp.unsignedinteger):
        return jnp.stack([value.astype(jnp.uint32), jnp.uint32(0)])
    signed = value.astype(jnp.int32)
    return jnp.stack([lax.bitcast_convert_type(signed, jnp.uint32),
                      jnp.where(signed < 0, jnp.uint32(0xFFFFFFFF), jnp.uint32(0))])
