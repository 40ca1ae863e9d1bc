"""Unit tests for the record stack's switches in train_gpt.py (layer 1), one or more per switch: each
fails if its switch does nothing or does the wrong thing (a reference computed another way, a shape,
a parameter count, an update).

Run: python3 -m pytest -q tests/test_stack.py   (CPU only; tiny models; about 20 s on 2 cores)
"""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from torch import nn

import build_shards
import train_gpt
from helpers import cpu_run, runs_processes
from train_gpt import ConfigError, Hyperparameters

TINY = dict(
    NUM_LAYERS="4",
    MODEL_DIM="64",
    NUM_HEADS="4",
    NUM_KV_HEADS="2",
    VOCAB_SIZE="64",
    TRAIN_SEQ_LEN="16",
    TRAIN_BATCH_TOKENS=str(8 * 16),
    VAL_BATCH_SIZE=str(8 * 16),
)


def args_with(**overrides) -> Hyperparameters:
    return Hyperparameters.from_env({**TINY, **{k: str(v) for k, v in overrides.items()}})


def randomize(model: nn.Module, seed: int = 0) -> nn.Module:
    """Leave the identity start (zero projections) so every branch does something."""
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for p in model.parameters():
            p.copy_(torch.randn(p.shape, generator=g) * 0.3)
    return model


def params(model: nn.Module) -> int:
    return sum(p.numel() for p in model.parameters())


def meta_gpt(args: Hyperparameters) -> train_gpt.GPT:
    """The model on the meta device: shapes and parameter counts without memory or init time (a record-size model
    took over a minute to initialise on a 2-core CPU)."""
    with torch.device("meta"):
        return train_gpt.GPT(args)


# ---- recipes and config --------------------------------------------------------------------------


def test_record_recipes_build_the_records_parameter_counts():
    # the 2026-04-09 record has 35,944,536 parameters at sp8192: 8 skip weights and gates (3-layer loops: 8 encoder,
    # 9 decoder positions); the 2026-04-05 record prints model_params:35943512 (7 of each)
    assert params(meta_gpt(Hyperparameters.from_env({"RECIPE": "record"}))) == 35_944_536
    assert params(meta_gpt(Hyperparameters.from_env({"RECIPE": "record_2026_04_05"}))) == 35_943_512
    # and the defaults are the reference run's 17.06M
    assert params(meta_gpt(Hyperparameters.from_env({}))) == 17_059_912


def test_recipe_values_apply_and_explicit_variables_win():
    args = Hyperparameters.from_env({"RECIPE": "record", "NUM_LAYERS": "9", "EMA_DECAY": "0"})
    assert (args.recipe, args.num_layers, args.ema_decay) == ("record", 9, 0.0)
    assert (args.mlp_mult, args.mlp_act, args.xsa_last_n, args.warmdown_frac) == (4.0, "leaky_relu2", 11, 0.72)
    defaults = Hyperparameters.from_env({})
    assert (defaults.recipe, defaults.mlp_act, defaults.num_loops, defaults.ema_decay) == ("", "relu2", 0, 0.0)
    with pytest.raises(ConfigError, match="RECIPE='recrod' is not one of record_2026_04_05, record, p180"):
        Hyperparameters.from_env({"RECIPE": "recrod"})


def test_data_dir_uses_the_records_layout_and_explicit_paths_still_win():
    args = Hyperparameters.from_env({"RECIPE": "record", "DATA_DIR": "/d"})
    assert args.data_path == "/d/datasets/fineweb10B_sp8192"
    assert args.tokenizer_path == "/d/tokenizers/fineweb_8192_bpe.model"
    args = Hyperparameters.from_env({"DATA_DIR": "/d", "TOKENIZER_PATH": "/t.model"})
    assert (args.data_path, args.tokenizer_path) == ("/d/datasets/fineweb10B_sp1024", "/t.model")


