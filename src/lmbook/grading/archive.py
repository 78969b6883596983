"""Unpacking an LMS zip of submissions, one student's broken entry never costing the others.

Every entry is checked before anything is written: names that would land outside the folder, names too long
for a file system, encrypted entries, symbolic links, a file and a folder of the same name, entries that would
expand far more than text does (a zip bomb) or past the total the class may take. A refused entry is reported
for the student it belongs to; the rest of the class is unpacked. The sizes in the zip's headers are not
trusted: they are checked before, and enforced again while the entry is written.
"""

from __future__ import annotations

import io
import os
import stat
import struct
import sys
import unicodedata
import zipfile
import zlib
from dataclasses import dataclass, field
from pathlib import Path

MB = 1_000_000
GiB = 1024**3
NAME_MAX_BYTES = 255  # one path component, on every common Linux and macOS file system
PATH_MAX_BYTES = 4000  # a whole path (Linux allows 4096, the scratch folder's own path included)
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
    """A zip entry that was not unpacked (or, with ``refused=False``, one unpacked with a remark), and why, in
    an instructor's words."""

    parts: tuple[str, ...]  # the entry's path; empty when it pointed outside the archive
    message: str
    refused: bool = field(default=True)

    @property
    def is_notebook(self) -> bool:
        return self.refused and bool(self.parts) and self.parts[-1].endswith(".ipynb")


def decode_name(raw: bytes) -> tuple[str, bool]:
    """A file name's bytes as text: UTF-8 when they are, else Windows-1252 (Latin-1 where 1252 has no letter).

    The second value says whether the fallback was used. A zip made on Windows and unpacked by Info-ZIP's
    ``unzip`` leaves names in Latin-1 bytes; Windows-1252 reads those, and the letters of Western European
    names, the same way.
    """
    try:
        return raw.decode("utf-8"), False
    except UnicodeDecodeError:
        pass
    try:
        return raw.decode("cp1252"), True
    except UnicodeDecodeError:
        return raw.decode("latin-1"), True


def display_name(name: str) -> tuple[str, bool]:
    """A name read from the file system as text that can be printed and written anywhere.

    Python keeps the bytes of a name that is not UTF-8 as lone surrogates ("Jos\\udce9"); those cannot be
    written to a UTF-8 report. They are decoded by :func:`decode_name`; the second value says so.
    """
    if not any("\udc80" <= ch <= "\udcff" for ch in name):
        return name, False
    return decode_name(os.fsencode(name))


class _Refused(Exception):
    """An entry that is not unpacked; its message is the reason."""


def entry_name(info: zipfile.ZipInfo, mislabelled: frozenset[bytes] = frozenset()) -> str:
    """The entry's name as its author saw it.

    Zips made by macOS and by many Windows tools store UTF-8 names without the flag that says so; Python then
    reads them as code page 437 ("ZoÃ«"). Real cp437 names are almost never valid UTF-8, so this is safe.
    ``mislabelled``: the raw names of entries flagged UTF-8 that are not (see :func:`_open_zip`), decoded
    by :func:`decode_name`'s fallback. NFC: macOS spells "ë" as "e" plus a combining mark; the same student
    must get the same name either way.
    """
    name = info.filename
    if not info.flag_bits & 0x800:
        raw = info.orig_filename.encode("cp437")
        if raw in mislabelled:
            name = decode_name(raw)[0].replace("\x00", "")
        else:
            try:
                name = raw.decode("utf-8")
            except UnicodeDecodeError:
                pass
    return unicodedata.normalize("NFC", name.replace("\\", "/"))  # some Windows tools write backslashes


def _name_remark(info: zipfile.ZipInfo, mislabelled: frozenset[bytes], shown: str) -> str | None:
    """What the instructor should know about how an entry's name was read, if anything."""
    if info.flag_bits & 0x800:
        return None
    raw = info.orig_filename.encode("cp437")
    if raw in mislabelled:
        return (f"the zip says the name {shown!r} is UTF-8, but its bytes are not: read them as Windows-1252 "
                "(Latin-1); check the student's name")
    if raw.isascii():
        return None
    try:
        raw.decode("utf-8")
    except UnicodeDecodeError:
        return (f"the zip does not say how the name {shown!r} is encoded and it is not UTF-8: read it as code "
                "page 437, the zip format's default (a Windows zip); check the student's name")
    return None


