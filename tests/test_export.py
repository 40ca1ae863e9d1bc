"""Tests of the export and scoring of part 2: int6 SD clip and GPTQ, zlib|lzma|brotli behind a header,
sliding-window scoring, EVAL_ONLY re-scoring (train_gpt.py sections "Evaluation" and "Export",
`train_and_score()`).

Run: python3 -m pytest -q tests/test_export.py   (CPU only; about 60 s on 2 cores)

Layer 1, unit: quantization against its formulas and against round to nearest; compression round trips;
the artifact header; windows scored by stub models whose loss tells which target, from which position
and with how much context, was scored; GPTQ's calibration data; config errors.
Layer 3, end to end: tiny runs as subprocesses (tests/helpers.py: tiny_env), shared by module fixtures:
one int6 + GPTQ + lzma + sliding-window run, EVAL_ONLY on its artifact with one and two processes,
and the same run on a validation shard of other text. OMP_NUM_THREADS=1 makes CPU runs deterministic.
"""

from __future__ import annotations

import dataclasses
import hashlib
import io
import lzma
import math
import os
import re
import shutil
import sys
import zlib
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pytest
import torch
from torch import nn

import build_shards
import train_gpt
import helpers
from helpers import TinyData, cpu_run, randomize_matrices, runs_processes, tiny_env
from train_gpt import GRAD_ACCUM_TOTAL, ConfigError, DistContext, Hyperparameters

CPU = torch.device("cpu")
FP16_ROUNDING = 2.0**-11  # relative rounding error of a number stored in fp16 (round to nearest)


@pytest.fixture(scope="module", autouse=True)
def one_thread():
    """One intra-op thread, as in the runs (OMP_NUM_THREADS=1): on 2 cores that something else also uses, two
    threads measured 24 s for the 1.7 s that one takes to score the tiny split three times."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


def cpu_context(world_size: int = 1, rank: int = 0) -> DistContext:
    """Rank `rank` of `world_size` processes on the CPU, without a process group."""
    return DistContext(rank, world_size, 0, CPU)


def rows_of_three_magnitudes(rows: int = 123, cols: int = 300, seed: int = 0) -> torch.Tensor:
    """Odd-shaped weights: rows of three scales (the SD clip is per row) and one outlier, 50 times its row's
    std before it was added (17 times after: one value in 300 cannot be more)."""
    w = torch.randn(rows, cols, generator=torch.Generator().manual_seed(seed))
    w[: rows // 3] *= 0.01
    w[rows // 3 : 2 * rows // 3] *= 5.0
    w[5, 17] = 50 * w[5].std()
    return w


def correlated_inputs(cols: int, n: int = 2000, rank: int = 20, seed: int = 1) -> torch.Tensor:
    """(n, cols) layer inputs that live near a rank-20 subspace, as a layer's real inputs do."""
    g = torch.Generator().manual_seed(seed)
    near = torch.randn(n, rank, generator=g) @ torch.randn(rank, cols, generator=g)
    return near + 0.1 * torch.randn(n, cols, generator=g)


# =================================================================================================
# Quantization: SD clip, GPTQ, and the int8 default
# =================================================================================================


@pytest.mark.parametrize("bits", [2, 4, 6, 8])
@pytest.mark.parametrize("clip_sigmas", [3.0, 12.85])
def test_sd_clip_rounds_to_nearest_with_a_step_of_k_sigma_over_qmax(bits, clip_sigmas):
    w = rows_of_three_magnitudes()
    qmax = 2 ** (bits - 1) - 1
    q, scale = train_gpt.quantize_rows(w, bits, clip_sigmas)
    assert q.dtype == torch.int8 and q.shape == w.shape and scale.dtype == torch.float16 and scale.shape == (123,)
    assert q.abs().max() <= qmax
    # the step of each row is k * std(row) / qmax (std with Bessel's correction, computed here in fp64),
    # stored in fp16: off by at most fp16's rounding. The uncorrected std is 1e-3 away: this catches it.
    expected = clip_sigmas * w.double().std(dim=1) / qmax
    assert ((scale.double() - expected).abs() <= expected * FP16_ROUNDING).all()
    s = scale.float()[:, None]  # the step as stored, which the rounding uses
    error = (w - q.float() * s).abs()
    inside = w.abs() <= qmax * s
    # half a step, plus fp32's rounding of w/s (|w/s| <= qmax: 127 * 2^-24 of a step at most)
    assert (error <= s * (0.5 + 1e-5))[inside].all()
    beyond = w.abs() > (qmax + 0.5) * s  # clipped: the largest code of the same sign
    assert torch.equal(q[beyond], (torch.sign(w[beyond]) * qmax).to(torch.int8))
    # the outlier (17 sigmas of its row, std included) is clipped; at 2 bits the clamp starts at 1.5 steps
    assert beyond[5, 17] or (bits, clip_sigmas) == (2, 12.85)
    if clip_sigmas == 3.0 and bits > 2:  # the clamp acts beyond (qmax + 1/2) steps: 3.2 sigmas at 4 bits
        assert beyond.sum() > 10  # 0.1% of Gaussian values: the clip is really exercised


@pytest.mark.parametrize("bits, clip_sigmas", [(6, 12.85), (4, 3.0), (8, 0.0)])
def test_gptq_with_a_diagonal_hessian_gives_exactly_the_round_to_nearest_codes(bits, clip_sigmas):
    # Uncorrelated inputs: no error to spread to other columns. 300 columns = three GPTQ blocks of 128.
    w = rows_of_three_magnitudes()
    hessian = torch.diag(torch.rand(300, generator=torch.Generator().manual_seed(2)) * 10 + 0.1)
    q_rtn, scale_rtn = train_gpt.quantize_rows(w, bits, clip_sigmas)
    q_gptq, scale_gptq = train_gpt.quantize_rows(w, bits, clip_sigmas, hessian)
    assert torch.equal(scale_gptq, scale_rtn)
    assert torch.equal(q_gptq, q_rtn)


