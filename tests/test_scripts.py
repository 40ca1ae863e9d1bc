"""scripts/profile_step.py: its kernel kinds on real kernel names from an H100 profile, and its CPU error;
scripts/compare_revisions.py: what it lets differ between two revisions' logs and artifacts, and what not;
scripts/bench_record.py: it reads both trainers' last-step lines as they write them, splits shards losslessly, and
refuses a --nproc the trainer cannot run before anything starts;
scripts/bench_attention.py: its implementations against attention written out, its shape parsing and its CPU error.
Run: python3 -m pytest -q tests/test_scripts.py"""

import argparse
import subprocess
import sys
from pathlib import Path

import pytest
import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "scripts"))
import bench_attention  # noqa: E402
import bench_record  # noqa: E402
import compare_revisions  # noqa: E402
import profile_step  # noqa: E402

# names as torch.profiler printed them for a training step of the defaults (one H100, torch 2.11, cut at 90
# characters), and NCCL's all-gather kernel as it names it (one GPU runs no NCCL)
H100_KERNELS = {
    "cudnn_generated_fort_native_sdpa_sm90_flash_bprop_wgmma_f16_knob_26_64x64x64_1x4x1_cga1x1x": "attention",
    "void cudnn::fusion::compute_dot_do_o_specialized<true, 64>(void const*, void const*, void*": "attention",
    "void cudnn::fusion::fmha_reduce_head<true>(void const*, void*, unsigned int, unsigned int,": "attention",
    "nvjet_sm90_tst_256x128_64x4_1x2_h_bz_coopA_NNT": "gemm",
    "triton_per_fused__fused_rms_norm__fused_rms_norm_backward__to_copy__unsafe_view_add_mul_se": "inductor_triton",
    "triton_poi_fused__to_copy__unsafe_view_mul_pow_relu_threshold_backward_view_2": "inductor_triton",
    "_softcap_ce_kernel": "loss_kernel",
    "ncclDevKernel_AllGather_RING_LL(ncclDevKernelArgsStorage<4096ul>)": "nccl",
    "void at::native::reduce_kernel<128, 4, at::native::ReduceOp<float, at::native::func_wrappe": "other_aten",
    "void at::native::vectorized_elementwise_kernel<4, at::native::CUDAFunctor_add<float>, std:": "other_aten",
}


@pytest.mark.parametrize("name, kind", H100_KERNELS.items())
def test_profile_step_sorts_kernels_into_kinds(name, kind):
    assert profile_step.kernel_kind(name) == kind


def test_profile_step_finds_the_gpus_idle_gaps_across_overlapping_streams():
    spans = [(10, 20, "b"), (0, 12, "a"), (15, 30, "c"), (35, 40, "d"), (36, 38, "e"), (41, 42, "f")]
    assert profile_step.idle_gaps(spans) == [(5, "c", "d"), (1, "d", "f")]
    assert profile_step.idle_gaps([]) == [] and profile_step.idle_gaps([(0, 1, "a")]) == []


@pytest.mark.skipif(torch.cuda.is_available(), reason="the CPU error only")
def test_profile_step_without_a_gpu_says_it_needs_one():
    run = subprocess.run(
        [sys.executable, str(ROOT / "scripts" / "profile_step.py")], capture_output=True, text=True, timeout=120
    )
    assert run.returncode != 0 and "needs a CUDA GPU" in run.stderr


def artifact(header: dict, payload: bytes) -> bytes:
    return b"parameter-golf artifact v1\n" + compare_revisions.json.dumps(header).encode() + b"\n" + payload


def test_compare_revisions_lets_a_retired_header_setting_differ_but_not_a_value_or_the_payload():
    old = dict(compressor="zlib", payload_sha256="aa", model=dict(num_layers=2, embedding_dim=0))
    new = dict(compressor="zlib", payload_sha256="aa", model=dict(num_layers=2))
    note = compare_revisions.same_payload(artifact(old, b"\x00\n\x01"), artifact(new, b"\x00\n\x01"))
    assert note == ", header settings only in a: embedding_dim"
    assert compare_revisions.same_payload(artifact(old, b"\x00"), artifact(new, b"\x01")) is None
    changed = dict(new, model=dict(num_layers=3))
    assert compare_revisions.same_payload(artifact(old, b"\x00"), artifact(changed, b"\x00")) is None
    assert compare_revisions.same_payload(artifact(old, b"x"), artifact(dict(new, compressor="lzma"), b"x")) is None


