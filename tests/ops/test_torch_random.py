"""bilm.backend.torch.random: on PyTorch, the numbers of TensorFlow's stateless ops from the same seed, bit for bit."""
import numpy as np
import pytest
import tensorflow as tf
import torch

from bilm.backend.torch import random as torch_random
from bilm.ops.native import portable_kernels

# Seeds as training makes them: small, negative (fold_in's), past 32 bits.
SEEDS = [[1, 7], [-143040582, 3], [2 ** 40, -(2 ** 50)]]


def _as_int64(words):
    """int64 `(4,)` 32-bit seed words as TensorFlow's int64 `(2,)` seed."""
    words = np.asarray(words).astype(np.uint64)
    return (words[0::2] | (words[1::2] << np.uint64(32))).view(np.int64)


@pytest.mark.parametrize("seed", SEEDS)
def test_draws_are_tensorflows_bit_for_bit(seed):
    x = np.random.default_rng(0).normal(size=(7, 33)).astype(np.float32)
    tf_seed = tf.constant(seed, tf.int64)
    tf_folded = tf.random.experimental.stateless_fold_in(tf_seed, 3)  # int32 data: an int32 seed
    words = torch_random.seed_words(*seed)
    folded = torch_random.fold_in_int32(words, 3)
    np.testing.assert_array_equal(_as_int64(folded.numpy()), tf.cast(tf_folded, tf.int64).numpy())
    np.testing.assert_array_equal(
        _as_int64(torch_random.fold_in(words, -5).numpy()),
        tf.random.experimental.stateless_fold_in(tf_seed, tf.constant(-5, tf.int64)).numpy())
    np.testing.assert_array_equal(torch_random.uniform(folded, (1001,)).numpy(),
                                  tf.random.stateless_uniform([1001], tf_folded, dtype=tf.float32).numpy())
    want = tf.nn.experimental.stateless_dropout(tf.constant(x), 0.3, seed=tf_folded).numpy()
    np.testing.assert_array_equal(torch_random.dropout(torch.from_numpy(x), 0.3, folded).numpy(), want)
    assert 0.2 < np.mean(want == 0) < 0.4  # the masks drop units: the comparison is not of zeros


def test_words_of_a_seed_sign_extend_as_tensorflow_casts_an_int32_seed():
    np.testing.assert_array_equal(_as_int64(torch_random.seed_words(-1, 2 ** 33 + 5).numpy()), [-1, 2 ** 33 + 5])
    words = torch_random.seed_words(torch.tensor(-7, dtype=torch.int32), torch.tensor(4_000_000_000))
    np.testing.assert_array_equal(_as_int64(words.numpy()), [-7, 4_000_000_000])


def test_philox_counter_carries_into_its_high_words():
    # Blocks past a low word of 2^32 - 1 carry into the next words, as a 128-bit counter does.
    key = torch.tensor([5, 6])
    words = torch_random.philox_words(key, torch.tensor([0xFFFFFFFF, 0xFFFFFFFF, 9, 0]), (8,)).numpy()
    carried = torch_random.philox_words(key, torch.tensor([0, 0, 10, 0]), (4,)).numpy()
    np.testing.assert_array_equal(words[4:], carried)
    assert not np.array_equal(words[:4], carried)


@pytest.mark.parametrize("counter", [[0, 0, 0, 0], [0xFFFFFFF0, 0xFFFFFFFF, 0xFFFFFFFF, 7], [123, 4, 5, 6]])
def test_the_native_words_on_a_cpu_are_the_words_of_the_ops_a_gpu_runs(counter):
    # On a CPU `philox_words` is bilm's native kernel; on a GPU PyTorch's ops: the same words, carries included.
    assert portable_kernels.load_library() is not None  # else both sides below would be the ops
    key = torch.tensor([0x3EC8F720, 0xFFFFFFFF])
    for shape in [(1,), (4,), (7, 3), (1001,)]:
        native = torch_random.philox_words(key, torch.tensor(counter), shape)
        by_ops = torch_random.philox_words_by_ops(key, torch.tensor(counter), shape)
        assert native.dtype == by_ops.dtype == torch.int64 and native.shape == by_ops.shape == shape
        np.testing.assert_array_equal(native.numpy(), by_ops.numpy())
