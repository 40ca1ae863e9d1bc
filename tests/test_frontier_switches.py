"""The frontier's switches in our record script (issue 57), each off by default, on the CPU.

With every switch off the record script gives the root's numbers and artifact (tests/test_frontier.py's
roots_numbers test); here each switch is checked on its own: off, it adds no parameter and changes no header;
on, it computes what its record computes, its parameters reach Adam's scalar group, and the settings that cannot
work are refused. SmearGate passes nothing across a BOS: a document's losses do not move when the document before it
changes. POLAR_EXPRESS is the record's loop; the export's switches (per-group clips, the gate's int8 rows, LQER) are
checked on the payload, LQER's factors through an artifact's bytes and round trip, and one run with every switch on
trains, exports and scores its artifact again under EVAL_ONLY (about 10 s on a CPU).

    python3 -m pytest -q tests/test_frontier_switches.py
"""

from __future__ import annotations

import io
import json
import re

import pytest
import torch

import train_gpt
from helpers import run_script, tiny_env
from test_frontier import BOS_ID, FRONTIER, TINY, fg, random_ids, tiny_args

MODEL_SWITCHES = {
    "SMEAR_GATE_ENABLED": ["smear_gate", "smear_lambda"],
    "ATTN_OUT_GATE_ENABLED": ["blocks.0.attn.attn_gate_w", "blocks.1.attn.attn_gate_w"],
    "GATED_ATTN_ENABLED": ["blocks.0.attn.attn_gate_w", "blocks.1.attn.attn_gate_w"],
    "SPARSE_ATTN_GATE_ENABLED": ["blocks.0.attn.attn_gate_w", "blocks.1.attn.attn_gate_w"],
}


def args_of(**overrides):
    """tiny_args without DOC_MASK unless asked for."""
    return tiny_args(**{"DOC_MASK": 0, **overrides})


def test_switches_off_build_the_roots_model():
    """Defaults: the root's parameters, names and values (same seed), and the root's header."""
    args = args_of()
    torch.manual_seed(0)
    ours = fg.GPT(args)
    torch.manual_seed(0)
    root = train_gpt.GPT(train_gpt.Hyperparameters.from_env({k: v for k, v in TINY.items() if k != "DOC_MASK"}))
    assert list(ours.state_dict()) == list(root.state_dict())
    assert all(torch.equal(a, b) for a, b in zip(ours.state_dict().values(), root.state_dict().values()))
    for name in fg.NEW_MODEL_SETTINGS:
        assert getattr(args, name) == fg.NEW_MODEL_SETTINGS[name], f"{name}'s default is not its off value"


@pytest.mark.parametrize("switch", list(MODEL_SWITCHES))
def test_each_model_switch_adds_its_parameters_to_adams_scalar_group(switch):
    args = args_of(**{switch: 1})
    model = fg.GPT(args)
    roles = fg.parameter_roles(model)
    new = [n for n in roles if n not in fg.GPT(args_of()).state_dict()]
    assert new == MODEL_SWITCHES[switch] and all(roles[n] == "scalar" for n in new)
    adam, muon = fg.build_optimizers(model, args)  # asserts each parameter is in exactly one group
    scalar = {id(p) for p in adam.param_groups[1]["params"]}
    assert all(id(dict(model.named_parameters())[n]) in scalar for n in new)
    args.tokenizer_path = __file__  # any file: the header holds its sha256
    header = fg.artifact_header(args, "raw", False)["model"]
    assert header[switch.lower()] is True  # the header says so
    assert not set(header) & (set(fg.NEW_MODEL_SETTINGS) - {switch.lower()})  # the others stay out


def smear_reference(x, ids, w, lam):
    """The 2026-04-27 record's smear as a loop: x_t + lam * sigmoid(w . x_t[:window]) * x_{t-1}, none onto a BOS."""
    out = x.clone()
    for b in range(x.size(0)):
        for t in range(1, x.size(1)):
            if ids[b, t] != BOS_ID:
                out[b, t] += lam * torch.sigmoid(w @ x[b, t, : w.numel()]) * x[b, t - 1]
    return out


