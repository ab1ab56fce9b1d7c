"""What the `bin/` scripts call: embedding files, dumps, training from files, the quick start."""