@pytest.mark.parametrize("bits, clip_sigmas", [(6, 12.85), (4, 6.0), (8, 20.0), (3, 4.0)])
def test_gptq_on_correlated_inputs_has_a_much_smaller_output_error_than_rounding(bits, clip_sigmas):
    w = torch.randn(123, 300, generator=torch.Generator().manual_seed(0))
    X = correlated_inputs(300)
    q_rtn, scale = train_gpt.quantize_rows(w, bits, clip_sigmas)
    q_gptq, scale_gptq = train_gpt.quantize_rows(w, bits, clip_sigmas, X.T @ X)
    assert torch.equal(scale_gptq, scale) and q_gptq.abs().max() <= 2 ** (bits - 1) - 1
    s = scale.float()[:, None]
    rtn_error = torch.linalg.norm((w - q_rtn.float() * s) @ X.T)
    gptq_error = torch.linalg.norm((w - q_gptq.float() * s) @ X.T)
    # measured: GPTQ's ||(W - W_hat) X^T|| is 0.12-0.14 of rounding's at 3, 4, 6 and 8 bits (3 seeds);
    # the weights themselves move further (their error is ~20% larger): the error went where X does not look
    assert gptq_error < 0.3 * rtn_error
    assert torch.linalg.norm(w - q_gptq.float() * s) > torch.linalg.norm(w - q_rtn.float() * s)


def test_gptq_zeroes_the_weights_of_dead_inputs():
    w = torch.randn(123, 300, generator=torch.Generator().manual_seed(0))
    dead = [0, 3, 127, 128, 299]  # first column, both sides of a block edge, last column
    w[:, dead] = 3.0  # rounding to nearest would keep these
    X = correlated_inputs(300)
    X[:, dead] = 0.0  # H_ii = 0: the layer never sees these inputs
    q_rtn, _ = train_gpt.quantize_rows(w, 6, 12.85)
    q_gptq, scale = train_gpt.quantize_rows(w, 6, 12.85, X.T @ X)
    assert (q_rtn[:, dead] != 0).all()
    assert (q_gptq[:, dead] == 0).all()
    restored = train_gpt.dequantize_state_dict({"quantized": {"w": q_gptq}, "scales": {"w": scale}, "kept": {}})["w"]
    assert (restored[:, dead] == 0).all() and (restored[:, 1:3] != 0).any()


# The baseline's control tensors, by name, as it chose them; ours are parameter_roles' scalars, the same tensors here.
CONTROL_NAMES = ("attn_scale", "mlp_scale", "resid_mix", "q_gain", "skip_weights", "skip_gates")


def int8_reference(state_dict: dict[str, torch.Tensor]) -> dict:
    """quantize_state_dict as it was before part 2 (commit a629280), the int8 + zlib baseline's format."""
    quantized, scales, kept = {}, {}, {}
    for name, tensor in state_dict.items():
        t = tensor.detach().to("cpu")
        if not t.is_floating_point():
            kept[name] = t
        elif t.numel() <= train_gpt.QUANT_KEEP_FLOAT_MAX_NUMEL:
            kept[name] = t.float() if any(c in name for c in CONTROL_NAMES) else t.half()
        else:
            t32 = t.float().reshape(t.size(0), -1)
            clip = torch.quantile(t32.abs(), train_gpt.QUANT_CLIP_QUANTILE, dim=1)
            scale = (clip / 127).clamp_min(1 / 127).half()
            q = torch.round(torch.clamp(t32, -clip[:, None], clip[:, None]) / scale.float()[:, None])
            quantized[name] = q.clamp(-127, 127).to(torch.int8).reshape(t.shape)
            scales[name] = scale
    return {"quantized": quantized, "scales": scales, "kept": kept}


def random_model(args: Hyperparameters, seed: int = 0) -> train_gpt.GPT:
    """A GPT with every matrix random (no zero-init projections), so that context changes its predictions."""
    torch.manual_seed(seed)
    return randomize_matrices(train_gpt.GPT(args))


def tiny_args_on(data: TinyData, tmp_path: Path, **overrides) -> Hyperparameters:
    return Hyperparameters.from_env(tiny_env(data, tmp_path, **overrides))


def test_the_int8_default_is_the_baseline_quantization_unchanged(tiny_data, tmp_path):
    args = tiny_args_on(tiny_data, tmp_path, MODEL_DIM=144, MLP_MULT=4)
    model = random_model(args)
    state = model.state_dict()
    state["tok_emb.weight"][7, 3] = 25.0  # an outlier above the quantile clip
    state["blocks.0.mlp.fc.weight"][:50] *= 0.01  # rows on the 1/127 floor step
    roles = train_gpt.parameter_roles(model)
    ours, reference = train_gpt.quantize_state_dict(state, args, roles), int8_reference(state)
    assert set(ours["quantized"]) == {
        "tok_emb.weight",
        "blocks.0.mlp.fc.weight",
        "blocks.0.mlp.proj.weight",
        "blocks.1.mlp.fc.weight",
        "blocks.1.mlp.proj.weight",
    }
    for part in ("quantized", "scales", "kept"):
        assert set(ours[part]) == set(reference[part]), part
        for name, t in reference[part].items():
            assert ours[part][name].dtype == t.dtype and torch.equal(ours[part][name], t), (part, name)


def test_each_tensor_is_quantized_with_its_own_bits_clip_and_hessian(tiny_data, tmp_path):
    args = tiny_args_on(
        tiny_data,
        tmp_path,
        MODEL_DIM=144,
        MLP_MULT=4,
        MATRIX_BITS=6,
        MATRIX_CLIP_SIGMAS=12.85,
        EMBED_BITS=7,
        EMBED_CLIP_SIGMAS=20,
    )
    model = random_model(args)
    state = model.state_dict()
    X = correlated_inputs(144)
    hessians = {"blocks.1.mlp.fc.weight": X.T @ X}
    obj = train_gpt.quantize_state_dict(state, args, train_gpt.parameter_roles(model), hessians)
    expected = {
        "tok_emb.weight": (7, 20.0, None),
        "blocks.0.mlp.fc.weight": (6, 12.85, None),
        "blocks.0.mlp.proj.weight": (6, 12.85, None),
        "blocks.1.mlp.proj.weight": (6, 12.85, None),
        "blocks.1.mlp.fc.weight": (6, 12.85, hessians["blocks.1.mlp.fc.weight"]),
    }
    assert set(obj["quantized"]) == set(expected)
    for name, (bits, sigmas, hessian) in expected.items():
        q, scale = train_gpt.quantize_rows(state[name].float(), bits, sigmas, hessian)
        assert torch.equal(obj["quantized"][name], q) and torch.equal(obj["scales"][name], scale), name
    # the Hessian made a difference where it was given (else the check above proves nothing about routing)
    assert not torch.equal(
        obj["quantized"]["blocks.1.mlp.fc.weight"],
        train_gpt.quantize_rows(state["blocks.1.mlp.fc.weight"], 6, 12.85)[0],
    )
    assert obj["kept"]["blocks.0.attn.c_q.weight"].dtype == torch.float16  # 144 x 144: under the limit


