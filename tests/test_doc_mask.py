"""DOC_MASK=1, document-masked attention: no token attends across a BOS, in training and on every scoring path.

CPU: the reference (SDPA with a mask) against a per-document loop of plain causal attention, the kernel's segments
against a Python count, and the leak probe (a token's loss does not move when another document's tokens change) on
the training forward, the round trip's and sliding windows' scoring and TTT. CUDA with flash-attn-4 installed: the
kernel against the reference, forward and backward, and compiled in one graph.

    python3 -m pytest -q tests/test_doc_mask.py
"""

from __future__ import annotations

import json

import pytest
import torch
import torch.nn.functional as F

import train_gpt
from helpers import run_script, tiny_env
from train_gpt import BOS_ID, ConfigError

TINY = dict(NUM_LAYERS="2", MODEL_DIM="64", NUM_HEADS="4", NUM_KV_HEADS="2", VOCAB_SIZE="64", TRAIN_SEQ_LEN="64")
TINY |= dict(TRAIN_BATCH_TOKENS=str(8 * 64), VAL_BATCH_SIZE=str(8 * 2 * 64), RUN_ID="doc_mask", DOC_MASK="1")
CPU = train_gpt.DistContext(0, 1, 0, torch.device("cpu"))
HAS_FA4 = torch.cuda.is_available() and train_gpt.resolve_attn_impl(
    train_gpt.Hyperparameters.from_env(dict(TINY)), torch.device("cuda")
) == ("fa4", "auto_cuda")


def tiny_args(**overrides) -> train_gpt.Hyperparameters:
    return train_gpt.Hyperparameters.from_env({**TINY, **{k: str(v) for k, v in overrides.items()}})


def random_ids(rows: int, T: int, docs_per_row: int, seed: int = 0, vocab: int = 64) -> torch.Tensor:
    """(rows, T) token ids in [2, vocab) with BOS_ID at random places (some rows with none, one at 0)."""
    g = torch.Generator().manual_seed(seed)
    ids = torch.randint(2, vocab, (rows, T), generator=g)
    for r in range(rows):
        for pos in torch.randperm(T, generator=g)[: (r * docs_per_row) % (docs_per_row + 2)]:
            ids[r, pos] = BOS_ID
    return ids


def per_document_attention(q, k, v, ids):
    """Plain causal attention on each document of each row alone: what the mask must equal."""
    out = torch.empty_like(q)
    for b in range(ids.size(0)):
        starts = [0] + [p for p in (ids[b] == BOS_ID).nonzero().flatten().tolist() if p > 0] + [ids.size(1)]
        for lo, hi in zip(starts, starts[1:]):
            part = [t[b : b + 1, :, lo:hi] for t in (q, k, v)]
            out[b : b + 1, :, lo:hi] = F.scaled_dot_product_attention(*part, is_causal=True, enable_gqa=True)
    return out


def test_reference_equals_a_loop_over_documents():
    ids = random_ids(5, 96, 4)
    g = torch.Generator().manual_seed(1)
    q = torch.randn(5, 4, 96, 16, generator=g)
    k, v = (torch.randn(5, 2, 96, 16, generator=g) for _ in range(2))
    masked = train_gpt.sdpa_attention(q, k, v, train_gpt.doc_causal_mask(ids))
    assert (ids == BOS_ID).sum() > 5 and (ids[:, 1:] == BOS_ID).any(1).sum() >= 3  # documents inside rows
    torch.testing.assert_close(masked, per_document_attention(q, k, v, ids), rtol=1e-5, atol=1e-6)
    dense = train_gpt.sdpa_attention(q, k, v, None)
    assert not torch.allclose(masked, dense, atol=1e-3)  # the mask does something


def test_segments_are_the_documents_and_rows_as_one_stream():
    ids = random_ids(4, 256, 3, seed=2)  # bound: 4 + 4 * 256 / 128 = 12 segments
    cu, cut_off = train_gpt.doc_segments(ids)
    flat = ids.flatten()
    starts = [p for p in range(flat.numel()) if p % 256 == 0 or flat[p] == BOS_ID]
    assert len(starts) <= 12 and not cut_off
    assert cu.dtype == torch.int32 and cu.shape == (13,)
    assert cu.tolist() == starts + [flat.numel()] * (13 - len(starts))  # empty segments after the last


def test_segments_past_the_bound_are_flagged_and_poison_the_output():
    ids = torch.full((2, 128), 5)
    ids[:, ::16] = BOS_ID  # 8 documents a row: 16 segments > 2 + 2 * 128 / 128 = 4
    cu, cut_off = train_gpt.doc_segments(ids)
    assert bool(cut_off) and cu.tolist() == [0, 16, 32, 48, 256]
    ids[:, 16:] = 5  # one document a row: 2 segments
    cu, cut_off = train_gpt.doc_segments(ids)
    assert not bool(cut_off) and cu.tolist() == [0, 128, 256, 256, 256]


