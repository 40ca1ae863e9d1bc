"""Benchmark the output loss on one GPU: the naive formula, the chunked PyTorch reference and the
fused Triton path, each eager and under torch.compile, forward + backward.

  python3 scripts/bench_loss.py                      # uses ./train_gpt.py
  python3 scripts/bench_loss.py --trainer-dir DIR --sweep

x (N, 512) bf16 and W (V, 512) fp32 both require grad, as in the trainer under autocast. Time is the
median of triton.testing.do_bench (compilation and warm-up excluded, L2 flushed between runs, .grad
reset outside the timed region). That time includes the host's work whenever the GPU waits for it
(small problems, Python-side ops), so a second column replays the same forward + backward from a CUDA
graph: the GPU's time alone, which is what a training step that keeps the GPU busy pays. Memory is
torch.cuda.max_memory_allocated during one forward + backward minus what was allocated before it (so
it includes x.grad and W.grad). The Triton path is checked against the naive formula at each size
first. --sweep also times the kernel alone for several warp counts, and the three
GEMMs of one chunk, to show where the time goes.
"""

import argparse
import sys
import time
from pathlib import Path

import torch

D_MODEL, SOFTCAP = 512, 30.0
SIZES = [(8192, 65536), (1024, 65536), (8192, 16384), (1024, 16384)]  # (V, N), the target first
SWEEP = {1024: [1, 2, 4, 8], 8192: [4, 8, 16, 32]}  # num_warps per vocabulary (the whole row is one block)


def usage_error(message: str) -> None:
    print(f"error: {message}", file=sys.stderr)
    sys.exit(2)


def parse_args():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--trainer-dir",
        default=str(Path(__file__).resolve().parents[1]),
        help="folder holding the train_gpt.py to import",
    )
    parser.add_argument(
        "--chunks",
        default="0,8192",
        help="tokens per chunk (0: the trainer's, "
        "LOSS_CHUNK_ELEMENTS // V); the first is used for the reference and the correctness "
        "check, the first two are also compiled",
    )
    parser.add_argument("--sweep", action="store_true", help="also time the kernel and GEMMs alone")
    parser.add_argument(
        "--budget-s",
        type=float,
        default=0.0,
        help="start no new size after this many seconds (0: no limit); the table still prints",
    )
    args = parser.parse_args()
    if not all(c.isdigit() for c in args.chunks.split(",")):
        usage_error(f"--chunks {args.chunks}: give tokens per chunk, comma-separated (0: the trainer's), e.g. 0,8192.")
    if not args.budget_s >= 0:
        usage_error(f"--budget-s {args.budget_s}: give seconds >= 0 (0: no limit).")
    return args


def naive_loss(x, weight, targets, softcap):
    """The unchunked formula: all (N, V) logits at once."""
    logits = x @ weight.to(x.dtype).t()
    return torch.nn.functional.cross_entropy(softcap * torch.tanh(logits.float() / softcap), targets)


def make_inputs(vocab: int, n: int, seed: int = 0):
    gen = torch.Generator(device="cuda").manual_seed(seed)
    x = torch.randn(n, D_MODEL, device="cuda", generator=gen).bfloat16().requires_grad_()  # unit RMS, like rms_norm
    weight = (torch.randn(vocab, D_MODEL, device="cuda", generator=gen) * 0.05).requires_grad_()  # logits ~ N(0, 1.1^2)
    targets = torch.randint(0, vocab, (n,), device="cuda", generator=gen)
    return x, weight, targets


def measure(fn, x, weight, targets) -> tuple[float, float, float]:
    """(median ms, median ms replayed from a CUDA graph, extra peak MiB) of one forward + backward."""
    import triton.testing

    def step():
        fn(x, weight, targets).backward()

    step()  # compile / autotune / cuBLAS heuristics, outside every measurement
    ms = triton.testing.do_bench(step, warmup=50, rep=300, grad_to_none=[x, weight], return_mode="median")
    x.grad = weight.grad = None
    torch.cuda.synchronize()
    torch.cuda.reset_peak_memory_stats()
    base = torch.cuda.memory_allocated()
    step()
    torch.cuda.synchronize()
    peak_mib = (torch.cuda.max_memory_allocated() - base) / 2**20
    x.grad = weight.grad = None
    return ms, graph_ms(step, x, weight), peak_mib


