"""What a person choosing which copy of a duplicate photo to keep wants to know, and the rule that picks one.

:func:`photo_facts` reads a file's size, format, EXIF date and camera from its header only (Pillow opens files
lazily: no pixel is decoded, so a truncated body goes unnoticed and a huge image costs nothing).

The keeper rule (:data:`KEEPER_RULE`, ``("raw", "resolution", "not-backup", "oldest", "path")``) orders the copies
of one photo by these criteria, each breaking the ties of the ones before it:

1. ``raw``: a camera RAW file (by extension: DNG, CR2, NEF, ARW, ...) first: of a RAW + JPEG pair, the RAW is the
   original (before ``resolution``: a camera's JPEG can have as many pixels, and a RAW format the library does not
   read has no known size);
2. ``resolution``: the most pixels (width x height) first: a smaller copy is a resize;
3. ``not-backup``: a file outside folders whose names say it is a copy (:data:`BACKUP_WORDS`: ``Backup``,
   ``copy``, ``Export``, ``tmp``, ... as a word of a folder of its path) first: fewer such folders first;
4. ``oldest``: the earliest date first: the EXIF date the photo was taken, else the file's modification time;
5. ``path``: the shortest path first, then alphabetical (deterministic).

Other criteria a user may name: ``format`` (files with EXIF camera information first, then camera RAW, TIFF, HEIF,
JPEG, PNG, WebP/AVIF, GIF and others), ``smallest``, ``newest``, ``bytes``, ``under:DIR`` (files under DIR first,
``--prefer-folder``) and ``not-under:DIR`` (files under DIR last, ``--never-keep-in``). :func:`parse_keeper_rule`
reads a user's rule (``"under:~/Pictures,resolution"``), :func:`keeper_rule_with` adds the folders a user prefers
or never keeps in. Whatever the rule, an unreadable file comes after every readable one, and the remaining ties go
to the path then the position in the list.
"""

from __future__ import annotations

import contextlib
import difflib
import os
import re
from datetime import datetime

from retrieval.features.image import ImageReadError, peek_image

KEEPER_RULE = ("raw", "resolution", "not-backup", "oldest", "path")
"""The default keeper rule (module docstring): the RAW of a RAW + JPEG pair, the most pixels, a file outside
backup / copy / export folders, the earliest date, the shortest path."""

KEEPER_CRITERIA = ("raw", "resolution", "smallest", "not-backup", "format", "oldest", "newest", "bytes", "path",
                   "under:DIR", "not-under:DIR")
"""The criteria of a keeper rule: camera RAW first, largest / smallest resolution, outside backup folders, original
format, oldest / newest date, largest file, shortest path, ``under:DIR`` (files under the folder DIR first, a user's
main library) and ``not-under:DIR`` (files under DIR last: a backup disk)."""

BACKUP_WORDS = frozenset({"backup", "backups", "bak", "copy", "copies", "copie", "copia", "kopie", "export",
                          "exports", "exported", "tmp", "temp", "duplicates", "sauvegarde", "sicherung"})
"""Words that make a folder a place of copies for the ``not-backup`` criterion (case-insensitive, any folder of the
path: ``Backup (copie)/``, ``Lightroom Exports/``, ``tmp/``)."""
_WORDS = re.compile(r"[^\W\d_]+")

RAW_EXTENSIONS = (".dng", ".cr2", ".cr3", ".crw", ".nef", ".nrw", ".arw", ".srf", ".sr2", ".orf", ".rw2", ".raf",
                  ".pef", ".srw", ".x3f", ".3fr", ".iiq", ".erf", ".mrw", ".kdc", ".dcr", ".raw")
"""Camera RAW files, recognised by extension: their format is the extension upper-cased. Those the library reads
(:data:`retrieval.features.raw_files.RAW_EXTENSIONS`, through LibRaw) have their size, camera and date read from
their header; the others' width and height are None."""

FORMAT_RANK = {**{ext[1:].upper(): 0 for ext in RAW_EXTENSIONS}, "TIFF": 1, "TIF": 1, "HEIF": 2, "HEIC": 2,
               "JPEG": 3, "JPG": 3, "JPE": 3, "MPO": 3, "PNG": 4, "WEBP": 5, "AVIF": 5}
"""Rank of a format in the ``format`` criterion (lower is kept first); GIF and any other format rank
:data:`OTHER_FORMAT_RANK`. Pillow's names and the extensions of files Pillow cannot open (``JPG``, ``HEIC``)."""

OTHER_FORMAT_RANK = 6

