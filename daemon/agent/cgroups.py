"""One cgroup per attempt: limits, the kill of every process in it, OOM and usage.

Standard library only: the supervisor (a fork of ``daemon/agent/launcher.py``,
run by path with ``python -I -S``) loads this module by path, and the agent
imports it as ``reckon.daemon.agent.cgroups``.  Two halves:

* **the agent's** (at start): ``detect`` finds what this machine offers the
  agent — cgroup v2 where the agent's own cgroup is a delegated subtree with
  the memory, cpu and pids controllers, else cgroup v1 controllers (memory,
  cpu, cpuacct, pids, freezer) the agent may write, else nothing — and says
  which limits it cannot enforce and why; ``plan`` turns it into the plain map
  a launch request carries; ``clean_leftovers`` kills and removes the cgroups
  of attempts that no longer run (a crash left them);
* **the supervisor's**: ``Cgroup.create`` makes the attempt's cgroup *before*
  the exec (so it belongs to the supervisor, which outlives agent restarts),
  the job's child joins it before it execs (``join``), and at the end
  ``kill_all`` (v2 ``cgroup.kill``; v1: freeze, SIGKILL every task, thaw) stops
  every process of the job — one that ``setsid()``\\ s or double-forks away
  too — then ``usage``/``oom_killed`` are read and ``remove`` deletes it.

Paths: v1 ``<mount of controller>/reckon/<agent>/<job>.<attempt>``; v2
``<agent's cgroup>/jobs/<job>.<attempt>`` (the agent moves itself into the
leaf ``<agent's cgroup>/agent``: a v2 cgroup with processes cannot hand
controllers to children).

Memory: every attempt gets a limit, its ``--mem`` or else the whole memory the agent offers
(``plan``'s ``mem``), and the cgroup all attempts share (v1 ``reckon/<agent>``, v2 ``jobs``) is
capped at that offered memory (``pool_mem``, written by each ``create``: a v1 base directory goes
when its last attempt does, and with it the limit).  So jobs together never take the machine past
what the agent offers: an out-of-memory there is the jobs' cgroup's, and the kernel kills a job in
it, never the agent.  For the machine-wide OOM killer (memory short outside reckon) the agent sets
itself ``oom_score_adj`` -1000 where it may (root, CAP_SYS_RESOURCE), its supervisors inherit it,
and each job is born with +500 (``spawn_first_for_the_oom_killer``): the kernel picks a job first.

CPUs are a CFS quota (``cpu.max`` / ``cpu.cfs_quota_us``) of ``cpus`` times
the period, not a cpuset: a quota needs no choice of which CPUs, so attempts
that come and go never fragment the machine.
"""

from __future__ import annotations

import errno
import os
import signal
import time

V1_CONTROLLERS = ("memory", "cpu", "cpuacct", "pids", "freezer")
V2_CONTROLLERS = ("memory", "cpu", "pids")
CFS_PERIOD_US = 100_000
DEFAULT_PIDS_MAX = 4096
OOM_SCORE_ADJ_JOB = 500  # a job's processes: picked by the machine's OOM killer before anything at 0
OOM_SCORE_ADJ_EXEMPT = -1000  # the agent and its supervisors, where allowed: never picked
_KILL_ROUNDS = 200  # freeze/kill/thaw rounds before kill_all gives up (a task stuck in D state)


class CgroupError(Exception):
    """A cgroup could not be made, limited or joined (one line)."""


def _write(path: str, value: str) -> None:
    fd = os.open(path, os.O_WRONLY | os.O_CLOEXEC)
    try:
        os.write(fd, value.encode())
    finally:
        os.close(fd)


def _read(path: str) -> str:
    with open(path) as f:
        return f.read()


def _read_int(path: str) -> int | None:
    try:
        return int(_read(path).split()[0])
    except (OSError, ValueError, IndexError):
        return None


def _keyed(path: str) -> dict[str, int]:
    """A flat keyed file (``memory.events``, ``cpu.stat``, ``memory.oom_control``)."""
    out: dict[str, int] = {}
    try:
        text = _read(path)
    except OSError:
        return out
    for line in text.splitlines():
        parts = line.split()
        if len(parts) == 2:
            try:
                out[parts[0]] = int(parts[1])
            except ValueError:
                pass
    return out


