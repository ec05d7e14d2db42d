"""Run one benchmark command and record how much of the machine it had to itself.

    python probe.py OUT.json [--wait-idle 0.6] [--max-wait 10] -- cmd args...

On a machine shared with other people, a figure means little without the load it was taken
under. So: first wait, at most ``--max-wait`` seconds, for a 1-s window in which at least
``--wait-idle`` of all CPU time was idle (0 = do not wait); then run ``cmd`` (bounding it is the
caller's job, e.g. with ``timeout``), with ``T_LAUNCH=<epoch seconds>`` set in its environment
just before it starts (the start-up measurements read it). Writes OUT.json:

    cmd, rc, wall_s, waited_s, idle_before,
    own_cpu_s     user + system CPU of the command's waited-for process tree,
    busy_frac     busy CPU time of the whole machine / (ncpu * wall),
    foreign_frac  (busy CPU time - own CPU time) / (ncpu * wall): everyone else's load.

Exits with the command's exit status. Standard library only.
"""

from __future__ import annotations

import json
import os
import resource
import subprocess
import sys
import time


def cpu_times() -> tuple[int, int]:
    """(total, idle) jiffies of all CPUs, from /proc/stat (user .. steal; idle + iowait)."""
    with open("/proc/stat") as f:
        v = [int(x) for x in f.readline().split()[1:]]
    return sum(v[:8]), v[3] + v[4]


def idle_frac(dt: float = 1.0) -> float:
    t0, i0 = cpu_times()
    time.sleep(dt)
    t1, i1 = cpu_times()
    return (i1 - i0) / max(1, t1 - t0)


def parse(argv: list[str]) -> tuple[str, float, float, list[str]]:
    usage = "usage: probe.py OUT.json [--wait-idle F] [--max-wait S] -- cmd args..."
    if "--" not in argv or argv.index("--") < 1 or argv.index("--") == len(argv) - 1:
        sys.exit(usage)
    sep = argv.index("--")
    out, opts, cmd = argv[0], argv[1:sep], argv[sep + 1:]
    wait_idle, max_wait = 0.0, 0.0
    while opts:
        k = opts.pop(0)
        if k in ("--wait-idle", "--max-wait") and opts:
            v = float(opts.pop(0))
            if k == "--wait-idle":
                wait_idle = v
            else:
                max_wait = v
        else:
            sys.exit(usage)
    return out, wait_idle, max_wait, cmd


def main() -> None:
    out, wait_idle, max_wait, cmd = parse(sys.argv[1:])
    hz = os.sysconf("SC_CLK_TCK")
    ncpu = os.cpu_count() or 1
    waited, idle0 = 0.0, idle_frac()
    while idle0 < wait_idle and waited < max_wait:
        waited += 1.0
        idle0 = idle_frac()
    tot0, idl0 = cpu_times()
    r0 = resource.getrusage(resource.RUSAGE_CHILDREN)
    w0 = time.time()
    rc = subprocess.call(cmd, env=dict(os.environ, T_LAUNCH=repr(time.time())))
    w1 = time.time()
    r1 = resource.getrusage(resource.RUSAGE_CHILDREN)
    tot1, idl1 = cpu_times()
    wall = max(w1 - w0, 1e-9)
    own = (r1.ru_utime + r1.ru_stime) - (r0.ru_utime + r0.ru_stime)
    busy = ((tot1 - tot0) - (idl1 - idl0)) / hz
    rec = {"cmd": " ".join(os.path.basename(x) if x.startswith("/") else x for x in cmd[:6]), "rc": rc,
           "wall_s": round(wall, 3), "waited_s": waited, "idle_before": round(idle0, 3), "own_cpu_s": round(own, 3),
           "busy_frac": round(busy / (ncpu * wall), 3),
           "foreign_frac": round(max(0.0, busy - own) / (ncpu * wall), 3)}
    with open(out, "w") as f:
        json.dump(rec, f)
    print(f"# probe: {json.dumps(rec)}", file=sys.stderr)
    sys.exit(rc)


if __name__ == "__main__":
    main()
