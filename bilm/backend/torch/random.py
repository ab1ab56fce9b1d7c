"""TensorFlow's stateless random numbers on PyTorch: one seed draws the same numbers on every backend.

As `bilm.backend.jax.random` does on JAX, these functions compute TensorFlow's
own numbers with PyTorch's tensors: the Philox-4x32-10 stream of
`tf.random.stateless_uniform` and `tf.nn.experimental.stateless_dropout`,
with the key and counter TensorFlow derives from a seed. PyTorch's uint32
has no addition, shifts or comparisons, so the 32-bit words are held in
int64 tensors and masked to 32 bits: an int64 product holds the 64 bits of
the unsigned product (two's complement wraps past 2^63 to the same bits),
so a shift and a mask read its high and low words. On a CPU the stream's
words come from bilm's native kernel instead
(`bilm.ops.native.portable_kernels.philox_words`), the same words without
an op per round.

A seed is TensorFlow's int64 `(2,)` stateless seed, held as int64 `(4,)`
32-bit words: `(word 0 low, word 0 high, word 1 low, word 1 high)`.
`seed_words` makes one; `fold_in` and `fold_in_int32` derive one from
another as `tf.random.experimental.stateless_fold_in` does with int64 and
int32 data. Tensors are made on the seed's device.
"""
import math

import torch

from bilm.backend.philox import M0, M1, ROUNDS, SCRAMBLE_KEY, W0, W1
from bilm.ops.native import portable_kernels

# A seed's shape and dtype as a network input (`build_bilm`'s `dropout_seed`): its four 32-bit words, each in an int64.
SEED_SHAPE, SEED_DTYPE = (4,), "int64"

_MASK = 0xFFFFFFFF


def seed_words(first, second, device=None):
    """The seed `(first, second)` as int64 `(4,)` 32-bit words: each an int (sign-extended to 64 bits as
    TensorFlow casts an int32 seed to int64), a scalar tensor (likewise), or already a `(2,)` (low, high)
    pair of words."""
    return torch.cat([_word(first, device), _word(second, device)])


def fold_in(seed, data):
    """`tf.random.experimental.stateless_fold_in(seed, data)` with int64 `data` (an int or a scalar tensor,
    sign-extended): the new seed, int64 `(4,)` words."""
    words = random_bits(seed, (2,))
    return seed_words(words, data, seed.device)


def fold_in_int32(seed, data):
    """`stateless_fold_in(seed, data)` with int32 `data`: TensorFlow's result is an int32 seed, which its
    kernels sign-extend to int64; here the new seed is already extended, int64 `(4,)` words."""
    bits = random_bits(seed, (1,))[0]
    return seed_words(torch.where(bits >= 2 ** 31, bits - 2 ** 32, bits), data, seed.device)


def random_bits(seed, shape):
    """The 32-bit words (int64 `shape`) TensorFlow's stateless ops draw from `seed` (Philox)."""
    key, counter = key_and_counter(seed)
    return philox_words(key, counter, shape)


def uniform(seed, shape):
    """`tf.random.stateless_uniform(shape, seed)`, float32 in `[0, 1)`: the low 23 bits of each word as the
    mantissa of a float in `[1, 2)`, less 1."""
    return (random_bits(seed, shape) & 0x7FFFFF).to(torch.float32) * 2.0 ** -23


def uniform_float64_mantissas(seed, size):
    """The 52-bit integers `M` of `tf.random.stateless_uniform([size], seed, tf.float64)` `= M / 2^52`, as
    `(high 20 bits, low 32 bits)`, each int64 `(size,)` (`bilm.backend.jax.random`'s pair)."""
    words = random_bits(seed, (2 * size,))
    return words[0::2] & 0xFFFFF, words[1::2]


def dropout(x, rate, seed):
    """`tf.nn.experimental.stateless_dropout(x, rate, seed)` for a Python float `rate` in `[0, 1)`:
    `x / (1 - rate)` where a uniform draw of the shape of `x` is at least `rate`, else 0 (float32 `x`)."""
    if rate == 0:
        return x
    keep = uniform(seed.to(x.device), tuple(x.shape)) >= rate
    scaled = x * torch.tensor(1.0 / (1.0 - rate), dtype=x.dtype, device=x.device)
    return torch.where(keep, scaled, torch.zeros_like(scaled))


def key_and_counter(seed):
    """`(key (2,), counter (4,))` 32-bit words: the Philox key and counter TensorFlow derives from `seed`, low
    words first (see `bilm.backend.jax.random.key_and_counter`)."""
    words = philox_words(torch.tensor(SCRAMBLE_KEY, dtype=torch.int64, device=seed.device), seed, (4,))
    return words[:2], torch.cat([torch.zeros(2, dtype=torch.int64, device=seed.device), words[2:]])


def philox_words(key, counter, shape):
    """Philox-4x32-10 from `key` `(2,)` and the 128-bit `counter` `(4,)` (32-bit words, low first): block `i`
    is the counter plus `i`, four words a block, the first `prod(shape)` words in `shape`. On a CPU by bilm's
    native kernel where it is built (an op per round costs more than the rounds), else with tensors
    (`philox_words_by_ops`): the same words."""
    if key.device.type == "cpu" and portable_kernels.load_library() is not None:
        words = portable_kernels.philox_words(key.numpy(), counter.numpy(), _size(shape), (M0, M1), (W0, W1), ROUNDS)
        return torch.from_numpy(words).reshape(tuple(int(dim) for dim in shape))
    return philox_words_by_ops(key, counter, shape)


def _size(shape):
    return math.prod(int(dim) for dim in shape)


def philox_words_by_ops(key, counter, shape):
    """`philox_words` with PyTorch's ops, on the tensors' device."""
    size = _size(shape)
    n_blocks = max(-(-size // 4), 1)
    i = torch.arange(n_blocks, dtype=torch.int64, device=key.device)
    words = []
    carry = i
    for word in counter:  # the 128-bit addition, a word at a time (sums of two words fit in 64 bits)
        total = word + carry
        words.append(total & _MASK)
        carry = total >> 32
    c0, c1, c2, c3 = words
    for round_ in range(ROUNDS):
        k0, k1 = (key[0] + W0 * round_) & _MASK, (key[1] + W1 * round_) & _MASK
        high0, low0 = _multiply_high_low(M0, c0)
        high1, low1 = _multiply_high_low(M1, c2)
        c0, c1, c2, c3 = high1 ^ c1 ^ k0, low1, high0 ^ c3 ^ k1, low0
    return torch.stack([c0, c1, c2, c3], dim=1).reshape(-1)[:size].reshape(shape)


def _multiply_high_low(constant, x):
    """The high and low 32 bits of the 64-bit product of a 32-bit `constant` and the words `x`: int64 holds the
    product's 64 bits (two's complement wraps an unsigned product past 2^63 to the same bits), and an
    arithmetic shift then the mask reads its high word."""
    product = constant * x
    return (product >> 32) & _MASK, product & _MASK


def _word(value, device):
    """int64 `(2,)` (low, high) words: a 64-bit word from an int or a scalar tensor (sign-extended), or a
    `(2,)` pair of words."""
    if isinstance(value, int):
        value &= 0xFFFFFFFFFFFFFFFF
        return torch.tensor([value & _MASK, value >> 32], dtype=torch.int64, device=device)
    value = torch.as_tensor(value, device=device).to(torch.int64)
    if value.shape == (2,):
        return value & _MASK
    return torch.stack([value & _MASK, (value >> 32) & _MASK])