EXIF_IFD, DATE_TIME_ORIGINAL, DATE_TIME, MAKE, MODEL, ORIENTATION = 0x8769, 36867, 306, 271, 272, 0x0112
_EXIF_DATE = re.compile(r"\s*(\d{4})[:-](\d{2})[:-](\d{2})[ T](\d{2}):(\d{2}):(\d{2})")


def photo_facts(path) -> dict:
    """The facts of one image file, read from its header (no pixel is decoded). Never raises.

    Parameters
    ----------
    path : str or Path

    Returns
    -------
    dict
        ``path`` (str), ``width`` and ``height`` (int, as displayed: swapped when the EXIF orientation is 5 to
        8), ``megapixels`` (float, rounded to 0.1), ``bytes`` (file size), ``format`` (Pillow's name: ``"JPEG"``,
        ``"PNG"``, ``"WEBP"``, ``"HEIF"``, ...; the extension upper-cased when Pillow cannot open the file or for
        a camera RAW file), ``date`` (EXIF ``DateTimeOriginal``, else ``DateTime``, as ``"YYYY-MM-DDTHH:MM:SS"``),
        ``camera`` (``"Make Model"``, the make left out when the model already names it), ``mtime`` (the
        modification time, local, ISO format) and ``error`` (None, or a one-line reason the file is unreadable).
        Unknown values are None.
    """
    path = str(path)
    ext = os.path.splitext(path)[1].lower()
    facts = {"path": path, "width": None, "height": None, "megapixels": None, "bytes": None,
             "format": ext[1:].upper() or None, "date": None, "camera": None, "mtime": None, "error": None}
    try:
        st = os.stat(path)
    except OSError as exc:
        facts["error"] = f"file not found or unreadable ({exc.strerror or exc})"
        return facts
    facts["bytes"] = int(st.st_size)
    with contextlib.suppress(OverflowError, OSError, ValueError):   # a timestamp out of datetime's range
        facts["mtime"] = datetime.fromtimestamp(st.st_mtime).isoformat(timespec="seconds")
    if st.st_size == 0:
        facts["error"] = "the file is empty (0 bytes)"
        return facts
    try:
        _read_header(path, ext, facts)
    except Exception as exc:  # noqa: BLE001 - a bad file gives a reason, never an exception
        reason = exc.reason if isinstance(exc, ImageReadError) else f"unreadable ({exc})"
        facts["error"] = " ".join(reason.split())
    return facts


def _read_header(path: str, ext: str, facts: dict) -> None:
    """Fill ``facts`` from the header Pillow reads when it opens ``path`` (size, format, EXIF)."""
    from PIL import Image

    with peek_image(path) as im:   # the header only: Pillow's decompression-bomb limit lifted, nothing decoded
        w, h = (int(v) for v in im.size)
        read_raw = "raw" in im.info   # a RAW file LibRaw read (its header: the developed photo's size)
        facts["format"] = ext[1:].upper() if ext in RAW_EXTENSIONS else (im.format or facts["format"])
        try:
            # a PNG whose eXIf chunk is not before its pixels would be decoded in full to look for it
            cheap = im.format != "PNG" or "exif" in im.info or "Raw profile type exif" in im.info
            exif = im.getexif() if cheap else Image.Exif()
            ifd0, sub = dict(exif), dict(exif.get_ifd(EXIF_IFD))
        except Exception:  # noqa: BLE001 - a broken EXIF block leaves date and camera unknown
            ifd0, sub = {}, {}
    if ext not in RAW_EXTENSIONS or read_raw:
        if ifd0.get(ORIENTATION) in (5, 6, 7, 8):
            w, h = h, w
        facts.update(width=w, height=h, megapixels=round(w * h / 1e6, 1))
    facts["date"] = _exif_date(sub.get(DATE_TIME_ORIGINAL)) or _exif_date(ifd0.get(DATE_TIME))
    facts["camera"] = _camera(_text(ifd0.get(MAKE)), _text(ifd0.get(MODEL)))


def _text(value) -> str:
    """An EXIF ASCII value as clean text ("" when absent): NULs and surrounding spaces stripped."""
    value = value.decode("latin-1") if isinstance(value, bytes) else value
    return value.replace("\x00", " ").strip() if isinstance(value, str) else ""


def _exif_date(value) -> str | None:
    """``"YYYY:MM:DD HH:MM:SS"`` -> ``"YYYY-MM-DDTHH:MM:SS"``; None when absent or not a real date."""
    m = _EXIF_DATE.match(_text(value))
    if m is None:
        return None
    try:
        return datetime(*(int(g) for g in m.groups())).isoformat(timespec="seconds")
    except ValueError:   # "0000:00:00 00:00:00" and other placeholders
        return None


