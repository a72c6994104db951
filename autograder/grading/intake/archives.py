"""A class handed in as a zip, unpacked within ``size_limits.ZipLimits`` (``safe_extract``): an absolute path, ``..``,
a name twice or any limit refuses the whole archive before anything is written, links and special files are not
extracted (their students are flagged, not lost), and a refused archive leaves nothing behind."""

from __future__ import annotations

import shutil
import stat
import zipfile
from pathlib import Path, PurePosixPath

from autograder.grading.intake.class_roster import LayoutError
from autograder.grading.intake.file_access import kind_of
from autograder.grading.intake.size_limits import ZipLimits


def _refuse_zip(zip_path, what: str, limit: str = "") -> LayoutError:
    return LayoutError(
        f"{zip_path} was not unpacked: {what}{f' (the limit is {limit})' if limit else ''}. Nothing was extracted. "
        "If the archive is what you expect, unpack it yourself with a tool you trust (e.g. `unzip "
        f"{zip_path} -d class`), check what it holds, and pass the folder; otherwise download it again.")


def _plan(zf: zipfile.ZipFile, zip_path, dest: Path, limits: ZipLimits) -> tuple:
    """([(info, target)] to extract, {relative path: what it is} skipped), or LayoutError before anything is
    written."""
    infos = zf.infolist()
    total, packed = sum(i.file_size for i in infos), sum(i.compress_size for i in infos)
    if len(infos) > limits.max_files:
        raise _refuse_zip(zip_path, f"it holds {len(infos)} files", f"{limits.max_files} files")
    if total > limits.max_bytes:
        raise _refuse_zip(zip_path, f"it unpacks to {total / 2**20:.0f} MB", f"{limits.max_bytes / 2**20:.0f} MB")
    if total > limits.ratio_floor and total > limits.max_ratio * max(packed, 1):
        raise _refuse_zip(zip_path, f"it is compressed {total / max(packed, 1):.0f} times, as a zip bomb is",
                          f"{limits.max_ratio} times, beyond {limits.ratio_floor / 2**20:.0f} MB")
    free = shutil.disk_usage(dest.parent).free
    if total > free:
        raise _refuse_zip(zip_path, f"it unpacks to {total / 2**20:.0f} MB and {dest.parent} has "
                                    f"{free / 2**20:.0f} MB free")
    members, skipped, seen = [], {}, set()
    for info in infos:
        name = PurePosixPath(info.filename)
        if name.is_absolute() or info.filename.startswith("\\") or ".." in name.parts or "\x00" in info.filename:
            raise _refuse_zip(zip_path, f"it holds an unsafe path {info.filename!r}")
        if len(name.parts) > limits.max_depth:
            raise _refuse_zip(zip_path, f"it holds a path {len(name.parts)} folders deep",
                              f"{limits.max_depth} folders")
        if name.parts in seen:
            raise _refuse_zip(zip_path, f"it holds {info.filename!r} twice")
        seen.add(name.parts)
        mode = info.external_attr >> 16
        kind = kind_of(mode if stat.S_IFMT(mode) else mode | stat.S_IFREG)  # no type bits: a plain file or folder
        if kind not in ("dir", "file"):
            skipped[name] = kind
        elif name.parts:
            members.append((info, dest.joinpath(*name.parts)))
    return members, skipped


def _copy(src, dst, budget: int) -> int:
    """Copy ``src`` to ``dst``; the bytes copied; past ``budget`` (a zip whose headers lie) raise OverflowError."""
    copied = 0
    while chunk := src.read(1 << 20):
        copied += len(chunk)
        if copied > budget:
            raise OverflowError
        dst.write(chunk)
    return copied


def safe_extract(zip_path: Path, dest: Path, limits: ZipLimits = ZipLimits()) -> dict:
    """Extract a zip into ``dest`` within ``limits``; returns {relative path: what it is} of the links and special
    files it did not extract. Absolute paths, ``..``, duplicates and any limit refuse the whole archive, and then
    ``dest`` is removed: a refused archive leaves nothing behind."""
    dest = Path(dest)
    dest.parent.mkdir(parents=True, exist_ok=True)
    try:
        with zipfile.ZipFile(zip_path) as zf:
            members, skipped = _plan(zf, zip_path, dest, limits)
            dest.mkdir()
            budget = min(limits.max_bytes, sum(i.file_size for i, _ in members))
            for info, target in members:
                if info.is_dir():
                    target.mkdir(parents=True, exist_ok=True)
                    continue
                target.parent.mkdir(parents=True, exist_ok=True)
                with zf.open(info) as src, open(target, "xb") as dst:
                    budget -= _copy(src, dst, budget)
            for rel in skipped:  # their folders are kept, so their students are flagged, not lost
                dest.joinpath(*rel.parent.parts).mkdir(parents=True, exist_ok=True)
    except LayoutError:
        shutil.rmtree(dest, ignore_errors=True)
        raise
    except OverflowError:
        shutil.rmtree(dest, ignore_errors=True)
        raise _refuse_zip(zip_path, "it unpacks to more than its headers declare") from None
    except (zipfile.BadZipFile, zipfile.LargeZipFile, OSError, EOFError, RuntimeError, NotImplementedError) as exc:
        shutil.rmtree(dest, ignore_errors=True)
        raise _refuse_zip(zip_path, f"it could not be read ({type(exc).__name__}: {exc})") from None
    return skipped