def _procs(directory: str) -> list[int]:
    try:
        return [int(p) for p in _read(os.path.join(directory, "cgroup.procs")).split()]
    except (OSError, ValueError):
        return []


def safe_name(name: str) -> str:
    """An agent or attempt name as one path component."""
    cleaned = "".join(c if c.isalnum() or c in "-_.@" else "_" for c in name).lstrip(".")
    return cleaned[:200] or "_"


# ---- the agent's half: what this machine offers --------------------------------------


def _mounts() -> list[tuple[str, str, list[str]]]:
    """(mount point, fs type, options) of every cgroup file system."""
    out = []
    try:
        text = _read("/proc/self/mounts")
    except OSError:
        return out
    for line in text.splitlines():
        fields = line.split()
        if len(fields) >= 4 and fields[2] in ("cgroup", "cgroup2"):
            out.append((fields[1].replace("\\040", " "), fields[2], fields[3].split(",")))
    return out


def _own_v2_path() -> str | None:
    try:
        for line in _read("/proc/self/cgroup").splitlines():
            if line.startswith("0::"):
                return line[3:]
    except OSError:
        pass
    return None


def detect(agent: str) -> dict:
    """What this machine lets the agent enforce, as a plain map.

    ``{"version": 2 | 1 | None, "kinds": [limit kinds it enforces], "why": reason for what it cannot,
    "v2": dir} or {"version": 1, "v1": {controller: base dir}}``.  v1: each base directory
    (``reckon/<agent>`` under each controller) is made to see that it can be, and removed again
    if empty (each attempt's cgroup makes it as needed); v2: the ``agent`` and ``jobs`` children
    of the agent's own cgroup are made, and the agent moves itself into ``agent``.
    """
    if os.geteuid() != 0:
        why_v1 = "the agent is not root"
    else:
        why_v1 = ""
    v2 = _detect_v2(agent)
    if isinstance(v2, dict):
        return v2
    found: dict[str, str] = {}
    if not why_v1:
        for point, kind, options in _mounts():
            if kind != "cgroup":
                continue
            for controller in V1_CONTROLLERS:
                if controller in options and controller not in found:
                    found[controller] = os.path.join(point, "reckon", safe_name(agent))
        for controller, base in list(found.items()):
            try:  # may the agent make its cgroups here?  (made for real by each attempt's create)
                os.makedirs(base, exist_ok=True)
            except OSError:
                del found[controller]
                continue
            try:
                os.rmdir(base)  # nothing left behind by an agent that runs no job and is SIGKILLed
            except OSError:
                pass  # attempts of before a restart are in it
        if not found:
            why_v1 = "no writable cgroup v1 controller"
    kinds = []
    if "memory" in found:
        kinds.append("mem")
    if "cpu" in found:
        kinds.append("cpus")
    if "pids" in found:
        kinds.append("pids")
    if "freezer" in found:
        kinds.append("kill")
    if not kinds:
        return {"version": None, "kinds": [], "why": f"{v2}; {why_v1}" if v2 else why_v1}
    missing = [c for c in ("memory", "cpu", "pids", "freezer") if c not in found]
    why = f"cgroup v1 has no writable {', '.join(missing)} controller" if missing else ""
    return {"version": 1, "kinds": kinds, "why": why, "v1": found}


