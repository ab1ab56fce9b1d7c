"""TensorFlow's trainer for the one training driver (`bilm.training.run`): the biLM as `TrainingLM`'s variables,
its step (`TrainStep`, under a `tf.distribute` strategy, with TensorFlow's fast paths), the batches as a
`tf.data` pipeline, the held-out evaluation, and the checkpoints read into its variables. JAX and PyTorch train
with `bilm.training.arrays`."""
