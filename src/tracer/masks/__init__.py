"""Attention masks: the ones the engine builds, and (mask lab) other frameworks' conventions."""
