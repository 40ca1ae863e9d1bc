"""The frontier's switches in our record script (issue 57), each off by default, on the CPU.

With every switch off the record script gives the root's numbers and artifact (tests/test_frontier.py's
roots_numbers test); here each switch is checked on its own: off, it adds no parameter and changes no header;
on, it computes what its record computes, its parameters reach Adam's scalar group, and the settings that cannot
work are refused. SmearGate passes nothing across a BOS: a document's losses do not move when the document before it
changes.

    python3 -m pytest -q tests/test_frontier_switches.py
"""

from __future__ import annotations

import re

import pytest
import torch

import train_gpt
from test_frontier import BOS_ID, TINY, fg, random_ids, tiny_args

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
