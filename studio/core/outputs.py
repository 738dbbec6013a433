"""The one way the studio writes a file or publishes a folder the user will see.

Every output (models and their external data, reports, charts, traces, bundles,
plugin packages, dumps, JSON) goes through this module, so these rules hold everywhere
(docs/reliability.md R32-R35):

* **Inputs are never a destination.** Every file a run reads is registered here
  (``register_input``: ``studio.core.model.load`` registers a model and its external data,
  ``user_data_path`` the data files a user names). A destination whose (st_dev, st_ino) is a
  registered input is refused, whatever alias names it: a symlink, a hard link, ``./x/../x.onnx``,
  a bind mount of its folder. A folder that holds an input is never replaced.
* **Links are never followed.** A symlink at the destination is refused with a message (neither
  the link nor its target is touched); the temp file is renamed over the destination's own name,
  so a link planted after the check is replaced, never written through. Links in the *parent*
  path are the user's own folder layout and are followed as usual.
* **Only regular files are replaced.** FIFOs, devices, sockets and folders at a file's
  destination, and a parent path that runs through a regular file, are refused before any work.
* **Atomic.** Data goes to a temp file in the destination folder, is fsynced, then renamed.
  Multi-file outputs (a model and its ``.data``) are committed together under a lock on the
  destination folder (``flock``): a concurrent writer waits for the commit, so the pair is
  never mixed; the last commit wins and both writers finish cleanly.
* **One-line errors.** ENOSPC, EFBIG (``SIGXFSZ`` is ignored, so a file-size limit is an error,
  not a kill), EROFS, EACCES, EPERM, ENAMETOOLONG, ENOTDIR, EISDIR... become an ``OutputError`` naming
  the path as the user gave it (the base name when that was absolute), why, and what to do
  (``_REASONS``, the one table). A path on a kernel file system (/proc, /sys) is named as such,
  whatever errno it gives, and refused before any work. No temp file is left and a previous
  output at the destination is untouched.
* **Folders it did not create stay.** A bundle is built in a sibling staging folder and swapped in;
  an existing folder at the bundle's name is replaced only when it carries the studio's own
  marker (``owned``) and holds no registered input. ``remove_scratch`` deletes only folders this
  module handed out.
"""

from __future__ import annotations

import errno
import fcntl
import io
import json
import os
import re
import shutil
import signal
import stat
import tempfile
import threading
import time
import uuid
from collections import OrderedDict
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from pathlib import Path
from typing import IO, Any

from studio.core.errors import PathError
from studio.core import jsonsafe
from studio.core.error_codes import ErrorCode

# How long a writer waits for another run's commit to the same folder before giving up.
LOCK_WAIT_S = 120.0
# Entries past this many are dropped, oldest first, but only those no live run holds (see input_run).
_MAX_REGISTERED = 4096

_registry: OrderedDict[tuple[int, int], str] = OrderedDict()   # (st_dev, st_ino) -> the path registered
_held: dict[tuple[int, int], int] = {}          # entry -> how many live ``input_run`` scopes hold it
_process_held: set[tuple[int, int]] = set()     # registered outside any scope: held while the process lives
_registry_lock = threading.Lock()
_run_entries: ContextVar[set[tuple[int, int]] | None] = ContextVar("onnx_studio_input_run", default=None)
_scratch: set[str] = set()                       # folders handed out by scratch_dir (absolute)


class OutputError(PathError):
    """An output destination is not acceptable, or writing it failed (one line, the user's path)."""

    code = ErrorCode.BAD_PATH
    errno: int | None = None          # the OSError's errno when a write failed (see DISK_ERRNOS)
    filename: str | None = None       # the path the failed call named (describe reads its file system again)
    settled: bool = False             # the message already says what was and was not written: kept as is


# -- inputs ---------------------------------------------------------------------------------------

