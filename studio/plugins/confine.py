"""Fence in user custom-op code running in a worker (RELIABILITY R23).

A custom op's Python body is the user's code: the studio runs it only in a
one-off worker (``fresh=True``) started with an allowlisted environment
(``Limits(minimal_env=True)``: no tokens, keys, proxies or HOME), and before
the code is imported :func:`confine_writes` shuts the process in:

* **Landlock** (Linux >= 5.13, unprivileged; used when the kernel has it):
  file writes, creations, removals, renames and truncation are allowed only
  beneath the job's own folder (scratch = cwd, results) and its output
  folder; TCP bind/connect are denied (ABI >= 4); signals to processes
  outside the worker and abstract UNIX sockets are denied (ABI >= 6). The
  kernel enforces this for every thread and child, ctypes included.
* **An audit hook** (PEP 578, always): refuses Python-level writes outside
  the same folders, process spawning and socket connects with a clear
  ``PermissionError``. It is the fallback where Landlock is missing; it does
  not stop native code (ctypes), which is why Landlock is preferred.

Reading is not restricted (the op needs numpy, the engine and its model). A
studio on a shared server does not run user code at all (``--shared``).
"""

from __future__ import annotations

import ctypes
import logging
import os
import sys
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path
from typing import Any

from studio.core.jobs import JobOutput
from studio.plugins.usercode import UserCodeError, load_user_function

log = logging.getLogger(__name__)

__all__ = ["confine_writes", "fence_build", "landlock_abi"]

_SYS_CREATE_RULESET, _SYS_ADD_RULE, _SYS_RESTRICT_SELF = 444, 445, 446   # same numbers on x86-64 and arm64
_PR_SET_NO_NEW_PRIVS = 38
_RULE_PATH_BENEATH = 1
_O_PATH = getattr(os, "O_PATH", 0o10000000)

# Filesystem rights (uapi/linux/landlock.h). Reads and execution are not handled, so stay allowed.
_WRITE_FILE, _REMOVE_DIR, _REMOVE_FILE = 1 << 1, 1 << 4, 1 << 5
_MAKE_ALL = sum(1 << b for b in range(6, 13))          # char, dir, reg, sock, fifo, block, sym
_REFER, _TRUNCATE = 1 << 13, 1 << 14
_NET_BIND_TCP, _NET_CONNECT_TCP = 1 << 0, 1 << 1
_SCOPE_ABSTRACT_UNIX, _SCOPE_SIGNAL = 1 << 0, 1 << 1


class _RulesetAttr(ctypes.Structure):
    _fields_ = [("handled_access_fs", ctypes.c_uint64), ("handled_access_net", ctypes.c_uint64),
                ("scoped", ctypes.c_uint64)]


class _PathBeneath(ctypes.Structure):
    _pack_ = 1
    _fields_ = [("allowed_access", ctypes.c_uint64), ("parent_fd", ctypes.c_int32)]


def _libc() -> ctypes.CDLL | None:
    if not sys.platform.startswith("linux"):
        return None
    try:
        return ctypes.CDLL(None, use_errno=True)
    except OSError:
        return None


def landlock_abi() -> int:
    """The kernel's Landlock ABI version (0 when unavailable)."""
    libc = _libc()
    if libc is None:
        return 0
    libc.syscall.restype = ctypes.c_long
    abi = libc.syscall(_SYS_CREATE_RULESET, None, ctypes.c_size_t(0), ctypes.c_uint32(1))
    return int(abi) if abi > 0 else 0


