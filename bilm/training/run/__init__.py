"""A training run: the loop and what happens around its steps (checkpoints, evaluation, signals,
distribution), and training from files."""
