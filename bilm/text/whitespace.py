"""The one rule for splitting text into tokens, in Python and in the TensorFlow graph.

Tokens are separated by runs of Unicode whitespace, and whitespace at either
end is dropped: Python's `str.split()` with no argument. That covers the ASCII
spaces, tabs and line breaks, the information separators U+001C-U+001F, and
the Unicode spaces such as U+00A0 (no-break space), U+2000-U+200A and U+3000
(ideographic space). Bytes that are not valid UTF-8 never separate tokens.

Every path that splits text uses this rule: sentence files (`bin/elmo.py`,
the dumps), training shards, the vocabulary builder, `ELMoEmbedding` and the
SavedModel given raw sentences.
"""
import functools
import sys

# str.split() without an argument; an alias, so the hot loops pay no extra call.
split_tokens = str.split


@functools.cache
def _whitespace():
    """Every character that str.split() separates on, in code point order; found on first use (a scan of every
    code point), not when a process imports bilm."""
    return "".join(chr(code) for code in range(sys.maxunicode + 1) if chr(code).isspace())


def __getattr__(name):
    # WHITESPACE: the string `_whitespace` gives.
    if name == "WHITESPACE":
        return _whitespace()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


@functools.cache
def _whitespace_run():
    """The regular expression of a run of `WHITESPACE`, for the in-graph split."""
    return "[" + "".join(f"\\x{{{ord(char):x}}}" for char in _whitespace()) + "]+"


def split_tokens_in_graph(sentences):
    """`split_tokens` for a batch of sentences, inside the graph.

    Args:
        sentences: string `(batch,)`.

    Returns:
        `tf.RaggedTensor` of strings `(batch, (tokens))`, the same tokens as
        `split_tokens` gives for each sentence decoded from UTF-8 (invalid
        bytes kept as they are).
    """
    import tensorflow as tf  # the graph's split is TensorFlow's

    # Every separator becomes an ASCII space, which tf.strings.split's
    # default (runs of ASCII whitespace, ends dropped) then splits on.
    return tf.strings.split(tf.strings.regex_replace(sentences, _whitespace_run(), " "))
