"""The one training driver, written once for every backend: the loop and what happens around its steps
(checkpoints, held-out evaluation, signals, policies, the run's origin), and training from files. Each backend's
trainer opens the run it drives: TensorFlow's in `bilm.training.tensorflow`, JAX's and PyTorch's in
`bilm.training.arrays` (`bilm.backend.trainer_module` picks it)."""
