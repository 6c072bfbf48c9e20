"""Plain-word summaries for ``retrieval presets`` (the full descriptions stay in ``retrieval presets --show``)."""

from __future__ import annotations

PRESET_SUMMARIES = {
    "default": "fast search of whole photos; the best start",
    "accurate": "best results on whole photos, slower and larger",
    "object": "find an object in photos: query with a box",
    "compact": "smallest index (256-bit codes), for very large folders",
}
"""One line for each preset meant for photo folders; the others reproduce a published table."""


def summary(row: dict) -> str:
    """A short plain-word description of a preset row of ``describe_presets``."""
    if row["name"] in PRESET_SUMMARIES:
        return PRESET_SUMMARIES[row["name"]]
    source = row["description"].split(":", 1)[0].strip()
    return f"reproduces {source}" if len(source) <= 60 else f"reproduces {source[:57]}..."


def presets_table(rows: list[dict], show_all: bool = False) -> list[str]:
    """Aligned lines: a header, then name, kind, availability and summary (plus what a missing preset needs)."""
    shown = [r for r in rows if show_all or r["name"] in PRESET_SUMMARIES]
    hidden = len(rows) - len(shown)
    width = max([len("name")] + [len(r["name"]) for r in shown])
    out = [f"{'name':{width}}  {'kind':6}  {'ready':5}  what it is for"]
    for r in shown:
        out.append(f"{r['name']:{width}}  {r['kind']:6}  {'yes' if r['available'] else 'no':5}  {summary(r)}")
        for m in r["missing"]:
            out.append(f"{'':{width}}  {'':6}  {'':5}  needs {m}")
    if hidden:
        out.append(f"({hidden} more presets reproduce published tables: 'retrieval presets --all'; "
                   f"'retrieval presets --show NAME' describes one)")
    return out
