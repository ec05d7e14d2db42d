"""``dtrun [options] script.py args...`` (or ``-m module``): the command line."""

from __future__ import annotations

import argparse
import os
import signal
import sys
import uuid

from .. import _dtcomm, _native, _relay
from . import hosts, rendezvous, workers


def _env(name: str) -> str | None:
    """A default from the environment: dtrun's ``DTRUN_<NAME>``, else torchrun's ``PET_<NAME>``
    (what a Kubeflow PyTorchJob or a torchrun-shaped launcher sets)."""
    for var in (f"DTRUN_{name}", f"PET_{name}"):
        if (v := os.environ.get(var, "").strip()):
            return v
    return None


def _env_int(name: str) -> int | None:
    v = _env(name)
    if v is None:
        return None
    try:
        return int(v)
    except ValueError:
        var = f"DTRUN_{name}" if os.environ.get(f"DTRUN_{name}", "").strip() else f"PET_{name}"
        raise SystemExit(f"dtrun: {var}={v!r} is not a number") from None


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="dtrun",
        description=(
            "Start a distributed job's workers on this node with torchrun's environment "
            "(RANK, LOCAL_RANK, WORLD_SIZE, LOCAL_WORLD_SIZE, MASTER_ADDR, MASTER_PORT, ...). "
            "One node: an embedded dt-rdzv. Several: join a running `dt-rdzv serve`."
        ),
    )
    p.add_argument("--version", action="version", version=f"dtrun {_dtcomm.__version__}",
                   help="dtcomm's version (the same as `dt-rdzv --version` and "
                        "dtcomm.__version__: the workspace version in Cargo.toml)")
    p.add_argument("--horovod", action="store_true",
                   help="run an unmodified Horovod script: `import horovod.torch` gets dtcomm's "
                        "Horovod API (an alias on PYTHONPATH), and HOROVOD_RANK, _SIZE, "
                        "_LOCAL_RANK, _LOCAL_SIZE, _CROSS_RANK, _CROSS_SIZE are set as horovodrun "
                        "sets them")
    p.add_argument("--nproc-per-node", "--nproc_per_node", "-np", type=int, default=None,
                   help="workers on this node (default 1; env DTRUN_NPROC_PER_NODE, "
                        "PET_NPROC_PER_NODE); with -H, "
                        "the job's processes (default: every slot)")
    p.add_argument("-H", "--hosts", default=os.environ.get("DTRUN_HOSTS"),
                   help="horovodrun's host list, host:slots,...: places the processes on the "
                        "hosts' slots in order and starts a dtrun on each (ssh for the other "
                        "machines, DTRUN_SSH; the same directory and Python path there); env "
                        "DTRUN_HOSTS")
    # Set by `-H` for each host's dtrun (hosts of different sizes).
    p.add_argument("--rank-offset", type=int, default=None, help=argparse.SUPPRESS)
    p.add_argument("--world-size", type=int, default=None, help=argparse.SUPPRESS)
    p.add_argument("--nnodes", default=_env("NNODES"),
                   help="nodes in the job: N, or MIN:MAX with the native rendezvous (default 1, "
                        "or the OCI variables with the native rendezvous; env DTRUN_NNODES)")
    p.add_argument("--rdzv-backend", "--rdzv_backend", choices=("auto", "store", "native"),
                   default=os.environ.get("DTRUN_RDZV_BACKEND", "auto"),
                   help="'native': join dt-rdzv's native port as one member per node (rounds, "
                        "liveness, restarts into new rounds); 'store': its TCPStore port; 'auto' "
                        f"(default): native when the endpoint's port is {_native.NATIVE_PORT} or "
                        "DTCOMM_RDZV_FINGERPRINT / DTCOMM_RDZV_CACERT is set")
    p.add_argument("--max-restarts", "--max_restarts", type=int, default=0,
                   help="native rendezvous: worker-group failures this node restarts from "
                        "(round changes from lost or new nodes do not count; default 0)")
    p.add_argument("--rdzv-endpoint", "--rdzv_endpoint",
                   default=_env("RDZV_ENDPOINT"),
                   help="host:port of a running dt-rdzv serve (several nodes); "
                        "env DTRUN_RDZV_ENDPOINT")
    p.add_argument("--rdzv-id", "--rdzv_id", default=_env("RDZV_ID"),
                   help="run id shared by the nodes of one job (default: 'dtrun' with several "
                        "nodes, random with one)")
    p.add_argument("--rdzv-host", action="store_true",
                   help="host the dt-rdzv server at --rdzv-endpoint's port on this node")
    p.add_argument("--node-rank", "--node_rank", type=int, default=None,
                   help="this node's rank (default: env DTRUN_NODE_RANK, PET_NODE_RANK, an "
                        "Indexed Job's JOB_COMPLETION_INDEX, else order of arrival)")
    p.add_argument("--rdzv-timeout", type=float, default=None,
                   help="seconds to wait for the other nodes (default 600, or OCI__TIMEOUT with "
                        "the native rendezvous)")
    p.add_argument("-m", "--module", action="store_true",
                   help="run the target as a module, like python -m")
    p.add_argument("--no-python", action="store_true",
                   help="run the target as an executable, not with this Python")
    p.add_argument("target", help="the training script (or module, or executable)")
    p.add_argument("args", nargs=argparse.REMAINDER, help="its arguments")
    return p