@pytest.mark.parametrize(
    "env, named",
    [
        ({"ROPE_DIMS": "7"}, "ROPE_DIMS=7"),
        ({"ROPE_DIMS": "32"}, "ROPE_DIMS=32"),
        ({"PARALLEL_RESIDUAL_START": "4"}, "PARALLEL_RESIDUAL_START=4"),
        ({"NUM_LOOPS": "1", "LOOP_START": "2", "LOOP_END": "4"}, "LOOP_END=4"),
        ({"NUM_LOOPS": "1", "LOOP_START": "3", "LOOP_END": "2"}, "LOOP_START=3"),
        ({"MLP_ACT": "gelu"}, "MLP_ACT='gelu'"),
        ({"TIE_EMBEDDINGS": "0"}, "TIE_EMBEDDINGS=0"),
        ({"WARMDOWN_FRAC": "1.5"}, "WARMDOWN_FRAC=1.5"),
        ({"EMA_DECAY": "1"}, "EMA_DECAY=1"),
        ({"MUON_WD": "-0.1"}, "MUON_WD=-0.1"),
        ({"ENABLE_LOOPING_AT": "2"}, "ENABLE_LOOPING_AT=2"),
    ],
)
def test_switch_values_that_cannot_work_are_config_errors(env, named):
    with pytest.raises(ConfigError, match=named):
        args_with(**env)


# ---- MLP -------------------------------------------------------------------------------------------


@pytest.mark.parametrize("mult, hidden", [(2, 128), (3.0, 192), (3.5, 224), (2.7, 172)])  # int(mult * 64)
def test_mlp_mult_takes_fractions_rounded_down_as_the_record_does(mult, hidden):
    block = train_gpt.GPT(args_with(MLP_MULT=mult)).blocks[0]
    assert block.mlp.fc.weight.shape == (hidden, 64) and block.mlp.proj.weight.shape == (64, hidden)


@pytest.mark.parametrize("act, slope", [("relu2", 0.0), ("leaky_relu2", 0.5)])
def test_mlp_activation_is_the_squared_relu_or_leaky_relu(act, slope):
    mlp = randomize(train_gpt.MLP(16, 2.0, act))
    x = torch.randn(5, 16)
    h = x @ mlp.fc.weight.T
    expected = torch.where(h > 0, h, slope * h).square() @ mlp.proj.weight.T
    torch.testing.assert_close(mlp(x), expected)


@pytest.mark.parametrize("act", ["relu2", "leaky_relu2"])
def test_mlp_function_is_autograd_written_out_to_the_bit(act):
    """MLP_IMPL=function (the default) runs MLPFunction where gradients flow: its output and all three gradients
    equal the modules' (MLP_IMPL=modules) exactly in fp32, eager and traced whole by torch.compile (fullgraph, as
    the trainer compiles; aot_eager: dynamo and AOTAutograd without inductor's code generation, so fast on CPU)."""
    modules = randomize(train_gpt.MLP(64, 3.0, act, "modules"))
    function = train_gpt.MLP(64, 3.0, act, "function")
    function.load_state_dict(modules.state_dict())
    x, weights = torch.randn(2, 33, 64), torch.randn(2, 33, 64)

    def run(mlp):
        mlp.zero_grad(set_to_none=True)
        xi = x.clone().requires_grad_()
        out = mlp(xi)
        (out * weights).sum().backward()
        return out, xi.grad, mlp.fc.weight.grad, mlp.proj.weight.grad

    want = run(modules)
    torch._dynamo.reset()
    for got in (run(function), run(torch.compile(function, fullgraph=True, backend="aot_eager"))):
        assert all(torch.equal(a, b) for a, b in zip(got, want))
    assert (want[0] != 0).any() and all(g.abs().sum() > 0 for g in want[1:])


def test_mlp_function_leaves_no_grad_passes_to_the_modules():
    """Scoring and GPTQ's Hessians run without gradients: there the modules run, so that GPTQ's forward hooks on
    fc and proj see their inputs; where gradients flow, MLPFunction runs instead of the modules."""
    mlp = randomize(train_gpt.MLP(64, 2.0, "leaky_relu2", "function"))
    seen = []
    for m in (mlp.fc, mlp.proj):
        m.register_forward_hook(lambda m, inputs, out: seen.append(inputs[0].shape))
    x = torch.randn(3, 5, 64)
    with torch.no_grad():
        want = mlp(x)
    assert seen == [(3, 5, 64), (3, 5, 128)]
    got = mlp(x)
    assert len(seen) == 2 and got.grad_fn is not None and torch.equal(got.detach(), want)
    assert train_gpt.GPT(args_with(MLP_IMPL="modules")).blocks[0].mlp.function is False
    assert train_gpt.GPT(args_with()).blocks[0].mlp.function is True


