"""Rich views of a trace: pure functions from report data (or a trace) to renderables."""
