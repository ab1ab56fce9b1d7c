"""Python's global random generator seeded for one block, then put back as it was."""
import contextlib
import random


@contextlib.contextmanager
def seeded_python_random(seed):
    """Within the block, Python's `random` module draws from `seed`; after it, the module's state is what it
    was before (nothing else process-wide is touched).

    Keras 3's initializers and seed generators that are given no seed take one from Python's `random` when
    they are built, so a model built within the block has the weights that `keras.utils.set_random_seed(seed)`
    would give it, on every backend, without that call's process-wide reseeding (NumPy's, TensorFlow's,
    torch's; it also imports TensorFlow wherever TensorFlow is installed).
    """
    saved = random.getstate()
    random.seed(seed)
    try:
        yield
    finally:
        random.setstate(saved)
