"""What training keeps on TensorFlow beside the one trainer (`bilm.training.arrays`, which TensorFlow trains with
as JAX and PyTorch do): the biLM as `TrainingLM`'s variables (bilm-tf's `evaluate`, the conversion of TF1
checkpoints), the batches as a `tf.data` pipeline, and a run's checkpoints read into those variables."""