def test_the_settings_choose_and_refuse_the_backend():
    assert train_gpt.resolve_attn_impl(tiny_args(DOC_MASK=0), CPU.device) == ("dense", "doc_mask_off")
    assert train_gpt.resolve_attn_impl(tiny_args(), CPU.device) == ("sdpa", "auto_no_cuda")
    with pytest.raises(ConfigError, match=r"ATTN_IMPL=fa4 cannot run here: no_cuda: install flash-attn-4"):
        train_gpt.resolve_attn_impl(tiny_args(ATTN_IMPL="fa4"), CPU.device)
    model = train_gpt.GPT(tiny_args(DOC_MASK=0), attn_impl="fa4")  # DOC_MASK=0: dense whatever the impl
    assert model.blocks[0].attn.attend is train_gpt.sdpa_attention and model.segments(None) is None
    model = train_gpt.GPT(tiny_args())
    assert model.blocks[1].attn.attend is train_gpt.sdpa_attention and model.segments is train_gpt.doc_causal_mask


def model_with_weights(args) -> train_gpt.GPT:
    torch.manual_seed(0)
    model = train_gpt.GPT(args)
    for p in model.parameters():  # zero-initialised projections would hide what attention mixes
        p.data.normal_(0, 0.3) if p.ndim == 2 else None
    return model


def other_documents(ids: torch.Tensor, changed_doc: int) -> torch.Tensor:
    """A copy of a 1-D stream with the tokens of document `changed_doc` (its BOS kept) redrawn."""
    doc = (ids == BOS_ID).cumsum(0)
    out = ids.clone()
    inside = (doc == changed_doc) & (ids != BOS_ID)
    out[inside] = (ids[inside] + 7) % 60 + 2
    return out


def test_training_forward_leaks_nothing_across_documents():
    args = tiny_args(XSA_LAST_N=1)
    model = model_with_weights(args)
    ids = random_ids(3, 64, 3, seed=4)
    ids[:, 21:40] = (ids[:, 21:40] - 2) % 62 + 2  # a document at 20..39 in each row, and one after it
    ids[:, 20] = ids[:, 40] = BOS_ID
    changed = ids.clone()
    changed[:, 21:40] = (changed[:, 21:40] + 5) % 60 + 2
    losses = [model.loss(model.hidden(x), x.roll(-1, 1), per_token=True).view(3, 64) for x in (ids, changed)]
    doc = (ids == BOS_ID).cumsum(1)
    same = doc != doc[:, 20:21]  # other documents: those before (causal anyway) and after
    assert same[:, 40:].any() and torch.equal(losses[0][same], losses[1][same])
    assert not torch.equal(losses[0][~same], losses[1][~same])
    dense = model_with_weights(tiny_args(DOC_MASK=0))
    plain = [dense.loss(dense.hidden(x), x.roll(-1, 1), per_token=True).view(3, 64) for x in (ids, changed)]
    assert not torch.equal(plain[0][same], plain[1][same])  # without the mask the probe moves them


def scored_distributions(args, tokens: torch.Tensor, path: str) -> dict[int, torch.Tensor]:
    """{target position: log-probabilities} of every scored target, on the round trip's, the sliding windows' or
    TTT's path, from the same weights."""
    val = train_gpt.ValData(tokens, torch.ones_like(tokens, dtype=torch.int32), {"val_bytes": "test"}, 64, 4)
    run = train_gpt.Run(args, CPU, train_gpt.Logger(None), val, [], "torch", "test", "", None)
    seen = {}

    def observe(positions, logprobs):
        seen.update(zip(positions.tolist(), logprobs.detach().view(len(positions), -1).clone()))

    model = model_with_weights(args)
    if path == "ttt":
        train_gpt.score_with_ttt(run, model, observe)
    else:
        train_gpt.score_windows(model, val, CPU, 16 if path == "sliding" else 0, observe=observe)
    return seen


@pytest.mark.parametrize("path", ["round_trip", "sliding", "ttt"])
def test_scoring_paths_leak_nothing_across_documents(path):
    args = tiny_args(EVAL_STRIDE=16, TTT_ENABLED=1, TTT_CHUNK_TOKENS=128, TTT_LR=0.05, TTT_EPOCHS=1)
    g = torch.Generator().manual_seed(5)
    tokens = torch.randint(2, 64, (321,), generator=g)
    tokens[torch.tensor([0, 37, 90, 150, 200, 260, 300])] = BOS_ID
    docs = (tokens == BOS_ID).cumsum(0)
    changed_doc = int(docs[280])  # in the last chunk: TTT adapts on nothing after it
    before = scored_distributions(args, tokens, path)
    after = scored_distributions(args, other_documents(tokens, changed_doc), path)
    assert before.keys() == after.keys() and len(before) == 320
    # a target is predicted from the tokens before it: the first token of the changed document sees only its BOS
    others = [p for p in before if docs[p - 1] != changed_doc]
    inside = [p for p in before if docs[p - 1] == changed_doc and p - 1 > 260]
    assert all(torch.equal(before[p], after[p]) for p in others), path
    assert not all(torch.equal(before[p], after[p]) for p in inside)


