"""Quiet by default: with stderr not a terminal no command writes carriage-return progress frames or INFO lines
(``-v`` brings INFO back), each unreadable file is reported once, and ``-q`` / ``-v`` are accepted by every
command as well as before it."""

from __future__ import annotations

import shutil

import click
from cli_world import run
from helpers import copy_index

from retrieval.cli.doc import iter_commands
from retrieval.cli.main import main


def assert_plain(res, what):
    err = res.stderr
    assert "\r" not in err, f"{what}: progress frames on stderr: {err[:300]!r}"
    info = [ln for ln in err.splitlines() if ln.startswith(("INFO", "DEBUG"))]
    assert not info, f"{what}: INFO lines without -v: {info[:3]}"


def test_every_command_accepts_quiet_and_verbose():
    for path, cmd, _ in iter_commands(main):
        if isinstance(cmd, click.Group):
            continue
        opts = {o for p in cmd.params for o in getattr(p, "opts", [])}
        assert {"-q", "--quiet", "-v", "--verbose"} <= opts, " ".join(path)


def test_index_reports_each_unreadable_file_once_and_plain_progress(cli_world):
    res = cli_world["index_run"]
    assert_plain(res, "index")
    assert res.stderr.count("broken.jpg") == 1, res.stderr
    # plain progress lines (not a terminal): 'extracting: n/N img (p %), t s'
    assert any(ln.startswith("extracting: ") and "/" in ln for ln in res.stderr.splitlines()), res.stderr


def test_commands_without_v_print_no_info_and_no_frames(cli_world, tmp_path):
    idx, photos = cli_world["index"], cli_world["photos"]
    img = photos / "img01.jpg"
    copy = tmp_path / "idx"
    copy_index(idx, copy)
    commands = [
        ["index", photos, "--index", copy],
        ["query", img, "--index", idx, "--top", "3"],
        ["query", img, "--index", idx, "--json"],
        ["info", "--index", idx],
        ["list", "--index", idx],
        ["check", "--index", idx],
        ["presets"],
        ["presets", "--show", "default"],
        ["duplicates", "--index", idx],
        ["match", img, photos / "img02.jpg", "--max-side", "400"],
        ["extract", img, "--max-side", "400"],
        ["train", "vocab", photos / "img01.jpg", photos / "img02.jpg", "-o", tmp_path / "v.npz", "-k", "4",
         "--kind", "kmeans", "--pca-dim", "0", "--workers", "1"],
        ["remove", "--index", copy, "1"],
    ]
    for args in commands:
        res = run(args)
        assert res.exit_code in (0, 1), (args, res.output)
        assert "Traceback" not in res.output
        assert_plain(res, " ".join(map(str, args[:2])))


def test_verbose_shows_info_and_quiet_hides_progress_anywhere(cli_world, tmp_path):
    idx, photos = cli_world["index"], cli_world["photos"]
    copy = tmp_path / "idx"
    copy_index(idx, copy)
    added = []
    try:
        for args in (["-v", "index", photos, "--index", copy], ["index", photos, "--index", copy, "-v"]):
            res = run(args)
            assert res.exit_code == 0, res.output
            assert "\r" not in res.stderr
            assert any(ln.startswith("INFO") for ln in res.stderr.splitlines()), res.stderr
        for i, args in enumerate((["-q", "index", photos, "--index", copy, "--workers", "1"],
                                  ["index", photos, "--index", copy, "-q", "--workers", "1"])):
            added.append(photos / f"added{i}.jpg")
            shutil.copy(cli_world["pool"][20 + i], added[-1])       # something to hash, extract and encode
            res = run(args)
            assert res.exit_code == 0, res.output
            assert "1 added" in res.stdout
            assert not any(ln.startswith(("hashing:", "extracting:", "encoding:")) for ln in res.stderr.splitlines())
    finally:
        for p in added:
            p.unlink()