def graph_ms(step, x, weight) -> float:
    """Median ms of replaying one captured forward + backward (nan if it cannot be captured)."""
    import triton.testing

    try:
        side = torch.cuda.Stream()  # warm-up off the default stream, as torch.cuda.graphs asks
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):
            for _ in range(2):
                step()
                x.grad = weight.grad = None
        torch.cuda.current_stream().wait_stream(side)
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):  # .grad is None: the backward allocates it in the graph's pool
            step()
        ms = triton.testing.do_bench(graph.replay, warmup=25, rep=300, return_mode="median")
    except Exception as exc:  # a benchmark reports the failure and goes on
        print(f"  CUDA graph capture failed: {type(exc).__name__}: {str(exc).splitlines()[0][:120]}", flush=True)
        ms = float("nan")
    finally:
        x.grad = weight.grad = None
        torch.cuda.synchronize()
    return ms


def compiled(fn):
    """torch.compile(fullgraph=True) as the trainer does; if that cannot trace fn, say so and allow breaks."""
    full = torch.compile(fn, fullgraph=True)

    def call(*args):
        nonlocal full
        try:
            return full(*args)
        except Exception as exc:  # a benchmark reports the failure and measures the fallback
            print(
                f"  fullgraph=True failed ({type(exc).__name__}: {str(exc).splitlines()[0][:120]}); "
                "using fullgraph=False",
                flush=True,
            )
            full = torch.compile(fn)
            return full(*args)

    return call


def grads(fn, x, weight, targets):
    x, weight = x.detach().requires_grad_(), weight.detach().requires_grad_()
    loss = fn(x, weight, targets)
    loss.backward()
    return loss.detach().double(), x.grad.double(), weight.grad.double()


def check(tg, vocab, n, chunk):
    """Relative errors of the Triton path vs the naive formula on the same bf16 x, and vs fp32 x."""
    x, weight, targets = make_inputs(vocab, n, seed=1)
    got = grads(lambda a, b, c: tg.softcap_ce_loss(a, b, c, SOFTCAP, chunk, "triton"), x, weight, targets)
    for name, xin in (("naive_bf16", x), ("naive_fp32", x.float())):
        want = grads(lambda a, b, c: naive_loss(a, b, c, SOFTCAP), xin, weight, targets)
        errs = [((g - w).norm() / w.norm()).item() for g, w in zip(got, want)]
        print(
            f"check V={vocab} N={n} chunk={chunk} vs {name}: loss_rel={errs[0]:.2e} "
            f"grad_x_rel={errs[1]:.2e} grad_w_rel={errs[2]:.2e}",
            flush=True,
        )


def sweep(tg):
    import triton.testing

    n = 16384
    for vocab, configs in SWEEP.items():
        buf = torch.randn(n, vocab, device="cuda").mul_(5).bfloat16()
        targets = torch.randint(0, vocab, (n,), device="cuda")
        loss_rows = torch.empty(n, device="cuda")
        block_v = vocab
        for warps in configs:

            def kernel():
                tg._softcap_ce_kernel[(n,)](
                    buf, targets, loss_rows, SOFTCAP, 1.0 / n, V=vocab, BLOCK_V=block_v, NEED_GRAD=True, num_warps=warps
                )

            ms = triton.testing.do_bench(kernel, warmup=25, rep=200, return_mode="median")
            print(
                f"sweep kernel V={vocab} rows={n} block_v={block_v} num_warps={warps}: {ms * 1e3:.1f}us "
                f"{4 * n * vocab / ms / 1e6:.0f}GB/s (bf16 read + write)",
                flush=True,
            )
        x = torch.randn(n, D_MODEL, device="cuda").bfloat16()
        w = torch.randn(vocab, D_MODEL, device="cuda").bfloat16()
        acc = torch.zeros(vocab, D_MODEL, device="cuda")
        gemms = {
            "logits=x@w.t()": lambda: torch.mm(x, w.t()),
            "grad_x=g@w": lambda: torch.mm(buf, w),
            "grad_w=g.t()@x bf16": lambda: torch.mm(buf.t(), x),
        }
        if hasattr(torch.ops.aten.addmm, "dtype"):
            gemms["grad_w+=g.t()@x fp32"] = lambda: torch.addmm(acc, buf.t(), x, out_dtype=torch.float32, out=acc)
        for name, fn in gemms.items():
            ms = triton.testing.do_bench(fn, warmup=25, rep=200, return_mode="median")
            print(
                f"sweep gemm V={vocab} rows={n} {name}: {ms * 1e3:.1f}us "
                f"{2 * n * vocab * D_MODEL / ms / 1e9:.0f}TFLOP/s",
                flush=True,
            )