def _command(a: argparse.Namespace) -> list[str]:
    if a.no_python:
        return [a.target, *a.args]
    if a.module:
        return [sys.executable, "-u", "-m", a.target, *a.args]
    return [sys.executable, "-u", a.target, *a.args]


def _native_main(a: argparse.Namespace, cmd: list[str]) -> int:
    """One member of a native job per node; the workers restart into every new round."""
    settings = rendezvous.native_settings(a.rdzv_endpoint, a.rdzv_id, a.nnodes, a.rdzv_timeout)
    print(f"[dtrun] {settings.log_line()}", file=sys.stderr, flush=True)
    try:
        member = _native.Member.join(settings)
    except _dtcomm.RdzvError as e:
        raise SystemExit(f"dtrun: {e}") from None
    restarts = 0
    ask: float | None = None
    code = 1

    def stop(sig: int, _frame: object) -> None:
        raise workers.Stopped(sig)

    # Between rounds (workers.run has its own handlers): a stop leaves the job at once.
    old = {s: signal.signal(s, stop) for s in (signal.SIGINT, signal.SIGTERM)}
    try:
        while True:
            try:
                rdzv = rendezvous.native_round(member, ask)
            except _dtcomm.RdzvError as e:
                print(f"[dtrun] {e}", file=sys.stderr, flush=True)
                return code if isinstance(e, _dtcomm.RdzvJobEndedError) and code else 1
            w = member.welcome
            assert w is not None
            spec = workers.Spec(cmd, a.nproc_per_node, w.world, rdzv.namespace, restarts,
                                a.max_restarts)
            ranks, world = workers.node_ranks(spec, rdzv)
            relay = _relay.Relay(member, _relay.opened(rdzv.store), _relay.fixed(ranks), world)

            def changed(relay: _relay.Relay = relay) -> str | None:
                try:
                    if member.poll():
                        return member.ended
                except _dtcomm.RdzvJobEndedError as e:
                    return str(e)
                relay.step()
                return None

            code = 1
            try:
                code = workers.run(spec, rdzv, interrupt=changed)
            except workers.Stopped as e:
                print(f"[dtrun] {member.who}: {e}; workers stopped, leaving the job",
                      file=sys.stderr, flush=True)
                return 128 + e.signum
            except workers.Interrupted as e:
                print(f"[dtrun] {member.who}: {e}; restarting the workers in the next round",
                      file=sys.stderr, flush=True)
                if member.job_end is not None:
                    return 1
                ask = None
                continue
            finally:
                rendezvous.finish(rdzv, w.world, code == 0)
            if code == 0:
                return 0
            if member.job_end is not None or restarts >= a.max_restarts:
                return code
            restarts += 1
            hb = w.heartbeat_timeout
            ask = 2 * hb + 1.0
            print(f"[dtrun] {member.who}: workers failed (exit {code}); restart {restarts} of "
                  f"{a.max_restarts} in the next round", file=sys.stderr, flush=True)
    except workers.Stopped as e:
        print(f"[dtrun] {member.who}: {e} between rounds; leaving the job",
              file=sys.stderr, flush=True)
        return 128 + e.signum
    finally:
        signal.signal(signal.SIGINT, signal.SIG_IGN)
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        try:
            member.leave()
        finally:
            for s, h in old.items():
                signal.signal(s, h)


def _child_args(a: argparse.Namespace) -> list[str]:
    """What every host's dtrun of ``-H`` runs, besides its placement."""
    out = ["--horovod"] if a.horovod else []
    if a.max_restarts:
        out += ["--max-restarts", str(a.max_restarts)]
    if a.rdzv_timeout is not None:
        out += ["--rdzv-timeout", str(a.rdzv_timeout)]
    out += ["-m"] if a.module else []
    out += ["--no-python"] if a.no_python else []
    return [*out, a.target, *a.args]