def register_input(*paths: str | Path) -> None:
    """Mark files this process reads as inputs: no output may replace them (by inode, not by name).

    An entry is held while the run that registered it is alive: inside ``input_run`` until that
    scope ends (a page's script run on the server), otherwise for the life of the process (a CLI
    command, a script). Only entries no live run holds are ever dropped, so a model opened first is
    still protected after dataset folders have registered thousands of files."""
    run = _run_entries.get()
    with _registry_lock:
        for p in paths:
            try:
                st = os.stat(p)
            except (OSError, ValueError):
                continue
            if not stat.S_ISREG(st.st_mode):
                continue
            key = (st.st_dev, st.st_ino)
            _registry[key] = os.path.realpath(p)
            _registry.move_to_end(key)
            if run is None:
                _process_held.add(key)
            elif key not in run:
                run.add(key)
                _held[key] = _held.get(key, 0) + 1
        _trim_locked()


def _trim_locked() -> None:
    """Drop the oldest entries past the cap, skipping every entry a live run holds."""
    excess = len(_registry) - _MAX_REGISTERED
    if excess <= 0:
        return
    for key in [k for k in _registry if k not in _process_held and not _held.get(k)][:excess]:
        del _registry[key]


@contextmanager
def input_run() -> Iterator[None]:
    """One run's scope for ``register_input``: what the run registers is held until the block ends
    (then it may be dropped past the cap, oldest first). Scopes nest; outside any scope the process
    is the run. A long-lived server wraps each request (a page's script run) in one."""
    entries: set[tuple[int, int]] = set()
    token = _run_entries.set(entries)
    try:
        yield
    finally:
        _run_entries.reset(token)
        with _registry_lock:
            for key in entries:
                left = _held.get(key, 0) - 1
                if left > 0:
                    _held[key] = left
                else:
                    _held.pop(key, None)
            _trim_locked()


def _is_input(st: os.stat_result) -> bool:
    """True when ``st`` is a registered input still on disk (an inode reused by a new file is not)."""
    with _registry_lock:
        path = _registry.get((st.st_dev, st.st_ino))
    if path is None:
        return False
    try:
        now = os.stat(path)
    except OSError:
        now = None
    if now is None or (now.st_dev, now.st_ino) != (st.st_dev, st.st_ino):
        with _registry_lock:           # the file is gone or was replaced: nothing left to protect
            key = (st.st_dev, st.st_ino)
            _registry.pop(key, None)
            _process_held.discard(key)
        return False
    return True


def _inputs_within(folder: Path) -> bool:
    """True when a registered input lies inside ``folder`` (by real path, or as a hard link in it)."""
    real = os.path.realpath(folder)
    with _registry_lock:
        entries = list(_registry.items())
    for key, path in entries:
        if (path == real or path.startswith(real.rstrip(os.sep) + os.sep)) and os.path.exists(path):
            return True
    for root, dirs, files in os.walk(folder):
        for name in files:
            try:
                st = os.lstat(os.path.join(root, name))
            except OSError:
                continue
            if stat.S_ISREG(st.st_mode) and _is_input(st):
                return True
    return False


# -- messages -------------------------------------------------------------------------------------

def shown_path(path: str | Path, given: str | Path | None = None) -> str:
    """The path for a message: as the user gave it when relative, else its base name."""
    text = str(given if given is not None else path)
    p = Path(text)
    if p.is_absolute():
        text = p.name or text
    text = "".join(c if c.isprintable() else "?" for c in text)
    return text if len(text) <= 160 else text[:80] + "..." + text[-60:]