def main():
    args = parse_args()
    if not torch.cuda.is_available():
        sys.exit("error: bench_loss.py needs a CUDA GPU (it times the output loss's kernels there).")
    sys.path.insert(0, args.trainer_dir)
    import train_gpt as tg

    reason = tg.triton_unavailable_reason()
    if reason is not None:
        sys.exit(f"error: the Triton loss cannot run here: {reason}")
    print(
        f"device:{torch.cuda.get_device_name()} torch:{torch.__version__} "
        f"triton:{tg.triton.__version__} trainer:{Path(tg.__file__).resolve()}",
        flush=True,
    )
    chunks = [int(c) for c in args.chunks.split(",")]
    if args.sweep:
        sweep(tg)
    label = lambda chunk: "default chunks" if chunk == 0 else f"chunk {chunk}"  # noqa: E731

    def tokens(chunk, vocab):  # 0: the trainer's chunk, from the vocabulary
        return chunk or max(1, tg.LOSS_CHUNK_ELEMENTS // vocab)

    def chunked(impl, chunk):
        return lambda x, w, t: tg.softcap_ce_loss(x, w, t, SOFTCAP, tokens(chunk, w.size(0)), impl)

    naive = lambda x, w, t: naive_loss(x, w, t, SOFTCAP)  # noqa: E731
    reference = chunked("torch", chunks[0])
    methods = [("naive", naive, False), ("naive", naive, True), (f"torch {label(chunks[0])}", reference, True)]
    for i, chunk in enumerate(chunks):
        fn = chunked("triton", chunk)
        methods += [(f"triton {label(chunk)}", fn, False)] + ([(f"triton {label(chunk)}", fn, True)] if i < 2 else [])
    rows, start = [], time.perf_counter()
    for vocab, n in SIZES:
        if args.budget_s and time.perf_counter() - start > args.budget_s:
            print(f"V={vocab} N={n}: skipped, past --budget-s={args.budget_s:.0f}", flush=True)
            continue
        check(tg, vocab, n, tokens(chunks[0], vocab))
        x, weight, targets = make_inputs(vocab, n)
        for name, fn, use_compile in methods:
            torch._dynamo.reset()
            ms, graph, mib = measure(compiled(fn) if use_compile else fn, x, weight, targets)
            mode = "compiled" if use_compile else "eager"
            rows.append((vocab, n, name, mode, ms, graph, mib))
            print(f"V={vocab} N={n} {name} {mode}: {ms:.3f}ms graph {graph:.3f}ms {mib:.0f}MiB", flush=True)
        del x, weight, targets
        torch.cuda.empty_cache()
    print(
        "\n| V | N | method | mode | fwd+bwd ms | / compiled naive | CUDA graph ms | / compiled naive "
        "| extra peak MiB |"
    )
    print("|---|---|---|---|---|---|---|---|---|")
    for vocab, n, name, mode, ms, graph, mib in rows:
        base = next(r for r in rows if r[:4] == (vocab, n, "naive", "compiled"))
        print(
            f"| {vocab} | {n} | {name} | {mode} | {ms:.3f} | {ms / base[4]:.2f} | {graph:.3f} | "
            f"{graph / base[5]:.2f} | {mib:.0f} |"
        )


if __name__ == "__main__":
    main()