def test_smear_gate_equals_the_records_formula_and_skips_every_bos():
    model = fg.GPT(args_of(SMEAR_GATE_ENABLED=1, GATE_WINDOW=5))
    with torch.no_grad():
        model.smear_gate.normal_(0, 1.0)
        model.smear_lambda.fill_(0.7)
    ids = random_ids(3, 64, 4, seed=2)
    x = torch.randn(3, 64, 64)
    smeared = model.smear(x, ids)
    torch.testing.assert_close(smeared, smear_reference(x, ids, model.smear_gate[0].detach(), 0.7))
    bos = ids == BOS_ID
    assert bos[:, 1:].sum() >= 3 and torch.equal(smeared[bos], x[bos])  # a BOS keeps its own embedding
    assert not torch.equal(smeared[~bos][1:], x[~bos][1:])
    assert fg.GPT(args_of()).smear(x, ids) is x  # off: the embeddings as they are


def test_smear_gate_passes_nothing_across_a_bos():
    """With the mask (DOC_MASK=1) and the smear on, every weight random: a document's losses do not move when the
    document before it changes (the 04-16 smear, without the 04-27 fix, moves the BOS's own embedding)."""
    args = tiny_args(SMEAR_GATE_ENABLED=1, SPARSE_ATTN_GATE_ENABLED=1)
    torch.manual_seed(0)
    model = fg.GPT(args)
    with torch.no_grad():
        for p in model.parameters():
            p.normal_(0, 0.3) if p.ndim == 2 else None
        model.smear_lambda.fill_(1.0)
    ids = random_ids(3, 64, 0, seed=4)
    ids[:, 20] = ids[:, 40] = BOS_ID  # documents ..19, 20..39, 40..
    changed = ids.clone()
    changed[:, 21:40] = (changed[:, 21:40] + 5) % 60 + 2
    losses = [model.loss(model.hidden(x), x.roll(-1, 1), per_token=True).view(3, 64) for x in (ids, changed)]
    assert torch.equal(losses[0][:, 40:], losses[1][:, 40:])  # the next document's predictions
    assert not torch.equal(losses[0][:, 21:39], losses[1][:, 21:39])  # the changed one's own do move


@pytest.mark.parametrize(
    "switch, mult, window, scale",
    [
        ("ATTN_OUT_GATE_ENABLED", 2.0, 12, 1.0),
        ("GATED_ATTN_ENABLED", 1.0, 64, 1.0),
        ("SPARSE_ATTN_GATE_ENABLED", 1.0, 12, 0.5),
    ],
)
def test_each_head_gate_scales_its_heads_output_as_its_record(switch, mult, window, scale):
    """y_h *= mult * sigmoid(scale * W_h . x[:window]) before the output projection, against the attention without
    the gate on the same weights, with an identity projection so that y is the output."""
    settings = {switch: 1, "SPARSE_ATTN_GATE_SCALE": scale}
    gated, plain = (fg.CausalSelfAttention(args_of(**s), False) for s in (settings, {}))
    plain.load_state_dict({k: v for k, v in gated.state_dict().items() if k != "attn_gate_w"})
    with torch.no_grad():
        for attn in (gated, plain):
            attn.proj.weight.copy_(torch.eye(64))
        assert gated.attn_gate_w.shape == (4, window)
        gated.attn_gate_w.normal_(0, 1.0)
    x = torch.randn(2, 64, 64)
    gate = mult * torch.sigmoid(scale * x[..., :window] @ gated.attn_gate_w.detach().T)  # (B, T, H)
    expected = plain(x).view(2, 64, 4, 16) * gate[..., None]
    torch.testing.assert_close(gated(x), expected.flatten(2))


def test_the_head_gates_start_where_their_records_start():
    """ATTN_OUT_GATE: 2 sigmoid(0) = 1; SPARSE_ATTN_GATE: W zero, 1/2; GATED_ATTN: W ~ N(0, 0.01^2)."""
    assert torch.all(fg.CausalSelfAttention(args_of(ATTN_OUT_GATE_ENABLED=1), False).attn_gate_w == 0)
    assert torch.all(fg.CausalSelfAttention(args_of(SPARSE_ATTN_GATE_ENABLED=1), False).attn_gate_w == 0)
    w = fg.CausalSelfAttention(args_of(GATED_ATTN_ENABLED=1), False).attn_gate_w
    assert 0.005 < w.std() < 0.02
    assert fg.CausalSelfAttention(args_of(), False).gate(w, None) is w  # off: no gate


