"""Text to biLM ids: vocabularies, character ids, batching, and the same in the TensorFlow graph."""
