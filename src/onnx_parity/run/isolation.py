"""What model code can reach of the run that started it: the job's tokens are taken out of the
environment before any process starts and kept in the parent's memory alone; the parent cannot
be read by its workers (not dumpable) and outlives nothing they start (a child subreaper that
kills what they leave behind); a worker gives up every capability, and any way to gain one back,
before a model's code runs.

Why all of it (docs/security.md): /proc/PID/environ shows a process's first environment, so
removing a variable later hides nothing; any process of the same user may read it unless the
process is not dumpable, and a process with CAP_SYS_PTRACE (root in a container, as CI and these
tests run) may read it even then. Linux only; elsewhere only the environment is cleaned.
"""

from __future__ import annotations

import contextlib
import ctypes
import logging
import os
import select
import signal
import sys
import time
from collections.abc import Iterator, MutableMapping
from pathlib import Path

logger = logging.getLogger(__name__)

# Credentials a job may hold that no model needs: GITHUB_TOKEN (kept for the comment), and the
# runner's own tokens a step may be given (OIDC, the cache and artifact services).
SECRETS = ("GITHUB_TOKEN", "ACTIONS_RUNTIME_TOKEN", "ACTIONS_ID_TOKEN_REQUEST_TOKEN")

# prctl(2) options and capset(2)'s version.
_PR_GET_DUMPABLE, _PR_SET_DUMPABLE, _PR_CAPBSET_DROP = 3, 4, 24
_PR_SET_CHILD_SUBREAPER, _PR_SET_NO_NEW_PRIVS, _PR_CAP_AMBIENT = 36, 38, 47
_PR_CAP_AMBIENT_CLEAR_ALL = 4
_CAPABILITY_VERSION_3 = 0x20080522
_REAP_SECONDS = 5.0  # waiting for killed leftovers to go, before giving up on them


def withhold(env: MutableMapping[str, str]) -> dict[str, str]:
    """Take SECRETS out of `env` (os.environ: every process started after this inherits the
    rest) and return them, to be kept in memory by the one part that needs them."""
    return {name: value for name in SECRETS if (value := env.pop(name, None))}


@contextlib.contextmanager
def guarded(holding: bool) -> Iterator[None]:
    """The parent's side, around everything that starts workers: not dumpable while `holding`
    credentials (its first environment may have them, its memory does), and a child subreaper
    whose leftovers (a daemon a model forked, however detached) are killed when it ends. Both
    settings are put back after, for a caller that goes on (the tests run `run` in-process)."""
    if not sys.platform.startswith("linux"):
        yield
        return
    libc = ctypes.CDLL(None, use_errno=True)
    dumpable = libc.prctl(_PR_GET_DUMPABLE, 0, 0, 0, 0)
    if holding:
        libc.prctl(_PR_SET_DUMPABLE, 0, 0, 0, 0)
    reaping = libc.prctl(_PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) == 0
    before = _children()
    try:
        yield
    finally:
        survivors = _kill_leftovers(before) if reaping else set()
        if reaping:
            libc.prctl(_PR_SET_CHILD_SUBREAPER, 0, 0, 0, 0)
        # Readable again only once nothing a model started is left to read it.
        if holding and dumpable > 0 and not survivors:
            libc.prctl(_PR_SET_DUMPABLE, dumpable, 0, 0, 0)


def confine_worker() -> None:
    """The worker's side, before any model: no credential in its environment, and no capability
    (CAP_SYS_PTRACE would read the parent however it is set), none to gain back by exec or
    setuid (an empty bounding set, no ambient ones, no_new_privs), whatever user it runs as. A
    capability that stays (a kernel that refuses) is a warning in the worker's log."""
    for name in SECRETS:
        os.environ.pop(name, None)
    if not sys.platform.startswith("linux"):
        return
    libc = ctypes.CDLL(None, use_errno=True)
    libc.prctl(_PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0)
    for cap in range(_last_capability() + 1):
        libc.prctl(_PR_CAPBSET_DROP, cap, 0, 0, 0)  # EPERM without CAP_SETPCAP: none to drop
    libc.prctl(_PR_CAP_AMBIENT, _PR_CAP_AMBIENT_CLEAR_ALL, 0, 0, 0)
    header = (ctypes.c_uint32 * 2)(_CAPABILITY_VERSION_3, 0)
    data = (ctypes.c_uint32 * 6)()  # effective, permitted, inheritable: twice 32 bits, all 0
    libc.capset(header, data)
    left = capabilities()
    if left:
        logger.warning("the worker kept capabilities %#x: model code may read the run's "
                       "parent", left)


def capabilities() -> int:
    """This process's effective capabilities (0 outside Linux)."""
    try:
        status = Path("/proc/self/status").read_text(encoding="ascii")
    except OSError:
        return 0
    line = next((line for line in status.splitlines() if line.startswith("CapEff:")), "")
    return int(line.split()[1], 16) if line else 0


def _last_capability() -> int:
    try:
        return int(Path("/proc/sys/kernel/cap_last_cap").read_text(encoding="ascii"))
    except (OSError, ValueError):
        return 63


def _children() -> set[int]:
    """This process's children, from /proc (an orphan reparented here is one)."""
    me, found = os.getpid(), set()
    with contextlib.suppress(OSError):
        for entry in os.scandir("/proc"):
            if not entry.name.isdigit():
                continue
            try:
                stat = Path(entry.path, "stat").read_bytes()
            except OSError:
                continue
            fields = stat.rpartition(b")")[2].split()
            if len(fields) > 1 and int(fields[1]) == me:
                found.add(int(entry.name))
    return found


def _kill_leftovers(before: set[int]) -> set[int]:
    """Kill every child this process did not have before (a worker that did not stop, a
    daemon reparented here), round after round, since killing one hands its own children
    here; multiprocessing's resource tracker, the parent's own, stays. The ones that would not
    go (stuck in the kernel), if any."""
    keep = before | _resource_tracker()
    deadline = time.monotonic() + _REAP_SECONDS
    while (left := _children() - keep) and time.monotonic() < deadline:
        for pid in left:
            with contextlib.suppress(OSError):
                os.kill(pid, signal.SIGKILL)
        for pid in left:
            _reap(pid, deadline)
    if left:
        logger.warning("processes the models started outlive the run: %s",
                       ", ".join(map(str, sorted(left))))
    return left


def _reap(pid: int, deadline: float) -> None:
    """Wait for a killed child to be gone, until `deadline`: as soon as it is (the kernel
    freeing a worker's memory takes 7 to 10 ms), through a pidfd where Linux has them."""
    try:
        handle = os.pidfd_open(pid)
    except (AttributeError, OSError):  # gone already, or no pidfd: poll
        handle = None
    try:
        while time.monotonic() < deadline:
            try:
                done, _ = os.waitpid(pid, os.WNOHANG)
            except ChildProcessError:
                return
            if done:
                return
            if handle is None:
                time.sleep(0.01)
            else:  # readable once the child has exited
                select.select([handle], [], [], max(0.0, deadline - time.monotonic()))
    finally:
        if handle is not None:
            os.close(handle)


def _resource_tracker() -> set[int]:
    tracker = sys.modules.get("multiprocessing.resource_tracker")
    pid = getattr(getattr(tracker, "_resource_tracker", None), "_pid", None)
    return {pid} if isinstance(pid, int) else set()
