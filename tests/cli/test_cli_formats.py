"""``--format table|json|jsonl|csv|paths`` (and ``-0``, and ``--json`` as the alias of ``--format json``) on query,
info, list and match: each format parsed back and compared with the JSON document; ids in every hit and row;
non-ASCII paths unescaped."""

from __future__ import annotations

import csv
import io
import json

from cli_world import run


def outputs(args):
    """stdout of ARGS for every format (exit status 0 or, for match, 1 allowed)."""
    out = {}
    for fmt in ("table", "json", "jsonl", "csv", "paths"):
        res = run([*args, "--format", fmt])
        assert res.exit_code == 0, (fmt, res.output)
        out[fmt] = res.stdout
    res = run([*args, "-0"])
    assert res.exit_code == 0, res.output
    out["null"] = res.stdout
    res = run([*args, "--json"])
    assert res.exit_code == 0 and untimed(json.loads(res.stdout)) == untimed(json.loads(out["json"]))
    return out


def untimed(doc):
    return {k: v for k, v in doc.items() if k != "seconds"} if isinstance(doc, dict) else doc


def check_records(out, key="path"):
    doc = json.loads(out["json"])
    assert isinstance(doc, list) and doc
    assert "\\u00fc" not in out["json"] and "\\u00fc" not in out["jsonl"]
    assert [json.loads(ln) for ln in out["jsonl"].splitlines()] == doc
    rows = list(csv.DictReader(io.StringIO(out["csv"])))
    assert [r[key] for r in rows] == [d[key] for d in doc]
    assert [r["id"] for r in rows] == ["" if d["id"] is None else str(d["id"]) for d in doc]
    assert out["paths"].splitlines() == [d[key] for d in doc]
    assert out["null"].split("\0") == [d[key] for d in doc] + [""]
    return doc, rows


def test_query_formats(cli_world):
    out = outputs(["query", cli_world["photos"] / "img01.jpg", "--index", cli_world["index"], "--top", "5"])
    doc, rows = check_records(out)
    assert len(doc) == 5 and all(isinstance(d["id"], int) and d["rank"] == i + 1 for i, d in enumerate(doc))
    names = {d["path"].rsplit("/", 1)[-1] for d in doc[:2]}
    assert names == {"img01.jpg", "Müller copy.jpg"}            # the query and its exact copy lead
    assert "Müller copy.jpg" in out["json"]
    assert [float(r["score"]) for r in rows] == [d["score"] for d in doc]
    assert [r["verified"] for r in rows] == ["true" if d["verified"] else "false" for d in doc]
    table = out["table"].splitlines()
    assert table[0].split() == ["rank", "score", "similarity", "verified", "inliers", "box", "path"]
    assert len(table) == 6
    for line, d in zip(table[1:], doc, strict=True):
        cells = line.split(None, 6)
        assert cells[3] == ("yes" if d["verified"] else "no") and cells[6] == d["path"]


def test_list_formats(cli_world):
    out = outputs(["list", "--index", cli_world["index"]])
    doc, rows = check_records(out)
    assert {d["status"] for d in doc} == {"ok", "failed"}
    assert all(isinstance(d["id"], int) for d in doc)
    ok = [d for d in doc if d["status"] == "ok"]
    assert len(ok) == 15 and all(d["features"] > 0 and d["size"] > 0 for d in ok)
    table = out["table"].splitlines()
    assert table[0] == "id\tstatus\tsize\tfeatures\tpath"
    assert [ln.split("\t")[-1] for ln in table[1:]] == [d["path"] for d in doc]


def test_info_formats(cli_world):
    out = outputs(["info", "--index", cli_world["index"]])
    doc = json.loads(out["json"])
    assert doc["indexed"] == 15 and doc["errors"] == 1
    assert [json.loads(ln) for ln in out["jsonl"].splitlines()] == [doc]
    rows = {r["field"]: r["value"] for r in csv.DictReader(io.StringIO(out["csv"]))}
    assert set(rows) == set(doc) and rows["indexed"] == "15"
    assert json.loads(rows["preset"]) == doc["preset"]
    assert out["paths"].splitlines() == doc["roots"] == [str(cli_world["photos"])]
    assert out["table"].splitlines()[0].startswith("index ")


def test_match_formats(cli_world):
    a, b = cli_world["photos"] / "img01.jpg", cli_world["photos"] / "Müller copy.jpg"
    out = outputs(["match", a, b, "--max-side", "400"])
    doc = json.loads(out["json"])
    assert doc["verified"] is True and doc["image_b"] == str(b) and doc["inliers"] > 10
    assert [untimed(json.loads(ln)) for ln in out["jsonl"].splitlines()] == [untimed(doc)]
    (row,) = list(csv.DictReader(io.StringIO(out["csv"])))
    assert row["verified"] == "true" and int(row["inliers"]) == doc["inliers"]
    assert json.loads(row["homography"]) == doc["homography"]
    assert out["paths"].splitlines() == [str(a), str(b)]
    assert out["null"] == f"{a}\0{b}\0"
    assert "inliers: " in out["table"]


def test_format_conflicts_are_usage_errors(cli_world):
    base = ["list", "--index", cli_world["index"]]
    for extra in (["--json", "--format", "csv"], ["-0", "--format", "json"]):
        res = run([*base, *extra])
        assert res.exit_code == 2 and res.stderr.count("Error: ") == 1 and "Traceback" not in res.output
