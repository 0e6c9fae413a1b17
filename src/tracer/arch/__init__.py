"""Model families: one adapter each, turning an HF config into a Spec and HF weight names into canonical ones."""
