"""Where a training step's time goes, on one GPU: wall time per step, the optimizers' time alone, and the GPU's
time per step by kernel kind (attention, GEMMs, inductor's fused elementwise kernels, the loss kernel, ...).

  DATA_PATH=... TOKENIZER_PATH=... python3 scripts/profile_step.py            # the config from the environment
  RECIPE=record DATA_PATH=... python3 scripts/profile_step.py --trainer-dir DIR --steps 10
  DOC_MASK=1 RECIPE=p180 DATA_PATH=... python3 scripts/profile_step.py --trainer-dir records/frontier   # our record script

The trainer's pre-flight checks the inputs (it writes no log); the model, optimizers and loader are then built as
train_gpt.py builds them (compiled). After --warmup steps (the compilation), --steps steps are timed between two
synchronizes; the optimizers' step() is then timed alone over 10 repeats on the gradients of one micro-batch; last,
torch.profiler records --profile steps and sums each kernel's GPU time per kind. Wall time above the GPU's total is
time the GPU waited for the host: gpu_idle_per_step sums the gaps between its kernels, and the largest are listed with
the kernels on either side. --trainer-dir takes a train_gpt.py with this API (preflight, a Run, TrainState).
"""

import argparse
import collections
import dataclasses
import sys
import time
from pathlib import Path

import torch

# kernel name (lower case) -> kind, first match wins; inductor's triton_* kernels are their own kind
KINDS = [
    ("loss_kernel", ("softcap_ce",)),
    ("nccl", ("nccl",)),
    ("attention", ("fmha", "flash", "sdpa", "cudnn", "attn")),
    ("gemm", ("gemm", "xmma", "nvjet", "cutlass", "cublas", "gemv", "sm90_")),
]


def kernel_kind(name: str) -> str:
    lower = name.lower()
    if lower.startswith("triton_"):  # inductor's kernels, whatever ops their names list
        return "inductor_triton"
    return next((kind for kind, keys in KINDS if any(k in lower for k in keys)), "other_aten")


def idle_gaps(spans: list[tuple[float, float, str]]) -> list[tuple[float, str, str]]:
    """(length, the event before, the event after) of each time no GPU event runs, from (start, end, name) spans."""
    spans, gaps = sorted(spans), []
    end, last = (spans[0][1], spans[0][2]) if spans else (0, "")
    for start, stop, name in spans[1:]:
        if start > end:  # idle from the latest end so far (streams overlap) to this start
            gaps.append((start - end, last, name))
        end, last = (stop, name) if stop > end else (end, last)
    return gaps


def parse_args():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--trainer-dir",
        default=str(Path(__file__).resolve().parents[1]),
        help="folder holding the train_gpt.py to import (another commit's of this API, to compare)",
    )
    parser.add_argument("--warmup", type=int, default=6, help="steps run first (compilation)")
    parser.add_argument("--steps", type=int, default=20, help="steps timed")
    parser.add_argument("--profile", type=int, default=3, help="steps profiled")
    parser.add_argument("--top", type=int, default=25, help="kernels listed")
    parser.add_argument("--looping", action="store_true", help="run the looped layer order (NUM_LOOPS > 0) throughout")
    cli = parser.parse_args()
    for flag, least in (("warmup", 0), ("steps", 1), ("profile", 1), ("top", 0)):  # steps, profile: divisors
        if getattr(cli, flag) < least:
            print(f"error: --{flag} {getattr(cli, flag)}: give a count of at least {least}.", file=sys.stderr)
            sys.exit(2)
    return cli