def _camera(make: str, model: str) -> str | None:
    """``"Make Model"``, or the model alone when it already starts with the make or the make's first word
    (``"Canon"`` + ``"Canon EOS 5D"``, ``"NIKON CORPORATION"`` + ``"NIKON D750"``); None when both are absent."""
    if make and model.lower().startswith((make.lower(), make.split()[0].lower())):
        return model
    return " ".join(p for p in (make, model) if p) or None


def backup_folders(path: str) -> list[str]:
    """The folders of ``path`` whose name holds a word of :data:`BACKUP_WORDS`, from the root down. The
    ``not-backup`` criterion keeps the copy with fewer of them: folders every copy shares (``/tmp``) decide
    nothing."""
    return [part for part in os.path.dirname(os.path.abspath(str(path))).split(os.sep)
            if BACKUP_WORDS.intersection(w.lower() for w in _WORDS.findall(part))]


def keeper_rule_with(rule=KEEPER_RULE, prefer_folders=(), never_keep_in=()) -> tuple:
    """``rule`` with the folders a user never keeps a copy in (``not-under:DIR``, first: they decide before any
    other criterion) and the folders a user prefers (``under:DIR``, where ``not-backup`` is in the rule, else after
    ``raw`` and ``resolution``)."""
    rule = list(_check_rule(rule))
    preferred = ["under:" + os.path.expanduser(str(d)) for d in prefer_folders]
    at = rule.index("not-backup") if "not-backup" in rule else sum(1 for n in rule[:2] if n in ("raw", "resolution"))
    rule[at:at] = preferred
    never = tuple("not-under:" + os.path.expanduser(str(d)) for d in never_keep_in)
    return _check_rule(never + tuple(rule))


def parse_keeper_rule(text) -> tuple:
    """A keeper rule from a user's comma-separated criteria (:data:`KEEPER_CRITERIA`).

    Parameters
    ----------
    text : str
        For example ``"oldest"``, ``"under:~/Pictures, resolution"``; names are case-insensitive, ``~`` in a
        folder is expanded.

    Returns
    -------
    tuple of str
        The criteria in order (``"under:DIR"`` entries keep their folder).

    Raises
    ------
    ValueError
        An empty rule, an unknown criterion or ``under:`` without a folder (one line naming the valid criteria).
    """
    def one(n):
        for prefix in ("under:", "not-under:"):
            if n.lower().startswith(prefix):
                return prefix + os.path.expanduser(n[len(prefix):].strip())
        return n.lower()

    return _check_rule(tuple(one(p.strip()) for p in str(text).split(",")))


def _folder_criterion(name) -> bool:
    return isinstance(name, str) and any(name.startswith(p) and name[len(p):] for p in ("under:", "not-under:"))


def _check_rule(rule) -> tuple:
    rule = (rule,) if isinstance(rule, str) else tuple(rule)
    for name in rule:
        if not (name in KEEPER_CRITERIA or _folder_criterion(name)):
            close = difflib.get_close_matches(str(name), [c for c in KEEPER_CRITERIA if ":" not in c], n=1)
            hint = f"did you mean {close[0]!r}? " if close else ""
            raise ValueError(f"keeper rule: unknown criterion {name!r} ({hint}a folder is needed: under:DIR); "
                             f"valid criteria: {', '.join(KEEPER_CRITERIA)}.")
    return rule


def _when(f) -> tuple[str | None, bool]:
    """The date the ``oldest`` / ``newest`` criteria use, and whether it is the file's modification time."""
    return (f["date"], False) if f.get("date") else (f.get("mtime"), True)


def _under(path: str, folder: str) -> bool:
    p, d = (os.path.normcase(os.path.realpath(os.path.expanduser(x))) for x in (path, folder))
    return p == d or p.startswith(d.rstrip(os.sep) + os.sep)


def _key(name: str, f: dict) -> tuple:
    """The sort key of facts ``f`` under one criterion: smaller is kept first, unknown values last."""
    if name in ("resolution", "smallest"):
        px = f["width"] * f["height"] if f.get("width") and f.get("height") else None
        return (1, 0) if px is None else (0, -px if name == "resolution" else px)
    if name == "format":
        return (0 if f.get("camera") else 1, FORMAT_RANK.get(str(f.get("format")).upper(), OTHER_FORMAT_RANK))
    if name in ("oldest", "newest"):
        try:
            s = (datetime.fromisoformat(_when(f)[0]) - datetime(1, 1, 1)).total_seconds()
        except (TypeError, ValueError):
            return (1, 0.0)
        return (0, s if name == "oldest" else -s)
    if name == "bytes":
        return (1, 0) if f.get("bytes") is None else (0, -f["bytes"])
    if name == "path":
        return (len(f["path"]), f["path"])
    if name == "raw":
        return (0 if os.path.splitext(f["path"])[1].lower() in RAW_EXTENSIONS else 1,)
    if name == "not-backup":
        return (len(backup_folders(f["path"])),)
    if name.startswith("not-under:"):
        return (1 if _under(f["path"], name[len("not-under:"):]) else 0,)
    return (0 if _under(f["path"], name[len("under:"):]) else 1,)


