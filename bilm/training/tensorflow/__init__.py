"""Earlier paths of modules that moved when TensorFlow's runs joined the one trainer (`bilm.training.arrays`,
which TensorFlow trains with as JAX and PyTorch do): each is the moved module itself, with a warning."""
