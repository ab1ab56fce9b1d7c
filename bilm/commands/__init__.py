"""What only the `bin/` scripts use: their shared flags and the one-line errors. Internal."""
