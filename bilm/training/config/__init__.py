"""A training run's configuration: the training keys parsed and checked."""
