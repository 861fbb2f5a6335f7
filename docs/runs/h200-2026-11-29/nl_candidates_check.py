import sys, time, torch
sys.path.insert(0, "benchmarks")
from common import fcc_crystal, median_seconds
from nvdd_plugins.geometry import build_neighbor_list
dev = torch.device("cuda")
for n in (500000,):
    pos, cell = fcc_crystal(n, 3.61, 0.05, torch.float32, dev)
    for mc in (2**26, 2**27, 2**28):
        t = median_seconds(lambda: build_neighbor_list(pos, cell, True, 5.0, max_candidates=mc), 10, dev)
        print(n, mc, round(t * 1e3, 2), "ms", flush=True)
