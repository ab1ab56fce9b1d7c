"""Where a stateless biLM starts each sentence: the one policy every caller uses.

A sentence embedded on its own starts from `"warm"`, the boundary state
(the mean LSTM state at sentence starts in the training stream, see
`bilm.models.boundary_state`), or from `"zeros"`. `resolve_start` decides
which, and with which boundary state, for `BidirectionalLanguageModel`,
`ELMoEmbedding`, the embedding files and `ELMo`:
- the boundary state is the one given, else one computed from `warm_up`
  text, else the one stored in the weight file, else none;
- `start=None` means `"warm"` when there is a boundary state and `"zeros"`
  otherwise (with a warning that says how to make one);
- `"warm"` without a boundary state is an error.
"""
import dataclasses
import os
import warnings
from typing import Optional

import numpy as np

from bilm.errors import UserError
from bilm.io.formats.sentence_files import token_lists
from bilm.io.formats.weight_file import read_boundary_state
from bilm.models.boundary_state import DEFAULT_N_SENTENCES, check_boundary_state, compute_boundary_state
from bilm.models.functional_bilm import state_keys
from bilm.models.text_inputs import batcher_for

STARTS = ("warm", "zeros")


@dataclasses.dataclass(frozen=True)
class StartState:
    """Where each sentence starts, and the boundary state behind `"warm"`.

    Attributes:
        start: `"warm"` or `"zeros"`.
        boundary_state: `{state key: float32 (size,)}`, or None.
        n_starts: sentence starts the boundary state averages (0 if unknown).
    """

    start: str
    boundary_state: Optional[dict] = None
    n_starts: int = 0

    def vectors(self, options):
        """`{state key: float32 (size,)}` every sentence starts from."""
        if self.start == "warm":
            return self.boundary_state
        return {key: np.zeros(size, np.float32) for key, _, size in state_keys(options)}


def resolve_start(options, start=None, *, boundary_state=None, weight_file=None, warm_up=None, network=None,
                  n_sentences=DEFAULT_N_SENTENCES, source=None):
    """The `StartState` of a stateless biLM (see the module docstring).

    Args:
        options: the model's prediction `BiLMOptions`.
        start: `"warm"`, `"zeros"` or None.
        boundary_state: `{state key: (size,)}` to use, or None.
        weight_file: the weight file whose stored boundary state is used when
            none is given or computed.
        warm_up: text to compute the boundary state from (sentences, or a
            text file's path); needs `network`, a character model.
        network: the prediction `build_bilm` model with its weights.
        n_sentences: sentence starts averaged for `warm_up`.
        source: what to call the model in messages (default: `weight_file`).

    Returns:
        `StartState`.

    Raises:
        UserError: an unknown `start`, `"warm"` without a boundary state, a
            boundary state that does not fit `options`, or `warm_up` for a
            token-input model.
    """
    source = source or (str(weight_file) if weight_file is not None else "the model")
    if start is not None and start not in STARTS:
        raise UserError(f"start must be one of {STARTS} (or None: 'warm' when the model has a boundary state, "
                        f"else 'zeros'). Received: start={start!r}")
    n_starts = 0
    if boundary_state is None and warm_up is not None:
        if options.char_cnn is None:
            raise UserError("warm_up needs a character biLM; a token-input one would need its vocabulary. Pass "
                            "boundary_state= (see bilm.models.compute_boundary_state).")
        if isinstance(warm_up, (str, os.PathLike)) and not os.path.isfile(warm_up):
            what = "is a directory" if os.path.isdir(warm_up) else "not found"
            raise UserError(f"warm_up text {os.fspath(warm_up)}: {what}. Give a text file with one sentence per "
                            "line (bin/elmo.py --warm_up FILE), or a list of sentences.")
        batcher = batcher_for(options)
        try:
            boundary_state, n_starts = compute_boundary_state(network, options, token_lists(warm_up),
                                                              batcher.batch_sentences, n_sentences)
        except UserError as error:
            if isinstance(warm_up, (str, os.PathLike)):
                raise UserError(f"warm_up text {os.fspath(warm_up)}: {error} Give a text file with one sentence "
                                "per line.") from None
            raise
    elif boundary_state is None and weight_file is not None:
        stored = read_boundary_state(weight_file)
        if stored is not None:
            boundary_state, n_starts = stored
    if boundary_state is not None:
        boundary_state = check_boundary_state(
            {key: np.asarray(value, np.float32) for key, value in boundary_state.items()}, options,
            f"{source}: boundary_state")
    if start is None:
        if boundary_state is None:
            # The default filter shows this once per model source.
            warnings.warn(
                f"{source} holds no boundary state, so every sentence starts from zero LSTM states, where the "
                "model never was in training (the first and last tokens' vectors suffer most). Compute the "
                "state from a sample of your own text with warm_up= (bilm.load(..., warm_up=sentences_or_file), "
                "ELMo.warm_up, bin/elmo.py --warm_up FILE); start='zeros' keeps zero states without this note.",
                stacklevel=3)
        start = "warm" if boundary_state is not None else "zeros"
    elif start == "warm" and boundary_state is None:
        raise UserError(
            f"start='warm' needs a boundary state, and {source} holds none (published weights, or weights trained "
            "before bilm stored one). Compute one from your own text with warm_up= (bilm.load(..., "
            "warm_up=sentences), ELMo.warm_up, bin/elmo.py --warm_up FILE), or use start='zeros'.")
    return StartState(start, boundary_state, n_starts)
