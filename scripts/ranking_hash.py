"""Hash the ranked lists of the bundled presets, to show that a change leaves results unchanged.

For each preset (default, compact, accurate, object) an index is built over one collection (the demo photos, and
minibench's 112 real photos when ``../shared/data`` is present), with the same trained model for every run (the
seeds of the presets), then every indexed image is searched: whole image with the preset's re-ranking and with
``rerank=none``, and a box query (the central half of the image). The hits' ids, verified flags, inliers, rounded
scores and boxes are written to ``OUT/<preset>.json`` and hashed; the last line prints one hash per preset.

With ``--peers``, the collections and queries of ``retrieval bench peers`` instead: Holidays-805 and UKBench-400
(``../shared/data/real``), each indexed alone, every group's first image searched (k = 100), features kept in
``--feature-store`` so that a second run extracts nothing.

With ``--oxford``, the 8 Oxford query crops (``real/oxford_crops``) searched against Oxford-133 (k = 30).

Uses the public Python API only (``Index.create``, ``sync``, ``search``), so the same script measures any version:

    python scripts/ranking_hash.py --out /tmp/rankings [--presets default,compact]
    python scripts/ranking_hash.py --out /tmp/peers --peers --presets accurate,default --feature-store /tmp/feats
    python scripts/ranking_hash.py --out /tmp/oxford --oxford --presets object,accurate --feature-store /tmp/feats
"""

from __future__ import annotations

import argparse
import hashlib
import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def collection(out: Path) -> list[str]:
    from retrieval.app.demo_data import build_demo_folder

    photos = out / "photos"
    if not photos.is_dir():
        build_demo_folder(photos)
    paths = sorted(str(p) for p in photos.rglob("*") if p.suffix.lower() in (".png", ".jpg", ".jpeg"))
    data = ROOT.parent / "shared" / "data"
    spec = data / "minibench.json"
    if spec.is_file():
        images = json.loads(spec.read_text())["images"]
        paths += sorted(str((data / rel).resolve()) for rel in images)
    return paths


def hits_record(hits) -> list:
    return [[int(h.id), bool(h.verified), h.inliers, round(float(h.score), 4),
             None if h.box is None else [round(float(v), 1) for v in h.box]] for h in hits]


def write_record(path: Path, record: dict) -> str:
    """Write ``record`` as sorted JSON to ``path``; returns its hash."""
    text = json.dumps(record, sort_keys=True)
    path.write_text(text)
    return hashlib.blake2b(text.encode(), digest_size=8).hexdigest()


def run(preset: str, paths: list[str], out: Path, k: int) -> str:
    from retrieval.app.index import Index

    folder = out / f"index-{preset}"
    idx = Index.create(folder, preset, exist_ok=True)
    idx.sync(paths)
    rows = sorted((r for r in idx.catalog.rows() if r["status"] == "indexed"), key=lambda r: r["path"])
    record = {}
    for r in rows:
        name = Path(r["path"]).name if "photos" in r["path"] else r["path"].split("data/")[-1]
        w, h = r["width"], r["height"]
        box = f"{w * 0.25:.0f},{h * 0.25:.0f},{w * 0.75:.0f},{h * 0.75:.0f}"
        entry = {"spatial": hits_record(idx.search(r["id"], k=k)),
                 "none": hits_record(idx.search(r["id"], k=k, rerank="none"))}
        try:
            entry["box"] = hits_record(idx.search(r["id"], bbox=box, k=k))
        except ValueError as exc:   # no feature in the box
            entry["box"] = str(exc)
        record[name] = entry
    idx.close()
    return write_record(out / f"{preset}.json", record)


def run_peers(preset: str, out: Path, store, k: int = 100) -> str:
    from retrieval.app.index import Index

    data = ROOT.parent / "shared" / "data" / "real"
    record = {}
    for name in ("holidays805", "ukbench400"):
        spec = json.loads((data / f"{name}.json").read_text())
        images = [str(data / rel) for g in spec["groups"] for rel in g["images"]]
        images += [str(data / rel) for rel in spec.get("distractors", [])]
        idx = Index.create(out / f"peers-{name}-{preset}", preset, feature_store=store, exist_ok=True)
        idx.sync(sorted(set(images)), progress=False)
        for g in spec["groups"]:
            record[f"{name}/{g['images'][0]}"] = hits_record(idx.search(str(data / g["images"][0]), k=k))
        idx.close()
    return write_record(out / f"peers-{preset}.json", record)


def run_oxford(preset: str, out: Path, store, k: int = 30) -> str:
    from retrieval.app.index import Index

    data = ROOT.parent / "shared" / "data" / "real"
    images = sorted(str(p) for p in (data / "oxford133" / "jpg").glob("*.jpg"))
    idx = Index.create(out / f"oxford-{preset}", preset, feature_store=store, exist_ok=True)
    idx.sync(images)
    record = {c.name: hits_record(idx.search(str(c), k=k)) for c in sorted((data / "oxford_crops").glob("*.jpg"))}
    idx.close()
    return write_record(out / f"oxford-{preset}.json", record)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", required=True, type=Path)
    ap.add_argument("--presets", default="default,compact,accurate,object")
    ap.add_argument("-k", type=int, default=20)
    ap.add_argument("--peers", action="store_true", help="the collections and queries of 'retrieval bench peers'")
    ap.add_argument("--oxford", action="store_true", help="the Oxford crops against Oxford-133")
    ap.add_argument("--feature-store", type=Path, default=None)
    a = ap.parse_args(argv)
    a.out.mkdir(parents=True, exist_ok=True)
    if a.peers or a.oxford:
        runner = run_peers if a.peers else run_oxford
        print(json.dumps({p: runner(p, a.out, a.feature_store) for p in a.presets.split(",")}))
        return 0
    paths = collection(a.out)
    print(f"{len(paths)} images", file=sys.stderr)
    hashes = {p: run(p, paths, a.out, a.k) for p in a.presets.split(",")}
    print(json.dumps(hashes))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
