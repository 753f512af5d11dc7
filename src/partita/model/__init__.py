"""The lower-bound performance model (Beaugnon's thesis, ch. 5): shared logic, target rates."""

from partita.model.bound import Bound, Model, Rates

__all__ = ["Bound", "Model", "Rates"]
