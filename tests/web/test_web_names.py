"""The pieces of the photos page that need no server: the accent-insensitive fold, folder names from the followed
folders, keyset pages of a selection (against a naive list), uploads' stored names and the Content-Disposition of
originals."""

from __future__ import annotations

from urllib.parse import unquote

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from retrieval.web.folders import FolderIndex, fold, folder_of, page_of, root_labels
from retrieval.web.originals import content_disposition, content_type, orientation_text
from retrieval.web.uploads import MAX_NAME_BYTES, upload_name


def test_fold_by_hand():
    assert fold("Été") == fold("ETE") == fold("été") == "ete"
    assert fold("Straße") == "strasse" and fold("Café") == fold("cafe\u0301") == "cafe"   # composed or not
    assert fold("ﬁlm") == "film" and fold("Ærø") == "ærø"   # a ligature decomposes; Æ and ø have no mark to drop
    assert fold("IMG_0001.HEIC") == "img_0001.heic" and fold("cascade*.jpg") == "cascade*.jpg"
    assert "ete" in fold("/photos/Été 2023/plage.jpg") and "ile aux" in fold("Île aux poissons")


@given(st.text(max_size=30))
def test_fold_is_stable_and_has_no_marks(text):
    import unicodedata

    once = fold(text)
    assert fold(once) == once and not any(unicodedata.combining(c) for c in once)


def test_folder_names_from_the_followed_folders():
    roots = ["/home/me/Pictures", "/mnt/disk/Pictures", "/home/me/Pictures/phone", "/srv/index/uploads"]
    labels = root_labels(roots)
    assert labels == {"/home/me/Pictures": "Pictures", "/mnt/disk/Pictures": "Pictures (2)",
                      "/home/me/Pictures/phone": "phone", "/srv/index/uploads": "uploads"}
    assert folder_of("/home/me/Pictures/été/plage 1.jpg", roots, labels) == "Pictures/été"
    assert folder_of("/home/me/Pictures/a.jpg", roots, labels) == "Pictures"
    assert folder_of("/mnt/disk/Pictures/2019/x/a.jpg", roots, labels) == "Pictures (2)/2019/x"
    assert folder_of("/home/me/Pictures/phone/IMG_1.HEIC", roots, labels) == "phone"   # the innermost followed
    assert folder_of("/home/me/Pictures phone/a.jpg", roots, labels) == "home/me/Pictures phone"   # not under one
    assert folder_of("/srv/index/uploads/x.jpg", roots, labels) == "uploads"


def test_folder_index_counts_and_selection():
    roots = ["/p"]
    rows = [(5, "/p/été/a.jpg"), (1, "/p/b.jpg"), (9, "/p/été/sub/c.jpg"), (3, "/p/voyages/Égypte/d.jpg"),
            (7, "/p/été/E.png")]
    index = FolderIndex.build(4, rows, roots)
    assert index.ids.tolist() == [1, 3, 5, 7, 9]
    f = index.folders_by_path
    assert (f["p"].photos, f["p"].total) == (1, 5) and f["p"].children == ("p/été", "p/voyages")   # by folded name
    assert (f["p/été"].photos, f["p/été"].total, f["p/voyages"].photos, f["p/voyages"].total) == (2, 3, 0, 1)
    assert index.select("p/été").tolist() == [5, 7]                    # the folder itself
    assert index.select("p/été", q="E").tolist() == [5, 7, 9]          # with q: its sub-folders too
    assert index.select(None, q="EGYPTE").tolist() == [3]
    assert index.select(None).tolist() == [1, 3, 5, 7, 9]
    assert [t.path for t in index.top()] == ["p"]


@settings(max_examples=60, deadline=None)
@given(ids=st.lists(st.integers(0, 60), unique=True, max_size=30), limit=st.integers(1, 7),
       cursor=st.integers(-2, 62), mode=st.sampled_from(["after", "before", "offset", "first"]))
