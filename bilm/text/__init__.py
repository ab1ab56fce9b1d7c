"""Text to biLM ids: vocabularies, character ids, batching, and the same in the TensorFlow graph.

The names below are the public surface of `bilm.text`; its modules are
internal and may change.
"""
from bilm.text.batching import Batcher, TokenBatcher
from bilm.text.dictionary_ids import DictionaryBatcher
from bilm.text.graph_batching import batch_char_ids, batch_token_ids, sentences_to_tokens, token_vocab_table
from bilm.text.vocabulary import UnicodeCharsVocabulary, UnknownTokenError, Vocabulary
from bilm.text.whitespace import split_tokens

__all__ = [
    "Batcher",
    "DictionaryBatcher",
    "TokenBatcher",
    "UnicodeCharsVocabulary",
    "UnknownTokenError",
    "Vocabulary",
    "batch_char_ids",
    "batch_token_ids",
    "sentences_to_tokens",
    "split_tokens",
    "token_vocab_table",
]
