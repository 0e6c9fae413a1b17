"""Thin typer commands wiring the layers together."""
