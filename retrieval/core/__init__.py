"""Shared low-level pieces: parameter checks, persistence (atomic writes, estimator files, crash points), progress."""
