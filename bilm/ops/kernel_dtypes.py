"""The dtypes of the large matmuls and kernels, and how far inference in the narrow ones strays (see
`bilm.ops.matmul_dtype`): names without TensorFlow, for every backend."""
from bilm.errors import UserError

MATMUL_DTYPES = ("float32", "bfloat16")
# The dtypes an inference model may keep its large kernels in: training's
# matmul dtypes and int8 (per-column scales).
KERNEL_DTYPES = MATMUL_DTYPES + ("int8",)


def check_matmul_dtype(value, where="matmul_dtype"):
    """Returns `value` if it is one of `MATMUL_DTYPES`; otherwise a ValueError naming `where`."""
    if value not in MATMUL_DTYPES:
        raise UserError(f"{where} must be one of {', '.join(map(repr, MATMUL_DTYPES))}, got {value!r}.")
    return value


def check_kernel_dtype(value, where="kernel_dtype"):
    """Returns `value` if it is one of `KERNEL_DTYPES`; otherwise a UserError naming `where`."""
    if value not in KERNEL_DTYPES:
        raise UserError(f"{where} must be one of {', '.join(map(repr, KERNEL_DTYPES))}, got {value!r}.")
    return value


# How far bfloat16 inference strays from float32, for weights initialised
# as bilm initialises them (`bilm.models.random_weights`): every token's
# vector of every layer within 3% of float32's (relative, Euclidean); 0.4-0.7%
# at the released sizes, up to 1.4% in tiny layers (bench_embed.py prints
# the deviations). The deviation is the rounding (2**-9) times how much the
# LSTMs amplify a perturbation along a sentence, so it depends on the
# weights: weights that amplify it more deviate more (the tests' large
# numpy-reference weights, up to 15%); a trained model's own decide.
BFLOAT16_INFERENCE_TOLERANCE = 0.03

# How far int8 inference (per-column scales, float32 activations) strays
# from float32 for weights initialised as bilm initialises them: each
# kernel value is off by up to half of its column's step (the column's
# largest magnitude / 254), and, as with bfloat16, the LSTMs carry that
# along the sentence (docs/performance.md has the released sizes' figures).
INT8_INFERENCE_TOLERANCE = 0.05