@pytest.mark.parametrize("env, want", [(None, False), ("0", False), ("1", True)])
def test_cuda_turns_inductors_mixed_order_reductions_off_unless_told(monkeypatch, env, want):
    """On CUDA, init_distributed turns inductor's mixed-order reductions off (with the loops on they spilled: 7.1% of
    RECIPE=record's step, MEASUREMENTS.md); TORCHINDUCTOR_MIX_ORDER_REDUCTION=1 keeps them. Run here with the GPU
    calls stubbed: the setting must exist under this name in this torch, and follow the variable."""
    monkeypatch.setattr(torch.cuda, "set_device", lambda device: None)
    if env is None:
        monkeypatch.delenv("TORCHINDUCTOR_MIX_ORDER_REDUCTION", raising=False)
    else:
        monkeypatch.setenv("TORCHINDUCTOR_MIX_ORDER_REDUCTION", env)
    config, matmul = torch._inductor.config.triton, torch.backends.cuda.matmul  # monkeypatch cannot restore these
    saved = config.mix_order_reduction, matmul.allow_tf32
    try:
        config.mix_order_reduction = not want
        train_gpt.init_distributed(train_gpt.DistContext(0, 1, 0, torch.device("cuda", 0)))
        assert config.mix_order_reduction is want
    finally:
        config.mix_order_reduction, matmul.allow_tf32 = saved


# ---- attention ---------------------------------------------------------------------------------------


def test_partial_rotary_rotates_the_first_rope_dims_only():
    x = torch.randn(2, 3, 10, 16)  # (B, H, T, hd)
    cos, sin = train_gpt.rotary_cos_sin(10, 8, 10_000.0, torch.device("cpu"))
    out = train_gpt.apply_rotary(x, cos, sin)
    torch.testing.assert_close(out[..., 8:], x[..., 8:], rtol=0, atol=0)  # passed through untouched
    # the first 8 dims are rotated exactly as a head of size 8 would be with full rotary
    full = train_gpt.apply_rotary(x[..., :8].contiguous(), cos, sin)
    torch.testing.assert_close(out[..., :8], full)
    assert not torch.allclose(out[..., :8], x[..., :8])
    attn = train_gpt.CausalSelfAttention(args_with(ROPE_DIMS=8), xsa=False)
    assert attn.rope_dims == 8 and train_gpt.CausalSelfAttention(args_with(), xsa=False).rope_dims == 16


