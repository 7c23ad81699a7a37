"""NNX-style backend plugin."""