@pytest.mark.parametrize(
    "settings, message",
    [
        (
            dict(SPARSE_ATTN_GATE_ENABLED=1, GATED_ATTN_ENABLED=1),
            "GATED_ATTN_ENABLED and SPARSE_ATTN_GATE_ENABLED "
            "are each 1, but the heads take one output gate: set only one.",
        ),
        (dict(SMEAR_GATE_ENABLED=1, GATE_WINDOW=65), "GATE_WINDOW=65 must be at most MODEL_DIM=64"),
        (dict(GATED_ATTN_QUANT_GATE=1), "GATED_ATTN_QUANT_GATE=1 quantizes the heads' gate, but none is on"),
        (dict(LQER_FACTOR_BITS=1), "LQER_FACTOR_BITS=1 must be in [2, 8]."),
        (dict(ATTN_OUT_GATE_SRC="q"), "ATTN_OUT_GATE_SRC='q' must be one of proj."),  # not built
        (dict(GATE_WIDTH=12), "GATE_WIDTH='12': did you mean GATE_WINDOW?"),  # the 04-16 record's name
    ],
)
def test_the_switches_refuse_what_cannot_work(settings, message):
    with pytest.raises(fg.ConfigError, match=re.escape(message)):
        args_of(**settings)


# ---- POLAR_EXPRESS: Newton-Schulz's coefficients a step each ----


def records_polar_express(G, coeffs=fg.POLAR_EXPRESS_COEFFS):
    """The 2026-04-23 record's zeropower_via_newtonschulz5 for a bank (B, rows, cols), in our order of operations
    (it writes c * (A @ A), which rounds otherwise in bf16)."""
    X = G.bfloat16()
    transposed = X.size(-2) > X.size(-1)
    X = X.mT if transposed else X
    X = X / (X.norm(dim=(-2, -1), keepdim=True) + 1e-7)
    for a, b, c in coeffs:
        A = X @ X.mT
        X = a * X + (b * A + c * A @ A) @ X
    return X.mT if transposed else X


def muon_of(**settings):
    return fg.build_optimizers(fg.GPT(args_of(**settings)), args_of(**settings))[1]


def test_polar_express_off_is_the_roots_newton_schulz_and_on_the_records():
    G = torch.randn(3, 96, 160, generator=torch.Generator().manual_seed(0))
    assert muon_of().orthogonalize is fg.newton_schulz_orthogonalize
    assert torch.equal(fg.newton_schulz_orthogonalize(G, 5), train_gpt.newton_schulz_orthogonalize(G, 5))
    polar = muon_of(POLAR_EXPRESS=1).orthogonalize
    for bank in (G, G.mT):  # wide and tall
        assert torch.equal(polar(bank, 5), records_polar_express(bank))
    errors = [
        (torch.linalg.svdvals(X.float()) - 1).abs().mean() for X in (polar(G, 5), fg.newton_schulz_orthogonalize(G, 5))
    ]
    assert errors[0] < 0.6 * errors[1]  # closer to U V^T in the same 5 steps
    past = fg.POLAR_EXPRESS_COEFFS + fg.POLAR_EXPRESS_COEFFS[-1:] * 2  # past the table: its last
    assert torch.equal(polar(G, 7), records_polar_express(G, past))


# ---- export: per-group clips, the gate's int8 rows, LQER ----

EXPORT = dict(DOC_MASK=0, MODEL_DIM=256, MLP_MULT=3, VOCAB_SIZE=512, MATRIX_BITS=6, MATRIX_CLIP_SIGMAS=12.85)


def exported(**settings):
    """(args, state_dict, payload) of a model of 5 quantized tensors (2 MLP fc, 2 MLP proj, the embedding), every
    matrix ~ N(0, 1/fan_in), the gates' too."""
    args = args_of(**EXPORT, **settings)
    torch.manual_seed(0)
    model = fg.GPT(args)
    with torch.no_grad():
        for p in model.parameters():
            p.normal_(0, p.size(1) ** -0.5) if p.ndim == 2 else None
    state = model.state_dict()
    return args, state, fg.quantize_state_dict(state, args, fg.parameter_roles(model))