def test_keyset_pages_match_a_naive_list(ids, limit, cursor, mode):
    selected = np.array(sorted(ids), dtype=np.int64)
    got, more_after, more_before = page_of(selected, limit=limit, after=cursor if mode == "after" else None,
                                           before=cursor if mode == "before" else None,
                                           offset=max(cursor, 0) if mode == "offset" else None)
    s = sorted(ids)
    if mode == "after":
        want = [i for i in s if i > cursor][:limit]
        left = [i for i in s if i <= cursor]
        assert more_after == (len([i for i in s if i > cursor]) > limit) and more_before == bool(left)
    elif mode == "before":
        below = [i for i in s if i < cursor]
        want = below[-limit:]
        assert more_before == (len(below) > limit) and more_after == any(i >= cursor for i in s)
    else:
        skip = max(cursor, 0) if mode == "offset" else 0
        want = s[skip:skip + limit]
        assert more_after == (len(s) > skip + limit) and more_before == (min(skip, len(s)) > 0)
    assert got == want


def test_upload_names_by_hand():
    assert upload_name("vacances à Nice.jpg", ".jpg") == "vacances à Nice.jpg"
    assert upload_name("IMG_0001.HEIC", ".heic") == "IMG_0001.HEIC" and upload_name("a.jpeg", ".jpg") == "a.jpeg"
    assert upload_name("photo.png", ".jpg") == "photo.jpg" and upload_name("notes.txt", ".png") == "notes.txt.png"
    assert upload_name("../../etc/passwd", ".jpg") == "passwd.jpg"
    assert upload_name("C:\\Users\\me\\été.png", ".png") == "été.png"
    assert upload_name(".bashrc", ".jpg") == "bashrc.jpg" and upload_name("..", ".jpg") == "upload.jpg"
    assert upload_name(None, ".png") == "upload.png" and upload_name("   ", ".png") == "upload.png"
    assert upload_name("evil\u202egpj.exe", ".jpg") == "evilgpj.exe.jpg"   # no right-to-left override
    assert upload_name("cafe\u0301.jpg", ".jpg") == "café.jpg"                # NFC
    assert upload_name("a\nb\x00c.jpg", ".jpg") == "abc.jpg"


@given(st.text(max_size=300), st.sampled_from([".jpg", ".png", ".heic", ".tif"]))
def test_upload_names_are_safe(name, extension):
    out = upload_name(name, extension)
    assert "/" not in out and "\\" not in out and "\x00" not in out and out not in (".", "..")
    assert not out.startswith((".", " ")) and len(out.encode("utf-8")) <= MAX_NAME_BYTES
    assert out.lower().endswith((extension, ".jpeg", ".jpe", ".tiff", ".heif"))
    assert len(out) > len(extension)


def test_content_disposition_and_types():
    assert content_disposition("plage 1.jpg", attachment=False) == 'inline; filename="plage 1.jpg"'
    header = content_disposition("Soirée d'été.HEIC", attachment=True)
    assert header == ("attachment; filename=\"Soiree d'ete.HEIC\"; "
                      "filename*=UTF-8''Soir%C3%A9e%20d%27%C3%A9t%C3%A9.HEIC")
    assert 'filename="a_b_.jpg"' in content_disposition('a"b\\.jpg', attachment=False)
    weird = content_disposition("日本\r\n.jpg", attachment=False)
    assert weird.isascii() and "\r" not in weird and "\n" not in weird
    assert unquote(weird.split("filename*=UTF-8''")[1]) == "日本.jpg"
    assert content_type("/x/IMG.HEIC") == "image/heic" and content_type("a.JPG") == "image/jpeg"
    assert content_type("a.avif") == "image/avif" and content_type("noext") == "application/octet-stream"
    assert orientation_text(6) == "6 (rotated 90° clockwise)" and orientation_text(None) == "1 (normal)"
