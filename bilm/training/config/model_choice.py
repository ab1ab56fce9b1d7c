"""Which model a training run from files trains: an options file, a released size, a model to adapt, or a
restart's checkpoint; the combinations that make no sense are one `UserError` each, on every backend."""
from bilm.errors import UserError


def check_model_choice(restart, options_file, size, init_from):
    """Raises `UserError` unless exactly one source of the model is given: `options_file` or `size` for a new
    run, `init_from` (optionally with an `options_file` of training keys) for an adapted one, neither for a
    `restart` (which continues its checkpoint)."""
    if init_from is not None and restart:
        raise UserError("--init_from starts a new run from a model; a restart continues its checkpoint.")
    if init_from is not None and size is not None:
        raise UserError("Give either a model to adapt (--init_from), whose architecture it keeps, or a size "
                        "(--size), not both.")
    if not restart and options_file is None and size is None and init_from is None:
        raise UserError("Give the model to train: an options file (--options_file) or a released size (--size "
                        "small, medium or original; small suits a CPU, the others want GPUs).")
    if not restart and options_file is not None and size is not None:
        raise UserError("Give either an options file (--options_file) or a size (--size), not both.")