def entry_parts(name: str) -> tuple[str, ...] | None:
    """The entry's path inside the archive, or None when it would land outside it (absolute, or ``..``)."""
    if name.startswith("/") or (len(name) > 1 and name[1] == ":"):  # /etc/x, C:/x
        return None
    parts = tuple(p for p in name.split("/") if p not in ("", "."))
    return None if ".." in parts else parts


class _Overlay(io.RawIOBase):
    """A file read with a few bytes replaced (the archive itself is never written)."""

    def __init__(self, path: Path, patches: dict[int, bytes]):
        self._f = open(path, "rb")  # noqa: SIM115 - closed with the overlay
        self._patches = patches
        self.name = str(path)

    def readable(self) -> bool:
        return True

    def seekable(self) -> bool:
        return True

    def seek(self, offset: int, whence: int = 0) -> int:
        return self._f.seek(offset, whence)

    def tell(self) -> int:
        return self._f.tell()

    def readinto(self, buffer) -> int:
        at = self._f.tell()
        n = self._f.readinto(buffer)
        for where, data in self._patches.items():
            for i, byte in enumerate(data):
                if 0 <= where + i - at < n:
                    buffer[where + i - at] = byte
        return n

    def close(self) -> None:
        self._f.close()
        super().close()


def _mislabelled_names(path: Path) -> tuple[dict[int, bytes], frozenset[bytes]]:
    """Entries whose UTF-8 flag is set but whose names are not UTF-8: patches clearing the flag in the central
    directory and the local header, and those raw names. Python's zipfile refuses the whole archive over one
    such entry (UnicodeDecodeError); an LMS or unzip reads the others."""
    patches: dict[int, bytes] = {}
    names: set[bytes] = set()
    with open(path, "rb") as fp:
        end = zipfile._EndRecData(fp)  # noqa: SLF001 - the standard library's own reader of the end record
        if not end:
            return patches, frozenset()
        size, offset = end[zipfile._ECD_SIZE], end[zipfile._ECD_OFFSET]  # noqa: SLF001
        concat = end[zipfile._ECD_LOCATION] - size - offset  # noqa: SLF001
        if end[zipfile._ECD_SIGNATURE] == zipfile.stringEndArchive64:  # noqa: SLF001
            concat -= zipfile.sizeEndCentDir64 + zipfile.sizeEndCentDir64Locator
        fp.seek(offset + concat)
        directory = fp.read(size)
        at = 0
        while at + zipfile.sizeCentralDir <= len(directory):
            header = struct.unpack(zipfile.structCentralDir, directory[at:at + zipfile.sizeCentralDir])
            if header[0] != zipfile.stringCentralDir:
                break
            flags, n_name, n_extra, n_comment = header[5], header[12], header[13], header[14]
            raw = directory[at + zipfile.sizeCentralDir:at + zipfile.sizeCentralDir + n_name]
            if flags & 0x800:
                try:
                    raw.decode("utf-8")
                except UnicodeDecodeError:
                    names.add(raw)
                    patches[offset + concat + at + 8] = (flags & ~0x800).to_bytes(2, "little")
                    local = header[18]
                    if local != 0xFFFFFFFF:  # a zip64 offset lives in the extra field: that entry stays unreadable
                        fp.seek(local + concat + 6)
                        local_flags = int.from_bytes(fp.read(2), "little")
                        patches[local + concat + 6] = (local_flags & ~0x800).to_bytes(2, "little")
            at += zipfile.sizeCentralDir + n_name + n_extra + n_comment
    return patches, frozenset(names)


def _open_zip(path: Path) -> tuple[zipfile.ZipFile, frozenset[bytes]]:
    """The archive, and the raw names of entries whose UTF-8 flag had to be cleared to read it."""
    try:
        return zipfile.ZipFile(path), frozenset()
    except UnicodeDecodeError:
        pass
    patches, names = _mislabelled_names(path)
    return zipfile.ZipFile(_Overlay(path, patches)), names


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
    why = _path_problem(parts)
    if why:
        return why
    if info.file_size > limits.ratio_floor_bytes and info.file_size > limits.max_ratio * max(info.compress_size, 1):
        return _bomb_message(shown, info.compress_size, _size(info.file_size), limits)
    return None