def test_mlp_and_attn_clip_sigmas_set_their_matrices_steps():
    """Each row's step is k * std(row) / 31 at int6: k = MLP_CLIP_SIGMAS on .mlp., ATTN_CLIP_SIGMAS on .attn.,
    MATRIX_CLIP_SIGMAS where those are 0 (their default), EMBED_CLIP_SIGMAS on the embedding."""
    for mlp, attn in ((0.0, 0.0), (11.5, 0.0), (11.5, 13.0)):
        args, state, obj = exported(MLP_CLIP_SIGMAS=mlp, ATTN_CLIP_SIGMAS=attn, EMBED_CLIP_SIGMAS=14, EMBED_BITS=7)
        sigmas = {".mlp.": mlp or 12.85, ".attn.": attn or 12.85, "tok_emb": 14.0}
        assert set(obj["scales"]) >= {"blocks.0.mlp.fc.weight", "blocks.1.mlp.proj.weight", "tok_emb.weight"}
        for name, scale in obj["scales"].items():
            k = next(v for part, v in sigmas.items() if part in name)
            w = state[name].reshape(len(scale), -1)
            expected = (k * w.std(dim=-1) / (63 if "tok_emb" in name else 31)).half()
            assert torch.equal(scale, expected), name
    attn = torch.randn(512, 512)  # the model's attention is under the size that is quantized
    obj = fg.quantize_state_dict({"blocks.0.attn.c_q.weight": attn}, args, {})
    assert torch.equal(obj["scales"]["blocks.0.attn.c_q.weight"], (13.0 * attn.std(dim=-1) / 31).half())


def test_gated_attn_quant_gate_stores_the_gate_as_int8_rows():
    for switch in ("SPARSE_ATTN_GATE_ENABLED", "GATED_ATTN_ENABLED"):
        _, state, kept = exported(**{switch: 1})
        _, _, obj = exported(**{switch: 1, "GATED_ATTN_QUANT_GATE": 1})
        name = "blocks.0.attn.attn_gate_w"
        assert name in kept["kept"] and name not in obj["kept"]  # off: kept as a float
        codes, scale = obj["quantized"][name], obj["scales"][name]
        w = state[name]
        assert codes.dtype == torch.int8 and codes.abs().max() == 127 and scale.shape == (len(w),)  # a step a head
        torch.testing.assert_close(scale, (w.abs().amax(1) / 127).half())
        error = fg.dequantize_state_dict(obj)[name] - w
        assert (error.abs() <= scale.float()[:, None] * 0.5 + 1e-6).all()  # half a step at most


def lqer_error_norms(state, obj):
    plain = fg.dequantize_state_dict({k: v for k, v in obj.items() if k != "lqer"})
    return {n: float((state[n] - plain[n]).norm()) for n in obj["quantized"]}, plain


