"""Downloader against a local HTTP server (127.0.0.1, a thread, stopped by the fixture): resume, checksums,
corrupt and malicious archives."""

from __future__ import annotations

import hashlib
import io
import json
import tarfile
import threading
import zipfile
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest
from click.testing import CliRunner

from retrieval.cli.main import main
from retrieval.datasets.download import ChecksumError, download_dataset, download_file, safe_extract
from retrieval.datasets.manifest import MANIFEST_FORMAT, check_files


class Server:
    def __init__(self):
        self.files, self.drop_after, self.requests = {}, {}, []
        owner = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args):  # quiet
                pass

            def do_GET(self):
                owner.requests.append((self.path, self.headers.get("Range")))
                body = owner.files.get(self.path)
                if body is None:
                    self.send_error(404)
                    return
                start = 0
                rng = self.headers.get("Range")
                if rng and rng.startswith("bytes="):
                    start = int(rng[6:].split("-")[0])
                    if start >= len(body):
                        self.send_response(416)
                        self.send_header("Content-Range", f"bytes */{len(body)}")
                        self.end_headers()
                        return
                    self.send_response(206)
                    self.send_header("Content-Range", f"bytes {start}-{len(body) - 1}/{len(body)}")
                else:
                    self.send_response(200)
                self.send_header("Content-Length", str(len(body) - start))
                self.end_headers()
                payload = body[start:]
                cut = owner.drop_after.pop(self.path, None)
                if cut is not None:
                    self.wfile.write(payload[:cut])
                    self.wfile.flush()
                    self.close_connection = True
                    return
                self.wfile.write(payload)

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.httpd.timeout = 5
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}"
        self.thread = threading.Thread(target=self.httpd.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
        self.thread.start()

    def stop(self):
        self.httpd.shutdown()
        self.httpd.server_close()
        self.thread.join(timeout=5)


@pytest.fixture
def server():
    s = Server()
    yield s
    s.stop()


def make_tar(entries) -> bytes:
    """entries: list of (name, bytes) for files or (name, ('symlink'|'hardlink', target))."""
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w:gz") as tar:
        for name, content in entries:
            info = tarfile.TarInfo(name)
            if isinstance(content, tuple):
                info.type = tarfile.SYMTYPE if content[0] == "symlink" else tarfile.LNKTYPE
                info.linkname = content[1]
                tar.addfile(info)
            else:
                info.size = len(content)
                tar.addfile(info, io.BytesIO(content))
    return buf.getvalue()


def manifest_for(url, filename, body, *, names, sha256=None, into="jpg", flatten=True):
    return {"format": MANIFEST_FORMAT, "format_version": 1, "dataset": "toy",
            "filesets": [{"name": "images", "folder": into, "names": names, "count": len(names)}],
            "archives": [{"url": f"{url}/{filename}", "filename": filename, "into": into, "flatten": flatten,
                          "md5": None, "sha256": sha256 or hashlib.sha256(body).hexdigest(), "size": len(body)}]}


def tree(path):
    return sorted(p.relative_to(path).as_posix() for p in path.rglob("*"))


def test_download_extract_and_check(server, tmp_path):
    body = make_tar([("set/a/1.jpg", b"one"), ("set/b/2.jpg", b"two" * 1000)])
    server.files["/toy.tar.gz"] = body
    man = manifest_for(server.url, "toy.tar.gz", body, names=["1.jpg", "2.jpg"])
    root = tmp_path / "root"
    assert not check_files(man, root).ok and "2 of 2 files missing" in check_files(man, root).message()
    rep = download_dataset(man, root)
    assert rep.ok, rep.message()
    assert (root / "jpg" / "2.jpg").read_bytes() == b"two" * 1000
    record = json.loads((root / ".retrieval-download.json").read_text())
    assert record["toy.tar.gz"]["sha256"] == hashlib.sha256(body).hexdigest()
    # second run: archive present and verified, nothing fetched
    n = len(server.requests)
    assert download_dataset(man, root).ok and len(server.requests) == n
    # the CLI, with a manifest file
    mfile = tmp_path / "toy.json"
    mfile.write_text(json.dumps(man))
    res = CliRunner().invoke(main, ["data", "download", str(mfile), "--root", str(tmp_path / "root2")])
    assert res.exit_code == 0, res.output
    assert "complete" in res.output and (tmp_path / "root2" / "jpg" / "1.jpg").read_bytes() == b"one"


def test_corrupt_download_leaves_nothing(server, tmp_path):
    good = make_tar([("1.jpg", b"one")])
    bad = bytearray(good)
    bad[len(bad) // 2] ^= 0xFF
    server.files["/toy.tar.gz"] = bytes(bad)
    man = manifest_for(server.url, "toy.tar.gz", good, names=["1.jpg"])
    root = tmp_path / "root"
    with pytest.raises(ChecksumError, match="sha256"):
        download_dataset(man, root)
    assert tree(root) == ["downloads"]  # no archive, no .part, nothing extracted
    res = CliRunner().invoke(main, ["data", "download", str(_write(tmp_path, man)), "--root", str(root)])
    assert res.exit_code != 0 and "corrupt download" in res.output


def _write(tmp_path, man):
    p = tmp_path / "m.json"
    p.write_text(json.dumps(man))
    return p


def test_resume_partial_download(server, tmp_path):
    body = bytes(range(256)) * 400
    server.files["/big.bin"] = body
    server.drop_after["/big.bin"] = 40_000
    dest = tmp_path / "big.bin"
    sha = hashlib.sha256(body).hexdigest()
    with pytest.raises(OSError, match="interrupted"):
        download_file(f"{server.url}/big.bin", dest, sha256=sha, timeout=5)
    part = tmp_path / "big.bin.part"
    assert part.stat().st_size == 40_000 and not dest.exists()
    download_file(f"{server.url}/big.bin", dest, sha256=sha, timeout=5)
    assert dest.read_bytes() == body and not part.exists()
    assert server.requests[-1] == ("/big.bin", "bytes=40000-")


@pytest.mark.parametrize("entries, message", [
    ([("ok.jpg", b"x"), ("../evil.txt", b"pwned")], "climbs out"),
    ([("ok.jpg", b"x"), ("/tmp/retrieval-evil-abs.txt", b"pwned")], "absolute"),
    ([("link", ("symlink", "../../outside")), ("ok.jpg", b"x")], "points outside"),
    ([("link", ("symlink", "/etc")), ("link/passwd", b"pwned")], "points outside"),
    ([("hard", ("hardlink", "/etc/passwd"))], "absolute"),
])
def test_malicious_archive_writes_nothing(server, tmp_path, entries, message):
    body = make_tar(entries)
    server.files["/evil.tar.gz"] = body
    man = manifest_for(server.url, "evil.tar.gz", body, names=["ok.jpg"], flatten=False)
    root = tmp_path / "root"
    before = tree(tmp_path)
    with pytest.raises(ValueError, match=message):
        download_dataset(man, root)
    after = [p for p in tree(tmp_path) if p not in before]
    # only the verified archive in downloads/ and the empty target folder: nothing extracted, nothing outside
    assert sorted(after) == ["root", "root/downloads", "root/downloads/evil.tar.gz", "root/jpg"]
    assert not (tmp_path / "evil.txt").exists() and not (tmp_path / "outside").exists()


def test_malicious_zip(tmp_path):
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w") as zf:
        zf.writestr("ok.jpg", b"x")
        zf.writestr("../../zip-evil.txt", b"pwned")
    arch = tmp_path / "evil.zip"
    arch.write_bytes(buf.getvalue())
    target = tmp_path / "out"
    with pytest.raises(ValueError, match="climbs out"):
        safe_extract(arch, target)
    assert tree(target) == [] and not (tmp_path.parent / "zip-evil.txt").exists()
    # a good zip extracts (with sub-folders kept when not flattened)
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w") as zf:
        zf.writestr("full/ukbench00000.jpg", b"x")
    arch.write_bytes(buf.getvalue())
    assert safe_extract(arch, target) == ["full/ukbench00000.jpg"]
