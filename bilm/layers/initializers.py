"""The original recipe's initialisers (the initialisers of bilm-tf's training code)."""
import math

import keras


def char_cnn_kernel_initializer(activation, width, char_dim):
    """U(-0.05, 0.05) for relu; N(0, sqrt(1 / (width * char_dim))) for tanh."""
    if activation == "relu":
        return keras.initializers.RandomUniform(-0.05, 0.05)
    return keras.initializers.RandomNormal(stddev=math.sqrt(1.0 / (width * char_dim)))


def dense_initializer(n_in):
    """N(0, sqrt(1 / n_in)): highway and projection kernels."""
    return keras.initializers.RandomNormal(stddev=math.sqrt(1.0 / n_in))
