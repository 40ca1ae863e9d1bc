"""The output loss: the chunked PyTorch reference against the naive formula, and the fused Triton
kernel against both, forward and backward. Run: python3 -m pytest -q tests/test_loss_kernel.py

Without a GPU the kernel runs in Triton's interpreter (conftest sets TRITON_INTERPRET=1), which is
slow: shapes stay small (123 tokens x 517 vocab, d = 48) and odd, so masks and ragged chunks are hit.
Errors are relative: |a - b| / |b| for the loss, ||a - b|| / ||b|| (Frobenius) for gradients.
"""

import dataclasses
import math

import pytest
import torch

import train_gpt as tg

SOFTCAP = 30.0
N, V, D = 123, 517, 48
FP32_TOL = 1e-5
# bf16 inputs: logits and dL/dlogits are stored in bf16 (8 significant bits: relative step 2^-8 =
# 3.9e-3 when rounded; the interpreter truncates instead, up to 2^-7), and grad_x is a bf16 matmul
# output, so implementations that round at different places differ by about one step (measured:
# ~5e-3 on CPU). The loss is accumulated in fp32 from the same bf16 logits, so it stays close.
BF16_LOSS_TOL, BF16_GRAD_TOL = 1e-4, 1.5e-2
BF16_STORE_TOL = 2.0**-7  # one bf16 store of fp32 values: each element within 2^-7, hence the norm too

needs_triton = pytest.mark.skipif(
    tg.triton_unavailable_reason() is not None, reason=f"Triton loss unavailable: {tg.triton_unavailable_reason()}"
)
DEVICE = "cuda" if torch.cuda.is_available() else "cpu"


def rel(a: torch.Tensor, b: torch.Tensor) -> float:
    a, b = a.double(), b.double()
    return ((a - b).norm() / b.norm()).item()


def make_inputs(dtype, n=N, vocab=V, d=D, seed=0):
    """x (n, d) like the trainer's normalised activations, weight (vocab, d) fp32 master weight."""
    gen = torch.Generator().manual_seed(seed)
    x = torch.randn(n, d, generator=gen).to(DEVICE, dtype).requires_grad_()
    weight = (torch.randn(vocab, d, generator=gen) * 0.5).to(DEVICE).requires_grad_()
    targets = torch.randint(0, vocab, (n,), generator=gen).to(DEVICE)
    return x, weight, targets


def loss_and_grads(fn, x, weight, targets, grad_output=1.0):
    x, weight = x.detach().requires_grad_(), weight.detach().requires_grad_()
    loss = fn(x, weight, targets)
    loss.backward(torch.tensor(grad_output, device=loss.device))
    return loss.detach(), x.grad, weight.grad


def naive(x, weight, targets):
    """The unchunked formula: holds all (N, V) logits."""
    logits = x @ weight.to(x.dtype).t()
    return torch.nn.functional.cross_entropy(SOFTCAP * torch.tanh(logits.float() / SOFTCAP), targets)


def torch_ref(chunk):
    return lambda x, weight, targets: tg.softcap_ce_loss(x, weight, targets, SOFTCAP, chunk, "torch")


def triton_loss(chunk):
    return lambda x, weight, targets: tg.softcap_ce_loss(x, weight, targets, SOFTCAP, chunk, "triton")


def assert_close(got, want, loss_tol, grad_tol):
    (loss, gx, gw), (want_loss, want_gx, want_gw) = got, want
    assert loss.dtype == torch.float32 and gx.dtype == want_gx.dtype and gw.dtype == torch.float32
    assert abs(loss.item() - want_loss.item()) <= loss_tol * abs(want_loss.item()), (loss, want_loss)
    assert rel(gx, want_gx) <= grad_tol, rel(gx, want_gx)
    assert rel(gw, want_gw) <= grad_tol, rel(gw, want_gw)