def test_exclusive_self_attention_removes_the_own_value_direction_gqa_aware():
    B, H, Hkv, T, hd = 2, 4, 2, 5, 8
    y, v = torch.randn(B, H, T, hd), torch.randn(B, Hkv, T, hd)
    out = train_gpt.exclusive_self_attention(y, v)
    # reference: repeat each kv head for its query heads (h reads kv head h // (H/Hkv)), project out
    vn = F.normalize(v.repeat_interleave(H // Hkv, dim=1), dim=-1)
    expected = y - (y * vn).sum(-1, keepdim=True) * vn
    torch.testing.assert_close(out, expected)
    assert (out * vn).sum(-1).abs().max() < 1e-5  # orthogonal to the own token's value


def test_xsa_last_n_switches_on_exactly_the_last_n_layers():
    def xsa(**settings) -> list[bool]:
        return [b.attn.post is train_gpt.exclusive_self_attention for b in train_gpt.GPT(args_with(**settings)).blocks]

    assert xsa(XSA_LAST_N=3) == [False, True, True, True]
    assert all(xsa(XSA_LAST_N=11))
    assert not any(xsa())


# ---- blocks ------------------------------------------------------------------------------------------


def block_reference(
    block: train_gpt.Block, x: torch.Tensor, x0: torch.Tensor, layer: int, ln_scale: bool, parallel: bool
) -> torch.Tensor:
    s = 1 / math.sqrt(layer + 1) if ln_scale else 1.0
    x = block.resid_mix[0] * x + block.resid_mix[1] * x0
    a = block.attn_scale * block.attn(train_gpt.rms_norm(x) * s)
    if parallel:
        return x + a + block.mlp_scale * block.mlp(train_gpt.rms_norm(x) * s)
    x = x + a
    return x + block.mlp_scale * block.mlp(train_gpt.rms_norm(x) * s)


@pytest.mark.parametrize("ln_scale", [0, 1])
@pytest.mark.parametrize("parallel_start", [-1, 0, 2])
def test_block_wiring_ln_scale_and_parallel_residuals(ln_scale, parallel_start):
    torch.manual_seed(0)
    model = randomize(train_gpt.GPT(args_with(LN_SCALE=ln_scale, PARALLEL_RESIDUAL_START=parallel_start)))
    x, x0 = torch.randn(2, 6, 64), torch.randn(2, 6, 64)
    for layer in (1, 3):
        parallel = 0 <= parallel_start <= layer
        block = model.blocks[layer]
        torch.testing.assert_close(block(x, x0), block_reference(block, x, x0, layer, bool(ln_scale), parallel))
        # the switch matters: the other wiring gives another output
        other = block_reference(block, x, x0, layer, not ln_scale, parallel)
        assert (block(x, x0) - other).abs().max() > 1e-3


def test_skip_gates_add_parameters_train_with_adam_and_start_halfway():
    plain, gated = train_gpt.GPT(args_with()), train_gpt.GPT(args_with(SKIP_GATES_ENABLED=1))
    assert params(gated) - params(plain) == 2 * 64 and gated.skip_gates.shape == (2, 64)
    x, skip = torch.randn(3, 64), torch.randn(3, 64)
    with torch.no_grad():
        gated.skip_weights.fill_(2.0)
        torch.testing.assert_close(gated.add_skip(x, skip, 1), 0.5 * (2.0 * skip) + 0.5 * x)  # sigmoid(0) = 1/2
        gated.skip_gates[1].fill_(3.0)
        g = torch.sigmoid(torch.tensor(3.0))
        torch.testing.assert_close(gated.add_skip(x, skip, 1), (1 - g) * 2.0 * skip + g * x)
    adam, _ = train_gpt.build_optimizers(gated, args_with(SKIP_GATES_ENABLED=1))
    assert any(p is gated.skip_gates for group in adam.param_groups for p in group["params"])


def test_layer_order_of_the_records_and_their_skip_counts():
    args = Hyperparameters.from_env({"RECIPE": "record_2026_04_05"})
    assert train_gpt.layer_order(args, False) == ([0, 1, 2, 3, 4], [5, 6, 7, 8, 9, 10])
    enc, dec = train_gpt.layer_order(args, True)
    assert enc + dec == [0, 1, 2, 3, 4, 5, 4, 5, 4, 5, 6, 7, 8, 9, 10] and len(enc) == 7
    assert train_gpt.GPT(args).skip_weights.shape == (7, 512)  # min(7, 8) rows, as the record
    args = Hyperparameters.from_env({"RECIPE": "record"})  # 2026-04-09: its README's encoder and decoder
    assert train_gpt.layer_order(args, True) == ([0, 1, 2, 3, 4, 5, 3, 4], [5, 3, 4, 5, 6, 7, 8, 9, 10])
    assert train_gpt.GPT(args).skip_weights.shape == (8, 512)
    assert [b.parallel for b in train_gpt.GPT(args).blocks] == [False] * 7 + [True] * 4


def test_looping_runs_the_blocks_in_the_loop_order_with_shared_weights():
    model = train_gpt.GPT(args_with(NUM_LOOPS=2, LOOP_START=1, LOOP_END=2))
    calls = []
    for i, block in enumerate(model.blocks):
        block.register_forward_hook(lambda *_, i=i: calls.append(i))
    x = torch.randint(0, 64, (1, 16))
    model(x, x)
    assert calls == [0, 1, 2, 3]
    calls.clear()
    model.looping = True
    model(x, x)
    assert calls == [0, 1, 2, 1, 2, 1, 2, 3]
    # loops share the blocks' weights: only the skip weights grow, to min(4, 4) rows from 2
    assert params(model) - params(train_gpt.GPT(args_with())) == (4 - 2) * 64


def test_ortho_init_makes_the_matrices_orthogonal_and_keeps_zero_projections():
    torch.manual_seed(0)
    model = train_gpt.GPT(args_with(ORTHO_INIT=1, MODEL_DIM=128, NUM_HEADS=2, NUM_KV_HEADS=1))
    fc = model.blocks[0].mlp.fc.weight  # (256, 128): orthonormal columns
    torch.testing.assert_close(fc.T @ fc, torch.eye(128), rtol=0, atol=1e-4)
    c_q = model.blocks[1].attn.c_q.weight
    torch.testing.assert_close(c_q @ c_q.T, torch.eye(128), rtol=0, atol=1e-4)
    assert model.blocks[0].mlp.proj.weight.abs().max() == 0 and model.blocks[0].attn.proj.weight.abs().max() == 0
    plain = train_gpt.GPT(args_with(MODEL_DIM=128, NUM_HEADS=2, NUM_KV_HEADS=1)).blocks[0].mlp.fc.weight
    assert (plain.T @ plain - torch.eye(128)).abs().max() > 0.1


# ---- the record's shuffled sampling --------------------------------------------------------------


def shuffled(seed: int = 5):
    return lambda files, ctx: train_gpt.ShuffledSequenceLoader(files, ctx, seed)


@pytest.mark.parametrize("world_size", [2, 4])
def test_shuffled_global_batch_is_the_same_for_any_world_size(tmp_path, world_size):
    from test_train_gpt import global_batches, write_counting_shards

    write_counting_shards(tmp_path)
    files = train_gpt.find_shards(str(tmp_path), "train")
    assert global_batches(files, world_size, 6, shuffled()) == global_batches(files, 1, 6, shuffled())
    assert global_batches(files, 1, 6, shuffled(6)) != global_batches(files, 1, 6, shuffled())  # SEED matters


def test_shuffled_sequences_are_whole_windows_of_one_shard_none_twice_per_epoch(tmp_path):
    from test_train_gpt import SEQ_LEN, SHARD_SIZES, global_batches, write_counting_shards

    stream = write_counting_shards(tmp_path)
    bounds = np.cumsum([0] + list(SHARD_SIZES))
    files = train_gpt.find_shards(str(tmp_path), "train")
    batches = global_batches(files, 1, 1, shuffled())
    seen = []
    for x, y in batches[0]:
        window = x + y[-1:]  # tokens count up: a window is consecutive ids within one shard
        assert window == list(range(window[0], window[0] + SEQ_LEN + 1))
        shard = np.searchsorted(bounds, window[0], side="right") - 1
        assert window[-1] < bounds[shard + 1], "a window crosses a shard boundary"
        seen.append(window[0])
    assert len(seen) == len(set(seen))  # without replacement
    stream_batch = global_batches(files, 1, 1)[0]
    assert sorted(batches[0]) != sorted(stream_batch)  # not the contiguous stream
    assert len(stream) > 0


# ---- optimizers ----------------------------------------------------------------------------------


def test_muon_row_normalize_and_decoupled_weight_decay():
    g = torch.Generator().manual_seed(0)
    p0, grad = torch.randn(8, 16, generator=g), torch.randn(8, 16, generator=g) * torch.arange(1, 9.0)[:, None]
    seen = []

    def record(G, steps):
        seen.append(G.clone())
        return G

    for row_normalize, wd in [(True, 0.0), (False, 0.5), (True, 0.5)]:
        p = nn.Parameter(p0.clone())
        opt = train_gpt.Muon(
            [p],
            lr=0.1,
            momentum=0.0,
            backend_steps=5,
            orthogonalize=record,
            row_normalize=row_normalize,
            weight_decay=wd,
        )
        p.grad = grad.clone()
        opt.step()
        update = grad / grad.norm(dim=1, keepdim=True) if row_normalize else grad
        torch.testing.assert_close(seen[-1], update[None])  # what Newton-Schulz receives: a bank of one
        torch.testing.assert_close(p.detach(), p0 * (1 - 0.1 * wd) - 0.1 * update)


def test_adam_weight_decay_per_group_is_decoupled():
    args = args_with(EMBED_WD=0.5, ADAM_WD=0.25, TIED_EMBED_LR=0.1, SCALAR_LR=0.2)
    model = train_gpt.GPT(args)
    adam, _ = train_gpt.build_optimizers(model, args)
    assert [group["weight_decay"] for group in adam.param_groups] == [0.5, 0.25]
    emb, mix = model.tok_emb.weight.detach().clone(), model.blocks[0].resid_mix.detach().clone()
    for p in model.parameters():
        p.grad = torch.zeros_like(p)
    adam.step()  # zero gradients: only the decay moves the weights
    torch.testing.assert_close(model.tok_emb.weight.detach(), emb * (1 - 0.1 * 0.5))
    torch.testing.assert_close(model.blocks[0].resid_mix.detach(), mix * (1 - 0.2 * 0.25))


# ---- schedule and EMA ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "env, step, elapsed_ms, expected",
    [
        (dict(WARMDOWN_FRAC=0.5, ITERATIONS=100, MAX_WALLCLOCK_SECONDS=0), 40, 0, 1.0),
        (dict(WARMDOWN_FRAC=0.5, ITERATIONS=100, MAX_WALLCLOCK_SECONDS=0), 75, 0, 0.5),
        (dict(WARMDOWN_FRAC=0.5, ITERATIONS=100, MAX_WALLCLOCK_SECONDS=0, WARMDOWN_ITERS=10), 75, 0, 0.5),  # frac wins
        (dict(WARMDOWN_FRAC=0.5, ITERATIONS=100, MAX_WALLCLOCK_SECONDS=0, MIN_LR=0.1), 99, 0, 0.1),
        (dict(WARMDOWN_FRAC=0.25, MAX_WALLCLOCK_SECONDS=100), 7, 90_000, 0.4),  # of the wallclock, not steps
        (dict(WARMDOWN_ITERS=10, ITERATIONS=100, MAX_WALLCLOCK_SECONDS=0, MIN_LR=0.3), 95, 0, 0.5),
        (dict(WARMDOWN_ITERS=10, ITERATIONS=100, MAX_WALLCLOCK_SECONDS=0, MIN_LR=0.3), 99, 0, 0.3),
    ],
)
def test_warmdown_frac_and_min_lr(env, step, elapsed_ms, expected):
    assert train_gpt.schedule(step, elapsed_ms, args_with(**env))[0] == pytest.approx(expected)


def test_the_loops_switch_on_at_enable_looping_at_of_the_steps_or_of_the_clock():
    loops = dict(NUM_LOOPS=1, LOOP_START=1, LOOP_END=2, ENABLE_LOOPING_AT=0.5, ITERATIONS=100)
    steps, clock = args_with(**loops, MAX_WALLCLOCK_SECONDS=0), args_with(**loops, MAX_WALLCLOCK_SECONDS=100)
    assert [train_gpt.schedule(step, 0.0, steps)[2] for step in (49, 50, 99)] == [False, True, True]
    assert [train_gpt.schedule(99, ms, clock)[2] for ms in (49_999.0, 50_000.0)] == [False, True]
    assert not train_gpt.schedule(99, 0.0, args_with(ITERATIONS=100, MAX_WALLCLOCK_SECONDS=0))[2]  # no loops: never


def test_ema_follows_the_weights_and_copies_the_average_back():
    model = nn.Linear(3, 2)
    start = [p.detach().clone() for p in model.parameters()]
    ema = train_gpt.EMA(model, 0.9)
    with torch.no_grad():
        for k in range(3):
            for p in model.parameters():
                p.add_(1.0)
            ema.update()
    # ema_3 = 0.9^3 * w0 + 0.1 * (0.9^2 (w0+1) + 0.9 (w0+2) + (w0+3))
    for s, p0 in zip(ema.shadow, start):
        torch.testing.assert_close(s, p0 + 0.1 * (0.81 * 1 + 0.9 * 2 + 3))
    ema.copy_to_model()
    for p, p0 in zip(model.parameters(), start):
        torch.testing.assert_close(p.detach(), p0 + 0.1 * (0.81 + 1.8 + 3))


def test_warmup_compiles_both_loop_graphs_and_restores_everything(tmp_path, monkeypatch):
    args = args_with(NUM_LOOPS=1, LOOP_START=1, LOOP_END=2, WARMUP_STEPS=2)
    model = train_gpt.GPT(args)
    seen = []
    monkeypatch.setattr(train_gpt, "train_step", lambda run, state, *a: seen.append(state.model.looping))
    monkeypatch.setattr(train_gpt, "make_train_loader", lambda *a: None)
    train_gpt.warmup_and_restore(cpu_run(args), train_gpt.TrainState(model, model, []))
    assert seen == [False, False, True, True] and model.looping is False


def test_too_little_data_for_a_shuffled_step_is_a_shard_error_naming_the_fix(tmp_path):
    build_shards.write_data_shard(tmp_path / "fineweb_train_000000.bin", np.arange(100))
    loader = train_gpt.ShuffledSequenceLoader(
        [tmp_path / "fineweb_train_000000.bin"], train_gpt.DistContext(0, 1, 0, torch.device("cpu")), 0
    )
    with pytest.raises(train_gpt.ShardError, match="fewer than one step .*TRAIN_SHUFFLE=0"):
        loader.next_batch(32, 16)  # 8 micro-batches of 2 sequences: 16 needed, 5 there


# ---- end to end -------------------------------------------------------------------------------


RECORD_STACK = dict(  # RECIPE=record's switches at a tiny size
    RECIPE="record",
    NUM_LAYERS=4,
    LOOP_START=1,
    LOOP_END=2,
    PARALLEL_RESIDUAL_START=3,
    ROPE_DIMS=16,
    ITERATIONS=8,
    EMA_DECAY=0.5,
    WARMUP_STEPS=1,
    TRAIN_LOG_EVERY=1,
    VAL_LOSS_EVERY=0,
    TTT_CHUNK_TOKENS=1024,
    TTT_EPOCHS=1,
    ENABLE_LOOPING_AT=0.5,
)


@pytest.fixture(scope="module")
def record_stack(tiny_data, tmp_path_factory):
    """The record stack's run in one process."""
    from test_end_to_end import launch

    return launch(tiny_data, tmp_path_factory.mktemp("record_stack"), **RECORD_STACK)


def assert_record_stack_ran(run) -> None:
    """The loops switch on at half the steps, both graphs warm up before the clock, the EMA is exported and scored."""
    assert run.result.returncode == 0, run.result.stderr
    [loop] = run.events("layer_loop")
    assert loop["step"] == "4" and loop["order"] == "0-1-2-1-2-1-2-3"
    assert [e["looping"] for e in run.events("warmup_step")] == ["0", "1"]  # both graphs before the clock
    assert [e["weights"] for e in run.events("val_bpb")] == ["raw", "ema"]
    assert run.events("roundtrip_val_bpb")[0]["weights"] == "ema"
    assert run.events("loss_impl")[0]["warmdown"] == "frac_0.72_wins_over_WARMDOWN_ITERS"
    assert run.score_line.startswith("final_int6_brotli_ttt_exact ")  # the score of record: TTT, last


def test_the_record_stack_runs_end_to_end_loops_on_time_and_scores_the_ema(record_stack):
    assert_record_stack_ran(record_stack)


@runs_processes(2)
def test_the_record_stack_trains_the_same_model_on_two_processes(record_stack, tiny_data, tmp_path):
    from test_end_to_end import launch

    runs = [record_stack, launch(tiny_data, tmp_path, nproc=2, **RECORD_STACK)]
    assert_record_stack_ran(runs[1])
    one, two = (run.losses("train_loss") for run in runs)
    # at most one unit of the log's 4th decimal: 2 ranks orthogonalise banks of 2 matrices where 1 process does banks
    # of 4, and CPU bf16 matmuls of other batch sizes round differently (a lost all-gather moves losses by > 0.01)
    assert one.keys() == two.keys() and max(abs(one[k] - two[k]) for k in one) < 1.5e-4

    def score(run, kind: str) -> float:  # the recipe's exact lines: int6 weights, brotli
        line = next(x for x in run.lines if x.startswith(f"final_int6_brotli_{kind}_exact "))
        return float(line.split("val_bpb:")[1])

    for kind in ("roundtrip", "sliding_window", "ttt"):  # TTT shares windows and sequences out and sums gradients
        assert abs(score(runs[0], kind) - score(runs[1], kind)) < 1e-4, kind


def test_mlp_function_backward_under_autocast_as_compile_0_runs_it():
    """Issue 49: COMPILE=0 on CUDA crashed in MLPFunction.backward (autocast ran the linears in bf16; x and the weights
    stayed fp32: "expected mat1 and mat2 to have the same dtype"). CPU autocast does the same to the forward."""
    torch.manual_seed(0)
    function, modules = (train_gpt.MLP(64, 2.0, "leaky_relu2", impl) for impl in ("function", "modules"))
    torch.nn.init.normal_(function.proj.weight, std=0.1)
    modules.load_state_dict(function.state_dict())
    x = torch.randn(4, 16, 64, requires_grad=True)
    grads = []
    for mlp in (function, modules):
        with torch.autocast("cpu", dtype=torch.bfloat16):
            y = mlp(train_gpt.rms_norm(x))
        assert y.dtype == torch.bfloat16
        y.float().square().sum().backward()
        grads.append([x.grad, mlp.fc.weight.grad, mlp.proj.weight.grad])
        x.grad = None
    for got, want in zip(*grads):
        assert got.dtype == want.dtype == torch.float32
        torch.testing.assert_close(got, want, rtol=2e-2, atol=1e-3)  # bf16 products
