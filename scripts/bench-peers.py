#!/usr/bin/env python3
"""Times the peers of the CUDA backend's attention kernels on the same GPU
and shapes as `go test ./engine/cuda -run TestBench` (PARALLAX_CUDA_BENCH=1):
PyTorch SDPA with its FlashAttention-2 and cuDNN backends (softmax
attention), and, when their source is present in peers/ (an ignored
folder), the Parallax authors' Triton kernels.

    python3 scripts/bench-peers.py [--only decode|prefill] [--json FILE]

PEER_SHAPES="B,H,L,D ..." picks the prefill shapes; PEER_TRITON=0 skips the
authors' Triton kernels (their autotuning takes minutes per shape).

Times are medians of CUDA-event timings (decode flushes the L2 cache before
every run). Prints one table per set; --json writes JSON lines.
"""
import argparse
import json
import math
import os
import sys

import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel

DEV = "cuda"
flush_buf = None


def flush_l2():
    flush_buf.zero_()


def median_ms(fn, warm=3, reps=30, flush=False):
    ts = []
    for i in range(warm + reps):
        if flush:
            flush_l2()
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record()
        fn()
        b.record()
        b.synchronize()
        if i >= warm:
            ts.append(a.elapsed_time(b))
    ts.sort()
    return ts[len(ts) // 2]


def backends():
    return [("flash", SDPBackend.FLASH_ATTENTION), ("cudnn", SDPBackend.CUDNN_ATTENTION)]


def bench_decode(out):
    D, Hkv = 128, 8
    print("decode (bf16, D 128, Hkv 8, Lq 1, L2 flushed, median of 30): softmax SDPA")
    print(f"{'backend':8} {'G':>3} {'B':>3} {'L':>6} {'time us':>10} {'GB/s':>8} {'% 4.4TB':>8}")
    for G in (1, 2, 4):
        for B in (1, 8, 32, 64):
            for L in (512, 1024, 4096, 16384, 32768):
                Hq = G * Hkv
                q = torch.randn(B, Hq, 1, D, device=DEV, dtype=torch.bfloat16)
                k = torch.randn(B, Hkv, L, D, device=DEV, dtype=torch.bfloat16)
                v = torch.randn(B, Hkv, L, D, device=DEV, dtype=torch.bfloat16)
                nbytes = 2 * B * Hkv * L * D * 2 + 2 * B * Hq * D * 2
                for name, be in backends():
                    try:
                        with sdpa_kernel(be):
                            fn = lambda: F.scaled_dot_product_attention(q, k, v, enable_gqa=G > 1)
                            fn()
                            ms = median_ms(fn, flush=True)
                    except Exception as e:  # a backend may refuse a shape
                        print(f"{name:8} {G:3} {B:3} {L:6} unsupported ({str(e).splitlines()[0][:60]})")
                        continue
                    gbs = nbytes / (ms * 1e-3) / 1e9
                    print(f"{name:8} {G:3} {B:3} {L:6} {ms*1e3:10.2f} {gbs:8.0f} {100*gbs/4400:7.1f}%")
                    out({"bench": "decode", "peer": "sdpa-" + name, "G": G, "B": B, "L": L, "us": ms * 1e3, "gbs": gbs})
                triton_decode(G, B, L, D, Hkv, nbytes, out)
                del q, k, v
                torch.cuda.empty_cache()
        sys.stdout.flush()


def bench_prefill(out):
    shapes = [(8, 16, 2048, 128), (4, 16, 4096, 128), (2, 16, 8192, 128), (1, 16, 16384, 128),
              (16, 16, 1024, 64), (8, 16, 2048, 64), (8, 16, 4096, 64), (1, 16, 16384, 64)]
    if os.environ.get("PEER_SHAPES"):  # "B,H,L,D B,H,L,D ..."
        shapes = [tuple(int(x) for x in s.split(",")) for s in os.environ["PEER_SHAPES"].split()]
    print("prefill (bf16, causal, median of 10): softmax SDPA; TFLOP/s counts 2 (fwd) and 7 (fwd+bwd) causal products")
    print(f"{'backend':8} {'B':>3} {'H':>3} {'L':>6} {'D':>4} {'fwd ms':>9} {'TFLOP/s':>8} {'fwd+bwd ms':>11} {'TFLOP/s':>8}")
    for B, H, L, D in shapes:
        q, k, v = (torch.randn(B, H, L, D, device=DEV, dtype=torch.bfloat16, requires_grad=True) for _ in range(3))
        g = torch.randn(B, H, L, D, device=DEV, dtype=torch.bfloat16)
        unit = B * H * L * L * D
        for name, be in backends():
            try:
                with sdpa_kernel(be):
                    f = lambda: F.scaled_dot_product_attention(q, k, v, is_causal=True)
                    def fb():
                        o = F.scaled_dot_product_attention(q, k, v, is_causal=True)
                        o.backward(g)
                    with torch.no_grad():
                        fwd = median_ms(f, 2, 10)
                    both = median_ms(fb, 2, 10)
            except Exception as e:
                print(f"{name:8} {B:3} {H:3} {L:6} {D:4} unsupported ({str(e).splitlines()[0][:60]})")
                continue
            print(f"{name:8} {B:3} {H:3} {L:6} {D:4} {fwd:9.3f} {2*unit/fwd/1e9:8.0f} {both:11.3f} {7*unit/both/1e9:8.0f}")
            out({"bench": "prefill", "peer": "sdpa-" + name, "B": B, "H": H, "L": L, "D": D, "fwd_ms": fwd, "fwdbwd_ms": both})
        triton_prefill(B, H, L, D, out)
        del q, k, v, g
        torch.cuda.empty_cache()
        sys.stdout.flush()


def peer_triton():
    """The authors' Triton package from peers/Parallax, or None."""
    root = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "peers", "Parallax")
    if not os.path.isdir(root):
        return None
    if root not in sys.path:
        sys.path.insert(0, root)
    try:
        import parallax.triton as pt  # noqa: E402
    except Exception as e:
        print(f"triton   peers/Parallax present but not importable: {e}")
        return None
    return pt