@pytest.mark.parametrize("chunk", [50, N, 1000])
def test_torch_reference_matches_naive_fp32(chunk):
    x, weight, targets = make_inputs(torch.float32)
    want = loss_and_grads(naive, x, weight, targets)
    assert_close(loss_and_grads(torch_ref(chunk), x, weight, targets), want, FP32_TOL, FP32_TOL)
    with torch.no_grad():
        assert abs(torch_ref(chunk)(x, weight, targets).item() / want[0].item() - 1) <= FP32_TOL


def saturate(t: torch.Tensor) -> torch.Tensor:
    """Every other row, and every 7th column of the rest, times 1e4: |logits| >> softcap, tanh = +-1.
    Unsaturated entries remain in every row, so the relative error is not that of ~exp(-2|u|) values."""
    t = t.detach().clone()
    t[::2] *= 1e4
    t[1::2, ::7] *= 1e4
    return t


@needs_triton
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("saturated", [False, True])
@pytest.mark.parametrize("softcap", [SOFTCAP, 41.5])  # the default; the largest cap the fixed shift allows
def test_kernel_chunk_matches_torch_chunk(dtype, saturated, softcap):
    """V=517 is not a power of two: the block's last 11 columns are masked."""
    gen = torch.Generator().manual_seed(1)
    logits = torch.randn(37, V, generator=gen) * softcap / 10
    logits = (saturate(logits) if saturated else logits).to(DEVICE, dtype)
    targets = torch.randint(0, V, (37,), generator=gen).to(DEVICE)
    want_grad, want_rows = logits.float().clone(), torch.empty(37, device=DEVICE)
    tg.softcap_ce_chunk_torch(want_grad, targets, want_rows, softcap, 0.25, True)
    want_loss = want_rows.sum()
    for need_grad in (False, True):
        buf, loss_rows = logits.clone(), torch.empty(37, device=DEVICE)
        tg.softcap_ce_chunk_triton(buf, targets, loss_rows, softcap, 0.25, need_grad)
        assert abs(loss_rows.sum().item() / want_loss.item() - 1) <= FP32_TOL
        if need_grad:
            assert torch.isfinite(buf).all()
            assert rel(buf.float(), want_grad) <= (FP32_TOL if dtype == torch.float32 else BF16_STORE_TOL)
        else:
            assert torch.equal(buf, logits), "the forward-only kernel must not write the logits"


@needs_triton
@pytest.mark.parametrize("sign", [-1.0, 1.0])
def test_kernel_fixed_shift_at_its_extremes(sign):
    """Every logit at +-1e4 (z = +-c everywhere): with the shift m = c, each exp2(zl - m) is 2^-2c*log2e
    or 1, the smallest and largest it can be. Uniform softmax: loss ln(V); tanh saturated: dL/dlogits 0."""
    logits = torch.full((5, V), sign * 1e4, device=DEVICE)
    targets = torch.arange(5, device=DEVICE) * 100
    buf, loss_rows = logits.clone(), torch.empty(5, device=DEVICE)
    tg.softcap_ce_chunk_triton(buf, targets, loss_rows, SOFTCAP, 1.0, True)
    assert torch.allclose(loss_rows, torch.full_like(loss_rows, math.log(V)), rtol=FP32_TOL, atol=0)
    assert torch.isfinite(buf).all() and buf.abs().max().item() < 1e-30


def test_the_loss_chunk_bounds_the_logits_buffer():
    def chunk(vocab):
        return tg.GPT(
            tg.Hyperparameters(vocab_size=vocab, num_layers=1, model_dim=16, num_heads=2, num_kv_heads=1)
        ).loss_chunk_tokens

    assert chunk(8192) == 16384 and chunk(1024) == 131072
    assert chunk(1000) * 1000 <= tg.LOSS_CHUNK_ELEMENTS < (chunk(1000) + 1) * 1000


@needs_triton
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("chunk", [50, N, 1000])  # ragged last chunk; one exact chunk; chunk > N
def test_triton_loss_matches_reference_and_naive(dtype, chunk):
    x, weight, targets = make_inputs(dtype)
    got = loss_and_grads(triton_loss(chunk), x, weight, targets)
    loss_tol, grad_tol = (FP32_TOL, FP32_TOL) if dtype == torch.float32 else (BF16_LOSS_TOL, BF16_GRAD_TOL)
    assert_close(got, loss_and_grads(torch_ref(chunk), x, weight, targets), loss_tol, grad_tol)
    assert_close(got, loss_and_grads(naive, x, weight, targets), loss_tol, grad_tol)


