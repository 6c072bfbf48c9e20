"""What ``retrieval index`` tells a person besides its summary line.

- **A small folder**: a preset meant for large folders is fitted to a small one by reducing what the photos
  cannot support (the small-collection rule, :func:`retrieval.engine.presets.record_reduction`). The library logs
  each reduction as a technical warning; while indexing, :class:`SmallFolderNotes` holds these back (they would
  cut the progress line) and says each one once, after it, as one plain sentence ("This folder is small: using a
  smaller vocabulary of 594 words ..."). The technical line (parameter, values, reason) follows with ``-v``.
- **Ctrl-C**: :func:`stopped_message` says what an interrupted run kept; the command then exits with status 130.
"""

from __future__ import annotations

import logging
import os
from pathlib import Path

import click

REDUCTIONS_LOGGER = "retrieval.engine.presets"
"""The logger of :func:`retrieval.engine.presets.record_reduction`."""

SMALL = "This folder is small: "


def plain_sentence(param: str, e: dict) -> str:
    """One sentence without parameter names for the reduction ``e`` (``{"preset", "used", "reason"}``) of the
    preset parameter ``param``."""
    was, used = e.get("preset"), e.get("used")
    if param in ("object_search.n_words", "aggregation.n_components") and used is not None:
        return f"{SMALL}using a smaller vocabulary of {used:,} words ({was:,} for a large folder)."
    if param == "projection.n_components" and used is None:
        return (f"{SMALL}photo descriptions are kept at full length instead of being shortened (that needs at "
                f"least {2 * int(was):,} photos to learn from).")
    if param == "search.evidence_words" and used is not None:
        return (f"{SMALL}photos are checked against a smaller vocabulary of {used:,} words ({was:,} for a large "
                f"folder).")
    if param == "index.bits" and used is not None:
        return f"{SMALL}each photo is summarised in {used // 8} bytes instead of {was // 8}."
    if param in ("index.nbits", "index.M"):
        return f"{SMALL}photo descriptions are compressed more coarsely than for a large folder."
    if param == "index.nlist" and used is not None:
        return f"{SMALL}the photos are sorted into {used:,} groups for searching instead of {was:,}."
    if param == "index.nprobe" and used is not None:
        return f"{SMALL}each search looks through all {used:,} groups."
    return f"{SMALL}a setting of the preset was reduced to fit it."


def reduced_parameter(record: logging.LogRecord) -> str | None:
    """The parameter a reduction warning is about (the second argument of its message), or None."""
    args = record.args if isinstance(record.args, tuple) else ()
    return str(args[1]) if len(args) > 1 else None


class SmallFolderNotes:
    """``with SmallFolderNotes() as notes: sync ...`` then ``notes.tell(...)``: the reduction warnings logged
    inside the block are held back, then told once (:func:`plain_sentence`; the original line with ``-v``)."""

    def __init__(self):
        self.records: list[logging.LogRecord] = []

    def filter(self, record: logging.LogRecord) -> bool:
        if record.funcName == "record_reduction":
            self.records.append(record)
            return False
        return True

    def __enter__(self) -> SmallFolderNotes:
        logging.getLogger(REDUCTIONS_LOGGER).addFilter(self)
        return self

    def __exit__(self, *exc) -> None:
        logging.getLogger(REDUCTIONS_LOGGER).removeFilter(self)

    def tell(self, effective: dict, *, verbose: int, quiet: bool) -> None:
        """Say each held-back reduction: one sentence (none with ``quiet``) when ``effective`` (the model's record
        of the reductions made when it was trained, in this run) has it, then, with ``verbose``, its technical
        line; a reduction ``effective`` does not explain is logged as it was."""
        logger = logging.getLogger(REDUCTIONS_LOGGER)
        for record in self.records:
            param = reduced_parameter(record)
            if param in effective:
                if not quiet:
                    click.echo(plain_sentence(param, effective[param]), err=True)
                if verbose:
                    logger.handle(record)
            else:
                logger.handle(record)


def stopped_message(idx, *, generation: int, indexed: int, started: float) -> str:
    """The sentence of a sync of ``idx`` interrupted by Ctrl-C: what was kept (the index as it was before, with
    ``indexed`` photos at ``generation``, and the features read since ``started``, a time.time()), and how to
    resume. The run, left 'running', is marked 'interrupted'."""
    now = idx.catalog.count("indexed")
    if idx.catalog.generation() != generation:   # stopped after the commit: the run is complete
        return f"Stopped: {now:,} photos indexed and kept; run the same command again to check nothing is left."
    idx.catalog.end_running_runs("interrupted")
    read = features_written_since(Path(idx.store.folder) / idx.extractor.config_key, started)
    return (f"Stopped: the index is as it was ({now:,} photos) and the {read:,} photos read in this run are kept; "
            f"run the same command again to resume (they are not read again).")


def features_written_since(folder: Path, started: float) -> int:
    """Feature-store entries (``folder/<2 hex>/<hash>.npz``) written at or after ``started`` (a time.time())."""
    n = 0
    try:
        subfolders = [e.path for e in os.scandir(folder) if e.is_dir()]
    except OSError:
        return 0
    for sub in subfolders:
        try:
            with os.scandir(sub) as entries:
                n += sum(1 for e in entries if e.name.endswith(".npz") and not e.name.startswith(".")
                         and e.stat().st_mtime >= started)
        except OSError:
            continue
    return n
