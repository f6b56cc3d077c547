"""This process's place in the world: rank and size from the environment, torch.distributed.

torchrun-compatible: RANK, WORLD_SIZE, LOCAL_RANK, MASTER_ADDR, MASTER_PORT. With none of them
set the run is one process of world size 1, and no process group is created unless the adapter
needs one (DeepSpeed does); then local defaults are filled in. The backend is NCCL when CUDA is
available, Gloo otherwise.
"""

import os
import socket
from dataclasses import dataclass

from . import bf16_gloo


class WorldError(Exception):
    """The distributed environment is inconsistent; the message names the variable."""


@dataclass
class World:
    rank: int = 0
    world_size: int = 1
    local_rank: int = 0
    group_started: bool = False


def _env_int(name, default, lo):
    text = os.environ.get(name)
    if text is None or text == "":
        return default
    try:
        value = int(text)
    except ValueError:
        raise WorldError(f"environment variable {name}={text!r} is not an integer") from None
    if value < lo:
        raise WorldError(f"environment variable {name}={value} must be >= {lo}")
    return value


def from_environment():
    """Returns the world the environment describes. Raises WorldError when it is inconsistent."""
    world_size = _env_int("WORLD_SIZE", 1, 1)
    rank = _env_int("RANK", 0, 0)
    if rank >= world_size:
        raise WorldError(f"RANK={rank} is not below WORLD_SIZE={world_size}")
    if world_size > 1 and "RANK" not in os.environ:
        raise WorldError(f"WORLD_SIZE={world_size} but RANK is not set")
    if world_size > 1:
        for name in ("MASTER_ADDR", "MASTER_PORT"):
            if not os.environ.get(name):
                raise WorldError(f"WORLD_SIZE={world_size} but {name} is not set")
    return World(rank=rank, world_size=world_size, local_rank=_env_int("LOCAL_RANK", rank, 0))


def free_port():
    """A loopback port the kernel just handed out, so two runs on one machine do not collide."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def launcher_environment(world):
    """What DeepSpeed's launcher exports and a rank here would lack: LOCAL_SIZE, the node's
    process count (launcher/launch.py), the world's since every rank runs on this machine.
    Without it DeepSpeed's CPU accelerator answers device_count() by running `numactl
    --hardware` (a fork of the rank) on every call, and ZeRO-3 calls it at every gradient
    reduce (stage3.py __avg_scatter_grads). A launcher's own value is kept."""
    os.environ.setdefault("LOCAL_SIZE", str(world.world_size))


def start(world, need_group, timeout=60.0):
    """Initialises torch.distributed when `need_group` (a no-op when already initialised).

    Every collective on the group (DeepSpeed's included) fails after `timeout` seconds instead
    of torch's default 30 minutes.
    """
    import datetime

    import torch
    import torch.distributed as dist

    if not need_group or dist.is_initialized():
        return
    launcher_environment(world)
    if world.world_size == 1:
        # A one-rank group still rendezvouses through env://; give it a private address.
        os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
        os.environ.setdefault("MASTER_PORT", str(free_port()))
        os.environ.setdefault("RANK", "0")
        os.environ.setdefault("WORLD_SIZE", "1")
        os.environ.setdefault("LOCAL_RANK", "0")
    backend = "gloo"
    if torch.cuda.is_available():
        backend = "nccl"
        torch.cuda.set_device(world.local_rank % torch.cuda.device_count())
    dist.init_process_group(backend=backend, init_method="env://", rank=world.rank,
                            world_size=world.world_size,
                            timeout=datetime.timedelta(seconds=timeout))
    if backend == "gloo":
        bf16_gloo.install()  # torch 1.13's Gloo has no bf16 (a no-op on torch >= 2)
    world.group_started = True


def gather(world, obj):
    """Returns every rank's `obj`, in rank order (just [obj] without a process group)."""
    import torch.distributed as dist

    if not (dist.is_available() and dist.is_initialized()) or world.world_size == 1:
        return [obj]
    gathered = [None] * world.world_size
    dist.all_gather_object(gathered, obj)
    return gathered


def stop(world):
    import torch.distributed as dist

    if world.group_started and dist.is_initialized():
        dist.destroy_process_group()
        world.group_started = False
