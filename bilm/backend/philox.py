"""The constants of TensorFlow's Philox-4x32-10 stream, which JAX's and PyTorch's `random` modules compute
(`bilm.backend.jax.random`, `bilm.backend.torch.random`): the rounds' multipliers and key increments, and the
key TensorFlow scrambles a seed with (`bilm.ops.stateless_random`)."""

M0, M1 = 0xD2511F53, 0xCD9E8D57
W0, W1 = 0x9E3779B9, 0xBB67AE85
SCRAMBLE_KEY = (0x3EC8F720, 0x02461E29)
ROUNDS = 10
