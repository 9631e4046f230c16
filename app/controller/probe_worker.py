"""The probe worker: one process per node runs a small allgather in a real torch.distributed
process group (NCCL when the node has GPUs, gloo otherwise) and reports to the controller's store.

    python -m app.controller.probe_worker once  --store H:P --group KEY --nodes a,b --node a ...
    python -m app.controller.probe_worker agent --store H:P --node a ...

`once` runs one group (what `srun -N2 -w a,b` or a pod starts); `agent` stays up and runs the
groups the controller assigns to its node, round after round (local probes: one import of torch
per node instead of one per group).

`--per-node G` runs G ranks on each node (one per GPU: `srun --ntasks-per-node=G`, or G local
agents per node): rank = node index x G + local rank (SLURM_LOCALID / LOCAL_RANK), each on its
own device, so the allgather crosses every GPU of the node, not GPU 0 alone. On CPU (gloo) the
ranks are processes.

Every member checks every gathered chunk, so a node that sends corrupt data fails its group.
LOGDX_PROBE_FAULTS (`node=fault,...`; exit_before | exit_mid | hang | corrupt | slow) injects a
fault on a named node (`node:1=fault`: on its local rank 1 only); LOGDX_PROBE_FAULTS_FILE names
a file read at each probe with the same syntax (a fault-injection run changes it while the
server runs: bench/chaos/). Both exist for the tests, the demo and the benchmark, and are unset
on real clusters.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
import traceback
from datetime import timedelta

FAULTS = ("exit_before", "exit_mid", "hang", "corrupt", "slow")
ITERATIONS = 3


def injected_fault(node: str, local_rank: int = 0) -> str | None:
    spec = os.environ.get("LOGDX_PROBE_FAULTS", "")
    if os.environ.get("LOGDX_PROBE_FAULTS_FILE"):
        try:
            with open(os.environ["LOGDX_PROBE_FAULTS_FILE"]) as f:
                spec += "," + f.read().replace("\n", ",")
        except OSError:
            pass  # no file: no injected fault
    for item in spec.split(","):
        name, _, fault = item.partition("=")
        if name.strip() in (node, f"{node}:{local_rank}") and fault.strip() in FAULTS:
            return fault.strip()
    return None


def connect(store_addr: str, timeout_s: float):  # noqa: ANN201
    import torch.distributed as dist

    host, _, port = store_addr.rpartition(":")
    return dist.TCPStore(host, int(port), is_master=False, timeout=timedelta(seconds=timeout_s))


def run_group(store, *, group: str, rank: int, world: int, node: str, timeout_s: float,  # noqa: ANN001
              nbytes: int, slow_s: float = 1.5, local_rank: int = 0) -> dict:
    """Join the group, allgather `nbytes` per rank ITERATIONS times, check every chunk."""
    import torch
    import torch.distributed as dist

    fault = injected_fault(node, local_rank)
    pstore = dist.PrefixStore(group, store)
    # the controller tells a group that ran from one the scheduler never started (busy nodes):
    # a node that dies after this line failed its group, one whose workers never got here did not run
    pstore.set(f"started/{rank}", node)
    if fault == "exit_before":
        os._exit(3)
    if fault == "hang":
        time.sleep(10 ** 6)
    use_cuda = torch.cuda.is_available()
    backend = "nccl" if use_cuda else "gloo"
    # one GPU per local rank; modulo: a task bound to one GPU (--gpus-per-task=1) sees it as cuda:0
    device = torch.device("cuda", local_rank % torch.cuda.device_count()) if use_cuda else torch.device("cpu")
    t_init = time.monotonic()
    result = {"node": node, "rank": rank, "local_rank": local_rank, "ok": False, "backend": backend,
              "device": str(device)}
    try:
        # a process group object of its own, not the global default group: a failed rendezvous
        # leaves no global state behind for the next group this process joins
        if use_cuda:
            pg = dist.ProcessGroupNCCL(pstore, rank, world, dist.ProcessGroupNCCL.Options())
        else:
            pg = dist.ProcessGroupGloo(pstore, rank, world, timedelta(seconds=timeout_s))
        n = max(1, nbytes // 4)
        mine = torch.full((n,), float(rank + 1), device=device)
        if fault == "corrupt":
            mine[n // 2] = -1.0
        out = [torch.empty(n, device=device) for _ in range(world)]
        t0 = time.monotonic()
        for i in range(ITERATIONS):
            if fault == "exit_mid" and i == 1:
                os._exit(4)
            if fault == "slow":
                time.sleep(slow_s)
            work = pg.allgather([out], [mine])
            if not work.wait(timedelta(seconds=timeout_s)):
                raise TimeoutError(f"allgather did not finish in {timeout_s} s")
            for r, chunk in enumerate(out):
                if not bool(torch.all(chunk == float(r + 1))):
                    raise RuntimeError(f"corrupt data from rank {r} in iteration {i}")
        if use_cuda:
            torch.cuda.synchronize()
        result.update(ok=True, elapsed_s=time.monotonic() - t0, init_s=t0 - t_init)
    except Exception as exc:  # the failure is the result
        result.update(error=f"{type(exc).__name__}: {str(exc)[:300]}", elapsed_s=time.monotonic() - t_init)
    pstore.set(f"result/{rank}", json.dumps(result))
    return result


def _local_rank(args: argparse.Namespace) -> int:
    if args.local_rank is not None:
        return args.local_rank
    return int(os.environ.get("SLURM_LOCALID") or os.environ.get("LOCAL_RANK") or 0)


def _once(args: argparse.Namespace) -> int:
    nodes = args.nodes.split(",")
    per = max(1, args.per_node)
    local = _local_rank(args)
    node = args.node or os.environ.get("SLURMD_NODENAME") or os.environ.get("LOGDX_NODE") or ""
    rank = nodes.index(node) * per + local if node in nodes else int(os.environ.get("SLURM_PROCID", "0"))
    store = connect(args.store, args.timeout * 3)
    res = run_group(store, group=args.group, rank=rank, world=len(nodes) * per, node=node or nodes[rank // per],
                    timeout_s=args.timeout, nbytes=args.bytes, local_rank=local)
    return 0 if res["ok"] else 1


def _agent(args: argparse.Namespace) -> int:
    store = connect(args.store, 3600)
    per, local = max(1, args.per_node), _local_rank(args)
    me = f"{args.node}/{local}"
    store.set(f"agent/{me}", str(os.getpid()))
    seq = 0
    while True:
        task = json.loads(store.get(f"assign/{me}/{seq}"))
        seq += 1
        if task.get("stop"):
            return 0
        # the task names the node's index in its group; each of its `per` agents is one rank
        run_group(store, group=task["group"], rank=task["rank"] * per + local, world=task["world"] * per,
                  node=args.node, timeout_s=task["timeout"], nbytes=task["bytes"], local_rank=local)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="probe_worker")
    parser.add_argument("mode", choices=["once", "agent"])
    parser.add_argument("--store", required=True, help="HOST:PORT of the controller's TCPStore")
    parser.add_argument("--node", default="")
    parser.add_argument("--group", default="")
    parser.add_argument("--nodes", default="", help="the group's nodes, in rank order")
    parser.add_argument("--timeout", type=float, default=30.0)
    parser.add_argument("--bytes", type=int, default=1 << 20)
    parser.add_argument("--per-node", type=int, default=1, help="ranks per node (one per GPU)")
    parser.add_argument("--local-rank", type=int, default=None, help="default: SLURM_LOCALID, LOCAL_RANK, 0")
    args = parser.parse_args(argv)
    try:
        return _once(args) if args.mode == "once" else _agent(args)
    except Exception:  # noqa: BLE001 - a worker must say why it died
        traceback.print_exc()
        return 2


if __name__ == "__main__":
    sys.exit(main())
