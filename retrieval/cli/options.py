"""Option bundles shared by several commands, as decorators (one definition, one help text)."""

from __future__ import annotations

import json
import os

import click


def verification_cache_mb() -> float:
    """The verification cache of a searching command, in MB: ``RETRIEVAL_VERIFY_CACHE_MB`` (a number >= 0; 0
    disables it) or :func:`retrieval.engine.backend.default_verification_cache_mb`. The environment is read here, at
    the command line's edge, and passed to :meth:`Index.open <retrieval.app.index.Index.open>`."""
    import os

    from retrieval.engine.backend import default_verification_cache_mb

    raw = os.environ.get("RETRIEVAL_VERIFY_CACHE_MB")
    if raw is None or raw.strip() == "":
        return float(default_verification_cache_mb())
    try:
        mb = float(raw)
    except ValueError:
        mb = -1.0
    if not mb >= 0:
        raise ValueError(f"RETRIEVAL_VERIFY_CACHE_MB must be a number of megabytes >= 0; got {raw!r}.")
    return mb


def json_option(help: str = "Print one JSON object instead of text."):
    """``--json``: the command prints its result as JSON on stdout (parameter ``as_json``)."""
    return click.option("--json", "as_json", is_flag=True, help=help)


def compact_features_option(help: str = "Keep the index's features in compact form, with codes of this many bytes "
                                        "a descriptor (verification on them; the full ones dropped from the index's "
                                        "own store; it costs ranking accuracy: docs/results.md \"The compact feature "
                                        "store\"). 0: in full."):
    """``--compact-features {0,16,32}`` (parameter ``compact_features``, None when not given)."""
    return click.option("--compact-features", "compact_features", type=click.Choice(["0", "16", "32"]), default=None,
                        help=help)


def seed_option(help: str = "Random seed."):
    """``--seed`` (default 0): every random draw of the command follows from it."""
    return click.option("--seed", type=int, default=0, show_default=True, help=help)


def threads_option(default: int = 1, help: str = "Threads."):
    """``--threads N`` (at least 1)."""
    return click.option("--threads", type=click.IntRange(1), default=default, show_default=True, help=help)


def workers_option(help: str = "Extraction processes (default: all cores)."):
    """``--workers N`` (at least 1, default: the library's choice)."""
    return click.option("--workers", type=click.IntRange(1), default=None, help=help)


def box_option(help: str):
    """``--bbox X1,Y1,X2,Y2``: a box in pixels, its 4 numbers separated by commas or spaces (``90,160,285,300``,
    ``"90 160 285 300"``, ``"90, 160, 285, 300"``), checked as soon as it is given (one line naming it and
    saying what is expected); the command receives the text as given (:func:`retrieval.features.parse_box`
    reads it)."""

    def check(ctx, param, value):
        if value is None:
            return None
        from retrieval.features import parse_box

        try:
            parse_box(value)
        except ValueError as exc:
            raise click.ClickException(f"--bbox: {exc}") from None
        return value

    return click.option("--bbox", default=None, metavar="X1,Y1,X2,Y2", callback=check,
                        help=f"{help} Four numbers separated by commas or spaces: 90,160,285,300 or "
                             f"\"90 160 285 300\".")


def int_list(text: str, option: str = "--bits") -> list[int]:
    """``"32,64"`` -> ``[32, 64]``; a usage error naming ``option`` unless every item is a positive integer."""
    try:
        out = [int(t) for t in text.split(",") if t.strip()]
    except ValueError:
        raise click.BadParameter(f"expected comma-separated integers, got {text!r}", param_hint=option) from None
    if not out or min(out) < 1:
        raise click.BadParameter(f"expected positive integers, got {text!r}", param_hint=option)
    return out


def csv_items(text: str) -> list[str]:
    """``"a, b,,c"`` -> ``["a", "b", "c"]``."""
    return [t.strip() for t in text.split(",") if t.strip()]


def echo_json(obj, indent: int | None = 2, **kw) -> None:
    """Print ``obj`` as JSON on stdout."""
    click.echo(json.dumps(obj, indent=indent, **{"ensure_ascii": False, **kw}))


def check_image_file(path, what: str = "IMAGE") -> None:
    """One clear line (exit 1) when ``path`` is an existing file whose extension is not one of
    :data:`retrieval.features.image.IMAGE_EXTENSIONS` (:func:`~retrieval.features.image.is_image_name`, the test
    every command uses)."""
    import os

    from retrieval.features.image import IMAGE_EXTENSIONS, is_image_name

    if os.path.isfile(path) and not is_image_name(path):
        raise click.ClickException(f"{what} {path}: not a supported image format (expected "
                                   f"{', '.join(e[1:] for e in IMAGE_EXTENSIONS)}).")


PICTURE_FORMATS = {".png": "PNG", ".jpg": "JPEG", ".jpeg": "JPEG", ".gif": "GIF", ".webp": "WEBP", ".bmp": "BMP",
                   ".tif": "TIFF", ".tiff": "TIFF"}
"""Picture files the CLI writes, by extension (the format always follows the extension)."""


def check_output_extension(path, allowed, option: str) -> None:
    """One clear line (exit 1) unless ``path`` ends with one of ``allowed`` (checked before any work)."""
    if path is not None and not str(path).lower().endswith(tuple(allowed)):
        raise click.ClickException(f"{option} {path}: the file's extension chooses its format; expected one of "
                                   f"{', '.join(sorted(allowed))}.")


def write_picture(path, bgr) -> None:
    """Write a BGR uint8 picture atomically in the format of ``path``'s extension (:data:`PICTURE_FORMATS`)."""
    import io
    from pathlib import Path

    from PIL import Image

    from retrieval.core.persistence import atomic_write

    fmt = PICTURE_FORMATS[Path(path).suffix.lower()]
    buf = io.BytesIO()
    Image.fromarray(bgr[:, :, ::-1].copy()).save(buf, format=fmt)
    with atomic_write(Path(path)) as fh:
        fh.write(buf.getvalue())


def deprecated_alias(old: str, new: str):
    """A hidden ``old`` option kept for compatibility (parameter ``deprecated_<name>``); use :func:`use_alias`."""
    return click.option(old, f"deprecated_{old.lstrip('-').replace('-', '_')}", default=None, hidden=True,
                        help=f"Deprecated alias of {new}.")


def use_alias(value, old_value, old: str, new: str):
    """``value``, or ``old_value`` with one warning line on stderr when only the deprecated ``old`` was given."""
    if old_value is None:
        return value
    click.echo(f"warning: {old} is deprecated, use {new}", err=True)
    if value is not None and value != old_value:
        raise click.UsageError(f"{old} (deprecated) and {new} disagree: give only {new}.")
    return old_value


DEFAULT_INDEX = "retrieval-index"


def index_option(f):
    """``--index DIR``: the index folder of a command (:func:`index_dir_of`)."""
    return click.option("--index", "index_dir", default=None, metavar="DIR",
                        help=f"Index folder (default: $RETRIEVAL_INDEX or ./{DEFAULT_INDEX}).")(f)


def index_dir_of(value) -> str:
    """The index folder of ``--index`` (else ``$RETRIEVAL_INDEX``, else :data:`DEFAULT_INDEX`); refuses a file."""
    path = value or os.environ.get("RETRIEVAL_INDEX") or DEFAULT_INDEX
    if os.path.exists(path) and not os.path.isdir(path):
        raise click.ClickException(f"--index {path}: this is a file; an index is a folder (give a new or an "
                                   f"existing index folder).")
    return path