@needs_triton
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_triton_loss_saturated_logits(dtype):
    """Every other row of x times 1e4: |logits| ~ 1e3 * softcap, tanh saturates and dL/dlogits ~ 0."""
    x, weight, targets = make_inputs(dtype)
    x = x.detach().clone()
    x[::2] *= 1e4  # the other rows keep ordinary logits, so the error is not that of ~exp(-2|u|) values
    got = loss_and_grads(triton_loss(50), x, weight, targets)
    assert all(torch.isfinite(t).all() for t in got)
    loss_tol, grad_tol = (FP32_TOL, FP32_TOL) if dtype == torch.float32 else (BF16_LOSS_TOL, BF16_GRAD_TOL)
    assert_close(got, loss_and_grads(naive, x, weight, targets), loss_tol, grad_tol)


@needs_triton
def test_triton_loss_is_nan_for_a_nan_row_as_the_reference():
    """A NaN hidden state scored as a uniform prediction (the clamp of exp's argument dropped the NaN): ln V, finite,
    so a diverged model or a poisoned attention output passed the finite checks and scored. It must stay NaN."""
    x, weight, targets = make_inputs(torch.float32)
    x = x.detach().clone()
    x[3, 5] = float("nan")
    rows = tg.softcap_ce_loss(x, weight, targets, 30.0, 50, "triton", per_token=True)
    reference = tg.softcap_ce_loss(x, weight, targets, 30.0, 50, "torch", per_token=True)
    assert torch.isnan(reference[3]) and torch.isnan(rows[3])
    assert torch.isfinite(rows[torch.arange(len(rows)) != 3]).all()


@needs_triton
def test_triton_loss_scales_by_grad_output():
    x, weight, targets = make_inputs(torch.float32)
    loss, gx, gw = loss_and_grads(triton_loss(50), x, weight, targets, grad_output=-2.5)
    want_loss, want_gx, want_gw = loss_and_grads(naive, x, weight, targets, grad_output=-2.5)
    assert rel(gx, want_gx) <= FP32_TOL and rel(gw, want_gw) <= FP32_TOL
    assert rel(gx, -2.5 * loss_and_grads(triton_loss(50), x, weight, targets)[1]) <= FP32_TOL


@needs_triton
def test_triton_loss_forward_only_under_no_grad():
    x, weight, targets = make_inputs(torch.bfloat16)
    with torch.no_grad():
        loss = triton_loss(50)(x, weight, targets)
        _, rows, grad_x, grad_w = tg.softcap_ce_op(x, weight, targets, SOFTCAP, 50, False, "triton")
    assert not loss.requires_grad and grad_x.numel() == 0 and grad_w.numel() == 0
    want = loss_and_grads(triton_loss(50), x, weight, targets)[0]
    assert abs(loss.item() - want.item()) <= 1e-6 * want.item()  # same kernel, same order of sums
    # Inputs that need no gradient take the same forward-only path with grad mode on.
    loss = triton_loss(50)(x.detach(), weight.detach(), targets)
    assert not loss.requires_grad and abs(loss.item() - want.item()) <= 1e-6 * want.item()


@needs_triton
def test_triton_loss_gradient_to_weight_only():
    x, weight, targets = make_inputs(torch.float32)
    weight = weight.detach().requires_grad_()
    triton_loss(50)(x.detach(), weight, targets).backward()
    assert rel(weight.grad, loss_and_grads(naive, x, weight, targets)[2]) <= FP32_TOL


