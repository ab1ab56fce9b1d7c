"""Text to biLM ids: vocabularies, character ids, batching, and the same in the TensorFlow graph.

The names below are the public surface of `bilm.text`; its modules are
internal and may change. Each is imported when first used.
"""
from bilm.utils.lazy_names import lazy_names

_MODULES = {
    "Batcher": "batching",
    "DictionaryBatcher": "dictionary_ids",
    "TokenBatcher": "batching",
    "UnicodeCharsVocabulary": "vocabulary",
    "UnknownTokenError": "vocabulary",
    "Vocabulary": "vocabulary",
    # In the TensorFlow graph (TensorFlow's).
    "batch_char_ids": "graph_batching",
    "batch_token_ids": "graph_batching",
    "sentences_to_tokens": "graph_batching",
    "split_tokens": "whitespace",
    "token_vocab_table": "graph_batching",
}

__all__ = sorted(_MODULES)

__getattr__, __dir__ = lazy_names(__name__, _MODULES)