# =================================================================================================
# Compression and the artifact's header
# =================================================================================================

COMPRESSORS = ["zlib", "lzma", "brotli"]


def need(compressor: str) -> None:
    if compressor == "brotli":
        pytest.importorskip("brotli")


def int6_codes_and_scales(size: int) -> bytes:
    """Bytes like a payload's: small int8 codes, then fp16 scales."""
    rng = np.random.default_rng(size)
    codes = np.clip(np.round(rng.normal(0, 4, size)), -31, 31).astype(np.int8).tobytes()
    return (codes + rng.normal(0, 1e-3, size).astype(np.float16).tobytes())[:size]


@pytest.mark.parametrize("compressor", COMPRESSORS)
@pytest.mark.parametrize("size", [1, 2, 3, 999, 4097])
def test_compressors_round_trip_bytes_of_any_length(compressor, size):
    need(compressor)
    data = int6_codes_and_scales(size)
    assert len(data) == size
    blob = train_gpt.compress(data, compressor)
    assert train_gpt.decompress(blob, compressor, train_gpt.COMPRESSORS[compressor][2], size) == data


def test_brotli_stores_the_bytes_by_plane_and_zlib_and_lzma_as_they_are():
    """Measured on a P180 int6 GPTQ payload (README): two planes save 0.03% with brotli, cost 0.09% with lzma."""
    data = int6_codes_and_scales(4097)
    padded = data + b"\0"  # an odd length is padded to whole 2-byte words
    planes = {name: planes for name, (_, _, planes) in train_gpt.COMPRESSORS.items()}
    assert planes == {"zlib": 1, "lzma": 1, "brotli": 2}
    assert zlib.decompress(train_gpt.compress(data, "zlib")) == data
    assert lzma.decompress(train_gpt.compress(data, "lzma")) == data
    brotli = pytest.importorskip("brotli")
    assert brotli.decompress(train_gpt.compress(data, "brotli")) == padded[0::2] + padded[1::2]


def test_a_missing_brotli_is_a_config_error_that_says_how_to_install_it(tiny_data, tmp_path, monkeypatch):
    monkeypatch.setitem(sys.modules, "brotli", None)  # `import brotli` now raises ImportError
    for call in (lambda: train_gpt.compressor("brotli"), lambda: train_gpt.compress(b"abc", "brotli")):
        with pytest.raises(ConfigError) as error:
            call()
        assert "COMPRESSOR=brotli" in str(error.value) and "pip install brotli" in str(error.value)
    # and a run says so among the checks made before a log, a process group or a GPU
    args = tiny_args_on(tiny_data, tmp_path, COMPRESSOR="brotli")
    with pytest.raises(ConfigError, match="pip install brotli"):
        train_gpt.preflight(args, cpu_context())


def quantized_tiny_model(data: TinyData, tmp_path: Path, **overrides) -> tuple[Hyperparameters, dict]:
    args = tiny_args_on(
        data, tmp_path, MODEL_DIM=144, MATRIX_BITS=6, MATRIX_CLIP_SIGMAS=12.85, EMBED_CLIP_SIGMAS=20, **overrides
    )
    model = random_model(args)
    return args, train_gpt.quantize_state_dict(model.state_dict(), args, train_gpt.parameter_roles(model))


@pytest.mark.parametrize("compressor", COMPRESSORS)
def test_an_artifact_round_trips_through_its_header(tiny_data, tmp_path, compressor):
    need(compressor)
    args, obj = quantized_tiny_model(tiny_data, tmp_path, COMPRESSOR=compressor)
    header = train_gpt.artifact_header(args, "ema", True)
    path = tmp_path / "model.ptz"
    raw_bytes, file_bytes = train_gpt.save_artifact(obj, header, str(path))
    assert raw_bytes == len(train_gpt.payload_bytes(obj)) and file_bytes == path.stat().st_size
    assert path.read_bytes().startswith(train_gpt.ARTIFACT_MAGIC)
    loaded_header, state = train_gpt.read_artifact(str(path), args)  # the config that made it matches
    payload = path.read_bytes().split(b"\n", 2)[2]  # after the magic line and the header line
    sha = hashlib.sha256(payload).hexdigest()
    counted = f"{len(obj['quantized'])}/{len(obj['quantized']) + len(obj['kept'])}"  # read from the payload
    assert loaded_header == dict(
        header, payload_bytes=raw_bytes, payload_sha256=sha, quantized_tensors=counted, path=str(path)
    )
    assert counted == "1/22"  # at MODEL_DIM=144 the embedding alone is over 65,536 values
    assert loaded_header["tokenizer_sha256"] == hashlib.sha256(tiny_data.tokenizer_path.read_bytes()).hexdigest()
    assert loaded_header["compressor"] == compressor
    assert loaded_header["byte_shuffle"] == train_gpt.COMPRESSORS[compressor][2]
    expected = train_gpt.dequantize_state_dict(obj)
    assert set(state) == set(expected)
    for name, t in expected.items():
        assert state[name].dtype == t.dtype and torch.equal(state[name], t), name


def test_an_artifact_without_the_header_or_without_a_file_is_an_error_naming_artifact_path(tiny_data, tmp_path):
    args, obj = quantized_tiny_model(tiny_data, tmp_path)
    headerless = tmp_path / "old.int8.ptz"  # the format before part 2: zlib of the torch.save payload
    headerless.write_bytes(zlib.compress(train_gpt.payload_bytes(obj), level=9))
    with pytest.raises(ConfigError, match=f"ARTIFACT_PATH={re.escape(str(headerless))} is not an artifact"):
        train_gpt.read_artifact(str(headerless), args)
    missing = tmp_path / "missing.ptz"
    with pytest.raises(ConfigError, match=f"ARTIFACT_PATH={re.escape(str(missing))}: no such file"):
        train_gpt.read_artifact(str(missing), args)


