"""The one training driver, written once for every backend: the loop and what happens around its steps
(checkpoints, held-out evaluation, signals, policies, the run's origin), and training from files. The trainer
opens the run it drives, the same on every backend (`bilm.training.arrays`, `bilm.backend.trainer_module`)."""