def _path_problem(parts: tuple[str, ...], dest_bytes: int = 200) -> str | None:
    """Why a path cannot be made on the file system: a name over 255 bytes, or nested past the path limit."""
    shown = "/".join(parts)
    long = [p for p in parts if len(p.encode()) > NAME_MAX_BYTES]
    if long:
        return (f"a file name in the zip is too long to unpack ({len(long[0].encode())} bytes; file systems allow "
                f"{NAME_MAX_BYTES}): {shown[:120]}...")
    if dest_bytes + len(shown.encode()) > PATH_MAX_BYTES:
        return (f"a path in the zip is nested too deep to unpack ({len(parts)} folders, {len(shown.encode())} bytes; "
                f"file systems allow about {PATH_MAX_BYTES}): {shown[:120]}...")
    return None


def _bomb_message(shown: str, packed: int, unpacked: str, limits: ZipLimits) -> str:
    return (f"{shown} was not unpacked: it expands from {_size(packed)} to {unpacked}, over "
            f"{limits.max_ratio:g} times, as a zip bomb does. If it is genuine, unzip the archive yourself and "
            "grade the folder")


def _plan(zf: zipfile.ZipFile, limits: ZipLimits, mislabelled: frozenset[bytes] = frozenset(),
          dest_bytes: int = 200) -> tuple[list[tuple[zipfile.ZipInfo, tuple[str, ...]]], set[tuple[str, ...]],
                                           list[EntryProblem]]:
    """The file entries to unpack, the folders to make, and the entries refused from their headers (and the
    remarks on names read by a fallback)."""
    files: dict[tuple[str, ...], zipfile.ZipInfo] = {}
    folders: set[tuple[str, ...]] = set()
    problems: list[EntryProblem] = []
    for info in zf.infolist():
        name = entry_name(info, mislabelled)
        parts = entry_parts(name)
        if parts is None:
            problems.append(EntryProblem((), f"skipped an entry that points outside the archive: {name!r}"))
            continue
        if not parts or any(is_litter(p) for p in parts):
            continue
        remark = _name_remark(info, mislabelled, "/".join(parts))
        if remark:
            problems.append(EntryProblem(parts, remark, refused=False))
        if info.is_dir() and not _is_symlink(info):
            why = _path_problem(parts, dest_bytes)
            if why:
                problems.append(EntryProblem(parts, why))
            else:
                folders.add(parts)
            continue
        why = _header_problem(info, parts, limits) or _path_problem(parts, dest_bytes)
        if why:
            problems.append(EntryProblem(parts, why))
            continue
        if parts in files:  # unzip, and the LMS that made the zip, keep the last copy: so does the grader
            problems.append(EntryProblem(parts, f"the zip holds {'/'.join(parts)} twice; its last copy was "
                                                "unpacked, as unzip does", refused=False))
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
        zf, mislabelled = _open_zip(path)
    except (zipfile.BadZipFile, OSError, ValueError, struct.error, NotImplementedError) as e:
        raise SystemExit(f"{path}: not a readable zip file ({e})") from None
    with zf:
        entries, folders, problems = _plan(zf, limits, mislabelled, len(str(dest).encode()) + 1)
        unmade: set[tuple[str, ...]] = set()
        for parts in sorted(folders):
            if any(parts[:i] in unmade for i in range(1, len(parts))):
                unmade.add(parts)
                continue
            try:
                dest.joinpath(*parts).mkdir(parents=True, exist_ok=True)
            except OSError as e:  # a name this file system refuses: that student's entries only
                unmade.add(parts)
                problems.append(EntryProblem(parts, f"the folder {'/'.join(parts)[:160]} could not be made "
                                                    f"({e.strerror or type(e).__name__})"))
        total = 0
        for info, parts in entries:
            if any(parts[:i] in unmade for i in range(1, len(parts))):
                problems.append(EntryProblem(parts, f"{'/'.join(parts)[:160]} was not unpacked: its folder could "
                                                    "not be made"))
                continue
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
