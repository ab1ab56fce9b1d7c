"""How a pretrained biLM embeds: one value that every front end builds once and passes on (`ELMo`, `load`,
`BidirectionalLanguageModel`, the embedding files, the Beam handler), instead of each carrying the settings
through arguments of its own; and the checks of the start and the kernel dtype, which the Keras layer
(`ELMoEmbedding`, whose Keras config keeps its own arguments) makes too.

- `start`: where a stateless model's LSTMs start each sentence: `"warm"`
  (the boundary state, the mean LSTM state at sentence starts in
  training, `bilm.models.boundary_state`), `"zeros"`, or None for
  `"warm"` when there is a boundary state, else `"zeros"` (with a note
  on how to make one). The policy: `bilm.models.start_state`.
- `warm_up`: your own text (a list of sentences, or a text file's path)
  to compute the boundary state from, for weights that carry none
  (every published model).
- `boundary_state`: `{state key: (size,)}` to use instead of the one
  stored in the weight file.
- `kernel_dtype`: the dtype the large kernels (highway, LSTMs) are kept
  in: `"float32"`; `"bfloat16"` (half the bytes, bfloat16 operands with
  float32 accumulation; vectors within `BFLOAT16_INFERENCE_TOLERANCE` of
  float32's); `"int8"` with a float32 scale per output column (a quarter
  of the bytes; within `INT8_INFERENCE_TOLERANCE`). Which is fastest
  where: docs/performance.md.
- `max_batch_size`: rows of a stateful model's state buffers.
- `token_cache_size`: distinct tokens whose encodings are kept across
  calls of a character model (`TokenEncodingCache`, on every backend); 0
  keeps none.
"""
import dataclasses
from typing import Any, Optional

import numpy as np

from bilm.errors import UserError
from bilm.models.start_state import STARTS
from bilm.ops.kernel_dtypes import check_kernel_dtype
from bilm.utils.deprecation import renamed_argument


@dataclasses.dataclass(frozen=True)
class EmbeddingSettings:
    """The settings of the module docstring, each checked once (`of`).

    Attributes:
        start: `"warm"`, `"zeros"` or None.
        warm_up: None, a text file's path, or sentences (strings or token
            lists; an iterator is read once, by the model built first).
        boundary_state: `{state key: (size,)}` or None.
        kernel_dtype: `"float32"`, `"bfloat16"` or `"int8"`.
        max_batch_size: int >= 1.
        token_cache_size: int >= 0.
    """

    start: Optional[str] = None
    warm_up: Any = None
    boundary_state: Optional[dict] = None
    kernel_dtype: str = "float32"
    max_batch_size: int = 128
    token_cache_size: int = 50_000

    @classmethod
    def of(cls, *, start=None, warm_up=None, boundary_state=None, kernel_dtype=None, max_batch_size=128,
           token_cache_size=50_000, matmul_dtype=None):
        """Checked settings (None `kernel_dtype`: float32; `matmul_dtype`: its deprecated old name, with a
        `DeprecationWarning` at the user's line); one `UserError` naming a bad one."""
        kernel_dtype = checked_kernel_dtype(kernel_dtype, matmul_dtype)
        check_start(start)
        if isinstance(max_batch_size, bool) or not isinstance(max_batch_size, (int, np.integer)) or max_batch_size < 1:
            raise UserError(f"max_batch_size must be >= 1. Received: max_batch_size={max_batch_size}")
        if (isinstance(token_cache_size, bool) or not isinstance(token_cache_size, (int, np.integer))
                or token_cache_size < 0):
            raise UserError(f"token_cache_size must be an integer >= 0 (0: no cache). "
                            f"Received: {token_cache_size!r}")
        return cls(start=start, warm_up=warm_up, boundary_state=boundary_state, kernel_dtype=kernel_dtype,
                   max_batch_size=int(max_batch_size), token_cache_size=int(token_cache_size))


def check_start(start, may_be_none=True):
    """`start` checked: `"warm"`, `"zeros"`, or (where `may_be_none`) None; else one `UserError` naming it.
    The Keras layer's start (`ELMoEmbedding`, its graph's own) may not be None."""
    if start is None and may_be_none or start in STARTS:
        return
    default = " (or None: 'warm' when the model has a boundary state, else 'zeros')" if may_be_none else ""
    raise UserError(f"start must be one of {STARTS}{default}. Received: start={start!r}")


def checked_kernel_dtype(kernel_dtype, matmul_dtype=None):
    """The kernel dtype asked for: `kernel_dtype`, else its deprecated old name `matmul_dtype` (with a
    `DeprecationWarning` at the user's line), else `"float32"`; checked (`bilm.ops.kernel_dtypes`)."""
    return check_kernel_dtype(renamed_argument("kernel_dtype", kernel_dtype, "matmul_dtype", matmul_dtype,
                                               "float32"))
