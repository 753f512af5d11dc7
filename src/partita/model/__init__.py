"""The lower-bound performance model (000 Ch. 5): shared logic, target rates."""

from partita.model.bound import Bound, Model, Rates

__all__ = ["Bound", "Model", "Rates"]