# errno -> (why the destination cannot take the write, what the user can do). One mapping for every
# writer: ``describe`` joins them as "cannot write 'X': REASON; WHAT TO DO; NOTE" (one line).
_REASONS: dict[int, tuple[str, str]] = {
    errno.ENOSPC: ("no space left on the device", "free some space or choose a folder on another disk"),
    errno.EDQUOT: ("the disk quota is exceeded", "free some space under the quota or choose another folder"),
    errno.EFBIG: ("the file would exceed the file-size limit (ulimit -f)",
                  "raise the limit (ulimit -f unlimited) or choose a disk that takes larger files"),
    errno.EROFS: ("the file system is read-only", "choose a folder on a writable disk"),
    errno.EACCES: ("permission denied", "choose a folder you can write to, or change its permissions"),
    errno.EPERM: ("operation not permitted: the folder refuses new files (immutable, append-only or a protected "
                  "mount: lsattr -d {folder})", "choose another folder"),
    errno.ENAMETOOLONG: ("the name is too long for the file system",
                         "choose a shorter name (at most 255 bytes per file or folder name)"),
    errno.ENOTDIR: ("a part of the path is a file, not a folder", "choose a path through folders only"),
    errno.EISDIR: ("it is a folder", "give a file name"),
    errno.ELOOP: ("too many symbolic links in the path", "fix the links or choose another path"),
    errno.EXDEV: ("the temp file and the destination are on different file systems (a file mounted there?)",
                  "choose another name"),
    errno.ENOTEMPTY: ("a non-empty folder is in the way", "move it away or choose another name"),
    errno.EEXIST: ("something else is in the way", "move it away or choose another name"),
    errno.ENOENT: ("a folder on the path does not exist (removed during the run?)", "check the path and run again"),
    errno.EINVAL: ("the file system does not accept this name", "choose a name of letters, digits, '-' and '_'"),
    errno.EIO: ("the disk reported an input/output error", "check the disk (dmesg) or choose another folder"),
    errno.EBUSY: ("the destination is busy (a mount point or a file in use)", "choose another name"),
    errno.EOPNOTSUPP: ("the file system does not support the operation", "choose a folder on a local disk"),
    errno.ETXTBSY: ("the file is a running program", "choose another name"),
}

# Kernel file systems: they hold the kernel's own entries, never a user's file (a new file in /proc is
# ENOENT, in /sys EPERM or EACCES -- words that would send the user looking for a missing folder).
KERNEL_FS = frozenset({"proc", "sysfs", "cgroup", "cgroup2", "debugfs", "tracefs", "securityfs", "pstore", "bpf",
                       "configfs", "fusectl", "efivarfs", "binfmt_misc", "devpts", "selinuxfs", "nsfs"})
_KERNEL_ADVICE = "choose a folder on a disk"


def _existing_ancestor(path: str | Path) -> str:
    """The nearest part of ``path`` that exists (``path`` itself when it does)."""
    probe = os.path.abspath(path)
    while not os.path.lexists(probe) and probe != os.path.dirname(probe):
        probe = os.path.dirname(probe)
    return probe


def mount_of(path: str | Path) -> tuple[str, str] | None:
    """(mount point, file-system type) of the file system ``path`` (or its nearest existing part) is on,
    from /proc/self/mountinfo; None where that cannot be read (not Linux)."""
    real = os.path.realpath(_existing_ancestor(path))
    try:
        with open("/proc/self/mountinfo", encoding="utf-8", errors="replace") as fh:
            lines = fh.read().splitlines()
    except OSError:
        return None
    best: tuple[str, str] | None = None
    for line in lines:
        head, sep, tail = line.partition(" - ")
        fields = head.split()
        if not sep or len(fields) < 5 or not tail.split():
            continue
        point = re.sub(r"\\([0-7]{3})", lambda m: chr(int(m.group(1), 8)), fields[4])   # \040 is a space
        inside = real == point or real.startswith(point.rstrip("/") + "/")
        if inside and (best is None or len(point) >= len(best[0])):      # the last mount over a point wins
            best = (point, tail.split()[0])
    return best


def kernel_fs_reason(path: str | Path) -> str | None:
    """Why ``path`` cannot hold an output when it lies on a kernel file system (/proc, /sys...), else None."""
    found = mount_of(path)
    if found is None or found[1] not in KERNEL_FS:
        return None
    return f"{found[0]} is a kernel file system ({found[1]}) that holds no files"


# Write failures that are the destination's, never the run's: a full disk, a quota, a file-size limit,
# a read-only file system, no permission. A run that meets one stops (it does not blame a pass or a
# variant) and says, in one line, what could not be written and that nothing was.
DISK_ERRNOS = frozenset({errno.ENOSPC, errno.EDQUOT, errno.EFBIG, errno.EROFS, errno.EACCES, errno.EPERM})