def _detect_v2(agent: str) -> dict | str:
    """A usable delegated v2 subtree (the map ``detect`` returns), or why there is none."""
    own = _own_v2_path()
    points = [p for p, kind, _ in _mounts() if kind == "cgroup2"]
    if own is None or not points:
        return "no cgroup v2"
    mine = os.path.join(points[0], own.lstrip("/"))
    try:
        available = _read(os.path.join(mine, "cgroup.controllers")).split()
    except OSError:
        return "no cgroup v2"
    if not set(V2_CONTROLLERS) <= set(available):
        return f"cgroup v2 gives the agent no {', '.join(c for c in V2_CONTROLLERS if c not in available)} controller"
    if not os.access(os.path.join(mine, "cgroup.subtree_control"), os.W_OK):
        return "the agent's cgroup v2 is not delegated to it (cgroup.subtree_control not writable)"
    try:
        leaf = os.path.join(mine, "agent")
        os.makedirs(leaf, exist_ok=True)
        for pid in _procs(mine):  # the agent and its launcher: into a leaf (no internal processes)
            try:
                _write(os.path.join(leaf, "cgroup.procs"), str(pid))
            except OSError:
                pass
        enable = " ".join("+" + c for c in V2_CONTROLLERS)
        _write(os.path.join(mine, "cgroup.subtree_control"), enable)
        jobs = os.path.join(mine, "jobs")
        os.makedirs(jobs, exist_ok=True)
        _write(os.path.join(jobs, "cgroup.subtree_control"), enable)
    except OSError as e:
        return f"cannot set up the agent's cgroup v2 subtree: {e.strerror or e}"
    kinds = ["cpus", "mem", "pids"]
    why = ""
    if os.path.exists(os.path.join(jobs, "cgroup.kill")):
        kinds.append("kill")
    else:
        why = "cgroup v2 without cgroup.kill (kernel before 5.14)"
    return {"version": 2, "kinds": sorted(kinds), "why": why, "v2": jobs}


def plan(found: dict, job: str, attempt: int, *, mem: int | None, cpus: int | None, pids_max: int | None,
         pool_mem: int | None = None) -> dict | None:
    """The ``cgroup`` map of one attempt's launch request (None: no cgroups here).  ``pool_mem``: the
    cap of the cgroup every attempt of the agent is in (the memory the agent offers)."""
    name = safe_name(f"{job}.{attempt}")
    # Only the limits this machine enforces: a v2 subtree without (say) the cpu controller has no
    # cpu.max to write, and a limit it cannot set must not stop the job (the agent said so at start).
    kinds = found.get("kinds")
    limits = {"mem": mem, "cpus": cpus, "pids_max": pids_max}
    if kinds is not None:
        limits = {"mem": mem if "mem" in kinds else None, "cpus": cpus if "cpus" in kinds else None,
                  "pids_max": pids_max if "pids" in kinds else None}
    if pool_mem is not None and (kinds is None or "mem" in kinds):
        limits["pool_mem"] = pool_mem
    if found.get("version") == 2:
        return {"v": 2, "dir": os.path.join(found["v2"], name), **limits}
    if found.get("version") == 1:
        return {"v": 1, "dirs": {c: os.path.join(base, name) for c, base in found["v1"].items()}, **limits}
    return None


def bases(found: dict) -> list[str]:
    if found.get("version") == 2:
        return [found["v2"]]
    if found.get("version") == 1:
        return sorted(set(found["v1"].values()))
    return []


def clean_leftovers(found: dict, keep: set[str]) -> list[str]:
    """Kill and remove the cgroups of attempts not in ``keep`` (``<job>.<attempt>`` names); return
    the names removed.  A crashed supervisor's cgroup, or one whose removal failed, ends here."""
    removed: set[str] = set()
    names: set[str] = set()
    for base in bases(found):
        try:
            names.update(e for e in os.listdir(base) if os.path.isdir(os.path.join(base, e)))
        except OSError:
            pass
    for name in sorted(names - {safe_name(k) for k in keep}):
        if found.get("version") == 2:
            cg = Cgroup({"v": 2, "dir": os.path.join(found["v2"], name)})
        else:
            cg = Cgroup({"v": 1, "dirs": {c: os.path.join(b, name) for c, b in found["v1"].items()}})
        cg.kill_all()
        if cg.remove():
            removed.add(name)
    return sorted(removed)


# ---- the supervisor's half: one attempt's cgroup -------------------------------------


