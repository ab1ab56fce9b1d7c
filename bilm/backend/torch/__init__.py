"""What a training step does its own way on this backend (`training_ops`, `sampler`)."""
