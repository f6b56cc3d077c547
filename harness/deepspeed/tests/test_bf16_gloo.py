"""world/bf16_gloo.py: bf16 collectives on torch 1.13's Gloo, two real ranks (processes): a SUM is
the fp32 sum rounded once, broadcast and gather move the values, async callers get a done handle,
other dtypes are the original collectives'. On torch >= 2 it installs nothing."""

import os
import socket
import unittest

import torch
import torch.distributed as dist
import torch.multiprocessing as mp

from zerocheck_ds.world import bf16_gloo

A = [1.0, 3.0, -2.0]
B = [2.0 ** -8, 2.0 ** -7 + 2.0 ** -9, 0.5]  # sums that fall between two bf16 neighbours


def _rank(rank, port, out):
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    dist.init_process_group("gloo", rank=rank, world_size=2)
    bf16_gloo.install()
    mine = torch.tensor(A if rank == 0 else B, dtype=torch.bfloat16)
    summed = mine.clone()
    handle = dist.all_reduce(summed, async_op=True)
    handle.wait()
    gathered = [torch.empty(3, dtype=torch.bfloat16) for _ in range(2)]
    dist.all_gather(gathered, mine)
    sent = mine.clone()
    dist.broadcast(sent, 1)
    plain = torch.tensor(A if rank == 0 else B)  # fp32: the original collective
    dist.all_reduce(plain)
    out[rank] = (summed.float().tolist(), [g.float().tolist() for g in gathered],
                 sent.float().tolist(), plain.tolist())
    dist.destroy_process_group()


class Bf16OnGloo(unittest.TestCase):
    @unittest.skipUnless(bf16_gloo.needed(torch), "torch >= 2: Gloo has bf16 itself")
    def test_two_ranks(self):
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
        out = mp.Manager().dict()
        mp.spawn(_rank, args=(port, out), nprocs=2, join=True)
        a, b = torch.tensor(A, dtype=torch.bfloat16), torch.tensor(B, dtype=torch.bfloat16)
        once = (a.float() + b.float()).to(torch.bfloat16).float().tolist()
        for rank in (0, 1):
            summed, gathered, sent, plain = out[rank]
            self.assertEqual(summed, once)
            self.assertEqual(gathered, [a.float().tolist(), b.float().tolist()])
            self.assertEqual(sent, b.float().tolist())
            self.assertEqual(plain, (torch.tensor(A) + torch.tensor(B)).tolist())
        self.assertNotEqual(once, (a.float() + b.float()).tolist())  # the rounding shows

    def test_nothing_is_installed_on_torch_2(self):
        self.assertEqual(bf16_gloo.needed(type("T", (), {"__version__": "2.6.0"})), False)
        self.assertEqual(bf16_gloo.needed(type("T", (), {"__version__": "1.13.1"})), True)


if __name__ == "__main__":
    unittest.main()