class Cgroup:
    """The cgroup (v2) or cgroups (v1, one per controller) of one attempt."""

    def __init__(self, spec: dict) -> None:
        self.version = spec["v"]
        self.spec = spec
        if self.version == 2:
            self.dirs = {c: spec["dir"] for c in ("memory", "cpu", "cpuacct", "pids", "freezer")}
        else:
            self.dirs = dict(spec["dirs"])
        self.all_dirs = sorted(set(self.dirs.values()))

    @classmethod
    def create(cls, spec: dict) -> "Cgroup":
        """Make the attempt's cgroup and set its limits; CgroupError (and nothing left) on failure."""
        cg = cls(spec)
        try:
            for d in cg.all_dirs:
                # makedirs: a v1 base directory left empty is removed by whoever empties it (remove()),
                # so it may be gone, or go again between the two mkdirs (then once more).
                for again in range(5):
                    try:
                        os.makedirs(d, 0o755, exist_ok=True)  # exists: a retry after a crash, same cgroup
                        break
                    except FileNotFoundError:
                        if again == 4:
                            raise
            if spec.get("pool_mem") is not None:
                cg._cap_pool(spec["pool_mem"])
            cg._limit(spec.get("mem"), spec.get("cpus"), spec.get("pids_max"))
        except CgroupError:
            cg.remove()
            raise
        except OSError as e:
            cg.remove()
            raise CgroupError(f"cannot make the job's cgroup {getattr(e, 'filename', None) or cg.all_dirs[0]}: "
                              f"{e.strerror or e}") from None
        return cg

    def pool_dir(self) -> str | None:
        """The memory cgroup all the agent's attempts are in (v1 ``reckon/<agent>``, v2 ``jobs``)."""
        d = self.dirs.get("memory")
        return os.path.dirname(d) if d is not None else None

    def _cap_pool(self, mem: int) -> None:
        """Cap all attempts together at ``mem`` (written only when it differs: a v1 limit is
        lowered only by reclaiming, so a needless write is not free)."""
        pool = self.pool_dir()
        if pool is None:
            return
        if self.version == 2:
            if _read(os.path.join(pool, "memory.max")).strip() != str(mem):
                # Below what is in use, v2 would OOM-kill running jobs to get there: refused as v1 does.
                used = _read_int(os.path.join(pool, "memory.current"))
                if used is not None and used > mem:
                    raise CgroupError(f"cannot cap the agent's jobs together at {_size_text(mem)} ({pool}/memory.max): "
                                      f"its running jobs use more ({_size_text(used)})")
                _write(os.path.join(pool, "memory.max"), str(mem))
            swap = os.path.join(pool, "memory.swap.max")
            if os.path.exists(swap) and _read(swap).strip() != "0":
                _write(swap, "0")
            return
        limit = os.path.join(pool, "memory.limit_in_bytes")
        memsw = os.path.join(pool, "memory.memsw.limit_in_bytes")
        current = _read_int(limit)
        if current == mem and (not os.path.exists(memsw) or _read_int(memsw) == mem):
            return
        # memsw >= memory always: raised, memsw goes first; lowered, memory goes first.
        order = [memsw, limit] if current is not None and mem > current else [limit, memsw]
        for path in order:
            if path == limit or os.path.exists(path):
                try:
                    _write(path, str(mem))
                except OSError as e:
                    # EBUSY: v1 lowers a limit only by reclaiming, and the running jobs hold more
                    # (an agent restarted with less memory).  No job starts uncapped.
                    busy = " (its running jobs use more)" if e.errno == errno.EBUSY else ""
                    raise CgroupError(f"cannot cap the agent's jobs together at {_size_text(mem)} ({path}): "
                                      f"{e.strerror or e}{busy}") from None

    def _limit(self, mem: int | None, cpus: int | None, pids_max: int | None) -> None:
        if self.version == 2:
            d = self.dirs["memory"]
            if mem is not None:
                _write(os.path.join(d, "memory.max"), str(mem))
                if os.path.exists(os.path.join(d, "memory.swap.max")):
                    _write(os.path.join(d, "memory.swap.max"), "0")  # the limit is on memory, not RAM
            if cpus:
                _write(os.path.join(d, "cpu.max"), f"{cpus * CFS_PERIOD_US} {CFS_PERIOD_US}")
            if pids_max:
                _write(os.path.join(d, "pids.max"), str(pids_max))
            return
        if mem is not None and "memory" in self.dirs:
            d = self.dirs["memory"]
            _write(os.path.join(d, "memory.limit_in_bytes"), str(mem))
            memsw = os.path.join(d, "memory.memsw.limit_in_bytes")
            if os.path.exists(memsw):  # no swapping past the limit either (written after the limit: memsw >= mem)
                _write(memsw, str(mem))
        if cpus and "cpu" in self.dirs:
            d = self.dirs["cpu"]
            _write(os.path.join(d, "cpu.cfs_period_us"), str(CFS_PERIOD_US))
            _write(os.path.join(d, "cpu.cfs_quota_us"), str(cpus * CFS_PERIOD_US))
        if pids_max and "pids" in self.dirs:
            _write(os.path.join(self.dirs["pids"], "pids.max"), str(pids_max))

    def join(self, pid: int = 0) -> None:
        """Put ``pid`` (0: the caller) into every controller's cgroup."""
        for d in self.all_dirs:
            _write(os.path.join(d, "cgroup.procs"), str(pid or os.getpid()))

    def spawn_inside(self, start):
        """Run ``start()`` (which forks and execs the job) with the caller inside the cgroup, then
        take the caller back to where it was: the job is born inside, so all it ever starts is
        too.  Cheaper than joining from the child (a ``preexec_fn`` costs a fork in place of
        subprocess's vfork); the caller (the supervisor) is inside only while ``start`` runs,
        and ``kill_all`` never kills it."""
        origin = _origin_dirs(self)
        self.join()
        try:
            return start()
        finally:
            for d in origin:
                _write(os.path.join(d, "cgroup.procs"), str(os.getpid()))

    def pids(self) -> list[int]:
        seen: set[int] = set()
        for d in self.all_dirs:
            seen.update(_procs(d))
        return sorted(seen)

    def kill_all(self) -> bool:
        """SIGKILL every process in the cgroup, however it left the job's session or process
        group; True once none is left.  v2: ``cgroup.kill``; v1: freeze first, so nothing forks
        between the read of the task list and the kill, then kill, then thaw (a frozen task
        cannot act on its SIGKILL)."""
        if self.version == 2:
            d = self.all_dirs[0]
            if os.path.exists(os.path.join(d, "cgroup.kill")):
                try:
                    _write(os.path.join(d, "cgroup.kill"), "1")
                except OSError:
                    pass
        freezer = self.dirs.get("freezer") if self.version == 1 else None
        for _ in range(_KILL_ROUNDS):
            me = os.getpid()
            pids = [p for p in self.pids() if p != me and not _zombie(p)]
            if not pids:
                return True
            frozen = freezer is not None and _freeze(freezer)
            for pid in self.pids():
                if pid == me:
                    continue
                try:
                    os.kill(pid, signal.SIGKILL)
                except OSError:
                    pass
            if frozen:
                try:
                    _write(os.path.join(freezer, "freezer.state"), "THAWED")
                except OSError:
                    pass
            time.sleep(0.005)
        return False

    def oom_killed(self) -> bool:
        """The kernel's OOM killer killed a process of this cgroup (its memory limit)."""
        d = self.dirs.get("memory")
        if d is None:
            return False
        if self.version == 2:
            return _keyed(os.path.join(d, "memory.events")).get("oom_kill", 0) > 0
        return _keyed(os.path.join(d, "memory.oom_control")).get("oom_kill", 0) > 0

    def usage(self) -> dict | None:
        """CPU user/system seconds and peak memory bytes of everything that ran in the cgroup."""
        if self.version == 2:
            d = self.all_dirs[0]
            stat = _keyed(os.path.join(d, "cpu.stat"))
            if "user_usec" not in stat:
                return None
            peak = _read_int(os.path.join(d, "memory.peak"))
            return {"cpu_user": stat["user_usec"] / 1e6, "cpu_system": stat.get("system_usec", 0) / 1e6,
                    "max_rss": peak}
        d = self.dirs.get("cpuacct")
        total = user = system = None
        if d is not None:
            total = _read_int(os.path.join(d, "cpuacct.usage"))
            user = _read_int(os.path.join(d, "cpuacct.usage_user"))
            system = _read_int(os.path.join(d, "cpuacct.usage_sys"))
        if total is None or user is None or system is None:
            return None
        # cpuacct.usage is the scheduler's exact runtime; usage_user/usage_sys are sampled at each
        # tick, and on a busy machine their sum strays from it (by a quarter, seen here).  The
        # total is the exact one, split in the samples' proportion.
        sampled = user + system
        user_share = user / sampled if sampled else 1.0
        peak = None
        if "memory" in self.dirs:
            peak = _read_int(os.path.join(self.dirs["memory"], "memory.max_usage_in_bytes"))
        return {"cpu_user": total * user_share / 1e9, "cpu_system": total * (1 - user_share) / 1e9, "max_rss": peak}

    def remove(self) -> bool:
        """Delete the (empty) cgroup; True when it is gone.  A cgroup that still has tasks stays
        (the agent's next start cleans it).  On v1 the agent's base directory goes too once it is
        empty, so an agent that is SIGKILLed leaves nothing behind (``create`` makes it again)."""
        gone = self._remove_dirs()
        if gone and self.version == 1:
            for d in self.all_dirs:
                try:
                    os.rmdir(os.path.dirname(d))
                except OSError:
                    pass  # another attempt's cgroup is in it
        return gone

    def _remove_dirs(self) -> bool:
        gone = True
        for d in self.all_dirs:
            for _ in range(100):
                try:
                    os.rmdir(d)
                    break
                except FileNotFoundError:
                    break
                except OSError as e:
                    if e.errno != errno.EBUSY:
                        gone = False
                        break
                    time.sleep(0.005)  # the last task is leaving
            else:
                gone = False
        return gone