def main() -> None:
    cli = parse_args()
    if not torch.cuda.is_available():
        sys.exit("error: profile_step.py needs a CUDA GPU (it times compiled training steps and their kernels).")
    sys.path.insert(0, cli.trainer_dir)
    import train_gpt as T

    args = T.Hyperparameters.from_env()
    if getattr(args, "compressor", "zlib") != "zlib":  # no artifact is written here: the recipe's optional
        args = dataclasses.replace(args, compressor="zlib")  # compressor (brotli) need not be installed
    run = T.preflight(args, T.DistContext(0, 1, 0, torch.device("cuda", 0)))  # one process on the first GPU
    ctx = run.ctx
    torch.backends.cuda.matmul.allow_tf32 = torch.backends.cudnn.allow_tf32 = True
    torch.manual_seed(args.seed)
    loss_impl = run.loss_impl if isinstance(run.loss_impl, str) else run.loss_impl[0]  # (impl, why) in ours
    attn_impl = getattr(run, "attn_impl", ("dense",))[0]  # DOC_MASK's attention, in our record script
    chosen = {"attn_impl": attn_impl} if hasattr(run, "attn_impl") else {}
    model = T.GPT(args, loss_impl, torch.bfloat16, **chosen).to(ctx.device)
    model.looping = cli.looping
    optimizers = T.build_optimizers(model, args, torch.compile(T.newton_schulz_orthogonalize, dynamic=False))
    state = T.TrainState(model, torch.compile(model, dynamic=False, fullgraph=True), optimizers)
    loader = T.make_train_loader(args, run.train_files, ctx)
    step = lambda i: T.train_step(run, state, loader, 1.0, T.schedule(i, 0.0, args)[1])  # noqa: E731

    t0 = time.perf_counter()
    for i in range(cli.warmup):
        step(i)
    compile_s = ctx.clock() - t0
    t0 = ctx.clock()
    for i in range(cli.steps):
        step(i)
    step_ms = 1000 * (ctx.clock() - t0) / cli.steps

    x, y = loader.next_batch(args.train_batch_tokens // T.GRAD_ACCUM_TOTAL, args.train_seq_len)
    with ctx.autocast():
        state.step_model(x, y).backward()
    for opt in optimizers:  # once untimed: the optimizer's own compilation
        opt.step()
    t0 = ctx.clock()
    for _ in range(10):
        for opt in optimizers:
            opt.step()
    optimizer_ms = 1000 * (ctx.clock() - t0) / 10
    for opt in optimizers:
        opt.zero_grad(set_to_none=True)

    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CUDA]) as prof:
        for i in range(cli.profile):
            step(i)
        torch.cuda.synchronize()
    kinds, kernels, calls = collections.Counter(), collections.Counter(), collections.Counter()
    spans = []  # (start, end, name) of every GPU event, microseconds: where the GPU waited, and between what
    for event in prof.events():
        if event.device_type == torch.autograd.DeviceType.CUDA:
            spans.append((event.time_range.start, event.time_range.end, event.name[:60]))
            us = getattr(event, "device_time", None) or getattr(event, "cuda_time", 0)
            kinds[kernel_kind(event.name)] += us
            kernels[event.name[:100]] += us
            calls[event.name[:100]] += 1
    per_step = lambda us: us / cli.profile / 1000  # noqa: E731
    print(
        f"gpu:{torch.cuda.get_device_name().replace(' ', '_')} compile_warmup:{compile_s:.1f}s "
        f"step_avg:{step_ms:.1f}ms optimizers:{optimizer_ms:.1f}ms "
        f"gpu_per_step:{per_step(sum(kinds.values())):.1f}ms looping:{int(model.looping)} "
        f"loss_impl:{loss_impl} mlp_impl:{getattr(args, 'mlp_impl', 'modules')} attn_impl:{attn_impl}"
    )
    for kind, us in kinds.most_common():
        print(f"kind:{kind} gpu_per_step:{per_step(us):.1f}ms")
    for name, us in kernels.most_common(cli.top):
        print(f"{per_step(us):8.2f} ms  {calls[name] // cli.profile:4d}x  {name}")
    gaps = idle_gaps(spans)
    print(f"gpu_idle_per_step:{per_step(sum(g for g, _, _ in gaps)):.1f}ms gaps:{len(gaps) // cli.profile}")
    for us, before, after in sorted(gaps, reverse=True)[: cli.top]:
        print(f"idle {us / 1000:8.3f} ms  after {before}  before {after}")


if __name__ == "__main__":
    main()