def test_compare_revisions_compares_the_settings_both_configs_have_and_names_the_others():
    a = ["x:1", 'config:{"head_lr": 0.008, "seed": 1}', "step:1/2 train_loss:5.0"]
    b = ["x:1", 'config:{"seed": 1, "ttt_lr": 0.005}', "step:1/2 train_loss:5.0"]
    log_a, log_b, note = compare_revisions.common_config(a, b)
    assert log_a == log_b and note == "; settings only in a: head_lr; settings only in b: ttt_lr"
    log_a, log_b, _ = compare_revisions.common_config(a, [b[0], b[1].replace('"seed": 1', '"seed": 2'), b[2]])
    assert log_a != log_b  # a value both have, changed: a difference


def test_compare_revisions_leaves_out_the_phase_lines_one_side_lacks_and_compares_them_where_both_have_them():
    """Issue 58 added phase:NAME phase_time:S compile_time:S lines and a last wall_time: line; every number in them is a
    clock's. Against an older revision (none of them) they are left out and named in a note; between two revisions
    that both log them, which phases and in which order is compared like any line, their times masked."""
    base = ["step:4/4 val_loss:2.0", "final_int8_zlib_roundtrip_exact val_loss:2.0 val_bpb:1.0"]
    timed = ["phase:startup phase_time:1.20s compile_time:0.00s", "step:4/4 val_loss:2.0"]
    timed += ["phase:roundtrip phase_time:0.31s compile_time:0.02s", base[1], "wall_time:3.10s since:process_start"]
    masked = [" ".join(compare_revisions.masked_token(t) for t in line.split(" ")) for line in timed]
    assert masked[0] == "phase:startup phase_time:* compile_time:*" and masked[-1] == "wall_time:* since:process_start"
    cut_a, cut_b, note = compare_revisions.comparable_logs(base, masked)
    assert cut_a == cut_b == base and note == "; phase lines only in b"
    slower = [line.replace("1.20s", "9.99s").replace("3.10s", "12.00s") for line in timed]
    masked_slower = [" ".join(compare_revisions.masked_token(t) for t in line.split(" ")) for line in slower]
    cut_a, cut_b, note = compare_revisions.comparable_logs(masked, masked_slower)
    assert cut_a == cut_b == masked and note == ""  # both have them: compared, the times masked
    other_order = [masked[2], masked[1], masked[0], *masked[3:]]
    cut_a, cut_b, _ = compare_revisions.comparable_logs(masked, other_order)
    assert cut_a != cut_b  # another phase sequence is a difference


RECORD_LOG = (
    ROOT.parent / "shared/records_examples/2026-04-09_SP8192_3LayerRecur_ParResid_QK525_LegalTTT/train_seed42.log"
)


def test_bench_record_reads_our_last_step_as_train_gpt_logs_it(tmp_path):
    import train_gpt

    log = train_gpt.Logger(tmp_path / "log.txt")
    log.log(step="4/4", train_loss=4.8309, train_time="80ms", step_avg="20.00ms", tokens_per_s="3210000")
    log.log(step="4/4", val_loss=5.2701, val_bpb=2.1215, weights="raw", train_time="80ms", step_avg="20.00ms")
    lines = (tmp_path / "log.txt").read_text().splitlines()
    got = bench_record.last_step(lines, bench_record.OURS_TRAIN, bench_record.OURS_VAL, 4)
    assert got == dict(tokens_per_s=3210000, train_loss=4.8309, val_bpb=2.1215)
    assert bench_record.last_step(lines, bench_record.OURS_TRAIN, bench_record.OURS_VAL, 5) == {}  # not reached


@pytest.mark.skipif(not RECORD_LOG.exists(), reason="needs ../shared/records_examples")
def test_bench_record_reads_the_records_log_lines():
    lines = RECORD_LOG.read_text().splitlines()
    got = bench_record.last_step(
        lines + ["4550/20000 train_loss: 2.7000 train_time: 9.8m tok/s: 6090000"],
        bench_record.RECORD_TRAIN,
        bench_record.RECORD_VAL,
        4550,
    )
    assert got == dict(tokens_per_s=6090000, train_loss=2.7, val_bpb=1.0886)


