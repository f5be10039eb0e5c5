#!/usr/bin/env python3
"""attention_tile_balance.py: how evenly the attention forward's snake order (attn_forward.cu,
attn_fwd_tile_of_round) spreads the causal query tiles over the persistent CTAs, one per SM.

A tile costs its key blocks plus a fixed cost per tile (--tile-cost, in blocks); the script prints, per shape, the
most loaded CTA's cost over the mean CTA's. The tile order and the blocks per tile follow the kernel: tiles longest
first (level by level over heads and sequences), CTA i taking tile r * ctas + i in even rounds and
r * ctas + ctas - 1 - i in odd ones; 192-query tiles shifted back by whole consumers of 64 rows, key blocks of
128 at head dim 64 and of 64 at head dim 128 (a block at head dim 128 has the matmul FLOPs of one at 64).

    python3 scripts/attention_tile_balance.py [--sms 132] [--tile-cost 2.4]
"""
import argparse

SHAPES = [(4, 2048, 64), (4, 2048, 128), (2, 4096, 64), (1, 8192, 64)]  # B, T, head dim; Hq 32 (RESULTS.md section 2)


def blocks_per_tile(qt, n_qt, T, BM, BN):
    first = qt * BM - (n_qt * BM - T) // 64 * 64
    return min((first + BM - 1) // BN, (T - 1) // BN) + 1


def imbalance(B, T, hd, Hq, sms, tile_cost):
    BM, BN = (192, 128) if hd == 64 else (192, 64)
    n_qt = -(-T // BM)
    heads_seqs, tiles = Hq * B, Hq * B * n_qt
    cost = [tile_cost + blocks_per_tile(n_qt - 1 - k // heads_seqs, n_qt, T, BM, BN) for k in range(tiles)]
    ctas = min(tiles, sms)
    load = [0.0] * ctas
    for r in range(-(-tiles // ctas)):
        for i in range(ctas):
            k = r * ctas + (ctas - 1 - i if r & 1 else i)
            if k < tiles:
                load[i] += cost[k]
    mean_blocks = sum(c - tile_cost for c in cost) / tiles
    return tiles, mean_blocks, max(load) / (sum(cost) / ctas)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--sms", type=int, default=132, help="persistent CTAs, one per SM (132 on an H100 SXM or H200)")
    ap.add_argument("--tile-cost", type=float, default=2.4, help="fixed cost of a tile, in key blocks")
    ap.add_argument("--hq", type=int, default=32)
    a = ap.parse_args()
    print(f"snake order over {a.sms} CTAs, a tile costing its key blocks + {a.tile_cost}")
    print("| B | T | hd | tiles | key blocks per tile | most loaded CTA / mean |")
    print("| ---: | ---: | ---: | ---: | ---: | ---: |")
    for B, T, hd in SHAPES:
        tiles, mean_blocks, r = imbalance(B, T, hd, a.hq, a.sms, a.tile_cost)
        print(f"| {B} | {T} | {hd} | {tiles} | {mean_blocks:.2f} | {r:.3f} |")


if __name__ == "__main__":
    main()
