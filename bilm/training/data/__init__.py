"""Training data: shards on disk, the windows cut from them, the `tf.data` pipeline, vocabulary building."""
