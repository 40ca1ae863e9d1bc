"""Causal attention alone, on one GPU: the forward and the forward + backward time of each implementation torch offers
at the model's shapes (SDPA with its default choice and each backend forced; k and v expanded to every query head
instead of GQA; flex_attention compiled, and autotuned with --autotune), in bf16, q, k and v laid out as the model's
projections give them. Each line also gives the largest difference from the first implementation's output.

  python3 scripts/bench_attention.py                            # the record's micro-batch and the defaults'
  python3 scripts/bench_attention.py --shape 48x2048 --heads 8 --kv-heads 4 --head-dim 64 --autotune

An implementation that has no kernel for a shape (SDPA's efficient backend has none for GQA) says so on its line.
MEASUREMENTS.md ("Speed, issue 31", session 4) has the figures for one H100.
"""

import argparse
import contextlib
import statistics
import sys

import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel

BACKENDS = {"cudnn": SDPBackend.CUDNN_ATTENTION, "flash": SDPBackend.FLASH_ATTENTION}
BACKENDS["efficient"] = SDPBackend.EFFICIENT_ATTENTION


def parse_shape(text: str) -> tuple[int, int]:
    try:
        batch, seq_len = (int(n) for n in text.lower().split("x"))
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not BATCHxSEQ_LEN, e.g. 48x2048") from None
    if batch <= 0 or seq_len <= 0:
        raise argparse.ArgumentTypeError(f"{text!r}: the batch and the sequence length must be positive")
    return batch, seq_len


def sdpa(backend=None, expand: int = 1):
    """SDPA on (B, H, T, D) q and (B, Hkv, T, D) k, v: torch's choice or one backend; expand > 1 repeats each kv head
    for the query heads that read it (query head h reads kv head h // expand) instead of asking for GQA."""

    def attend(q, k, v):
        if expand > 1:
            k, v = k.repeat_interleave(expand, 1), v.repeat_interleave(expand, 1)
        with sdpa_kernel(backend) if backend else contextlib.nullcontext():
            return F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=k.size(1) != q.size(1))

    return attend


def flex(seq_len: int, device, mode: str | None):
    """flex_attention compiled (mode: torch.compile's), with a causal block mask that skips the blocks above it."""
    from torch.nn.attention.flex_attention import create_block_mask, flex_attention

    mask = create_block_mask(lambda b, h, q, k: q >= k, None, None, seq_len, seq_len, device=device)
    compiled = torch.compile(flex_attention, dynamic=False, mode=mode)
    return lambda q, k, v: compiled(q, k, v, block_mask=mask, enable_gqa=k.size(1) != q.size(1))


def implementations(heads: int, kv_heads: int, seq_len: int, device, autotune: bool) -> dict:
    found = {"sdpa": sdpa(), "sdpa_expanded_kv": sdpa(expand=heads // kv_heads)}
    found.update({f"sdpa_{name}": sdpa(backend) for name, backend in BACKENDS.items()})
    found["flex"] = flex(seq_len, device, None)
    if autotune:
        found["flex_autotuned"] = flex(seq_len, device, "max-autotune-no-cudagraphs")
    return found


def qkv(batch, seq_len, heads, kv_heads, head_dim, device, dtype):
    """q (B, H, T, D), k and v (B, Hkv, T, D), each (B, T, heads, D) in memory as the projections write them (the model's
    rotary then copies q and k to (B, H, T, D))."""
    g = torch.Generator(device=device).manual_seed(0)
    made = [torch.randn(batch, seq_len, n, head_dim, device=device, dtype=dtype, generator=g) for n in (heads,)]
    made += [torch.randn(batch, seq_len, kv_heads, head_dim, device=device, dtype=dtype, generator=g) for _ in "kv"]
    return [t.transpose(1, 2).requires_grad_() for t in made]


def gpu_ms(fn, reps: int) -> float:
    """Median of reps timings by CUDA events, after 3 untimed calls (compilation, autotuning)."""
    for _ in range(3):
        fn()
    times = []
    for _ in range(reps):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        fn()
        end.record()
        torch.cuda.synchronize()
        times.append(start.elapsed_time(end))
    return statistics.median(times)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--shape", type=parse_shape, action="append", help="BATCHxSEQ_LEN (default 48x2048, 12x4096)")
    parser.add_argument("--heads", type=int, default=8)
    parser.add_argument("--kv-heads", type=int, default=4)
    parser.add_argument("--head-dim", type=int, default=64)
    parser.add_argument("--reps", type=int, default=20, help="timed calls; the median is printed")
    parser.add_argument("--autotune", action="store_true", help="also flex_attention autotuned (minutes)")
    cli = parser.parse_args()
    if cli.heads <= 0 or cli.kv_heads <= 0 or cli.heads % cli.kv_heads:
        sys.exit(f"error: --kv-heads {cli.kv_heads} must be positive and divide --heads {cli.heads}.")
    if not torch.cuda.is_available():
        sys.exit("error: bench_attention.py needs a CUDA GPU (it times attention kernels).")
    print(f"gpu:{torch.cuda.get_device_name().replace(' ', '_')} torch:{torch.__version__}")
    for batch, seq_len in cli.shape or [(48, 2048), (12, 4096)]:
        q, k, v = qkv(batch, seq_len, cli.heads, cli.kv_heads, cli.head_dim, "cuda", torch.bfloat16)
        grad = torch.randn_like(q)
        flops = 2 * batch * cli.heads * seq_len * seq_len * cli.head_dim  # causal forward: half of 4 B H T^2 D
        first = None
        for name, attend in implementations(cli.heads, cli.kv_heads, seq_len, "cuda", cli.autotune).items():
            try:
                with torch.no_grad():
                    out = attend(q, k, v).float()
                first = out if first is None else first

                def forward_backward():
                    attend(q, k, v).backward(grad)
                    q.grad = k.grad = v.grad = None

                fwd, both = gpu_ms(lambda: attend(q, k, v), cli.reps), gpu_ms(forward_backward, cli.reps)
            except RuntimeError as error:  # no kernel for this shape or layout
                print(f"shape:{batch}x{seq_len} impl:{name} failed:{str(error).splitlines()[0][:120]}")
                continue
            print(
                f"shape:{batch}x{seq_len} impl:{name} forward_ms:{fwd:.3f} ({flops / fwd / 1e9:.0f} TFLOP/s) "
                f"forward_backward_ms:{both:.3f} ({3.5 * flops / both / 1e9:.0f} TFLOP/s) "
                f"max_diff:{(out - first).abs().max().item():.2e}",
                flush=True,
            )


if __name__ == "__main__":
    main()
