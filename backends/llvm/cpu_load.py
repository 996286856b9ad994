"""What the machine's CPUs are doing now, read from Linux's ``/proc``: how many threads are
runnable at this moment, and how much of the CPUs this process may use sat idle since the
previous reading. The load average (``os.getloadavg``) answers for the last minute, and a
minute is long: a compile started a few seconds after a busy spell (a benchmark's earlier
workloads, a test run) finds an average of 1.9 on an idle two-core machine. A compile that
decides whether to put work on another core needs the machine as it is now (see
:func:`thread_pool.free_cores`). Where ``/proc`` is missing, the readings are None.

    >>> free_cores_now({0, 1})       # doctest: +SKIP
    1
"""
from __future__ import annotations

import os
import time

# The kernel reports idle time in clock ticks (10 ms): each reading of a partly idle CPU is
# up to a tick short, so a window holds at least two. (A CPU busy throughout reads exactly
# 0, one idle throughout at least half the window.) The first compile's window, from the
# backend's loading to its decision, is about 30 ms.
MIN_WINDOW_S = 0.02
try:
    _TICKS_PER_S = os.sysconf("SC_CLK_TCK")
except (AttributeError, ValueError, OSError):
    _TICKS_PER_S = 100
_previous: list = []  # [(time, {cpu: idle ticks})] of the last reading kept


def runnable_threads() -> int | None:
    """Threads runnable on the machine at this moment, the calling one included (the fourth
    field of ``/proc/loadavg``: runnable / all)."""
    try:
        with open("/proc/loadavg", "rb") as f:
            return int(f.read().split()[3].split(b"/")[0])
    except (OSError, ValueError, IndexError):
        return None


def idle_ticks() -> dict | None:
    """Each CPU's idle and I/O-wait time since boot, in clock ticks (``/proc/stat``, whose
    first lines are the CPUs': the total, then one a CPU)."""
    try:
        with open("/proc/stat", "rb") as f:
            text = f.read()
    except OSError:
        return None
    ticks = {}
    try:
        for line in text.split(b"\n")[1:]:
            if not line.startswith(b"cpu"):
                break
            fields = line.split()
            ticks[int(fields[0][3:])] = int(fields[4]) + int(fields[5])
    except (ValueError, IndexError):
        return None
    return ticks or None


def idle_cores(cpus) -> float | None:
    """How many of the CPUs numbered ``cpus`` were idle, on average, since the previous
    reading kept (the first is taken when this module is imported; one is kept when at
    least ``MIN_WINDOW_S`` has passed since the one before). None without ``/proc/stat``
    or before the window is long enough."""
    now, ticks = time.monotonic(), idle_ticks()
    if ticks is None:
        return None
    if not _previous:
        _previous.append((now, ticks))
        return None
    then, before = _previous[0]
    if now - then < MIN_WINDOW_S:
        return None
    _previous[0] = (now, ticks)
    idle = sum(ticks[c] - before[c] for c in cpus if c in ticks and c in before)
    return idle / _TICKS_PER_S / (now - then)


def free_cores_now(cpus) -> int | None:
    """How many of the CPUs numbered ``cpus`` (those this process may use) are free now for
    one more thread each besides the calling one: the machine's CPUs less its runnable
    threads at this moment, and no more than its CPUs idle since the previous reading
    (counted at half a core: a thread gets a core idle half the time before it is worth
    waiting for, see :mod:`parallel_compile`). A neighbour that runs in bursts may be
    between bursts at the moment of reading; the idle time since the previous reading
    (at least ``MIN_WINDOW_S``) sees it. None without ``/proc``."""
    running = runnable_threads()
    if running is None:
        return None
    free = max(0, (os.cpu_count() or len(cpus)) - running)
    idle = idle_cores(cpus)
    if idle is not None:
        free = min(free, int(idle + 0.5))
    return max(0, min(free, len(cpus) - 1))


idle_cores(())  # the first reading: the first compile's window starts when the backend loads
