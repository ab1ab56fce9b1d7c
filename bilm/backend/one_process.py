"""What a training `Placement` of one process does, where one program covers the global batch (JAX's devices,
PyTorch's device): the part of the shared `Placement` names that TensorFlow's strategies do their own way
(`bilm.backend.tensorflow.training_ops.Placement`)."""
import contextlib

from bilm.errors import UserError


class OneProcess:
    """A placement's side of the replicas, for one process whose step is one program over the global batch."""

    chief, n_workers = True, 1

    @staticmethod
    def scope():
        """Nothing to enter: the state's arrays are made where the placement puts them."""
        return contextlib.nullcontext()

    @staticmethod
    def each_replica(function, batch, lstm, n_rows, jit_compile=None):
        """`function(batch, lstm, 0)`: the step is one program over the global batch, compiled whole
        (`function`'s contract: the TensorFlow backend's `Placement.each_replica`)."""
        return function(batch, lstm, 0)

    @staticmethod
    def agree(requests):
        """This process's request flags: they are the agreed ones (one process)."""
        return requests


def refuse_strategy(strategy, backend_name):
    """A `UserError` in one line where a `strategy` (TensorFlow's `tf.distribute`) is given to `backend_name`'s
    training, whose devices share each batch without one."""
    if strategy is not None:
        raise UserError(f"strategy is a tf.distribute.Strategy, for TensorFlow; on {backend_name}, n_gpus devices "
                        "share each batch (leave strategy out).")
