"""ELMo on Apache Beam: the vectors of a PCollection of sentences, and text files to embedding files.

Needs the `beam` extra (`pip install "bilm[beam]"`). The pieces:
- `ELMoModelHandler`: RunInference's handler of an ELMo model (sentences in,
  `ELMo.embed`'s arrays out), the model loaded once per worker process and
  shared by its threads;
- `EmbedSentences`: a `PTransform` from sentences (or `(key, sentence)`
  pairs) to `(sentence, vectors)` (or `(key, vectors)`), batched by length;
- `EmbedFiles` and `shard_outputs`: one embedding file per text shard, in
  `bin/elmo.py`'s layout; `python -m bilm.beam` runs it as a pipeline.
"""
from bilm.utils.start_up import command_imports

# Apache Beam's modules load compiled libraries: `python -m bilm.beam` stopped while they initialise waits for them.
with command_imports():
    try:
        import apache_beam  # noqa: F401
    except ImportError as error:  # the optional extra is missing
        raise ImportError('bilm.beam needs Apache Beam: pip install "bilm[beam]".') from error

    from bilm.beam.embedding_files import EmbedFiles, shard_outputs
    from bilm.beam.model_handler import ELMoModelHandler
    from bilm.beam.sentence_vectors import EmbedSentences

__all__ = ["ELMoModelHandler", "EmbedFiles", "EmbedSentences", "shard_outputs"]