def describe(exc: OSError, shown: str, *, note: str = "nothing was written") -> OutputError:
    """An OSError of a write as a one-line error naming ``shown``: why the destination cannot take it and what
    to do (``_REASONS``; a path on a kernel file system says so whatever the errno). Every write here is atomic
    (a temp file renamed into place), so a failed one leaves nothing at the destination: ``note`` says so."""
    code = exc.errno or 0
    kernel = kernel_fs_reason(exc.filename) if isinstance(exc.filename, (str, Path)) and exc.filename else None
    if kernel is not None:
        reason, advice = kernel, _KERNEL_ADVICE
    else:
        reason, advice = _REASONS.get(code) or ((exc.strerror or type(exc).__name__).lower(), "choose another folder")
        folder = os.path.dirname(shown)
        reason = reason.replace("{folder}", folder or "FOLDER")
    err = OutputError(f"cannot write '{shown}': {reason}; {advice}; {note}")
    err.errno = exc.errno
    err.filename = exc.filename if isinstance(exc.filename, str) else None
    return err


def disk_error(exc: BaseException, shown: str | None = None, *,
               note: str = "nothing was written") -> OutputError | None:
    """``exc`` as the one-line OutputError of a destination that cannot take the write (``DISK_ERRNOS``):
    an OSError raised anywhere (a library writing by path), or an OutputError this module made. It names
    ``shown`` (the output as the user gave it) when given, else the file the error names. None for
    anything else (a bug, a model problem): that stays the run's own error."""
    code = exc.errno if isinstance(exc, (OSError, OutputError)) else None
    if code not in DISK_ERRNOS:
        return None
    if isinstance(exc, OutputError) and (exc.settled or (shown is None and note == "nothing was written")):
        return exc
    if shown is None:
        shown = shown_path(exc.filename) if isinstance(exc, OSError) and exc.filename else "the output"
    return describe(OSError(code, os.strerror(code), exc.filename), shown, note=note)


def side_output_failed(exc: BaseException, shown: str, written: str) -> OutputError | None:
    """A side output (a report, a zip of a bundle) hit a full or read-only disk after the main output
    was saved: one line naming both, so the user knows what is there (``written``) and what is not."""
    err = disk_error(exc, shown, note=f"{written} was written, '{shown}' was not")
    if err is not None:
        err.settled = True
    return err


@contextmanager
def writing_folder(folder: str | Path, *, shown: str | None = None, remove_new: bool = True) -> Iterator[None]:
    """A block that fills ``folder`` file by file (plugin packages, precision variants, a profile's job
    folder, an export): a full disk, a read-only mount or a file-size limit met by any write inside (the
    studio's or a library's) stops it with one line naming the folder as the user gave it
    (``disk_error``), and what the block created there is removed again -- every new file and folder
    (``remove_new``; else only ``folder`` itself when the block made it and it is empty) -- so the run
    leaves nothing half written. What existed before is never touched, nor is anything removed on any
    other error (a concurrent run's files stay)."""
    label = shown or shown_path(folder)
    root = Path(os.path.abspath(folder))
    existed = os.path.lexists(root)
    if existed and not root.is_dir():        # a FIFO, a device, a file: refused before the block runs
        mode = os.lstat(root).st_mode
        raise OutputError(f"output '{label}' exists and is {'a file' if stat.S_ISREG(mode) else _kind(mode)}, "
                          "not a folder; choose another folder name")
    _refuse_unreachable(root, label)          # through a file, on /proc, a name too long: before the block runs
    before: set[str] = set()
    if remove_new and existed and root.is_dir() and not root.is_symlink():
        for dirpath, dirnames, filenames in os.walk(root):
            before.update(os.path.join(dirpath, n) for n in (*dirnames, *filenames))
    try:
        yield
    except Exception as exc:
        err = disk_error(exc, label)
        if err is None:
            raise
        if remove_new:
            _remove_new(root, existed, before)
        elif not existed:
            try:
                os.rmdir(root)
            except OSError:
                pass
        raise err from None