def _size_text(value: int) -> str:
    return f"{value >> 20}M" if value % (1 << 20) == 0 else f"{value / (1 << 20):.1f}M"


def oom_score_adj() -> int | None:
    """This process's ``oom_score_adj`` (None: unreadable)."""
    return _read_int("/proc/self/oom_score_adj")


def set_oom_score_adj(value: int) -> str | None:
    """Set this process's ``oom_score_adj``; None when done, else why not (below the value it
    was given takes root or CAP_SYS_RESOURCE)."""
    try:
        _write("/proc/self/oom_score_adj", str(value))
    except OSError as e:
        return e.strerror or str(e)
    return None


def spawn_first_for_the_oom_killer(start):
    """Run ``start()`` (which forks the job) with this process at ``OOM_SCORE_ADJ_JOB``, then go
    back to the value it had: the job inherits it at the fork, before it can run or fork itself.
    Raising one's own value is always allowed, and so is going back to it; a failure leaves the
    job at the supervisor's value (the agent said at start what it could set)."""
    before = oom_score_adj()
    raised = before is not None and before < OOM_SCORE_ADJ_JOB and set_oom_score_adj(OOM_SCORE_ADJ_JOB) is None
    try:
        return start()
    finally:
        if raised:
            set_oom_score_adj(before)


