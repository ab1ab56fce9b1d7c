"""The LSTM's steps with a hand-written backward pass (BPTT) on JAX, as TensorFlow's `bilm.ops.lstm_bptt`.

JAX's autodiff of the steps' scan adds each step's share of the recurrent and projection kernels' gradients inside
the backward loop: one small product a step, which XLA runs on a CPU as a slow Eigen dot. Here the backward loop
carries only the state gradients, and each kernel's gradient is one product over all steps after it. Where no
gradient is taken the steps are the portable ones (`bilm.ops.lstm_scan.lstm_steps`, the same program; on a CPU, at
a few rows over a large kernel, their arithmetic in columns); where one is, the forward pass computes the same
arithmetic and keeps what the backward pass reads. The gradients are autodiff's to float32 round-off (the sums over
steps are taken in another order).
"""
import functools
import math
import types

import jax
import jax.numpy as jnp
from keras import ops

from bilm.ops.lstm_scan import lstm_cell, widened
from bilm.ops.lstm_scan import lstm_steps as portable_lstm_steps


def lstm_steps_bptt(gates_tm, valid_tm, initial_c, initial_h, recurrent_kernel, projection_kernel, cell_clip,
                    proj_clip, scan):
    """`bilm.ops.lstm_scan.lstm_steps` (its arguments and results; `scan` the backend's `core.scan`), with the
    backward pass above. Differentiable with respect to `gates_tm`, both states and both kernels."""
    # As arrays: a Keras variable (a layer's kernel) is not one, and `jax.custom_vjp` takes only arrays.
    # Kernels widened to float32 (a bfloat16 layer's), as the portable steps take them.
    kernels = widened(recurrent_kernel), widened(projection_kernel)
    arrays = [None if x is None else ops.convert_to_tensor(x)
              for x in (gates_tm, valid_tm, initial_c, initial_h, *kernels)]
    return _steps((cell_clip, proj_clip), scan, *arrays)


# Where a CPU runs the steps in columns (`_column_steps`): batches of a few rows over a large recurrent kernel (the
# original size's 512 x 16384), whose products XLA's CPU dot takes faster with the state on the second axis; one row
# or many, and smaller kernels (the small size's 128 x 4096), it takes as fast or faster as they are (measured:
# docs/performance.md).
COLUMN_BATCH_SIZES = range(4, 49)
COLUMN_MIN_KERNEL_VALUES = 1 << 23
# The functions `lstm_cell` computes with, each state and gate in columns, `(width, batch)`: `matmul(h, kernel_t)` is
# `kernel_t @ h` for a kernel's transpose, and `split` cuts the columns' rows.
COLUMN_MATH = types.SimpleNamespace(matmul=lambda h, kernel_t: kernel_t @ h, sigmoid=jax.nn.sigmoid, tanh=jnp.tanh,
                                    clip=jnp.clip, split=lambda x, n, axis: jnp.split(x, n, axis=0))


def runs_in_columns(batch, recurrent_kernel_shape):
    """Whether steps of `batch` rows over a recurrent kernel of `recurrent_kernel_shape` run in columns."""
    return (batch in COLUMN_BATCH_SIZES and math.prod(recurrent_kernel_shape) >= COLUMN_MIN_KERNEL_VALUES
            and jax.default_backend() == "cpu")


@functools.partial(jax.custom_vjp, nondiff_argnums=(0, 1))
def _steps(clips, scan, gates_tm, valid_tm, initial_c, initial_h, recurrent_kernel, projection_kernel):
    if runs_in_columns(gates_tm.shape[1], recurrent_kernel.shape):
        return _column_steps(clips, gates_tm, valid_tm, initial_c, initial_h, recurrent_kernel, projection_kernel)
    return portable_lstm_steps(gates_tm, valid_tm, initial_c, initial_h, recurrent_kernel, projection_kernel, *clips,
                               scan=scan)


def _column_steps(clips, gates_tm, valid_tm, initial_c, initial_h, recurrent_kernel, projection_kernel):
    """`column_steps` of the kernels' transposes, made here."""
    return column_steps(clips, gates_tm, valid_tm, initial_c, initial_h, recurrent_kernel.T,
                        None if projection_kernel is None else projection_kernel.T)


def column_steps(clips, xs, valid_tm, initial_c, initial_h, recurrent_kernel_t, projection_kernel_t, gate_rows=None,
                 bias=None, scan=jax.lax.scan):
    """The portable steps' arithmetic (`bilm.ops.lstm_scan.lstm_cell`, on `COLUMN_MATH`) with each state in columns:
    `c` `(units, batch)`, `h` `(output_dim, batch)`, each product a kernel's transpose (`recurrent_kernel_t`
    `(4 * units, output_dim)`, `projection_kernel_t` `(output_dim, units)` or None) times a state. `xs` `(time,
    batch, 4 * units)`: each step's rows of the input half, which the step turns into columns; or with `gate_rows`
    `(n, 4 * units)`, int `(time, batch)`: the rows each step reads. `bias` `(4 * units,)` is added to each step's
    (None: nothing); `valid_tm` bool `(time, batch, 1)`; `scan`: `jax.lax.scan`'s arguments and results. Returns
    `lstm_steps`' `(outputs_tm, final_c, final_h)`, the same values to float32 round-off (other products sum in other
    orders)."""
    def step(state, step_inputs):
        c, h = state
        x, valid = step_inputs  # (batch, 4 * units) or (batch,) indices; (1, batch)
        gates = (x if gate_rows is None else jnp.take(gate_rows, x, axis=0)).T
        if bias is not None:
            gates = gates + bias[:, None]
        new_c, new_h = lstm_cell(COLUMN_MATH, gates, c, h, recurrent_kernel_t, projection_kernel_t, *clips)
        return (jnp.where(valid, new_c, c), jnp.where(valid, new_h, h)), jnp.where(valid, new_h, 0.0)

    (final_c, final_h), outputs = scan(step, (initial_c.T, initial_h.T), (xs, jnp.swapaxes(valid_tm, 1, 2)))
    return jnp.swapaxes(outputs, 1, 2), final_c.T, final_h.T