def _remove_new(root: Path, existed: bool, before: set[str]) -> None:
    if not root.is_dir() or root.is_symlink():
        return
    if not existed:
        shutil.rmtree(root, ignore_errors=True)          # the block made the folder: all of it is this run's
        return
    for dirpath, dirnames, filenames in os.walk(root, topdown=False):
        for name in filenames:
            path = os.path.join(dirpath, name)
            if path not in before:
                _unlink_quiet(Path(path))
        for name in dirnames:
            path = os.path.join(dirpath, name)
            if path not in before:
                if os.path.islink(path):
                    _unlink_quiet(Path(path))
                else:
                    shutil.rmtree(path, ignore_errors=True)


@contextmanager
def translated(shown: str) -> Iterator[None]:
    """Turn OSErrors raised inside into ``OutputError``s naming ``shown``."""
    try:
        yield
    except OutputError:
        raise
    except OSError as exc:
        raise describe(exc, shown) from None


def _ignore_sigxfsz() -> None:
    """A file-size rlimit kills the process with SIGXFSZ by default; ignored, the write fails with
    EFBIG and becomes a one-line error. Only the main thread may set signal handlers."""
    if hasattr(signal, "SIGXFSZ") and threading.current_thread() is threading.main_thread():
        try:
            if signal.getsignal(signal.SIGXFSZ) == signal.SIG_DFL:
                signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
        except (ValueError, OSError):  # pragma: no cover - embedded interpreters
            pass


# -- destinations ---------------------------------------------------------------------------------

def _absolute(target: str | Path) -> Path:
    """Absolute, parent resolved through links, final component kept as named (never resolved)."""
    text = str(target)
    if not text or "\x00" in text:
        raise OutputError("output path is empty or contains a NUL byte")
    p = Path(os.path.abspath(text))
    if p.name in ("", ".", ".."):
        raise OutputError(f"output '{shown_path(text)}' names a folder; give a file name")
    return Path(os.path.realpath(p.parent)) / p.name


def _kind(mode: int) -> str:
    if stat.S_ISDIR(mode):
        return "a folder"
    if stat.S_ISFIFO(mode):
        return "a FIFO"
    if stat.S_ISCHR(mode) or stat.S_ISBLK(mode):
        return "a device"
    if stat.S_ISSOCK(mode):
        return "a socket"
    return "not a regular file"


def _refuse_unreachable(target: str | Path, shown: str) -> None:
    """Refused before any work, nothing created: a destination (file or folder) whose path runs through a
    file, lies on a kernel file system (/proc, /sys), or has a missing part too long for any file system."""
    full = os.path.abspath(target)
    probe = _existing_ancestor(full)
    code = None
    if probe != full and not os.path.isdir(probe):
        code = errno.ENOTDIR
    elif kernel_fs_reason(probe) is not None:
        code = errno.ENOENT                   # what /proc says; describe names the kernel file system instead
    elif probe != full and any(len(part.encode("utf-8", "surrogateescape")) > 255
                               for part in Path(os.path.relpath(full, probe)).parts):
        code = errno.ENAMETOOLONG
    if code is not None:
        raise describe(OSError(code, os.strerror(code), probe), shown)


def _check_parent(parent: Path, shown: str, target: Path | None = None) -> None:
    """The parent folders of ``target`` (default: ``parent`` itself): refuse what cannot be made
    (``_refuse_unreachable``), then create them."""
    _refuse_unreachable(target if target is not None else parent, shown)
    with translated(shown):
        parent.mkdir(parents=True, exist_ok=True)


def _check_existing(path: Path, shown: str, *, folder: bool = False) -> os.stat_result | None:
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        return None
    except OSError as exc:
        raise describe(exc, shown) from None
    if stat.S_ISLNK(st.st_mode):
        raise OutputError(f"output '{shown}' is a symbolic link; the studio does not write through links "
                          "(remove the link or choose another name)")
    if folder:
        if not stat.S_ISDIR(st.st_mode):
            what = "a file" if stat.S_ISREG(st.st_mode) else _kind(st.st_mode)
            raise OutputError(f"output '{shown}' exists and is {what}, not a folder; choose another folder name")
        return st
    if not stat.S_ISREG(st.st_mode):
        what = _kind(st.st_mode)
        hint = ("give a file name" if what == "a folder"
                else "only regular files are replaced; choose another file name")
        raise OutputError(f"output '{shown}' is {what}; {hint}")
    if _is_input(st):
        raise OutputError(f"output '{shown}' would overwrite the input model or a file this run reads; "
                          "choose another output path")
    return st