def _full_key(f: dict, rule: tuple) -> tuple:
    return (f.get("error") is not None, *(_key(name, f) for name in rule), _key("path", f))


def choose_keeper(facts_list, rule=KEEPER_RULE) -> int:
    """The index in ``facts_list`` of the copy to keep.

    Parameters
    ----------
    facts_list : sequence of dict
        :func:`photo_facts` of the copies of one photo (at least one).
    rule : tuple of str, default :data:`KEEPER_RULE`
        Criteria in order (:func:`parse_keeper_rule`). Readable files always come first; remaining ties go to
        the shortest, then alphabetically first path, then the first in the list.

    Returns
    -------
    int

    Raises
    ------
    ValueError
        An empty ``facts_list`` or an unknown criterion.
    """
    rule = _check_rule(rule)
    if not facts_list:
        raise ValueError("choose_keeper: facts_list is empty.")
    return min(range(len(facts_list)), key=lambda i: (_full_key(facts_list[i], rule), i))


def keeper_reason(facts_list, keeper_index: int, rule=KEEPER_RULE) -> str:
    """A short reason ``facts_list[keeper_index]`` is kept: the first criterion of ``rule`` that puts it before
    the runner-up (the best of the other copies), e.g. ``"largest resolution (4032x3024)"``, ``"original format
    (JPEG over PNG)"``, ``"oldest (2019-05-01)"``; ``"chosen by hand (...)"`` when the rule prefers another copy.

    Parameters
    ----------
    facts_list : sequence of dict
    keeper_index : int
    rule : tuple of str, default :data:`KEEPER_RULE`

    Returns
    -------
    str
    """
    rule = _check_rule(rule)
    keeper = facts_list[keeper_index]
    others = [i for i in range(len(facts_list)) if i != keeper_index]
    if not others:
        return "the only copy"
    runner_index = min(others, key=lambda i: (_full_key(facts_list[i], rule), i))
    runner = facts_list[runner_index]
    if (keeper.get("error") is None) != (runner.get("error") is None):
        return "the only readable copy" if keeper.get("error") is None else _by_hand(runner)
    for name in (*rule, "path"):
        a, b = _key(name, keeper), _key(name, runner)
        if a != b:
            return _reason(name, keeper, runner) if a < b else _by_hand(runner)
    return "first listed" if keeper_index < runner_index else _by_hand(runner)


def _by_hand(preferred: dict) -> str:
    return f"chosen by hand (the rule prefers {os.path.basename(preferred['path'])})"


def _reason(name: str, keeper: dict, runner: dict) -> str:
    if name in ("resolution", "smallest"):
        word = "largest" if name == "resolution" else "smallest"
        return f"{word} resolution ({keeper['width']}x{keeper['height']})"
    if name == "format":
        def described(f):
            return f"{f.get('format') or 'unknown'}" + (f" from {f['camera']}" if f.get("camera") else "")
        return f"original format ({described(keeper)} over {described(runner)})"
    if name in ("oldest", "newest"):
        (when, modified), other = _when(keeper), _when(runner)[0] or ""
        shown = when[:10] if when[:10] != other[:10] else when.replace("T", " ")
        return f"{name} ({'modified ' if modified else ''}{shown})"
    if name == "bytes":
        return f"largest file ({keeper['bytes'] / 1e6:.1f} MB)" if keeper["bytes"] >= 100_000 else (
            f"largest file ({keeper['bytes']:,} bytes)")
    if name == "path":
        return "shortest path" if len(keeper["path"]) < len(runner["path"]) else "first path alphabetically"
    if name == "raw":
        ext = os.path.splitext(runner["path"])[1][1:].upper() or runner.get("format") or "the other"
        return f"the RAW original ({os.path.splitext(keeper['path'])[1][1:].upper()} over {ext})"
    if name == "not-backup":
        extra = [d for d in backup_folders(runner["path"]) if d not in backup_folders(keeper["path"])]
        return f"not in a copies folder (the other is in {(extra or ['a copies folder'])[-1]!r})"
    if name.startswith("not-under:"):
        return f"not under {name[len('not-under:'):]} (never kept there)"
    return f"under {name[len('under:'):]} (preferred)"
