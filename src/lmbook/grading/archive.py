"""Unpacking an LMS zip of submissions, one student's broken entry never costing the others.

Every entry is checked before anything is written: names that would land outside the folder, names too long
for a file system, encrypted entries, symbolic links, a file and a folder of the same name, entries that would
expand far more than text does (a zip bomb) or past the total the class may take. A refused entry is reported
for the student it belongs to; the rest of the class is unpacked. The sizes in the zip's headers are not
trusted: they are checked before, and enforced again while the entry is written.
"""

from __future__ import annotations

import os
import stat
import sys
import unicodedata
import zipfile
import zlib
from dataclasses import dataclass
from pathlib import Path

MB = 1_000_000
GiB = 1024**3
NAME_MAX_BYTES = 255  # one path component, on every common Linux and macOS file system
LITTER_NAMES = {".ds_store", "thumbs.db", "desktop.ini"}  # compared casefolded: Windows ignores case
LITTER_FOLDERS = {"__MACOSX", ".ipynb_checkpoints"}


def is_litter(name: str) -> bool:
    """Files and folders that operating systems and Jupyter add by themselves: never a student's work.

    ``._name`` files are macOS AppleDouble metadata (a zip made on a Mac holds one beside every file).
    """
    return name in LITTER_FOLDERS or name.casefold() in LITTER_NAMES or name.startswith("._")


@dataclass(frozen=True)
class ZipLimits:
    """How much a class zip may unpack to. Headers can lie: each limit is also enforced while writing."""

    max_total_bytes: int = 2 * GiB
    max_ratio: float = 200.0  # text compresses 5 to 20 times; thousands of times is a zip bomb
    # Below this size an entry may compress as well as it likes (a file of blanks): it cannot fill a disk.
    ratio_floor_bytes: int = MB


DEFAULT_ZIP_LIMITS = ZipLimits()


@dataclass(frozen=True)
class EntryProblem:
    """A zip entry that was not unpacked, and why, in an instructor's words."""

    parts: tuple[str, ...]  # the entry's path; empty when it pointed outside the archive
    message: str

    @property
    def is_notebook(self) -> bool:
        return bool(self.parts) and self.parts[-1].endswith(".ipynb")


class _Refused(Exception):
    """An entry that is not unpacked; its message is the reason."""


def entry_name(info: zipfile.ZipInfo) -> str:
    """The entry's name as its author saw it.

    Zips made by macOS and by many Windows tools store UTF-8 names without the flag that says so; Python then
    reads them as code page 437 ("ZoÃ«"). Real cp437 names are almost never valid UTF-8, so this is safe.
    NFC: macOS spells "ë" as "e" plus a combining mark; the same student must get the same name either way.
    """
    name = info.filename
    if not info.flag_bits & 0x800:
        try:
            name = name.encode("cp437").decode("utf-8")
        except (UnicodeEncodeError, UnicodeDecodeError):
            pass
    return unicodedata.normalize("NFC", name.replace("\\", "/"))  # some Windows tools write backslashes


def entry_parts(name: str) -> tuple[str, ...] | None:
    """The entry's path inside the archive, or None when it would land outside it (absolute, or ``..``)."""
    if name.startswith("/") or (len(name) > 1 and name[1] == ":"):  # /etc/x, C:/x
        return None
    parts = tuple(p for p in name.split("/") if p not in ("", "."))
    return None if ".." in parts else parts


def _is_symlink(info: zipfile.ZipInfo) -> bool:
    return stat.S_ISLNK(info.external_attr >> 16)


def _size(n: float) -> str:
    return f"{n / MB:.1f} MB" if n >= 100_000 else f"{n / 1000:.1f} kB"


def _header_problem(info: zipfile.ZipInfo, parts: tuple[str, ...], limits: ZipLimits) -> str | None:
    """Why the entry must not be unpacked, judging from its header alone; None when it may be."""
    shown = "/".join(parts)
    if _is_symlink(info):
        return f"ignored a symbolic link: {shown} (the grader never follows links)"
    if info.flag_bits & 0x1:
        return f"{shown} is encrypted (password-protected) in the zip, so it could not be unpacked"
    long = [p for p in parts if len(p.encode()) > NAME_MAX_BYTES]
    if long:
        return (f"a file name in the zip is too long to unpack ({len(long[0].encode())} bytes; file systems allow "
                f"{NAME_MAX_BYTES}): {shown[:120]}...")
    if info.file_size > limits.ratio_floor_bytes and info.file_size > limits.max_ratio * max(info.compress_size, 1):
        return _bomb_message(shown, info.compress_size, _size(info.file_size), limits)
    return None


def _bomb_message(shown: str, packed: int, unpacked: str, limits: ZipLimits) -> str:
    return (f"{shown} was not unpacked: it expands from {_size(packed)} to {unpacked}, over "
            f"{limits.max_ratio:g} times, as a zip bomb does. If it is genuine, unzip the archive yourself and "
            "grade the folder")


