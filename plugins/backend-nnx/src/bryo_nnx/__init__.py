"""NNX-style backend."""