@needs_triton
def test_custom_op_registration():
    """Fake (meta) outputs match the real ones and autograd is registered: what torch.compile uses."""
    x, weight, targets = make_inputs(torch.float32, n=20, vocab=70, d=8)
    torch.library.opcheck(
        tg.softcap_ce_op,
        (x, weight, targets, SOFTCAP, 8, True, "torch"),
        test_utils=("test_schema", "test_faketensor", "test_autograd_registration"),
    )
    torch.library.opcheck(
        tg.softcap_ce_op,
        (x, weight, targets, SOFTCAP, 8, True, "triton"),
        test_utils=("test_schema", "test_faketensor", "test_autograd_registration"),
    )


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA: the trainer compiles only on GPU")
@pytest.mark.skipif(tg.triton_unavailable_reason() is not None, reason="Triton loss unavailable")
def test_triton_loss_inside_torch_compile_fullgraph():
    """As the trainer runs it: compiled with fullgraph=True, under bf16 autocast, x from a bf16 op."""
    torch._dynamo.reset()
    x, weight, targets = make_inputs(torch.float32, n=4096, vocab=1024, d=128)

    def step(x, weight, targets):
        with torch.autocast("cuda", dtype=torch.bfloat16):
            return tg.softcap_ce_loss((x * 2.0).bfloat16(), weight, targets, SOFTCAP, 1000, "triton")

    got = loss_and_grads(torch.compile(step, fullgraph=True), x, weight, targets, grad_output=0.5)
    assert_close(got, loss_and_grads(step, x, weight, targets, grad_output=0.5), 1e-6, 1e-6)
    want = loss_and_grads(lambda a, b, c: naive((a * 2.0).bfloat16(), b, c), x, weight, targets, 0.5)
    assert_close(got, want, BF16_LOSS_TOL, BF16_GRAD_TOL)
    with torch.no_grad():
        assert abs(torch.compile(step, fullgraph=True)(x, weight, targets).item() / got[0].item() - 1) < 1e-6


@pytest.mark.parametrize("impl", ["torch", pytest.param("triton", marks=needs_triton)])
def test_per_token_losses_match_naive(impl):
    """What scoring reads: each token's loss, in order, over ragged chunks; forward only."""
    x, weight, targets = make_inputs(torch.float32)
    z = SOFTCAP * torch.tanh((x @ weight.t()).float() / SOFTCAP)
    want = torch.nn.functional.cross_entropy(z, targets, reduction="none")
    with torch.no_grad():
        rows = tg.softcap_ce_loss(x, weight, targets, SOFTCAP, 50, impl, per_token=True)
    assert rows.shape == (N,) and rel(rows, want) <= FP32_TOL
    rows = tg.softcap_ce_loss(x.requires_grad_(), weight, targets, SOFTCAP, 50, impl, per_token=True)
    assert not rows.requires_grad  # forward only, even with autograd on: a backward through them is an error
    with pytest.raises(RuntimeError):
        rows.sum().backward()


@needs_triton
def test_kernel_refuses_rows_it_cannot_hold_and_auto_falls_back_to_torch():
    """Rows wider than MAX_BLOCK_V or caps above 41.6 are the PyTorch path's: the kernel says why it will not run
    them, LOSS_IMPL=auto takes torch with that reason, and LOSS_IMPL=triton is a config error."""
    for vocab, cap, why in [(tg.MAX_BLOCK_V + 1, SOFTCAP, "VOCAB_SIZE"), (64, 41.7, "LOGIT_SOFTCAP")]:
        logits, targets = torch.zeros(2, vocab, device=DEVICE), torch.zeros(2, dtype=torch.int64, device=DEVICE)
        with pytest.raises(ValueError, match=why):
            tg.softcap_ce_chunk_triton(logits, targets, torch.empty(2, device=DEVICE), cap, 1.0, True)
        args = tg.Hyperparameters(vocab_size=vocab, logit_softcap=cap)
        impl, reason = tg.resolve_loss_impl(args, torch.device("cuda"))
        assert impl == "torch" and why in reason
        with pytest.raises(tg.ConfigError, match=why):
            tg.resolve_loss_impl(dataclasses.replace(args, loss_impl="triton"), torch.device("cuda"))
    assert tg.resolve_loss_impl(tg.Hyperparameters(vocab_size=tg.MAX_BLOCK_V), torch.device("cuda"))[0] == "triton"
