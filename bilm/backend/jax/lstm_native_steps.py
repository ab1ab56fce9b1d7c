"""The LSTM's steps at inference under JAX on a CPU by bilm's native recurrence, an XLA custom call
(`bilm.ops.native.xla_kernels`): the loop TensorFlow's `BilmLstmRecurrence` op runs, on XLA's buffers and threads.

The rows are sorted longest first and packed, as the op takes them, inside the compiled program: each step
computes only the rows inside their length, streams each kernel once for all of them, and runs the cell's
elementwise work in one pass. Each row's values are the same bytes at any number of rows beside it (the op's
contract) and, against the portable steps, the same to float32 round-off. No gradient: training takes the portable
steps. Figures: docs/performance.md.
"""
import jax
import jax.numpy as jnp
import numpy as np
from keras import ops

from bilm.ops.lstm_scan import lstm_scan
from bilm.ops.native import xla_kernels

# The kernels' dtypes the custom call takes.
NATIVE_KERNEL_DTYPES = ("float32", "bfloat16")


def native_steps_available(recurrent_kernel, projection_kernel):
    """Whether the native steps take these kernels (float32 or bfloat16, both one dtype) and the custom call is
    registered (built on the first call; False where it cannot be: `xla_kernels.register`)."""
    dtypes = {str(kernel.dtype) for kernel in (recurrent_kernel, projection_kernel) if kernel is not None}
    return len(dtypes) == 1 and dtypes <= set(NATIVE_KERNEL_DTYPES) and xla_kernels.register()


def lstm_steps(gates_tm, valid_tm, initial_c, initial_h, recurrent_kernel, projection_kernel, cell_clip, proj_clip,
               gate_index=None, bias=None):
    """`bilm.ops.lstm_scan.lstm_steps` (its arguments and results) by the custom call, for kernels
    `native_steps_available` takes and `valid_tm` that is each row's first steps (as `lstm_scan` gives it); no gradient.

    Raises:
        RuntimeError: the custom call cannot be built here (`native_steps_available` says so first).
    """
    if not xla_kernels.register():
        raise RuntimeError("bilm's LSTM recurrence for JAX could not be built here (see its RuntimeWarning)")
    time, batch = valid_tm.shape[:2]
    units, output_dim = initial_c.shape[1], initial_h.shape[1]
    lengths = jnp.sum(valid_tm[..., 0].astype(jnp.int32), axis=0)
    order = jnp.argsort(-lengths, stable=True).astype(jnp.int32)
    active = jnp.sum(lengths[order][None, :] > jnp.arange(time)[:, None], axis=1).astype(jnp.int32)
    # Packed entry k: step t's rows b < active[t], in order; entries past the last are never read.
    entries = jnp.nonzero((jnp.arange(batch)[None, :] < active[:, None]).reshape(-1), size=time * batch,
                          fill_value=0)[0]
    index = ((entries // batch) * batch + order[entries % batch]).astype(jnp.int32)
    if gate_index is None:
        gates, rows = jnp.reshape(gates_tm, (-1, 4 * units)), index
    else:
        gates, rows = gates_tm, jnp.reshape(gate_index, (-1,))[index].astype(jnp.int32)
    recurrent_kernel = jnp.asarray(recurrent_kernel)
    none = jnp.zeros((0,), recurrent_kernel.dtype)
    call = jax.ffi.ffi_call(xla_kernels.TARGET, (
        jax.ShapeDtypeStruct((time, batch, output_dim), jnp.float32),
        jax.ShapeDtypeStruct((batch, units), jnp.float32), jax.ShapeDtypeStruct((batch, output_dim), jnp.float32)))
    outputs, c, h = call(
        ops.cast(gates, "float32"), rows, jnp.zeros((0,), jnp.float32) if bias is None else ops.cast(bias, "float32"),
        index, active, recurrent_kernel, none if projection_kernel is None else jnp.asarray(projection_kernel),
        ops.cast(initial_c, "float32")[order], ops.cast(initial_h, "float32")[order],
        cell_clip=np.float32(-1.0 if cell_clip is None else cell_clip),
        proj_clip=np.float32(-1.0 if proj_clip is None else proj_clip))
    inverse = jnp.argsort(order)
    return outputs, c[inverse], h[inverse]


def lstm_scan_native(*args, recurrence=None, **kwargs):
    """`lstm_scan` (its arguments and results) with the native steps as its recurrence."""
    return lstm_scan(*args, recurrence=lstm_steps, **kwargs)

