"""Process-level helpers that only a caller who owns the process turns on. Internal."""