@pytest.mark.parametrize("asym", [1, 0])
def test_lqer_fits_the_largest_errors_and_round_trips(asym):
    """LQER_TOP_K=3 of the 5 quantized tensors, those of the largest error, each + A B: asymmetric A in [-2, 1] with
    one step and B in [-8, 7] with a step a 64 of its elements (the 2026-04-27 record), or LQER_FACTOR_BITS=8 a row
    each, which must then be E's rank-4 SVD truncation within 1%. The round trip applies them, and the error drops."""
    args, state, obj = exported(LQER_ENABLED=1, LQER_ASYM_ENABLED=asym, LQER_FACTOR_BITS=8)
    norms, plain = lqer_error_norms(state, obj)
    top = sorted(norms, key=norms.get, reverse=True)[:3]
    assert len(norms) == 5 and list(obj["lqer"]) == top
    weights = fg.dequantize_state_dict(obj)
    for name, (a, a_scale, b, b_scale) in obj["lqer"].items():
        rows, cols = state[name].shape
        assert a.shape == (rows, 4) and b.shape == (4, cols) and a.dtype == b.dtype == torch.int8
        if asym:
            assert a_scale.shape == (1,) and b_scale.shape == (4 * cols // 64,)
            assert a.min() >= -2 and a.max() <= 1 and b.min() >= -8 and b.max() <= 7
        else:
            assert a_scale.shape == (rows,) and b_scale.shape == (4,) and a.abs().max() == b.abs().max() == 127
        fit = (a.float() * (a_scale.float() if asym else a_scale.float()[:, None])) @ (
            b.float().reshape(-1, 64) * b_scale.float()[:, None] if asym else b.float() * b_scale.float()[:, None]
        ).reshape(b.shape)
        torch.testing.assert_close(weights[name], plain[name] + fit)
        U, S, Vh = torch.linalg.svd(state[name] - plain[name])
        best = U[:, :4] * S[:4] @ Vh[:4]
        if not asym:
            assert (fit - best).norm() < 0.01 * best.norm()
        assert (state[name] - weights[name]).norm() < norms[name]
    assert all(torch.equal(weights[n], plain[n]) for n in norms if n not in top)


def test_lqer_factors_are_in_the_artifact_and_counted(tmp_path):
    """The factors travel in the payload (their bytes in the artifact's size) and read_artifact applies them;
    with LQER off the payload has no lqer entry (the root's bytes: tests/test_frontier.py)."""
    args, state, obj = exported(LQER_ENABLED=1)
    args.tokenizer_path = __file__  # any file: the header holds its sha256
    plain = {k: v for k, v in obj.items() if k != "lqer"}
    assert "lqer" not in exported()[2]
    factor_bytes = sum(t.numel() * t.element_size() for f in obj["lqer"].values() for t in f)
    assert len(fg.payload_bytes(obj)) - len(fg.payload_bytes(plain)) >= factor_bytes
    sizes, read = {}, {}
    for tag, payload in (("lqer", obj), ("plain", plain)):
        path = str(tmp_path / f"{tag}.ptz")
        raw, sizes[tag] = fg.save_artifact(payload, fg.artifact_header(args, "raw", False), path)
        assert raw == len(fg.payload_bytes(payload))
        header, read[tag] = fg.read_artifact(path, args)
        assert header["lqer_enabled"] is True
        assert all(torch.equal(read[tag][n], w) for n, w in fg.dequantize_state_dict(payload).items())
    assert sizes["lqer"] > sizes["plain"]
    assert all(not torch.equal(read["lqer"][n], read["plain"][n]) for n in obj["lqer"])  # + A B, read back


# ---- every switch at once, as a user runs the script ----

ALL_ON = dict(
    DOC_MASK=1,
    SMEAR_GATE_ENABLED=1,
    SPARSE_ATTN_GATE_ENABLED=1,
    SPARSE_ATTN_GATE_SCALE=0.5,
    GATED_ATTN_QUANT_GATE=1,
    POLAR_EXPRESS=1,
    MIN_LR=0.1,
    MUON_MOMENTUM=0.97,
    BETA2=0.99,
    GRAD_CLIP_NORM=0.3,
    WARMDOWN_FRAC=0.85,
    MATRIX_LR=0.026,
    MATRIX_BITS=6,
    MATRIX_CLIP_SIGMAS=12.85,
    MLP_CLIP_SIGMAS=11.5,
    ATTN_CLIP_SIGMAS=13.0,
    EMBED_BITS=7,
    EMBED_CLIP_SIGMAS=14.0,
    LQER_ENABLED=1,
    GPTQ_CALIBRATION_BATCHES=2,
)


def test_every_switch_on_trains_exports_and_scores_again_from_its_artifact(tiny_data, tmp_path):
    """End to end on the CPU with the frontier's settings (its MLP matrices large enough to be quantized, so that
    LQER has four to choose from): the artifact holds the switches, the LQER factors and the gate's int8 rows, its
    bytes are what the log counts, and EVAL_ONLY scores it to the same number."""
    env = tiny_env(tiny_data, tmp_path, MODEL_DIM=128, MLP_MULT=5, **ALL_ON)
    run = run_script(env, tmp_path, script=FRONTIER)
    assert run.result.returncode == 0, run.result.stderr[-2000:]
    blob = run.artifact_path.read_bytes()
    header = json.loads(blob.split(b"\n")[1])
    assert header["lqer_enabled"] is True and header["gated_attn_quant_gate"] is True
    assert header["model"]["smear_gate_enabled"] is True and header["model"]["sparse_attn_gate_scale"] == 0.5
    payload = blob.split(b"\n", 2)[2]
    obj = torch.load(io.BytesIO(fg.decompress(payload, "zlib", 1, header["payload_bytes"])))
    assert len(obj["lqer"]) == 3 and all(n.endswith(("fc.weight", "proj.weight")) for n in obj["lqer"])
    assert obj["quantized"]["blocks.1.attn.attn_gate_w"].dtype == torch.int8
    (sizes,) = run.events("total_bytes")
    assert int(sizes["model_bytes"]) == len(blob)
    assert int(sizes["total_bytes"]) == len(blob) + FRONTIER.stat().st_size
    again = run_script(dict(env, EVAL_ONLY="1", RUN_ID="eval"), tmp_path, script=FRONTIER)
    assert again.result.returncode == 0, again.result.stderr[-2000:]
    scores = [[line for line in r.lines if line.startswith("final_int6_zlib_roundtrip_exact")] for r in (run, again)]
    assert len(scores[0]) == 1 and scores[0] == scores[1]