def test_a_run_logs_its_attention_and_its_artifact_keeps_the_mask(tiny_data, tmp_path):
    """End to end on CPU: the log names the backend; EVAL_ONLY without DOC_MASK=1 refuses the masked artifact."""
    env = tiny_env(tiny_data, tmp_path, DOC_MASK=1, EVAL_STRIDE=32, TTT_ENABLED=1, TTT_CHUNK_TOKENS=4096)
    run = run_script(env, tmp_path)
    assert run.result.returncode == 0, run.result.stderr[-2000:]
    assert run.events("attn_impl") == [dict(doc_mask="1", attn_impl="sdpa", attn_impl_reason="auto_no_cuda")]
    header = json.loads(run.artifact_path.read_bytes().split(b"\n")[1])
    assert header["model"]["doc_mask"] is True
    assert run.events("final_int8_zlib_roundtrip_exact") or run.events("val_bpb")
    refused = run_script(dict(env, EVAL_ONLY="1", DOC_MASK="0", RUN_ID="eval"), tmp_path)
    assert (
        refused.result.returncode == 2 and "holds another model: DOC_MASK=True (config: False)" in refused.result.stderr
    )
    plain = train_gpt.artifact_header(tiny_args(DOC_MASK=0, TOKENIZER_PATH=env["TOKENIZER_PATH"]), "raw", False)
    assert "doc_mask" not in plain["model"]  # DOC_MASK=0: the header as before the setting, byte for byte


@pytest.mark.skipif(not HAS_FA4, reason="needs CUDA and flash-attn-4 (README: document-masked attention)")
def test_fa4_kernel_equals_the_reference_forward_and_backward():
    for shape in [(3, 1024, 8, 4, 64), (2, 2048, 8, 4, 64), (5, 512, 4, 4, 32)]:
        check_fa4_against_the_reference(*shape)


def check_fa4_against_the_reference(B, T, H, Hkv, hd):
    ids = random_ids(B, T, 2, seed=T).cuda()
    assert not train_gpt.doc_segments(ids)[1]  # within the bound
    q = torch.randn(B, H, T, hd, device="cuda", dtype=torch.bfloat16, requires_grad=True)
    k, v = (torch.randn(B, Hkv, T, hd, device="cuda", dtype=torch.bfloat16, requires_grad=True) for _ in range(2))
    grad = torch.randn(B, H, T, hd, device="cuda", dtype=torch.bfloat16)
    results = []
    for attend, segments in (train_gpt.ATTENTION["fa4"], train_gpt.ATTENTION["sdpa"]):
        y = attend(q, k, v, segments(ids))
        results.append([y.float(), *(g.float() for g in torch.autograd.grad(y, (q, k, v), grad))])
    for name, fast, ref in zip(["y", "dq", "dk", "dv"], *results):
        err = ((fast - ref).norm() / ref.norm()).item()
        assert err < 1e-2, f"{name} at {(B, T, H, Hkv, hd)}: relative error {err:.2e} over bf16 noise"


@pytest.mark.skipif(not HAS_FA4, reason="needs CUDA and flash-attn-4")
def test_fa4_output_is_nan_where_the_segments_overflow():
    ids = torch.full((2, 512), 5, device="cuda")
    ids[:, ::16] = BOS_ID  # 64 segments > the bound of 10
    q, k, v = (torch.randn(2, 4, 512, 32, device="cuda", dtype=torch.bfloat16) for _ in range(3))
    assert torch.isnan(train_gpt.varlen_attention(q, k, v, train_gpt.doc_segments(ids))).all()


@pytest.mark.skipif(not HAS_FA4, reason="needs CUDA and flash-attn-4")
def test_fa4_model_compiles_in_one_graph():
    args = tiny_args(
        NUM_LAYERS=3,
        MODEL_DIM=256,
        NUM_HEADS=4,
        NUM_KV_HEADS=2,
        TRAIN_SEQ_LEN=512,
        VOCAB_SIZE=512,
        TRAIN_BATCH_TOKENS=8 * 512,
        VAL_BATCH_SIZE=8 * 512,
    )
    model = train_gpt.GPT(args, "torch", torch.bfloat16, False, "fa4").cuda()
    ids = random_ids(4, 512, 1, vocab=512).cuda()
    torch._dynamo.reset()
    explained = torch._dynamo.explain(model)(ids, ids.roll(-1, 1))
    assert explained.graph_count == 1 and explained.graph_break_count == 0, explained.break_reasons
    compiled = torch.compile(model, dynamic=False, fullgraph=True)
    loss = compiled(ids, ids.roll(-1, 1))
    loss.backward()
    with torch.no_grad():
        ref = train_gpt.GPT(args, "torch", torch.bfloat16, False, "sdpa").cuda()
        ref.load_state_dict(model.state_dict())
        assert abs(ref(ids, ids.roll(-1, 1)).item() - loss.item()) < 2e-2
