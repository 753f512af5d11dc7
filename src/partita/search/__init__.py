"""Exploring decision spaces: random sampling (here), and the model-guided searches."""