def _forward(clips, scan, gates_tm, valid_tm, initial_c, initial_h, recurrent_kernel, projection_kernel):
    """The steps, keeping per step what the backward pass reads: the gates' activations `(batch, 4 * units)`,
    the state before the step, the cell before its clip and the projected output before its clip."""
    del scan  # the loop is JAX's own scan, whose steps may output several arrays
    cell_clip, proj_clip = clips

    def step(state, step_inputs):
        c, h = state
        gates, valid = step_inputs
        activations = _activations(gates + h @ recurrent_kernel)
        i, j, f, o = jnp.split(activations, 4, axis=-1)
        raw_c = f * c + i * j
        new_c = raw_c if cell_clip is None else jnp.clip(raw_c, -cell_clip, cell_clip)
        raw_h = o * jnp.tanh(new_c)
        if projection_kernel is not None:
            raw_h = raw_h @ projection_kernel
        new_h = raw_h if proj_clip is None else jnp.clip(raw_h, -proj_clip, proj_clip)
        saved = (activations, c, h, raw_c, raw_h)
        return ((jnp.where(valid, new_c, c), jnp.where(valid, new_h, h)),
                (jnp.where(valid, new_h, jnp.zeros_like(new_h)), saved))

    (final_c, final_h), (outputs_tm, saved) = jax.lax.scan(step, (initial_c, initial_h), (gates_tm, valid_tm))
    return (outputs_tm, final_c, final_h), (saved, valid_tm, recurrent_kernel, projection_kernel)


def _backward(clips, scan, residuals, cotangents):
    """The gradients of `_steps`' array arguments (None for the mask) from `_forward`'s residuals and the
    cotangents of `(outputs_tm, final_c, final_h)`."""
    del scan
    cell_clip, proj_clip = clips
    (activations, c_before, h_before, raw_c, raw_h), valid_tm, recurrent_kernel, projection_kernel = residuals
    d_outputs, d_final_c, d_final_h = cotangents

    def step(state, step_inputs):
        d_c, d_h = state
        d_output, valid, activations, c, raw_c, raw_h = step_inputs
        i, j, f, o = jnp.split(activations, 4, axis=-1)
        d_raw_h = jnp.where(valid, d_h + d_output, 0.0) * _unclipped(raw_h, proj_clip)
        new_c = raw_c if cell_clip is None else jnp.clip(raw_c, -cell_clip, cell_clip)
        tanh_c = jnp.tanh(new_c)
        d_cell_output = d_raw_h if projection_kernel is None else d_raw_h @ projection_kernel.T
        d_raw_c = (jnp.where(valid, d_c, 0.0) + d_cell_output * o * (1.0 - tanh_c * tanh_c)) * _unclipped(
            raw_c, cell_clip)
        d_z = jnp.concatenate([d_raw_c * j * i * (1.0 - i), d_raw_c * i * (1.0 - j * j),
                               d_raw_c * c * f * (1.0 - f), d_cell_output * tanh_c * o * (1.0 - o)], axis=-1)
        d_c = jnp.where(valid, d_raw_c * f, d_c)
        d_h = jnp.where(valid, d_z @ recurrent_kernel.T, d_h)
        return (d_c, d_h), (d_z, d_raw_h, o * tanh_c)

    (d_initial_c, d_initial_h), (d_gates, d_raw_h, cell_outputs) = jax.lax.scan(
        step, (d_final_c, d_final_h), (d_outputs, valid_tm, activations, c_before, raw_c, raw_h), reverse=True)
    # The kernels' gradients: one product each over all steps (invalid steps' rows are zeros in d_gates, d_raw_h).
    d_recurrent = _rows(h_before).T @ _rows(d_gates)
    d_projection = None if projection_kernel is None else _rows(cell_outputs).T @ _rows(d_raw_h)
    return d_gates, None, d_initial_c, d_initial_h, d_recurrent, d_projection


_steps.defvjp(_forward, _backward)


def _activations(z):
    """`(sigmoid(i), tanh(j), sigmoid(f + 1), sigmoid(o))` side by side, for `z` `(batch, 4 * units)`."""
    i, j, f, o = jnp.split(z, 4, axis=-1)
    return jnp.concatenate([jax.nn.sigmoid(i), jnp.tanh(j), jax.nn.sigmoid(f + 1.0), jax.nn.sigmoid(o)], axis=-1)


def _unclipped(x, clip):
    """1.0 where `clip(x, -clip, clip)` passes `x`'s gradient, else 0.0 (everywhere without a clip)."""
    return 1.0 if clip is None else ((x >= -clip) & (x <= clip)).astype(x.dtype)


def _rows(x):
    return x.reshape(-1, x.shape[-1])

