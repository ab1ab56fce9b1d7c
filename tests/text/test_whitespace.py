"""One whitespace rule: the in-graph split equals str.split() on every Unicode space."""
import os
import sys

import numpy as np
import tensorflow as tf

import warm_python
from bilm.io.formats.sentence_files import read_sentences
from bilm.models.elmo_embedding import ELMoEmbedding
from bilm.text.graph_batching import sentences_to_tokens
from bilm.text.whitespace import WHITESPACE, split_tokens, split_tokens_in_graph
from helpers import ROOT, write_model


def test_the_in_graph_split_equals_str_split_for_every_whitespace_character():
    assert "\u00a0" in WHITESPACE and "\u3000" in WHITESPACE and "\x1c" in WHITESPACE and "a" not in WHITESPACE
    sentences = [f"a{space}b{space}{space}c{space}" for space in WHITESPACE]
    sentences += ["", "  ", "naïve\u2009中文 🙂", "\u200bzero-width-is-not-a-space"]
    got = split_tokens_in_graph(tf.constant(sentences)).to_list()
    assert got == [[token.encode("utf-8") for token in split_tokens(s)] for s in sentences]
    raw = tf.constant([b"caf\xe9\xc2\xa0ok", b"\xff \xfe"])  # invalid UTF-8 never separates
    assert split_tokens_in_graph(raw).to_list() == [[b"caf\xe9", b"ok"], [b"\xff", b"\xfe"]]


def test_a_file_and_a_keras_layer_split_a_no_break_space_alike(tmp_path):
    line = "The\u00a0cat sat"
    path = tmp_path / "in.txt"
    path.write_text(line + "\n", encoding="utf-8")
    (_, _, tokens), = read_sentences(str(path))
    assert tokens == ["The", "cat", "sat"]
    assert sentences_to_tokens(tf.constant([line])).numpy().tolist() == [[b"The", b"cat", b"sat"]]
    options_file, weight_file, _ = write_model(tmp_path)
    layer = ELMoEmbedding.from_files(options_file, weight_file, output="all")
    from_text = layer(tf.constant([line]))
    from_tokens = layer(tf.constant([tokens]))
    assert from_text["elmo"].shape[1] == 3
    np.testing.assert_allclose(from_text["elmo"], from_tokens["elmo"], atol=1e-6)


def test_a_command_that_splits_no_text_in_the_graph_never_scans_the_code_points():
    # The scan of every code point for WHITESPACE costs a tenth of a second: a process pays it where it splits
    # text in the graph, not when it imports bilm.
    code = ("import bilm.commands.cli, bilm.text.whitespace as w; from bilm.io.formats.sentence_files import "
            "read_sentences; print(w._whitespace.cache_info().currsize)")
    result = warm_python.run([sys.executable, "-c", code], cwd=ROOT, env=dict(os.environ), capture_output=True,
                             text=True, timeout=300)
    assert result.returncode == 0, result.stderr[-2000:]
    assert result.stdout.split() == ["0"]