def _origin_dirs(cg: Cgroup) -> list[str]:
    """The caller's own cgroup directories in the hierarchies of ``cg`` (where it goes back to)."""
    by_controller: dict[str, str] = {}
    for line in _read("/proc/self/cgroup").splitlines():
        _, controllers, path = line.split(":", 2)
        for controller in (controllers.split(",") if controllers else [""]):
            by_controller[controller] = path
    out = []
    for d in cg.all_dirs:
        controller = "" if cg.version == 2 else next(c for c, x in cg.dirs.items() if x == d)
        out.append(os.path.join(_mount_of(d), by_controller[controller].lstrip("/")))
    return out


def _mount_of(path: str) -> str:
    """The cgroup mount point ``path`` lies under (the longest match)."""
    best = ""
    for point, _, _ in _mounts():
        if (path == point or path.startswith(point.rstrip("/") + "/")) and len(point) > len(best):
            best = point
    return best


def _zombie(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            data = f.read()
        return data[data.rindex(b")") + 2:].split()[0] in (b"Z", b"X")
    except (OSError, ValueError, IndexError):
        return True  # gone


def _freeze(freezer: str) -> bool:
    state = os.path.join(freezer, "freezer.state")
    try:
        _write(state, "FROZEN")
    except OSError:
        return False
    for _ in range(200):
        try:
            if _read(state).strip() == "FROZEN":
                return True
        except OSError:
            return False
        time.sleep(0.001)
    return True  # FREEZING for long: kill anyway, a later round gets the rest