def test_an_artifact_of_another_model_shape_names_each_differing_variable(tiny_data, tmp_path):
    args = tiny_args_on(tiny_data, tmp_path)
    header = train_gpt.artifact_header(args, "raw", False)
    path = tmp_path / "a.ptz"
    model = train_gpt.GPT(args)
    obj = train_gpt.quantize_state_dict(model.state_dict(), args, train_gpt.parameter_roles(model))
    train_gpt.save_artifact(obj, header, str(path))
    # settings that do not change the weights' shapes or meaning may differ
    same_model = tiny_args_on(tiny_data, tmp_path, EVAL_STRIDE=16, MATRIX_LR=0.5, ITERATIONS=3)
    assert train_gpt.read_artifact(str(path), same_model)[0]["model"] == header["model"]
    other = tiny_args_on(tiny_data, tmp_path, NUM_LAYERS=3, MLP_MULT=3, ROPE_DIMS=8)
    with pytest.raises(ConfigError) as error:
        train_gpt.read_artifact(str(path), other)
    message = str(error.value)
    for named in (
        "NUM_LAYERS=2 (config: 3)",
        "MLP_MULT=2.0 (config: 3.0)",
        "ROPE_DIMS=0 (config: 8)",
        f"ARTIFACT_PATH={path} holds another model",
    ):
        assert named in message, message
    assert "MODEL_DIM" not in message and "NUM_HEADS" not in message  # only the ones that differ


# =================================================================================================
# Sliding windows: every target scored exactly once, with the promised context
# =================================================================================================


class WindowStub(nn.Module):
    """A GPT's two scoring calls, scoring_hidden and loss, for a model whose hidden state at each position is
    (input id, context length = position in window + 1); with `loss_of(y, input_id, context)` as each target's loss."""

    def __init__(self, loss_of):
        super().__init__()
        self.loss_of = loss_of

    def scoring_hidden(self, x):
        context = torch.arange(1, x.size(1) + 1, dtype=torch.float64).expand(x.shape)
        return torch.stack([x.double(), context], dim=-1)

    def loss(self, h, y, per_token=False):
        assert per_token and h.shape[:2] == y.shape
        return self.loss_of(y, h[..., 0].long(), h[..., 1]).reshape(-1)


MISALIGNED = 1e9  # a loss no scored target can have: the position's input must be the target's previous token


def synthetic_val(num_targets: int, seq_len: int, batch_seqs: int, seed: int = 0) -> train_gpt.ValData:
    """Token ids 0..N, all distinct, so a target's id is its position + 1; random bytes for each, as a sidecar's."""
    g = torch.Generator().manual_seed(seed)
    n = num_targets + 1
    return train_gpt.ValData(
        torch.arange(n),
        torch.randint(0, 5, (n,), generator=g, dtype=torch.int32),
        {"val_bytes": "sidecar"},
        seq_len,
        batch_seqs,
    )


