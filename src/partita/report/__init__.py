"""Results made usable outside partita: a tuned implementation exported as a C library
(:func:`export_c`), and a tuning run's evaluations summarised as an HTML page with plots
(:func:`write_report`; :func:`write_generic_report` for a size-generic kernel)."""

from partita.report.export import build_flags, export_c, prototype
from partita.report.html import generic_section, write_generic_report, write_report

__all__ = ["build_flags", "export_c", "generic_section", "prototype", "write_generic_report",
           "write_report"]