def check_destination(target: str | Path, *, shown: str | None = None) -> Path:
    """Validate a file destination before any work (see the module doc); returns its absolute path
    (parent resolved, final name kept). Creates missing parent folders."""
    label = shown or shown_path(target)
    path = _absolute(target)
    _check_parent(path.parent, label, path)
    _check_existing(path, label)
    if len(path.name.encode("utf-8", "surrogateescape")) > 255:
        raise describe(OSError(errno.ENAMETOOLONG, os.strerror(errno.ENAMETOOLONG)), label)
    return path


def check_folder(target: str | Path, *, shown: str | None = None) -> Path:
    """Validate (and create) an output folder: refuses a file, a FIFO, a device or a link there."""
    label = shown or shown_path(target)
    text = str(target)
    if not text or "\x00" in text:
        raise OutputError("output folder name is empty or contains a NUL byte")
    path = Path(os.path.abspath(text))
    if path.name not in ("", ".", ".."):
        _check_parent(path.parent, label, path)
        path = Path(os.path.realpath(path.parent)) / path.name
        if os.path.islink(path) and os.path.isdir(path):
            return Path(os.path.realpath(path))          # a link to a folder the user chose: theirs to keep
        if _check_existing(path, label, folder=True) is None:
            with translated(label):
                path.mkdir(exist_ok=True)
    return Path(os.path.realpath(path))


# -- committing -----------------------------------------------------------------------------------

@contextmanager
def folder_lock(folder: Path, shown: str) -> Iterator[None]:
    """An exclusive ``flock`` on the folder itself (no lock file is left behind): commits of
    concurrent writers into one folder happen one after the other."""
    with translated(shown):
        fd = os.open(folder, os.O_RDONLY | os.O_DIRECTORY)
    try:
        deadline = time.monotonic() + LOCK_WAIT_S
        while True:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                if time.monotonic() > deadline:
                    raise OutputError(f"another run is still writing to '{shown}'; try again when it "
                                      "has finished") from None
                time.sleep(0.05)
            except OSError:          # a file system without flock: the renames are still atomic
                break
        yield
    finally:
        os.close(fd)


