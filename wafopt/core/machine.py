"""What the machine running a search can hold: the memory a process may still use."""

from __future__ import annotations

import os

CGROUP_FILES = ("/sys/fs/cgroup/memory.max", "/sys/fs/cgroup/memory.current")   # cgroup v2 (containers)


def _meminfo_available() -> int | None:
    """MemAvailable of /proc/meminfo (Linux: free memory plus what the kernel can reclaim), or the
    free physical pages where the system reports them."""
    try:
        with open("/proc/meminfo") as info:
            for line in info:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    try:
        return os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    except (ValueError, OSError, AttributeError):
        return None


def _cgroup_headroom() -> int | None:
    """The container's memory limit less its use, where a limit is set."""
    try:
        limit, used = (_read(path) for path in CGROUP_FILES)
        return None if limit == "max" else max(0, int(limit) - int(used))
    except (OSError, ValueError):
        return None


def _read(path: str) -> str:
    with open(path) as file:
        return file.read().strip()


def available_memory() -> int | None:
    """Bytes this process can still allocate without swapping (the lesser of the system's
    available memory and the container's headroom), or None where neither is known."""
    known = [b for b in (_meminfo_available(), _cgroup_headroom()) if b is not None]
    return min(known) if known else None
