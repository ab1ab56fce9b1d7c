"""`EmbedSentences`: a PCollection of sentences to their ELMo vectors."""
import apache_beam as beam
from apache_beam.ml.inference.base import KeyedModelHandler, RunInference

from bilm.beam.model_handler import n_tokens


class EmbedSentences(beam.PTransform):
    """Sentences -> `(sentence, vectors)`; with `keyed=True`, `(key, sentence)` -> `(key, vectors)`.

    A sentence is a string (split on whitespace) or a list of tokens;
    `vectors` is what `ELMo.embed` gives it with the handler's `layers`,
    start state and kernels (float32 `(n_tokens, 2P)`, or
    `(n_layers + 1, n_tokens, 2P)` for `"all"`). Each element gives exactly
    one output. Sentences are gathered into batches of up to the handler's
    `max_batch_tokens` tokens, which run in calls of sentences of similar
    lengths; the model is loaded once per worker process and shared by its
    threads (RunInference).

    Args:
        model_handler: an `ELMoModelHandler`.
        keyed: the elements are `(key, sentence)` pairs.

    Example:
    ```python
    handler = ELMoModelHandler("model_dir", layers="all")
    vectors = pipeline | beam.Create([("s1", "The cat sat ."), ("s2", "Hi")]) | EmbedSentences(handler, keyed=True)
    ```
    """

    def __init__(self, model_handler, *, keyed=False):
        super().__init__()
        self.model_handler = model_handler
        self.keyed = keyed

    def expand(self, sentences):
        handler = KeyedModelHandler(self.model_handler) if self.keyed else self.model_handler
        size = (lambda element: n_tokens(element[1])) if self.keyed else n_tokens
        batching = self.model_handler.batch_elements_kwargs()
        results = (sentences
                   | "BatchByTokens" >> beam.BatchElements(
                       min_batch_size=batching["min_batch_size"], max_batch_size=batching["max_batch_size"],
                       element_size_fn=size)
                   | "Embed" >> RunInference(handler.with_no_batching()))
        if self.keyed:
            return results | "Vectors" >> beam.MapTuple(lambda key, result: (key, result.inference))
        return results | "Vectors" >> beam.Map(lambda result: (result.example, result.inference))
