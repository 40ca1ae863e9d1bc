"""Causal attention alone, on one GPU: the forward and the forward + backward time of each implementation torch offers
at the model's shapes (SDPA with its default choice and each backend forced; k and v expanded to every query head
instead of GQA; flex_attention compiled, and autotuned with --autotune), in bf16, q, k and v laid out as the model's
projections give them. Each line also gives the largest difference from the first implementation's output.

  python3 scripts/bench_attention.py                            # the record's micro-batch and the defaults'
  python3 scripts/bench_attention.py --shape 48x2048 --heads 8 --kv-heads 4 --head-dim 64 --autotune
  python3 scripts/bench_attention.py --doc-mask --docs-from data/datasets/webmix_sp8192/fineweb_train_000000.bin

With --doc-mask the implementations are DOC_MASK=1's in our record script (records/frontier/train_gpt.py, or --script):
FlexAttention with the block mask of the documents, and the reference, SDPA with a (B, 1, T, T) mask; against plain
causal SDPA (dense), each line's difference taken from the reference. The documents are the first B*T tokens of
--docs-from (a shard: real document lengths), or random lengths of 64-2048 tokens. The block mask is made once a
forward pass in the model, for every layer: its own time is a line of its own (mask_ms), not in the calls'.

An implementation that has no kernel for a shape (SDPA's efficient backend has none for GQA) says so on its line.
MEASUREMENTS.md ("Speed, issue 31", session 4) has the figures for one H100.
"""

import argparse
import contextlib
import importlib.util
import statistics
import sys
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel

ROOT = Path(__file__).resolve().parents[1]

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


def doc_ids(batch: int, seq_len: int, docs_from: Path | None, bos: int) -> torch.Tensor:
    """(batch, seq_len) ids: a shard's first tokens as they are, or random ids with a BOS every 64-2048 tokens."""
    if docs_from is not None:
        tokens = torch.from_numpy(
            np.fromfile(docs_from, dtype="<u2", offset=1024, count=batch * seq_len).astype(np.int64)
        )
        if tokens.numel() < batch * seq_len:
            sys.exit(f"error: --docs-from {docs_from} holds {tokens.numel()} tokens, fewer than {batch}x{seq_len}.")
        return tokens.view(batch, seq_len)
    g = torch.Generator().manual_seed(0)
    ids = torch.randint(2, 1000, (batch * seq_len,), generator=g)
    at = 0
    while at < ids.numel():
        ids[at] = bos
        at += int(torch.randint(64, 2049, (), generator=g))
    return ids.view(batch, seq_len)


def load_script(path: Path):
    spec = importlib.util.spec_from_file_location("record_script", path)
    module = importlib.util.module_from_spec(spec)
    sys.modules["record_script"] = module  # its dataclasses look their module up there
    spec.loader.exec_module(module)
    return module


def doc_masked(script: Path, ids: torch.Tensor) -> dict:
    """DOC_MASK=1's attention of the record script on these documents: flex, and the reference first."""
    T = load_script(script)
    ids = ids.cuda()
    docs = int((ids == T.BOS_ID).sum()) + ids.size(0)
    mask, block_mask = T.doc_causal_mask(ids), T.doc_block_mask(ids)
    mask_ms = gpu_ms(lambda: T.doc_block_mask(ids), 20)
    print(
        f"shape:{ids.size(0)}x{ids.size(1)} documents_at_most:{docs} block_mask_sparsity:{block_mask.sparsity():.1f}% "
        f"mask_ms:{mask_ms:.3f}",
        flush=True,
    )
    flex = T.compiled_flex()
    return {
        "sdpa_doc_mask": lambda q, k, v: T.sdpa_attention(q, k, v, mask),
        "dense_causal": sdpa(),
        "flex_doc_mask": lambda q, k, v: T.flex_doc_attention(q, k, v, block_mask, flex),
    }


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
    parser.add_argument("--doc-mask", action="store_true", help="DOC_MASK=1's implementations (the docstring)")
    parser.add_argument("--script", type=Path, default=ROOT / "records" / "frontier" / "train_gpt.py")
    parser.add_argument("--docs-from", type=Path, help="--doc-mask: a shard whose documents to use")
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
        if cli.doc_mask:
            found = doc_masked(cli.script, doc_ids(batch, seq_len, cli.docs_from, 1))
        else:
            found = implementations(cli.heads, cli.kv_heads, seq_len, "cuda", cli.autotune)
        for name, attend in found.items():
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
