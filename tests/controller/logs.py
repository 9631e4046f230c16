"""Job logs in real formats (Megatron progress lines, kernel Xid lines, Python tracebacks)."""

from __future__ import annotations


def progress(first: int, last: int, *, host: str = "node1", loss: float = 2.3) -> list[str]:
    return [f"{host}: samples/sec: 34.470 | iteration {i:8d}/  100000 | elapsed time per iteration (ms): "
            f"1000.2 | learning rate: 6.467E-05 | approx flops per GPU: 192.4TFLOPS | lm_loss: {loss:.6E} | "
            f"loss scale: 1.0 | number of skipped iterations:   0 | number of nan iterations:   0 |"
            for i in range(first, last + 1)]


def xid_fault(host: str) -> list[str]:
    return [f"{host} kernel: NVRM: Xid (PCI:0000:3b:00): 79, pid=4242, name=python, GPU has fallen off the bus.",
            "RuntimeError: CUDA error: unspecified launch failure"]


def script_error() -> list[str]:
    return ["Traceback (most recent call last):", '  File "/work/train.py", line 12, in <module>',
            "    lr = cfg['lr']", "KeyError: 'lr'"]


def storage_error() -> list[str]:
    return ["botocore.exceptions.EndpointConnectionError: Could not connect to the endpoint URL: "
            '"https://s3.example.com/bucket/shard-0001.bin"']


def text(*parts: list[str]) -> str:
    return "\n".join(line for part in parts for line in part) + "\n"
