"""The forward pass as small pure NumPy functions. Knows nothing of rich, files or the command line."""