def _fsync_dir(folder: Path) -> None:
    try:
        fd = os.open(folder, os.O_RDONLY | os.O_DIRECTORY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


def _temp_beside(path: Path) -> tuple[int, Path]:
    """A private temp file in the destination folder, with a short name (a long destination
    name must not make the temp name too long)."""
    fd, tmp = tempfile.mkstemp(prefix=".onnx-studio-", suffix=".tmp", dir=path.parent)
    return fd, Path(tmp)


def current_umask() -> int:
    """The process umask, read without changing it where the kernel says it (``/proc/self/status``,
    Linux 4.7+): ``os.umask`` can only be read by setting it, a race with other threads' files."""
    try:
        with open("/proc/self/status", encoding="ascii") as fh:
            for line in fh:
                if line.startswith("Umask:"):
                    return int(line.split()[1], 8)
    except (OSError, ValueError, IndexError):
        pass
    mask = os.umask(0o022)      # the conservative common value while it is read back
    os.umask(mask)
    return mask


def _file_mode() -> int:
    return 0o666 & ~current_umask()


def _unlink_quiet(path: Path) -> None:
    try:
        os.unlink(path)
    except OSError:
        pass


@contextmanager
def open_output(target: str | Path, mode: str = "wb", *, shown: str | None = None,
                encoding: str | None = None) -> Iterator[IO]:
    """Open a destination for writing: the handle is a temp file beside it, renamed into place
    (after fsync) when the block ends without an exception. See the module doc for what is refused."""
    if mode not in ("w", "wb"):
        raise ValueError("open_output writes whole files: mode 'w' or 'wb'")
    _ignore_sigxfsz()
    label = shown or shown_path(target)
    path = check_destination(target, shown=label)
    with translated(label):
        fd, tmp = _temp_beside(path)
    try:
        with translated(label):           # the caller's writes too: ENOSPC/EFBIG surface in them
            fh = os.fdopen(fd, mode, **({"encoding": encoding or "utf-8"} if mode == "w" else {}))
            with fh:
                os.fchmod(fh.fileno(), _file_mode())
                yield fh
                fh.flush()
                os.fsync(fh.fileno())
        with folder_lock(path.parent, label):
            _check_existing(path, label)       # again, right before the rename
            with translated(label):
                os.replace(tmp, path)
        _fsync_dir(path.parent)
    except BaseException:
        _unlink_quiet(tmp)
        raise


def write_bytes(target: str | Path, data: bytes, *, shown: str | None = None) -> Path:
    with open_output(target, "wb", shown=shown) as fh:
        fh.write(data)
    return _absolute(target)


def write_text(target: str | Path, text: str, *, shown: str | None = None) -> Path:
    """Write text as UTF-8 (whatever the locale says)."""
    return write_bytes(target, text.encode("utf-8", "surrogateescape"), shown=shown)


def write_json(target: str | Path, obj: Any, *, shown: str | None = None, indent: int | None = 2,
               default: Callable[[Any], Any] | None = str) -> Path:
    """Valid JSON (non-finite numbers become null: studio.core.jsonsafe), encoded whole, then written atomically."""
    kwargs = {"default": default} if default is not None else {}
    return write_text(target, jsonsafe.dumps(obj, indent=indent, **kwargs), shown=shown)


def copy_file(source: str | Path, target: str | Path, *, shown: str | None = None) -> Path:
    """Copy a (regular) file's bytes to ``target`` through ``open_output``."""
    label = shown or shown_path(target)
    with open_output(target, "wb", shown=label) as out:
        with translated(label), open(source, "rb") as src:
            shutil.copyfileobj(src, out, 4 * 2**20)
    return _absolute(target)


def write_html_figure(figure: Any, target: str | Path, *, shown: str | None = None) -> Path:
    """A plotly figure as a self-contained HTML file (plotly.js inlined)."""
    buf = io.StringIO()
    figure.write_html(buf, include_plotlyjs=True)
    return write_text(target, buf.getvalue(), shown=shown)


def link_file(source: str | Path, target: str | Path, *, shown: str | None = None) -> bool:
    """Hard-link a file the studio wrote itself to ``target`` (checked like any destination), made
    under a temp name and renamed into place. False when the file system has no hard links."""
    label = shown or shown_path(target)
    path = check_destination(target, shown=label)
    tmp = path.with_name(f".onnx-studio-{uuid.uuid4().hex[:12]}.link")
    try:
        os.link(source, tmp)
    except OSError:
        return False
    try:
        with folder_lock(path.parent, label):
            _check_existing(path, label)
            with translated(label):
                os.replace(tmp, path)
    except BaseException:
        _unlink_quiet(tmp)
        raise
    return True


# -- several files at once ------------------------------------------------------------------------

@contextmanager
def staged_files(folder: str | Path, *, shown: str | None = None, what: str | None = None) -> Iterator[Path]:
    """A private staging folder beside the destination files: write any number of files into it
    (libraries that write by path: onnx, onnx_ir, OpenVINO), then every regular file in it is
    renamed into ``folder`` (same relative name) in one commit under the folder lock. Each
    destination is checked like ``check_destination`` first; on any error nothing is renamed.
    ``what``: the output named in messages about failing writes into the stage (default: the folder)."""
    _ignore_sigxfsz()
    dest = Path(folder)
    label = shown or shown_path(dest)
    _check_parent(Path(os.path.abspath(dest)), label)
    dest = Path(os.path.realpath(dest))
    with translated(what or label):         # the file the user named, where there is one
        stage = Path(tempfile.mkdtemp(prefix=".onnx-studio-stage-", dir=dest))
    try:
        with translated(what or label):     # the library's writes into the stage: ENOSPC, EFBIG...
            yield stage
        moves = []
        for root, _dirs, files in os.walk(stage):
            for name in files:
                src = Path(root) / name
                rel = src.relative_to(stage)
                if src.is_symlink() or not src.is_file():
                    continue
                moves.append((src, dest / rel, os.path.normpath(os.path.join(label, rel))))
        for _src, dst, sub in moves:
            _check_parent(dst.parent, sub)
            _check_existing(dst, sub)
        with folder_lock(dest, label):
            for _src, dst, sub in moves:
                _check_existing(dst, sub)
            for src, dst, sub in moves:
                with translated(sub):
                    os.chmod(src, _file_mode())
                    os.replace(src, dst)
        _fsync_dir(dest)
    finally:
        shutil.rmtree(stage, ignore_errors=True)


def copy_into(source: str | Path, staged: Path) -> Path:
    """Copy a file into a staging folder from ``staged_files`` or ``scratch_dir`` (not a destination)."""
    staged.parent.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(source, staged)
    return staged


# -- folders --------------------------------------------------------------------------------------

def scratch_dir(parent: str | Path, prefix: str, *, shown: str | None = None) -> Path:
    """A fresh private folder in ``parent`` (for staging and scratch): ``remove_scratch`` deletes only these."""
    label = shown or shown_path(parent)
    with translated(label):
        d = Path(tempfile.mkdtemp(prefix=prefix, dir=parent))
    _scratch.add(str(d))
    return d


def remove_scratch(path: str | Path) -> None:
    """Delete a folder handed out by ``scratch_dir`` (anything else is left alone)."""
    key = str(path)
    if key in _scratch:
        shutil.rmtree(key, ignore_errors=True)
        _scratch.discard(key)


def publish_folder(staging: Path, final: Path, *, owned: Callable[[Path], bool], shown: str | None = None) -> Path:
    """Swap a finished staging folder (from ``scratch_dir``, a sibling of ``final``) into place.

    What sits at ``final`` is replaced only when it is a folder ``owned`` says the studio wrote and
    it holds no registered input; a link, a file or a foreign folder is refused (the staging folder
    is then removed by the caller). The swap runs under the parent folder's lock, so concurrent
    publishers follow one another and the last one wins; the replaced folder is deleted afterwards.
    """
    label = shown or shown_path(final)
    if str(staging) not in _scratch:
        raise ValueError("publish_folder takes a folder made by scratch_dir")
    aside: Path | None = None
    with folder_lock(final.parent, label):
        st = _check_existing(final, label, folder=True)
        if st is not None:
            _refuse_replacing(final, label, owned)
            aside = final.with_name(f".{final.name[:60]}.old-{uuid.uuid4().hex[:10]}")
            with translated(label):
                os.replace(final, aside)
        with translated(label):
            os.replace(staging, final)
        _scratch.discard(str(staging))
    _fsync_dir(final.parent)
    if aside is not None:
        shutil.rmtree(aside, ignore_errors=True)      # the studio's own previous output
    return final


def check_publish(final: Path, *, owned: Callable[[Path], bool], shown: str | None = None) -> None:
    """``publish_folder``'s refusals, checked before the work starts (nothing is changed)."""
    label = shown or shown_path(final)
    if _check_existing(final, label, folder=True) is not None:
        _refuse_replacing(final, label, owned)


def _refuse_replacing(final: Path, label: str, owned: Callable[[Path], bool]) -> None:
    """An existing output folder is replaced only when onnx-studio wrote it and it holds nothing this run reads."""
    if _inputs_within(final):
        raise OutputError(f"output folder '{label}' holds the input model or a file this run reads; "
                          "it is not replaced: choose another output folder")
    if not owned(final):
        raise OutputError(f"output folder '{label}' exists and was not written by onnx-studio; "
                          "it is not replaced: move it away or choose another output folder")


def iter_protected() -> Iterable[str]:
    """The registered inputs' real paths (for diagnostics and tests)."""
    with _registry_lock:
        return list(_registry.values())
