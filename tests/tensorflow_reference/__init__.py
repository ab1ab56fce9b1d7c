"""TensorFlow's own training code, the references the one trainer (`bilm.training.arrays`, on every backend) is
tested against: `TrainingLM` (the biLM and softmax as TensorFlow variables), its step (`train_step`), held-out
evaluation, boundary state, softmax fit, `tf.data` pipeline and checkpoints in TensorFlow's formats (to write
checkpoints of earlier runs for the tests that restart them). bilm trained with them until every backend's runs
moved to the array step."""
