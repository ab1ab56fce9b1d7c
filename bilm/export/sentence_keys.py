"""The names of a sentence embedding file's datasets: a line's number, or its sentence made safe for HDF5
(`sentence_key`), and the `sentence_to_index` dataset that maps each sentence to its name."""
import json

import h5py
import numpy as np

from bilm.errors import UserError
from bilm.io.formats.embedding_files import SENTENCE_TO_INDEX, line_number_key
from bilm.io.formats.sentence_files import read_sentences

# Whole sentences that cannot be dataset names as they are: "." is the group
# itself, and the mapping's own name would collide.
_RESERVED_NAMES = (".", SENTENCE_TO_INDEX)


def sentence_key(sentence):
    """The dataset name of `sentence` with `use_sentence_keys=True`.

    The sentence itself, except that `%`, `/` and NUL, and bytes that were
    not valid UTF-8 (read as surrogate escapes), are percent-encoded (`%25`,
    `%2F`, `%00`, `%E9`); a sentence that is exactly `.` or
    `sentence_to_index` gets its first character encoded (`%2E`,
    `%73entence_to_index`). Distinct sentences get distinct names.
    """
    if not sentence:
        raise UserError("An empty sentence has no dataset name.")
    out = []
    for char in sentence:
        code = ord(char)
        if char in "%/\x00":
            out.append(f"%{code:02X}")
        elif 0xDC80 <= code <= 0xDCFF:  # surrogateescape of the byte code - 0xDC00
            out.append(f"%{code - 0xDC00:02X}")
        else:
            out.append(char)
    if sentence in _RESERVED_NAMES:
        out[0] = f"%{ord(sentence[0]):02X}"
    return "".join(out)


def dataset_key_function(use_sentence_keys):
    """`key_of(line number, line)`: a line's dataset name, its sentence's (`sentence_key`) or its number's."""
    if use_sentence_keys:
        return lambda number, line: sentence_key(line.strip())
    return line_number_key


def sentence_to_index_dataset(input_file, key_of):
    """The `sentence_to_index` dataset: JSON {stripped line: dataset name}.

    A sentence on several lines maps to its last line, as in AllenNLP.
    """
    mapping = {line.strip(): key_of(number, line) for number, line, _ in read_sentences(input_file)}
    return np.array([json.dumps(mapping)], dtype=h5py.string_dtype())


def check_no_blank_lines(input_file):
    """Refuses, in one line naming them, the blank lines of `input_file`, which have no sentence to name a dataset."""
    blank = [number for number, _, tokens in read_sentences(input_file) if not tokens]
    if blank:
        shown = ", ".join(str(n) for n in blank[:10]) + (" ..." if len(blank) > 10 else "")
        raise UserError(
            f"{input_file}: {len(blank)} blank line(s) (0-based line numbers {shown}) have no sentence to "
            "use as their dataset name with use_sentence_keys. Remove them, or drop use_sentence_keys "
            "(--use_sentence_keys) to name datasets by line number (a blank line then gets an empty dataset).")