def triton_decode(G, B, L, D, Hkv, nbytes, out):
    """The authors' Triton Parallax decode (heads-last layout, one query)."""
    pt = peer_triton()
    if pt is None:
        return
    Hq = G * Hkv
    q = torch.randn(B, 1, Hq, D, device=DEV, dtype=torch.bfloat16)
    r = torch.randn(B, 1, Hq, D, device=DEV, dtype=torch.bfloat16) / math.sqrt(D)
    k = torch.randn(B, L, Hkv, D, device=DEV, dtype=torch.bfloat16)
    v = torch.randn(B, L, Hkv, D, device=DEV, dtype=torch.bfloat16)
    try:
        fn = lambda: pt.parallax_decode(q, r, k, v)
        fn()
        ms = median_ms(fn, flush=True)
    except Exception as e:
        print(f"triton   {G:3} {B:3} {L:6} failed: {str(e).splitlines()[0][:80]}")
        return
    gbs = nbytes / (ms * 1e-3) / 1e9
    print(f"{'triton':8} {G:3} {B:3} {L:6} {ms*1e3:10.2f} {gbs:8.0f} {100*gbs/4400:7.1f}%  (authors' Parallax decode)")
    out({"bench": "decode", "peer": "authors-triton-parallax", "G": G, "B": B, "L": L, "us": ms * 1e3, "gbs": gbs})


def triton_prefill(B, H, L, D, out):
    """The authors' Triton Parallax kernels, if peers/ holds them."""
    pt = peer_triton()
    if pt is None or os.environ.get("PEER_TRITON") == "0":
        return
    parallax_func = pt.parallax_func
    # Their parallax_func takes (B, H, L, D) like SDPA; always causal.
    q, k, v = (torch.randn(B, H, L, D, device=DEV, dtype=torch.bfloat16, requires_grad=True) for _ in range(3))
    r = (torch.randn(B, H, L, D, device=DEV, dtype=torch.bfloat16) / math.sqrt(D)).requires_grad_()
    g = torch.randn(B, H, L, D, device=DEV, dtype=torch.bfloat16)
    try:
        f = lambda: parallax_func(q, r, k, v)
        def fb():
            parallax_func(q, r, k, v).backward(g)
        fb()
        fwd, both = median_ms(f, 2, 10), median_ms(fb, 2, 10)
    except Exception as e:
        print(f"triton   {B:3} {H:3} {L:6} {D:4} failed: {str(e).splitlines()[0][:80]}")
        return
    unit = B * H * L * L * D
    print(f"{'triton':8} {B:3} {H:3} {L:6} {D:4} {fwd:9.3f} {4*unit/fwd/1e9:8.0f} {both:11.3f} {12*unit/both/1e9:8.0f}  (authors' Parallax)")
    out({"bench": "prefill", "peer": "authors-triton-parallax", "B": B, "H": H, "L": L, "D": D, "fwd_ms": fwd, "fwdbwd_ms": both})


def main():
    global flush_buf
    ap = argparse.ArgumentParser()
    ap.add_argument("--only", choices=["decode", "prefill"])
    ap.add_argument("--json")
    a = ap.parse_args()
    torch.manual_seed(0)
    flush_buf = torch.empty(256 << 20, dtype=torch.uint8, device=DEV)
    f = open(a.json, "w") if a.json else None
    out = (lambda rec: f.write(json.dumps(rec) + "\n")) if f else (lambda rec: None)
    print("device:", torch.cuda.get_device_name(), "torch", torch.__version__)
    if a.only in (None, "decode"):
        bench_decode(out)
    if a.only in (None, "prefill"):
        bench_prefill(out)


if __name__ == "__main__":
    main()
