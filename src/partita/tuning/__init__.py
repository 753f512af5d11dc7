"""Tuning a kernel end to end, with records: :func:`tune`, :func:`load` and the
:class:`Tuned` they return.

:mod:`~partita.tuning.pipeline` runs a tune (checks, records, search, result), asking the
kernel's target (:mod:`partita.targets`) for everything that depends on the hardware;
:mod:`~partita.tuning.tuned` holds the result and reads it back from records;
:mod:`~partita.tuning.limits` the time each candidate is allowed;
:mod:`~partita.tuning.transfer` the start from related kernels;
:mod:`~partita.tuning.baseline` the numpy comparison;
:mod:`~partita.tuning.generic` size-generic kernels: versions tuned at training sizes behind a
dispatcher whose thresholds :mod:`~partita.tuning.thresholds` tunes
(:mod:`~partita.tuning.generic_tune`), kept in the records
(:mod:`~partita.tuning.generic_store`);
:mod:`~partita.tuning.suite` a list of kernels tuned in one go, locally or on a cluster.
"""

from partita.tuning.baseline import kernel_rates, numpy_time
from partita.tuning.generic import GenericTuned
from partita.tuning.generic_tune import load_generic, tune_generic
from partita.tuning.limits import (
    ABANDON_FACTOR,
    FIRST_CALL_BOUNDS,
    batch_abandon,
    batch_limit,
    budget_stop,
    call_limit,
)
from partita.tuning.pipeline import check_request, target_model, tune
from partita.tuning.suite import SuiteError, SuiteResult, tune_suite
from partita.tuning.transfer import adapt
from partita.tuning.tuned import (
    StaleRecord,
    Tuned,
    host_machine,
    kernel_params,
    load,
    rebuild_program,
    records_target,
)

__all__ = [
    "ABANDON_FACTOR", "FIRST_CALL_BOUNDS", "GenericTuned", "StaleRecord", "SuiteError",
    "SuiteResult", "Tuned", "adapt",
    "batch_abandon",
    "batch_limit", "budget_stop", "call_limit", "check_request", "host_machine",
    "kernel_params", "kernel_rates", "load", "load_generic", "numpy_time", "rebuild_program",
    "records_target", "target_model", "tune", "tune_generic", "tune_suite",
]