def expected_context(num_targets: int, seq_len: int, stride: int) -> torch.Tensor:
    """The rule as the docstring states it: windows of seq_len start every `stride` tokens; the first scores all
    its targets, each later one its last `stride`. Target p (0-based) then sits at position p - s of the window
    starting at s, where s = 0 for p < seq_len and otherwise the first start with p < s + seq_len."""
    p = torch.arange(num_targets)
    if stride == 0:
        return p % seq_len + 1
    start = torch.where(p < seq_len, 0, ((p - seq_len) // stride + 1) * stride)
    return p - start + 1


def scored_by_ranks(model, val, stride, world_size, monkeypatch) -> torch.Tensor:
    """score_windows summed over `world_size` simulated ranks: all_reduce is the sum done here."""
    monkeypatch.setattr(train_gpt.dist, "all_reduce", lambda tensor, *a, **k: None)
    return sum(train_gpt.score_windows(model, val, cpu_context(world_size, rank), stride) for rank in range(world_size))


@pytest.mark.parametrize("stride", [0, 1, 5, 7, 15, 16])
@pytest.mark.parametrize("world_size", [1, 2, 3])
def test_each_target_is_scored_once_aligned_and_with_the_longest_context_it_can_have(stride, world_size, monkeypatch):
    T, N = 16, 80  # a short split: stride 1 is 65 windows; 3 windows per batch, so the last batch is padded
    val = synthetic_val(N, T, batch_seqs=3)
    weights = torch.rand(N + 2, generator=torch.Generator().manual_seed(1), dtype=torch.float64)
    misaligned = lambda y, x: MISALIGNED * (y != x + 1)  # noqa: E731
    by_target = WindowStub(lambda y, x, context: weights[y] + misaligned(y, x))
    by_context = WindowStub(lambda y, x, context: context + misaligned(y, x))
    loss_sum, tokens, num_bytes = scored_by_ranks(by_target, val, stride, world_size, monkeypatch).tolist()
    assert tokens == N
    assert num_bytes == val.token_bytes[1:].sum().item()
    # one random weight per target: a target scored twice or not at all moves the sum by ~0.5, rounding by 1e-14
    assert loss_sum == pytest.approx(weights[1 : N + 1].sum().item(), rel=1e-12)
    context_sum = scored_by_ranks(by_context, val, stride, world_size, monkeypatch)[0].item()
    assert context_sum == expected_context(N, T, stride).sum().item()  # integers: exact


def test_the_expected_context_rule_itself():
    # T=4, stride 3: windows at 0 (scores targets 0-3), 3 (scores 4-6), 6 (scores 7-9), ...
    assert expected_context(10, 4, 3).tolist() == [1, 2, 3, 4, 2, 3, 4, 2, 3, 4]
    assert expected_context(10, 4, 0).tolist() == expected_context(10, 4, 4).tolist() == [1, 2, 3, 4] * 2 + [1, 2]


@pytest.fixture(scope="module")
def tiny_val(tiny_data, tmp_path_factory) -> tuple[Hyperparameters, train_gpt.ValData]:
    """The tiny validation split in windows of 64, five windows per batch."""
    args = tiny_args_on(tiny_data, tmp_path_factory.mktemp("tiny_val"), VAL_BATCH_SIZE=8 * 64 * 5)
    val = train_gpt.preflight(args, cpu_context()).val
    assert val.seq_len == 64 and val.batch_seqs == 5
    return args, val


@pytest.mark.parametrize("stride", [7, 24, 63, 64])
def test_on_the_tiny_split_sliding_windows_score_the_same_tokens_and_bytes_as_non_overlapping(tiny_val, stride):
    _, val = tiny_val
    model = WindowStub(lambda y, x, context: y.double())  # each target's loss is its id
    plain = train_gpt.score_windows(model, val, cpu_context(), 0)
    sliding = train_gpt.score_windows(model, val, cpu_context(), stride)
    targets = val.tokens[1:]
    assert plain.tolist() == [
        targets.double().sum().item(),
        targets.numel(),
        val.token_bytes[1:].sum().item(),
    ]
    assert sliding.tolist() == plain.tolist()  # integer-valued fp64 sums: exact


def first_windows(val: train_gpt.ValData, windows: int) -> train_gpt.ValData:
    n = windows * val.seq_len
    return dataclasses.replace(val, tokens=val.tokens[: n + 1], token_bytes=val.token_bytes[: n + 1])


def test_with_a_real_model_context_changes_the_score_but_not_what_is_counted(tiny_val):
    args, full = tiny_val
    val = first_windows(full, 64)  # 4,096 targets
    model = random_model(args)
    score = {stride: train_gpt.score_windows(model, val, cpu_context(), stride) for stride in (0, 16, 64)}
    assert torch.equal(score[64], score[0])  # stride == seq_len is the same windows, computed the same way
    assert score[16][1:].tolist() == score[0][1:].tolist()
    per_token = {stride: (s[0] / s[1]).item() for stride, s in score.items()}
    # measured on this random (untrained) model: 6.7815 without overlap, 6.7878 with stride 16, where each
    # target past the first window sees 49-64 tokens instead of 1-64; a model blind to context gives equal scores
    assert abs(per_token[16] - per_token[0]) > 1e-3
    # loss_and_bpb() turns the same sums into (loss, bpb)
    loss, bpb = train_gpt.loss_and_bpb(train_gpt.score_windows(model, val, cpu_context(), 16))
    tokens, num_bytes = score[16][1].item(), score[16][2].item()
    assert loss == per_token[16] and bpb == pytest.approx(loss / math.log(2) * tokens / num_bytes)


def test_sliding_windows_match_a_window_by_window_reference(tiny_val):
    args, full = tiny_val
    T, stride, n = 64, 24, 16 * 64
    val = first_windows(full, 16)
    model = random_model(args).eval()
    context = expected_context(n, T, stride)
    reference = torch.zeros((), dtype=torch.float64)
    with torch.no_grad():
        for start in sorted(set((torch.arange(n) - context + 1).tolist())):  # each window, run on its own
            x, y = val.tokens[start : start + T][None], val.tokens[start + 1 : start + T + 1][None]
            losses = model.loss(model.hidden(x), y, per_token=True)
            targets = torch.arange(start, min(start + T, n))
            scored = targets[targets - context[targets] + 1 == start]  # the targets this window scores
            reference += losses[scored - start].double().sum()
    ours = train_gpt.score_windows(model, val, cpu_context(), stride)
    # fp32 per-token losses from batches of 5 windows against batches of 1, summed in another order: measured
    # equal; allowed 1e-6. Scoring a target from the wrong window or position changes the sum by ~1e-3.
    assert ours[0].item() == pytest.approx(reference.item(), rel=1e-6)
    assert ours[1].item() == n


# =================================================================================================
# GPTQ's calibration: training micro-batches only
# =================================================================================================


def calibration_args(data: TinyData, tmp_path: Path, **overrides) -> Hyperparameters:
    settings = dict(MODEL_DIM=144, MLP_MULT=4, MATRIX_BITS=6, MATRIX_CLIP_SIGMAS=12.85, GPTQ_CALIBRATION_BATCHES=3)
    return tiny_args_on(data, tmp_path, **{**settings, **overrides})


def calibration_run(args: Hyperparameters, world_size: int = 1, rank: int = 0) -> train_gpt.Run:
    """What collect_hessians reads: the config, this process's place and the training shards of DATA_PATH."""
    run = cpu_run(args, train_files=train_gpt.find_shards(args.data_path, "train"))
    return dataclasses.replace(run, ctx=cpu_context(world_size, rank))


def test_calibration_reads_the_first_training_micro_batches_and_sums_x_transpose_x(tiny_data, tmp_path):
    args = calibration_args(tiny_data, tmp_path)
    model = random_model(args)
    seen, real_hidden = [], model.hidden
    model.hidden = lambda x: (seen.append(x.clone()), real_hidden(x))[1]  # a spy on every forward pass
    hessians = train_gpt.collect_hessians(calibration_run(args), model)
    loader = train_gpt.DistributedTokenLoader(train_gpt.find_shards(args.data_path, "train"), cpu_context())
    micro_batch_tokens = args.train_batch_tokens // GRAD_ACCUM_TOTAL
    expected = [loader.next_batch(micro_batch_tokens, args.train_seq_len)[0] for _ in range(3)]
    assert len(seen) == 3 and all(torch.equal(a, b) for a, b in zip(seen, expected))
    large = [n for n, t in model.state_dict().items() if t.numel() > train_gpt.QUANT_KEEP_FLOAT_MAX_NUMEL]
    assert sorted(hessians) == sorted(large)  # every quantized matrix, the tied embedding included
    with torch.no_grad():  # the tied embedding reads the final hidden states as the output head
        h = torch.cat([real_hidden(x).reshape(-1, 144) for x in expected])
    assert torch.allclose(hessians["tok_emb.weight"], h.T @ h, rtol=1e-5, atol=1e-3)


def test_calibration_never_reads_a_validation_token(tiny_data, tmp_path):
    # train shards hold ids 4..255 only, the validation shard ids 256..511 only
    rng = np.random.default_rng(0)
    data_path = tmp_path / "disjoint"
    data_path.mkdir()
    for i in range(2):
        build_shards.write_data_shard(data_path / f"fineweb_train_00000{i}.bin", rng.integers(4, 256, 5000))
    build_shards.write_data_shard(data_path / "fineweb_val_000000.bin", rng.integers(256, 512, 5000))
    args = calibration_args(tiny_data, tmp_path, DATA_PATH=data_path, GPTQ_CALIBRATION_BATCHES=30)
    model = random_model(args)
    seen, real_hidden = [], model.hidden
    model.hidden = lambda x: (seen.append(x.clone()), real_hidden(x))[1]
    train_gpt.collect_hessians(calibration_run(args), model)
    ids = torch.cat([x.reshape(-1) for x in seen])
    assert ids.numel() == 30 * 128 and ids.min() >= 4 and ids.max() < 256


def test_two_ranks_calibrate_on_the_same_micro_batches_as_one_process(tiny_data, tmp_path, monkeypatch):
    # Training's global batch does not depend on the number of processes; the calibration set should not
    # either, or an 8-GPU export calibrates on 8x the tokens of the 1-GPU run of the same config.
    args = calibration_args(tiny_data, tmp_path, GPTQ_CALIBRATION_BATCHES=4)
    model = random_model(args)
    one = train_gpt.collect_hessians(calibration_run(args), model)
    monkeypatch.setattr(train_gpt.dist, "all_reduce", lambda tensor, *a, **k: None)  # the sum is done here
    ranks = [train_gpt.collect_hessians(calibration_run(args, 2, r), model) for r in range(2)]
    for name, H in one.items():
        summed = ranks[0][name] + ranks[1][name]
        # the trace is the sum of squares of every input seen: 2.0 would be twice the tokens of one process
        assert (summed.trace() / H.trace()).item() == pytest.approx(1.0, rel=1e-5), name
        assert torch.allclose(summed, H, rtol=1e-4, atol=1e-2), name  # the same tokens, summed in another order


# =================================================================================================
# Config
# =================================================================================================


@pytest.mark.parametrize(
    "settings, named",
    [
        (dict(MATRIX_BITS=6), ["MATRIX_BITS=6", "MATRIX_CLIP_SIGMAS"]),
        (dict(EMBED_BITS=7), ["EMBED_BITS=7", "EMBED_CLIP_SIGMAS"]),
        (dict(MATRIX_BITS=9, MATRIX_CLIP_SIGMAS=3), ["MATRIX_BITS=9", "[2, 8]"]),
        (dict(MATRIX_BITS=1, MATRIX_CLIP_SIGMAS=3), ["MATRIX_BITS=1", "[2, 8]"]),
        (dict(MATRIX_CLIP_SIGMAS=-1), ["MATRIX_CLIP_SIGMAS=-1"]),
        (dict(EVAL_STRIDE=65), ["EVAL_STRIDE=65", "TRAIN_SEQ_LEN=64"]),
        (dict(EVAL_STRIDE=33, EVAL_SEQ_LEN=32), ["EVAL_STRIDE=33", "EVAL_SEQ_LEN=32"]),
        (dict(EVAL_STRIDE=-1), ["EVAL_STRIDE=-1"]),
        (dict(COMPRESSOR="gzip"), ["COMPRESSOR='gzip'", "zlib, lzma, brotli"]),
        (dict(GPTQ_CALIBRATION_BATCHES=-2), ["GPTQ_CALIBRATION_BATCHES=-2"]),
        (
            dict(MAX_WALLCLOCK_SECONDS=600, GPTQ_RESERVE_SECONDS=600),
            ["GPTQ_RESERVE_SECONDS=600", "MAX_WALLCLOCK_SECONDS=600"],
        ),
        (
            dict(MAX_WALLCLOCK_SECONDS=10, GPTQ_RESERVE_SECONDS=12),
            ["GPTQ_RESERVE_SECONDS=12", "MAX_WALLCLOCK_SECONDS=10"],
        ),
    ],
)
def test_a_bad_export_or_scoring_setting_is_a_config_error_naming_it(tiny_data, tmp_path, settings, named):
    with pytest.raises(ConfigError) as error:
        tiny_args_on(tiny_data, tmp_path, **settings)
    for text in named:
        assert text in str(error.value), str(error.value)


def test_the_limits_themselves_are_allowed(tiny_data, tmp_path):
    args = tiny_args_on(
        tiny_data,
        tmp_path,
        MATRIX_BITS=2,
        MATRIX_CLIP_SIGMAS=3,
        EMBED_BITS=8,
        EVAL_STRIDE=64,
        MAX_WALLCLOCK_SECONDS=10,
        GPTQ_RESERVE_SECONDS=9.5,
    )
    assert (args.matrix_bits, args.eval_stride, args.val_seq_len) == (2, 64, 64)
    assert tiny_args_on(tiny_data, tmp_path, EVAL_SEQ_LEN=128, EVAL_STRIDE=100).val_seq_len == 128


def test_the_training_clock_stops_gptq_reserve_seconds_before_the_cap(tiny_data, tmp_path):
    args = tiny_args_on(tiny_data, tmp_path, MAX_WALLCLOCK_SECONDS=600, GPTQ_RESERVE_SECONDS=12, WARMDOWN_FRAC=0.5)
    assert args.train_cap_ms == 588_000.0
    assert tiny_args_on(tiny_data, tmp_path, MAX_WALLCLOCK_SECONDS=600).train_cap_ms == 600_000.0
    assert tiny_args_on(tiny_data, tmp_path, MAX_WALLCLOCK_SECONDS=0).train_cap_ms == 0.0
    # the schedule runs on that clock: the warm-down (the last half) starts at 294 s and ends at 588 s
    assert train_gpt.schedule(5, 294_000.0, args)[0] == 1.0 > train_gpt.schedule(5, 294_100.0, args)[0]
    assert train_gpt.schedule(5, 441_000.0, args)[0] == pytest.approx(0.5)
    assert train_gpt.schedule(5, 588_000.0, args)[0] == 0.0


# =================================================================================================
# End to end: int6 + GPTQ + lzma + sliding windows, then EVAL_ONLY on its artifact
# =================================================================================================

FINAL_LINE = re.compile(r"final_int6_lzma_(roundtrip|sliding_window)_exact val_loss:(\d+\.\d{8}) val_bpb:(\d+\.\d{8})")
VAL_TOKENS = 4097  # a 4,096-target validation split keeps the runs' scoring short
# MODEL_DIM=144 MLP_MULT=4: the tied embedding (512 x 144) and the MLP matrices (576 x 144) are over the
# 65,536-value keep-as-float limit: five matrices go through int6/int8 and GPTQ. EVAL_STRIDE=24 does not divide 64.
RUN_SETTINGS = dict(
    MODEL_DIM=144,
    MLP_MULT=4,
    ITERATIONS=6,
    MATRIX_BITS=6,
    MATRIX_CLIP_SIGMAS=12.85,
    EMBED_CLIP_SIGMAS=20,
    GPTQ_CALIBRATION_BATCHES=4,
    COMPRESSOR="lzma",
    EVAL_STRIDE=24,
)
QUANTIZED_MATRICES = 5


class Run(helpers.Run):
    def final_lines(self) -> list[str]:
        return [line for line in self.lines if line.startswith("final_")]

    def scores(self) -> dict[str, tuple[float, float]]:
        matches = [FINAL_LINE.fullmatch(line) for line in self.final_lines()]
        assert all(matches), self.final_lines()
        return {m.group(1): (float(m.group(2)), float(m.group(3))) for m in matches}


def run_script(env_vars: dict[str, str], cwd: Path, nproc: int = 1) -> Run:
    return helpers.run_script(env_vars, cwd, nproc, Run)


def sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


@pytest.fixture(scope="module")
def data_folders(tiny_data, tmp_path_factory) -> dict[str, Path]:
    """main: the training shards and the first VAL_TOKENS validation tokens; other_val: the same training
    shards and the last VAL_TOKENS (other text, same length); val_only: main's validation shard alone."""
    root = tmp_path_factory.mktemp("export_data")
    val = train_gpt.load_data_shard(tiny_data.data_path / "fineweb_val_000000.bin")
    folders = {}
    for name, tokens, with_train in [
        ("main", val[:VAL_TOKENS], True),
        ("other_val", val[-VAL_TOKENS:], True),
        ("val_only", val[:VAL_TOKENS], False),
    ]:
        folders[name] = root / name
        folders[name].mkdir()
        if with_train:
            for shard in tiny_data.data_path.glob("fineweb_train_*.bin"):
                shutil.copy(shard, folders[name] / shard.name)
        build_shards.write_data_shard(folders[name] / "fineweb_val_000000.bin", tokens.numpy())
    assert not torch.equal(val[:VAL_TOKENS], val[-VAL_TOKENS:])
    return folders


def launch(data: TinyData, folder: Path, directory: Path, nproc: int = 1, **settings) -> Run:
    env = tiny_env(data, directory, DATA_PATH=folder, **{**RUN_SETTINGS, **settings})
    return run_script(env, directory, nproc)


@pytest.fixture(scope="module")
def gptq_run(tiny_data, data_folders, tmp_path_factory) -> Run:
    run = launch(tiny_data, data_folders["main"], tmp_path_factory.mktemp("gptq_run"))
    assert run.result.returncode == 0, run.result.stderr
    return run


@dataclass
class EvalOnly:
    run: Run
    artifact_before: tuple[str, int]  # sha256 and mtime of the artifact before the EVAL_ONLY run
    listing_before: list[str]


def eval_only(data, folder, directory, artifact: Path, nproc: int = 1, **settings) -> EvalOnly:
    before = (sha256(artifact), artifact.stat().st_mtime_ns), sorted(os.listdir(artifact.parent))
    run = launch(data, folder, directory, nproc, EVAL_ONLY=1, ARTIFACT_PATH=artifact, **settings)
    return EvalOnly(run, *before)


@pytest.fixture(scope="module")
def eval_only_run(tiny_data, data_folders, gptq_run, tmp_path_factory) -> EvalOnly:
    # the folder has no training shards: EVAL_ONLY needs none
    directory = tmp_path_factory.mktemp("eval_only")
    result = eval_only(tiny_data, data_folders["val_only"], directory, gptq_run.artifact_path)
    assert result.run.result.returncode == 0, result.run.result.stderr
    return result


@pytest.fixture(scope="module")
def two_process_eval_only(tiny_data, data_folders, gptq_run, tmp_path_factory) -> EvalOnly:
    result = eval_only(
        tiny_data, data_folders["main"], tmp_path_factory.mktemp("eval_only_2"), gptq_run.artifact_path, nproc=2
    )
    assert result.run.result.returncode == 0, result.run.result.stderr
    return result


def test_the_run_prints_its_scores_named_by_the_format_the_sliding_one_last(gptq_run):
    run = gptq_run
    assert "Traceback" not in run.result.stderr
    assert [FINAL_LINE.fullmatch(line).group(1) for line in run.final_lines()] == ["roundtrip", "sliding_window"]
    assert run.score_line == run.final_lines()[-1]
    [roundtrip] = run.events("roundtrip_val_loss")
    [sliding] = run.events("sliding_window_val_loss")
    assert (sliding["eval_stride"], sliding["eval_seq_len"], sliding["weights"]) == ("24", "64", "raw")
    scores = run.scores()
    # the printed 4-decimal values are the final lines' 8-decimal ones
    assert float(roundtrip["roundtrip_val_loss"]) == pytest.approx(scores["roundtrip"][0], abs=5e-5)
    assert float(sliding["sliding_window_val_bpb"]) == pytest.approx(scores["sliding_window"][1], abs=5e-5)
    # more context per target scores differently (measured: 5.80269 against 5.80134)
    assert scores["sliding_window"][0] != scores["roundtrip"][0]
    # int6 + GPTQ costs little against the weights before export (measured: 4.5145 -> 4.5189 bpb after 6 steps)
    [last_val] = [e for e in run.events("val_bpb") if e["step"] == "6/6"]
    assert scores["roundtrip"][1] == pytest.approx(float(last_val["val_bpb"]), abs=0.02)


def test_the_scores_do_not_depend_on_the_compressor(tiny_data, data_folders, gptq_run, tmp_path):
    """README (the golfer's loop): COMPRESSOR=zlib in an A/B leaves every score as the recipe's compressor gives it."""
    run = launch(tiny_data, data_folders["main"], tmp_path, COMPRESSOR="zlib")
    assert run.result.returncode == 0, run.result.stderr
    ours = [line.replace("_zlib_", "_lzma_") for line in run.final_lines()]  # the names say the compressor
    assert ours == gptq_run.final_lines() and len(ours) == 2  # GPTQ int6, round trip and sliding, every decimal
    assert sha256(run.artifact_path) != sha256(gptq_run.artifact_path)  # other bytes, the same weights


def test_the_run_logs_gptq_and_the_payload_it_writes(gptq_run):
    run = gptq_run
    [gptq] = run.events("gptq_hessians")
    assert int(gptq["gptq_hessians"]) == QUANTIZED_MATRICES
    assert gptq["within_cap"] == "yes"
    progress = run.events("gptq_calibration")  # the first micro-batch and each tenth: here all four
    assert [e["gptq_calibration"] for e in progress] == ["1/4", "2/4", "3/4", "4/4"]
    assert int(progress[-1]["tokens"]) == 4 * int(run.env["TRAIN_BATCH_TOKENS"]) // GRAD_ACCUM_TOTAL
    [start] = run.events("model_params")
    [artifact] = run.events("artifact")
    assert start["payload_raw_bytes"] == artifact["payload_raw_bytes"]  # the estimate at start is the payload
    raw, model_bytes = int(artifact["payload_raw_bytes"]), int(artifact["model_bytes"])
    assert model_bytes == run.artifact_path.stat().st_size and artifact["sha256"] == sha256(run.artifact_path)
    assert float(artifact["compression_ratio"]) == pytest.approx(raw / model_bytes, abs=5e-4)
    code_bytes = int(start["code_bytes"])
    assert start["compression_needed"] == f"{raw / (train_gpt.ARTIFACT_LIMIT_BYTES - code_bytes):.2f}x"
    header, _ = train_gpt.read_artifact(str(run.artifact_path), Hyperparameters.from_env(run.env))
    assert header["payload_bytes"] == raw
    assert {
        k: header[k]
        for k in (
            "matrix_bits",
            "embed_bits",
            "matrix_clip_sigmas",
            "embed_clip_sigmas",
            "gptq_calibration_batches",
            "compressor",
            "byte_shuffle",
            "weights",
            "looping",
        )
    } == dict(
        matrix_bits=6,
        embed_bits=8,
        matrix_clip_sigmas=12.85,
        embed_clip_sigmas=20.0,
        gptq_calibration_batches=4,
        compressor="lzma",
        byte_shuffle=1,
        weights="raw",
        looping=False,
    )
    payload = run.artifact_path.read_bytes().split(b"\n", 2)[2]
    obj = torch.load(io.BytesIO(train_gpt.decompress(payload, "lzma", 1, raw)))
    assert len(obj["quantized"]) == QUANTIZED_MATRICES
    for name, q in obj["quantized"].items():
        assert q.abs().max() <= (127 if name == "tok_emb.weight" else 31), name


def test_eval_only_reprints_the_same_scores_without_training_or_touching_the_artifact(gptq_run, eval_only_run):
    run = eval_only_run.run
    assert run.final_lines() == gptq_run.final_lines()
    untimed = lambda event: {k: v for k, v in event.items() if "eval_time" not in k}  # noqa: E731
    for key in ("roundtrip_val_loss", "sliding_window_val_loss"):
        [ours], [theirs] = run.events(key), gptq_run.events(key)
        assert untimed(ours) == untimed(theirs)
    for key in ("step", "warmup_steps", "model_params", "gptq_hessians", "artifact_previous_moved_to"):
        assert run.events(key) == [], key
    [theirs], [ours] = gptq_run.events("artifact"), run.events("artifact")
    assert all(ours[k] == theirs[k] for k in ("artifact", "sha256", "model_bytes", "payload_raw_bytes"))
    artifact = gptq_run.artifact_path
    assert (sha256(artifact), artifact.stat().st_mtime_ns) == eval_only_run.artifact_before
    assert sorted(os.listdir(artifact.parent)) == eval_only_run.listing_before


@runs_processes(2)
def test_eval_only_with_two_processes_gives_the_same_scores(gptq_run, two_process_eval_only):
    run = two_process_eval_only.run
    [header] = run.events("world_size")
    assert header["world_size"] == "2"
    one, two = gptq_run.scores(), run.scores()
    assert set(two) == {"roundtrip", "sliding_window"}
    for kind in one:
        # each rank scores a contiguous half of the windows, in batches that start elsewhere: per-token fp32
        # losses may differ in their last bits between batch compositions (measured: identical to 8 decimals).
        # A window scored twice or lost moves the mean by ~1e-3.
        assert two[kind] == pytest.approx(one[kind], rel=1e-6), kind
    assert (
        sha256(gptq_run.artifact_path),
        gptq_run.artifact_path.stat().st_mtime_ns,
    ) == two_process_eval_only.artifact_before


def test_eval_only_on_an_artifact_of_another_shape_exits_2_naming_the_variable(
    tiny_data, data_folders, gptq_run, tmp_path
):
    result = eval_only(tiny_data, data_folders["main"], tmp_path, gptq_run.artifact_path, NUM_LAYERS=3)
    run = result.run
    assert run.result.returncode == 2
    assert "NUM_LAYERS=2 (config: 3)" in run.result.stderr and "Traceback" not in run.result.stderr
    assert run.final_lines() == []
    assert (sha256(gptq_run.artifact_path), gptq_run.artifact_path.stat().st_mtime_ns) == result.artifact_before


def test_eval_only_without_an_artifact_exits_2_naming_artifact_path(tiny_data, data_folders, tmp_path):
    missing = tmp_path / "nothing_here.ptz"
    run = launch(tiny_data, data_folders["main"], tmp_path, EVAL_ONLY=1, ARTIFACT_PATH=missing)
    assert run.result.returncode == 2
    assert f"ARTIFACT_PATH={missing}" in run.result.stderr and "Traceback" not in run.result.stderr
    assert not missing.exists()


def test_the_artifact_does_not_depend_on_the_validation_text(tiny_data, data_folders, gptq_run, tmp_path):
    # Same training shards, tokenizer and config; a validation shard of other text. With GPTQ on, the weights,
    # the codes and the compressed bytes are all the same: calibration never read a validation token.
    run = launch(tiny_data, data_folders["other_val"], tmp_path, EVAL_STRIDE=0)
    assert run.result.returncode == 0, run.result.stderr
    [ours], [theirs] = run.events("artifact"), gptq_run.events("artifact")
    assert run.artifact_path != gptq_run.artifact_path and ours["sha256"] == theirs["sha256"]
    assert sha256(run.artifact_path) == sha256(gptq_run.artifact_path)
    assert run.events("gptq_hessians")[0]["gptq_hessians"] == str(QUANTIZED_MATRICES)
    # and the validation text really was other text: the same weights score differently on it
    assert run.scores()["roundtrip"] != gptq_run.scores()["roundtrip"]