def _landlock(allowed: list[Path], files: Iterable[Path] = ()) -> int:
    libc = _libc()
    abi = landlock_abi()
    if libc is None or abi <= 0:
        return 0
    fs = _WRITE_FILE | _REMOVE_DIR | _REMOVE_FILE | _MAKE_ALL
    if abi >= 2:
        fs |= _REFER
    if abi >= 3:
        fs |= _TRUNCATE
    attr = _RulesetAttr(fs, _NET_BIND_TCP | _NET_CONNECT_TCP if abi >= 4 else 0,
                        _SCOPE_ABSTRACT_UNIX | _SCOPE_SIGNAL if abi >= 6 else 0)
    size = 24 if abi >= 6 else 16 if abi >= 4 else 8
    ruleset = libc.syscall(_SYS_CREATE_RULESET, ctypes.byref(attr), ctypes.c_size_t(size), ctypes.c_uint32(0))
    if ruleset < 0:
        log.info("landlock_create_ruleset failed: %s", os.strerror(ctypes.get_errno()))
        return 0
    try:
        for folder in allowed:
            fd = os.open(str(folder), _O_PATH | os.O_CLOEXEC)
            try:
                rule = _PathBeneath(fs, fd)
                if libc.syscall(_SYS_ADD_RULE, ctypes.c_int(ruleset), ctypes.c_int(_RULE_PATH_BENEATH),
                                ctypes.byref(rule), ctypes.c_uint32(0)) < 0:
                    raise OSError(ctypes.get_errno(), "landlock_add_rule")
            finally:
                os.close(fd)
        for path in files:       # single files (/dev/null): only the rights that apply to a file
            fd = os.open(str(path), _O_PATH | os.O_CLOEXEC)
            try:
                rule = _PathBeneath(_WRITE_FILE | (_TRUNCATE if abi >= 3 else 0), fd)
                if libc.syscall(_SYS_ADD_RULE, ctypes.c_int(ruleset), ctypes.c_int(_RULE_PATH_BENEATH),
                                ctypes.byref(rule), ctypes.c_uint32(0)) < 0:
                    raise OSError(ctypes.get_errno(), "landlock_add_rule")
            finally:
                os.close(fd)
        if libc.prctl(_PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0:
            raise OSError(ctypes.get_errno(), "prctl(PR_SET_NO_NEW_PRIVS)")
        if libc.syscall(_SYS_RESTRICT_SELF, ctypes.c_int(ruleset), ctypes.c_uint32(0)) < 0:
            raise OSError(ctypes.get_errno(), "landlock_restrict_self")
    except OSError as exc:
        log.info("Landlock not applied: %s", exc)
        return 0
    finally:
        os.close(ruleset)
    return abi


_WRITE_FLAGS = os.O_WRONLY | os.O_RDWR | os.O_CREAT | os.O_TRUNC | os.O_APPEND
_PATH_EVENTS = {"os.remove", "os.rename", "os.rmdir", "os.mkdir", "os.symlink", "os.link", "os.truncate",
                "os.chmod", "os.chown", "os.utime", "shutil.rmtree", "shutil.move", "shutil.copyfile"}
_SPAWN_EVENTS = {"subprocess.Popen", "os.system", "os.exec", "os.posix_spawn", "os.spawn", "os.fork",
                 "os.forkpty", "pty.spawn"}


def _audit_hook(allowed: list[str]):
    def inside(path: object) -> bool:
        if isinstance(path, int):
            return True
        try:
            real = os.path.realpath(os.fsdecode(path))   # type: ignore[arg-type]
        except (TypeError, ValueError):
            return False
        return any(real == a or real.startswith(a + os.sep) for a in allowed)

    def hook(event: str, args: tuple) -> None:
        if event == "open" and args:
            mode = args[1] if len(args) > 1 and isinstance(args[1], str) else ""
            flags = args[2] if len(args) > 2 and isinstance(args[2], int) else 0
            if (any(c in mode for c in "wax+") or flags & _WRITE_FLAGS) and not inside(args[0]):
                raise PermissionError("custom-op code may write only inside its scratch folder (the cwd)")
        elif event in _PATH_EVENTS and args and not all(inside(a) for a in args[:2] if isinstance(a, (str, bytes))):
            raise PermissionError(f"custom-op code may change files only inside its scratch folder ({event})")
        elif event in _SPAWN_EVENTS:
            raise PermissionError(f"custom-op code may not start processes ({event})")
        elif event == "socket.connect" or event == "socket.bind":
            raise PermissionError("custom-op code may not use the network")
        elif event in ("os.kill", "os.killpg") and args and args[0] not in (0, os.getpid()):
            raise PermissionError("custom-op code may not signal other processes")

    return hook


def confine_writes(folders: Iterable[Path]) -> dict[str, object]:
    """Allow writes only beneath ``folders`` from now on, for this process and its children.

    Irreversible by design: call it only in a one-off worker, just before user code is imported.
    Returns what was applied (``{"landlock_abi": N, "audit_hook": True}``) for the job's report.
    """
    allowed = sorted({Path(f).resolve() for f in folders if Path(f).is_dir()})
    abi = _landlock(allowed)
    sys.addaudithook(_audit_hook([str(a) for a in allowed]))
    return {"landlock_abi": abi, "audit_hook": True}


def fence_build(folders: Iterable[Path]) -> dict[str, object]:
    """Allow writes only beneath ``folders`` (and to ``/dev/null``) for this process and every process it starts:
    the Landlock half of :func:`confine_writes`, without the audit hook (a build must start CMake and the
    compiler). Used by the C++ build job, so generated build files cannot write outside the job's scratch
    folder whatever they contain. Irreversible: one-off workers only. ``{"landlock_abi": 0}`` where the kernel
    has no Landlock (the build then runs with the worker's other limits only)."""
    allowed = sorted({Path(f).resolve() for f in folders if Path(f).is_dir()})
    files = [Path("/dev/null")] if Path("/dev/null").exists() else []
    return {"landlock_abi": _landlock(allowed, files), "audit_hook": False}


def load_confined(ctx: Any, args: Mapping[str, Any], label: str, default_function: str,
                  preload: Callable[[], None]) -> tuple[Callable[..., Any], dict[str, object]] | JobOutput:
    """``preload()`` (import the engine: it may read its own files), then shut the worker in
    (:func:`confine_writes` to its scratch and output folders, no bytecode written) and load
    ``args["function"]`` (default ``default_function``) from ``args["code_path"]``: the function and the fence
    applied, or the job's answer when the code does not load."""
    ctx.set_stage(f"{label}: loading the code")
    preload()
    sys.dont_write_bytecode = True
    fence = confine_writes([ctx.scratch.parent, ctx.out_dir])
    try:
        fn = load_user_function(Path(args["code_path"]), str(args.get("function") or default_function), label)
    except UserCodeError as exc:
        return JobOutput(data={"load_error": str(exc), "samples": [], "model": None, "confinement": fence})
    return fn, fence