def test_bench_record_splits_training_tokens_into_shards_without_losing_one(tmp_path):
    import numpy as np
    import train_gpt

    tokens = np.random.default_rng(0).integers(0, 1024, 1001).astype("<u2")
    header = np.zeros(train_gpt.SHARD_HEADER_INTS, "<i4")
    header[:3] = train_gpt.SHARD_MAGIC, train_gpt.SHARD_VERSION, len(tokens)
    (tmp_path / "fineweb_train_000000.bin").write_bytes(header.tobytes() + tokens.tobytes())
    out = tmp_path / "split"
    out.mkdir()
    parts = bench_record.split_training_tokens([tmp_path / "fineweb_train_000000.bin"], out, 4)
    assert len(parts) == 4
    again = np.concatenate([train_gpt.load_data_shard(p).numpy() for p in parts])  # each shard's header checked
    assert np.array_equal(again, tokens)


@pytest.mark.parametrize("nproc", ["0", "3", "-2"])
def test_bench_record_refuses_a_process_count_the_trainer_cannot_run_in_one_line(nproc, tmp_path):
    missing = [str(tmp_path / name) for name in ("record.py", "shards", "sp.model")]  # never reached
    args = ["--record", missing[0], "--data", missing[1], "--tokenizer", missing[2], "--nproc", nproc]
    run = subprocess.run(
        [sys.executable, str(ROOT / "scripts" / "bench_record.py"), *args], capture_output=True, text=True, timeout=120
    )
    assert run.returncode == 2, run.stderr
    assert run.stderr == f"error: --nproc {nproc} must divide 8 (a step's micro-batches): 1, 2, 4 or 8.\n"


def test_bench_record_and_ab_unpack_a_packed_record_and_replace_fa3_by_sdpa(tmp_path):
    import hashlib

    import recordlib

    filler = "".join(f"# {hashlib.sha256(bytes([i])).hexdigest()}\n" for i in range(40))  # packs to > 1000 chars
    source = f"import torch\nimport torch.nn.functional as F\n{bench_record.ab.FA3_IMPORT}\n{filler}"
    (tmp_path / "train_gpt.py").write_text(recordlib.pack_script(source))
    text = bench_record.record_source(tmp_path / "train_gpt.py")
    assert text == source.replace(bench_record.ab.FA3_IMPORT, bench_record.ab.SDPA_SHIM)
    namespace = {}
    exec(text, namespace)  # the stand-in: attention of the FA3 layout (B, T, H, D), grouped kv heads
    q, k = torch.randn(1, 5, 4, 8), torch.randn(1, 5, 2, 8)
    y = namespace["flash_attn_3_func"](q, k, k, causal=True)
    assert y.shape == q.shape
    torch.testing.assert_close(y[:, 0, :2], k[:, 0, :1].expand(1, 2, 8))  # the first position reads itself only


def test_bench_attention_implementations_agree_with_causal_gqa_attention_written_out():
    heads, kv_heads, seq_len, head_dim = 4, 2, 7, 8
    q, k, v = bench_attention.qkv(2, seq_len, heads, kv_heads, head_dim, "cpu", torch.float32)
    kx, vx = (t.repeat_interleave(heads // kv_heads, 1) for t in (k, v))  # query head h reads kv head h // 2
    scores = (q @ kx.transpose(-1, -2)) / head_dim**0.5
    scores = scores.masked_fill(torch.ones(seq_len, seq_len).triu(1).bool(), float("-inf"))
    expected = scores.softmax(-1) @ vx
    assert q.is_contiguous() is False and q.transpose(1, 2).is_contiguous()  # the projections' layout
    for attend in (bench_attention.sdpa(), bench_attention.sdpa(expand=heads // kv_heads)):
        torch.testing.assert_close(attend(q, k, v), expected, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("text", ["48", "0x2048", "axb", "48x2048x1"])
def test_bench_attention_refuses_a_shape_that_is_not_batch_x_seq_len(text):
    with pytest.raises(argparse.ArgumentTypeError, match="BATCHxSEQ_LEN|positive"):
        bench_attention.parse_shape(text)
    assert bench_attention.parse_shape("48x2048") == (48, 2048)


@pytest.mark.skipif(torch.cuda.is_available(), reason="the CPU error only")
def test_bench_attention_without_a_gpu_says_it_needs_one():
    run = subprocess.run(
        [sys.executable, str(ROOT / "scripts" / "bench_attention.py")], capture_output=True, text=True, timeout=120
    )
    assert run.returncode != 0 and "needs a CUDA GPU" in run.stderr
