"""Finding benchmark files: --data-dir, then $TSMIX_DATA_DIR, then the user cache (downloaded once).

Downloads use urllib only, go to a temporary file beside the target, are checked against the
registry's sha256 and then renamed into place, so the cache never holds a partial or wrong file.
"""

from __future__ import annotations

import hashlib
import http.client
import os
import sys
import urllib.error
import urllib.request
from collections.abc import Sequence
from pathlib import Path

from tsmix.atomic import atomic_path
from tsmix.datasets.errors import DataError
from tsmix.datasets.specs import BenchmarkSpec, get_benchmark

ENV_DATA_DIR = "TSMIX_DATA_DIR"  # a folder holding ETT-small/ and weather/ (e.g. ../shared/data)
ENV_CACHE_DIR = "TSMIX_CACHE_DIR"  # where downloads go (default: $XDG_CACHE_HOME/tsmix or ~/.cache/tsmix)
ENV_DATA_URL = "TSMIX_DATA_URL"  # base URL of a mirror; the file URL is base + relpath
DOWNLOAD_TIMEOUT_S = 60.0


def cache_dir() -> Path:
    """The user cache folder for downloaded data (not created here)."""
    if os.environ.get(ENV_CACHE_DIR):
        return Path(os.environ[ENV_CACHE_DIR]).expanduser()
    base = os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache"
    return Path(base).expanduser() / "tsmix"


def download_url(spec: BenchmarkSpec) -> str:
    base = os.environ.get(ENV_DATA_URL)
    return base.rstrip("/") + "/" + spec.relpath if base else spec.url


def _candidates(spec: BenchmarkSpec, folder: Path) -> list[Path]:
    # The folder layout of the data bundles (ETT-small/ETTh1.csv) or the bare file name.
    return [folder / spec.relpath, folder / spec.filename]


def sha256_file(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def resolve_path(name: str, data_dir: str | Path | None = None) -> Path:
    """Local path of benchmark ``name`` (case-insensitive); downloads into the cache when missing."""
    spec = get_benchmark(name)
    folders = [Path(d).expanduser() for d in (data_dir, os.environ.get(ENV_DATA_DIR)) if d]
    for folder in folders:
        for p in _candidates(spec, folder):
            if p.is_file():
                return p
    target = cache_dir() / spec.relpath
    if target.is_file():
        return target
    return download(spec, target, searched=folders)


def download(spec: BenchmarkSpec, target: Path, *, searched: Sequence[Path] = (),
             timeout: float = DOWNLOAD_TIMEOUT_S) -> Path:
    """Fetch ``spec`` into ``target`` atomically and verify its sha256. Leaves nothing behind on failure."""
    url = download_url(spec)
    looked = ", ".join(str(p) for p in searched) + ", " if searched else f"{ENV_DATA_DIR} is not set; "
    fix = (f"download {spec.relpath} from {url} yourself and set {ENV_DATA_DIR} (or --data-dir) to the "
           f"folder holding it")
    try:
        response = urllib.request.urlopen(url, timeout=timeout)  # opened before anything is written
    except (urllib.error.URLError, OSError, ValueError) as exc:
        reason = f"HTTP {exc.code} {exc.reason}" if isinstance(exc, urllib.error.HTTPError) else (
            getattr(exc, "reason", None) or exc)
        raise DataError(f"{spec.relpath} not found (looked in {looked}cache {cache_dir()}) and downloading "
                        f"it from {url} failed ({reason}): {fix}") from None
    print(f"tsmix: downloading {spec.filename} from {url} to {target}", file=sys.stderr)
    created = [p for p in [target.parent, *target.parent.parents] if not p.exists()]  # innermost first
    try:
        with response, atomic_path(target, suffix=".part") as tmp:  # renamed only once verified
            h = hashlib.sha256()
            with open(tmp, "wb") as f:
                for chunk in iter(lambda: response.read(1 << 20), b""):
                    h.update(chunk)
                    f.write(chunk)
            if h.hexdigest() != spec.sha256:
                raise DataError(f"sha256 mismatch for {spec.relpath} downloaded from {url}: got "
                                f"{h.hexdigest()}, expected {spec.sha256}; the download is corrupt or "
                                f"the upstream file changed: {fix}")
        created = []
        return target
    except (urllib.error.URLError, http.client.HTTPException, OSError) as exc:
        raise DataError(f"downloading {spec.relpath} from {url} failed ({exc}): {fix}") from None
    finally:
        for p in created:  # only folders this call made, and only while empty
            try:
                p.rmdir()
            except OSError:
                break