def _slurm_defaults(a: argparse.Namespace) -> None:
    """``srun --ntasks-per-node=1 dtrun ...`` inside an allocation: one agent per node; the
    node count, this node's rank and the rendezvous (node 0 hosts it on the first host of the
    step's node list, on the port every task derives from the job and step ids) come from
    Slurm's variables, read by the engine's rules (``_dtcomm.slurm_step``). Explicit
    ``--nnodes``, ``--node-rank`` or ``--rdzv-endpoint`` turn this off."""
    if a.nnodes is not None or a.node_rank is not None or a.rdzv_endpoint is not None:
        return
    try:
        st = _dtcomm.slurm_step(dict(os.environ))
    except ValueError as e:
        raise SystemExit(f"dtrun: {e}") from None
    if st is None:
        return
    if st["local_size"] != 1:
        raise SystemExit(
            f"dtrun: srun started {st['local_size']} dtrun tasks on this node (node {st['node']} "
            f"of step {st['run_id']}): run one per node (srun --ntasks-per-node=1 dtrun "
            "--nproc-per-node N ...), or set --nnodes/--node-rank/--rdzv-endpoint")
    a.nnodes = str(st["nodes"])
    a.node_rank = st["node"]
    if st["nodes"] > 1:
        a.rdzv_endpoint = _native.join_host_port(st["first_host"], st["port"])
        a.rdzv_host = st["node"] == 0
    a.rdzv_id = a.rdzv_id or st["run_id"]
    print(f"[dtrun] Slurm step {st['run_id']}: node {st['node']} of {st['nodes']}"
          + (f", rendezvous {a.rdzv_endpoint} ({'hosted here' if a.rdzv_host else 'on node 0'})"
             if st["nodes"] > 1 else ""), file=sys.stderr, flush=True)


def main(argv: list[str] | None = None) -> int:
    a = parser().parse_args(argv)
    if a.hosts:
        if a.nnodes is not None or a.rdzv_endpoint is not None or a.node_rank is not None:
            raise SystemExit("dtrun: -H places the job itself: drop --nnodes, --rdzv-endpoint "
                             "and --node-rank")
        return hosts.run(a.hosts, a.nproc_per_node, _child_args(a), a.rdzv_id)
    if a.nproc_per_node is None:
        n = _env_int("NPROC_PER_NODE")
        a.nproc_per_node = 1 if n is None else n
    if a.node_rank is None:
        a.node_rank = _env_int("NODE_RANK")
        index = os.environ.get("JOB_COMPLETION_INDEX", "").strip()
        if a.node_rank is None and index:
            if not index.isdigit():
                raise SystemExit(f"dtrun: JOB_COMPLETION_INDEX={index!r} is not a number")
            a.node_rank = int(index)
            if a.nnodes is not None and str(a.nnodes).isdigit() and a.node_rank >= int(a.nnodes):
                raise SystemExit(f"dtrun: JOB_COMPLETION_INDEX={index} is past the job's "
                                 f"{a.nnodes} nodes (--nnodes / DTRUN_NNODES / PET_NNODES)")
    _slurm_defaults(a)
    if a.horovod:
        # Workers inherit this process's environment (workers.worker_env).
        alias = os.path.join(os.path.dirname(os.path.dirname(__file__)), "horovod", "alias")
        os.environ["PYTHONPATH"] = os.pathsep.join(
            p for p in (alias, os.environ.get("PYTHONPATH", "")) if p)
        os.environ["DTRUN_HOROVOD"] = "1"
    if a.rdzv_backend == "native" or (
        a.rdzv_backend == "auto" and a.rdzv_endpoint is not None
        and _native.is_native(os.environ, a.rdzv_endpoint).value
    ):
        if a.rdzv_endpoint is None:
            raise SystemExit("dtrun: --rdzv-backend native needs --rdzv-endpoint "
                             f"HOST:{_native.NATIVE_PORT}")
        if a.nproc_per_node < 1:
            raise SystemExit("dtrun: --nproc-per-node must be at least 1")
        return _native_main(a, _command(a))
    try:
        a.nnodes = int(a.nnodes) if a.nnodes is not None else 1
    except ValueError:
        raise SystemExit(f"dtrun: --nnodes {a.nnodes!r}: MIN:MAX needs the native rendezvous "
                         "(--rdzv-backend native)") from None
    if a.nproc_per_node < 1 or a.nnodes < 1:
        raise SystemExit("dtrun: --nproc-per-node and --nnodes must be at least 1")
    if a.node_rank is not None and not 0 <= a.node_rank < a.nnodes:
        raise SystemExit(f"dtrun: --node-rank {a.node_rank} is not in 0..{a.nnodes - 1}")
    run_id = a.rdzv_id or ("dtrun" if a.nnodes > 1 else uuid.uuid4().hex[:12])
    cmd = _command(a)
    timeout = a.rdzv_timeout if a.rdzv_timeout is not None else 600.0
    rdzv = rendezvous.setup(a.nnodes, a.rdzv_endpoint, run_id, a.node_rank, a.rdzv_host, timeout)
    try:
        return workers.run(workers.Spec(cmd, a.nproc_per_node, a.nnodes, run_id,
                                        rank_offset=a.rank_offset, world=a.world_size), rdzv)
    except workers.Stopped as e:
        return 128 + e.signum
    finally:
        rdzv.close()


if __name__ == "__main__":
    sys.exit(main())