def _plan(zf: zipfile.ZipFile, limits: ZipLimits) -> tuple[list[tuple[zipfile.ZipInfo, tuple[str, ...]]],
                                                            set[tuple[str, ...]], list[EntryProblem]]:
    """The file entries to unpack, the folders to make, and the entries refused from their headers."""
    files: dict[tuple[str, ...], zipfile.ZipInfo] = {}
    folders: set[tuple[str, ...]] = set()
    problems: list[EntryProblem] = []
    for info in zf.infolist():
        name = entry_name(info)
        parts = entry_parts(name)
        if parts is None:
            problems.append(EntryProblem((), f"skipped an entry that points outside the archive: {name!r}"))
            continue
        if not parts or any(is_litter(p) for p in parts):
            continue
        if info.is_dir() and not _is_symlink(info):
            folders.add(parts)
            continue
        why = _header_problem(info, parts, limits)
        if why is None and parts in files:
            why = f"the zip holds {'/'.join(parts)} twice; only its first copy was unpacked"
        if why:
            problems.append(EntryProblem(parts, why))
            continue
        files[parts] = info
    folders |= {parts[:i] for parts in files for i in range(1, len(parts))}
    for parts in sorted(files.keys() & folders):  # "a" as a file and "a/b" inside a folder "a": keep the folder
        problems.append(EntryProblem(parts, f"the zip holds {'/'.join(parts)} both as a file and as a folder; "
                                            "the file was not unpacked"))
        del files[parts]
    # Notebooks first: if the class goes over the total, the files that matter for grading are already there.
    order = sorted(files.items(), key=lambda kv: (not kv[0][-1].endswith(".ipynb"), kv[0]))
    return [(info, parts) for parts, info in order], folders, problems


def _write_entry(zf: zipfile.ZipFile, info: zipfile.ZipInfo, target: Path, shown: str, allowed: int,
                 limits: ZipLimits) -> int:
    """Stream one entry to a new file; the bytes written. Raises _Refused past ``allowed`` bytes or the ratio."""
    ratio_cap = max(limits.ratio_floor_bytes, limits.max_ratio * max(info.compress_size, 1))
    written = 0
    # O_EXCL and O_NOFOLLOW: the folder is new and only this code writes it, but never write through a link.
    fd = os.open(target, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
    with os.fdopen(fd, "wb") as out, zf.open(info) as src:
        while chunk := src.read(1 << 20):
            written += len(chunk)
            if written > ratio_cap:
                raise _Refused(_bomb_message(shown, info.compress_size, f"more than {_size(ratio_cap)}", limits))
            if written > allowed:
                raise _Refused(f"{shown} was not unpacked: it holds more than its header says "
                               f"({_size(info.file_size)}) or more than the class may unpack")
            out.write(chunk)
    return written


def extract_zip(path: Path, dest: Path, limits: ZipLimits = DEFAULT_ZIP_LIMITS) -> list[EntryProblem]:
    """Unpack an LMS zip into ``dest``; the entries that were not unpacked, each with the reason.

    Never creates a symbolic link, never writes outside ``dest``, never writes more than
    ``limits.max_total_bytes``. Only an unreadable archive stops everything (SystemExit).
    """
    try:
        zf = zipfile.ZipFile(path)
    except (zipfile.BadZipFile, OSError) as e:
        raise SystemExit(f"{path}: not a readable zip file ({e})") from None
    with zf:
        entries, folders, problems = _plan(zf, limits)
        for parts in sorted(folders):
            dest.joinpath(*parts).mkdir(parents=True, exist_ok=True)
        total = 0
        for info, parts in entries:
            shown = "/".join(parts)
            target = dest.joinpath(*parts)
            allowed = min(info.file_size, limits.max_total_bytes - total)
            if info.file_size > limits.max_total_bytes - total:
                problems.append(EntryProblem(parts, f"{shown} ({_size(info.file_size)}) was not unpacked: the class "
                                                    f"zip would unpack to more than {limits.max_total_bytes / GiB:g} "
                                                    "GiB (--max-unzip-gb)"))
                continue
            try:
                total += _write_entry(zf, info, target, shown, allowed, limits)
            except _Refused as e:
                problems.append(EntryProblem(parts, str(e)))
            except (zipfile.BadZipFile, zlib.error, EOFError) as e:
                why = "its checksum does not match: download the zip again" if "CRC" in str(e) else str(e)
                problems.append(EntryProblem(parts, f"{shown} is damaged in the zip and could not be unpacked ({why})"))
            except (OSError, NotImplementedError, RuntimeError, ValueError) as e:
                problems.append(EntryProblem(parts, f"{shown} could not be unpacked ({type(e).__name__}: {e})"))
            else:
                continue
            target.unlink(missing_ok=True)  # a refused entry leaves nothing half-written behind
    for p in problems:
        if not p.parts:
            print(f"warning: {path.name}: {p.message}", file=sys.stderr)
    return problems
