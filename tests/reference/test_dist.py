"""Reference test of the data-parallel epoch shards (vt_dist_shard, src/train/dist.c) against PyTorch's
torch.utils.data.distributed.DistributedSampler (shuffle=False, drop_last=False: the list padded by wrapping to a
multiple of the rank count, rank r taking every N-th element from r). The shuffle itself is vitc's own (seeded
xoshiro, equal on every rank); what is compared is the sharding of a given order. The C side is
tests/reference/dist_driver.c, compiled against build/libvitc.a. Cases: N = 1..4 ranks, datasets shorter than,
equal to and longer than N, divisible and not.
"""
import subprocess

from torch.utils.data.distributed import DistributedSampler

from common import Report, build_driver, tmpdir

rep = Report()
exe = build_driver(rep, "dist_driver", tmpdir())
if exe:
    for n in (1, 2, 3, 5, 8, 10, 17, 64, 101):
        for size in (1, 2, 3, 4):
            p = subprocess.run([str(exe), str(n), str(size)], capture_output=True, text=True)
            got = {}
            for line in p.stdout.splitlines():
                r, _, rest = line.partition(":")
                got[int(r)] = [int(v) for v in rest.split()]
            want = {r: list(DistributedSampler(range(n), num_replicas=size, rank=r, shuffle=False, drop_last=False))
                    for r in range(size)}
            ok = p.returncode == 0 and got == want
            rep.check(f"shard n={n} ranks={size}", ok, "" if ok else f"rc {p.returncode}; vitc {got}, torch {want}")
rep.finish()
