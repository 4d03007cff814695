#!/usr/bin/env python3
"""FP8 training with finegemm, DeepSeek-V3's recipe, against the same training in bf16 PyTorch.

Each linear layer runs its three GEMMs in FP8 with fp32 scales:

- forward ``y = x W^T``: x quantized per 1x128 block along its features (``per_token_cast_to_fp8``), W per 128x128
  block (``per_block_cast_to_fp8``), ``gemm_fp8_fp8_bf16_nt`` into bf16;
- input gradient ``dx = dy W``: dy per 1x128 block along its features, W^T per 128x128 block (the transpose of W's
  FP8 values and scales: a 128x128 block has the same amax either way round), ``gemm_fp8_fp8_bf16_nt`` into bf16;
- weight gradient ``dW = dy^T x``: dy^T and x^T both quantized per 1x128 block along the tokens (the K of this GEMM,
  zero-padded to a multiple of 128), ``gemm_fp8_fp8_nt`` accumulating in fp32 into the weight's main gradient.

The weights are fp32 master weights (Adam updates them); FP8Linear quantizes them on every call. As in Megatron-LM,
the weight gradient is accumulated into ``weight.main_grad``, an fp32 buffer created on first use, and not into
``weight.grad``: ``backward`` returns no gradient for the weight, so micro-batches accumulate into ``main_grad`` and
the training loop hands it to the optimizer (``weight.grad = weight.main_grad``) and zeroes it after the step.

An MoE layer does the same per expert: a bf16 router picks the top-2 of 8 experts per token (router and gating in
bf16 PyTorch); the token-expert pairs are laid out by expert in finegemm's contiguous layout (each expert's rows from
a multiple of 128, ``m_indices`` -1 on padding rows); the forward and input-gradient GEMMs of the gate/up and down
projections are contiguous grouped GEMMs (``m_grouped_gemm_fp8_fp8_bf16_nt_contiguous``) and the weight gradient of
all experts is one K-grouped GEMM (``k_grouped_gemm_fp8_fp8_f32_nt``): ``dW[e] += dy_e^T x_e`` over each expert's
tokens (the K of expert e, its segment of the contiguous layout, a multiple of 128, padding rows zeroed), both operands
quantized per 1x128 block along the tokens, accumulated in fp32 into the weights' main gradient.

The task: a fixed random teacher (a wider tanh MLP the students cannot match exactly, so that their loss stays well
above the floor FP8's rounding adds, about 0.2% of the targets' variance) maps random inputs to targets; a student
is trained on the mean squared error with Adam, once with the FP8 layers and once in bf16 PyTorch (fp32 master
weights, bf16 matmuls), from the same initial weights on the same batches. Printed: both loss curves; at a few
steps the relative error ``||g8 - g16|| / ||g16||`` of each FP8 weight gradient against the bf16 gradient at the same
weights and batch; the final loss of both on held-out batches. Exits 1 if the final FP8 loss is not within 2% of the
bf16 one, or if a weight-gradient error exceeds 0.5 (FP8's rounding gives about 0.05 at the start and 0.1-0.2 near the
end, where the gradient itself is small; a wrong GEMM gives 1 or more).
The first steps compile the kernels (the dense weight gradient once per distinct token count, in multiples of 128;
the K-grouped one reads the experts' token counts on the GPU, they are not compiled in).

    python examples/fp8_training.py [--steps 300] [--seed 0] [--model linear|moe|both]
"""

import argparse
import copy
import sys
import time

import torch
import torch.nn.functional as F

import finegemm

BF16 = torch.bfloat16
ALIGN = 128                 # rows per expert segment (contiguous layout); tokens per K block of the weight gradient
                            # (the K-grouped GEMM takes each expert's K, its segment, in multiples of 128: this ALIGN)
TOKENS = 1024               # per batch
DIM = 512                   # the students' input and output width
HIDDEN = 1024               # the linear student's hidden width
TEACHER_HIDDEN = 2048
EXPERTS, TOP_K, EXPERT_HIDDEN = 8, 2, 256
LEARNING_RATE = 1e-3
EVAL_BATCHES = 4
MAX_LOSS_GAP = 0.02         # final FP8 loss vs the bf16 one, relative
MAX_GRAD_ERROR = 0.5        # ||g8 - g16|| / ||g16|| per weight


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--steps", type=int, default=300)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--model", choices=("linear", "moe", "both"), default="both")
    return p.parse_args(argv)


# ---- FP8 linear layers ---------------------------------------------------------------------------------------------


def main_grad(weight):
    """The fp32 buffer FP8 layers accumulate ``weight``'s gradient into (Megatron's ``main_grad``), zeroed at first."""
    if getattr(weight, "main_grad", None) is None:
        weight.main_grad = torch.zeros_like(weight, dtype=torch.float32)
    return weight.main_grad


def transposed_fp8(wq, sw):
    """W^T quantized per 128x128 block, from W's: the same blocks, so the same scales and values, transposed."""
    return wq.transpose(-1, -2).contiguous(), sw.transpose(-1, -2).contiguous()


def tokens_last(t):
    """t [T, C] -> contiguous [C, T_pad], T rounded up to a multiple of ALIGN, the extra columns zero (they add
    nothing to the weight gradient's sums)."""
    tokens = t.shape[0]
    out = t.new_zeros(t.shape[1], (tokens + ALIGN - 1) // ALIGN * ALIGN)
    out[:, :tokens] = t.t()
    return out


def accumulate_weight_grad(grad, dy, x):
    """``grad += dy^T @ x`` in fp32 for dy [T, out] and x [T, in] (bf16): the tokens are K, quantized per 1x128."""
    if dy.shape[0] == 0:
        return
    a = finegemm.per_token_cast_to_fp8(tokens_last(dy))  # [out, T_pad], scales [out, T_pad / 128]
    b = finegemm.per_token_cast_to_fp8(tokens_last(x))   # [in, T_pad], scales [in, T_pad / 128]: 1x128 per row
    finegemm.gemm_fp8_fp8_nt(a, b, grad, grad)


class FP8Linear(torch.autograd.Function):
    """``y = x @ weight.T`` in bf16 for x [..., in] (bf16) and an fp32 master weight [out, in], all three GEMMs in FP8.

    ``backward`` returns the input's gradient and accumulates the weight's into ``main_grad(weight)``; it returns
    None for the weight, which leaves ``weight.grad`` to the training loop."""

    @staticmethod
    def forward(ctx, x, weight):
        x2 = x.reshape(-1, x.shape[-1]).to(BF16).contiguous()
        wq, sw = finegemm.per_block_cast_to_fp8(weight.detach())
        y = torch.empty(x2.shape[0], weight.shape[0], dtype=BF16, device=x.device)
        finegemm.gemm_fp8_fp8_bf16_nt(finegemm.per_token_cast_to_fp8(x2), (wq, sw), y)
        ctx.save_for_backward(x2, weight, wq, sw)
        ctx.x_shape = x.shape
        return y.view(*x.shape[:-1], weight.shape[0])

    @staticmethod
    def backward(ctx, dy):
        x2, weight, wq, sw = ctx.saved_tensors
        dy2 = dy.reshape(-1, weight.shape[0]).to(BF16).contiguous()
        dx = None
        if ctx.needs_input_grad[0]:
            dx = torch.empty_like(x2)
            finegemm.gemm_fp8_fp8_bf16_nt(finegemm.per_token_cast_to_fp8(dy2), transposed_fp8(wq, sw), dx)
            dx = dx.view(ctx.x_shape)
        if ctx.needs_input_grad[1]:
            accumulate_weight_grad(main_grad(weight), dy2, x2)
        return dx, None


class ExpertLayout:
    """Token-expert pairs grouped by expert: sorted pair i is token ``token[i]``, at row ``row[i]`` of the contiguous
    layout; expert e's rows are ``segments[e] = (begin, end)``, begin a multiple of ALIGN, padding up to the next
    segment, ``m_indices`` -1 there (``padding`` True). ``ks[e]``: expert e's rows with its padding (a multiple of
    ALIGN, 0 for an expert without tokens), the K of expert e in the K-grouped weight gradient; ``ks_tensor`` the same
    as int32 on the GPU (the kernel reads it there)."""

    def __init__(self, experts, num_experts):
        top_k = experts.shape[1]
        flat = experts.flatten()
        self.order = torch.argsort(flat, stable=True)          # pairs sorted by expert
        self.token = self.order // top_k
        self.counts = torch.bincount(flat, minlength=num_experts).tolist()  # one host sync: the shapes depend on it
        self.segments, rows, begin = [], [], 0
        for count in self.counts:
            self.segments.append((begin, begin + count))
            rows.append(torch.arange(begin, begin + count, device=flat.device))
            begin += (count + ALIGN - 1) // ALIGN * ALIGN
        self.num_rows = begin
        self.row = torch.cat(rows)
        self.m_indices = torch.full((self.num_rows,), -1, dtype=torch.int32, device=flat.device)
        for e, (begin, end) in enumerate(self.segments):
            self.m_indices[begin:end] = e
        self.padding = self.m_indices < 0
        self.ks = [(count + ALIGN - 1) // ALIGN * ALIGN for count in self.counts]  # sum: num_rows
        self.ks_tensor = torch.tensor(self.ks, dtype=torch.int32, device=flat.device)


def k_grouped_operand(t, layout):
    """t [rows, C] (bf16, the contiguous layout of ``layout``) -> an operand of the K-grouped weight gradient, whose K
    is the tokens, expert after expert (expert e's K: ``layout.ks[e]``, its segment with the padding):

    - fp8 values, flat: expert e's ``[C, ks[e]]`` block, row-major (its tokens contiguous), after expert e-1's;
    - fp32 scales ``[C, rows / 128]``, one per channel and 128 tokens, MN-major (strides ``(1, C)``), expert e's
      columns after expert e-1's.

    The padding rows are zeroed first (whatever they held: zeros add nothing to the sums and change no amax)."""
    t = t.masked_fill(layout.padding.unsqueeze(1), 0)
    # 1x128 blocks along the tokens of each channel: [C, rows] values and [C, rows / 128] MN-major scales. Segments
    # start at multiples of 128, so each 128-token block lies in one expert: the scales are already in the GEMM's
    # layout, and these are the values and scales each expert's [C, ks[e]] block alone would get.
    values, scales = finegemm.per_token_cast_to_fp8(t.t().contiguous())
    # The values expert by expert: [C, ks[e]] blocks back to back (a copy; a fused quantize-and-transpose kernel would
    # write them so directly).
    values = torch.cat([block.reshape(-1) for block in values.split(layout.ks, dim=1)])
    return values, scales


class FP8GroupedLinear(torch.autograd.Function):
    """Per expert e, ``y[r] = x[r] @ weight[e].T`` for the rows r of its segment: x [rows, in] bf16 in the contiguous
    layout, weight [E, out, in] fp32; padding rows of y (and of dx) are zero. Weight gradient into ``main_grad`` as
    FP8Linear's, for all experts in one K-grouped GEMM over their segments' rows (padding rows zeroed first: their
    values are never used)."""

    @staticmethod
    def forward(ctx, x_rows, weight, layout):
        x_rows = x_rows.to(BF16).contiguous()
        wq, sw = finegemm.per_block_cast_to_fp8(weight.detach())  # [E, out, in], [E, out / 128, in / 128]
        y = x_rows.new_zeros(x_rows.shape[0], weight.shape[1])
        finegemm.m_grouped_gemm_fp8_fp8_bf16_nt_contiguous(finegemm.per_token_cast_to_fp8(x_rows), (wq, sw), y,
                                                           layout.m_indices)
        ctx.save_for_backward(x_rows, weight, wq, sw)
        ctx.layout = layout
        return y

    @staticmethod
    def backward(ctx, dy):
        x_rows, weight, wq, sw = ctx.saved_tensors
        layout = ctx.layout
        dy = dy.to(BF16).contiguous()
        dx = None
        if ctx.needs_input_grad[0]:
            dx = torch.zeros_like(x_rows)
            finegemm.m_grouped_gemm_fp8_fp8_bf16_nt_contiguous(finegemm.per_token_cast_to_fp8(dy),
                                                               transposed_fp8(wq, sw), dx, layout.m_indices)
        if ctx.needs_input_grad[1]:
            grad = main_grad(weight)  # fp32 [E, out, in]
            if layout.num_rows > 0:
                # For every expert e, grad[e] += dy_e^T @ x_e over its ks[e] tokens, in one GEMM: M = out, N = in,
                # K = the tokens (an expert without tokens keeps its gradient).
                finegemm.k_grouped_gemm_fp8_fp8_f32_nt(k_grouped_operand(dy, layout), k_grouped_operand(x_rows, layout),
                                                       grad, layout.ks, layout.ks_tensor, accumulate=True)
        return dx, None, None


# ---- Models: one definition, run in FP8 or in bf16 -------------------------------------------------------------------


def linear(x, weight, fp8):
    return FP8Linear.apply(x, weight) if fp8 else F.linear(x, weight.to(BF16))


def swiglu(h):
    gate, up = h.chunk(2, dim=-1)
    return F.silu(gate) * up


def init_weight(generator, *shape, device):
    """fp32 master weight with unit-variance outputs for unit-variance inputs."""
    return torch.nn.Parameter(torch.randn(*shape, generator=generator, device=device) / shape[-1] ** 0.5)


class MLPStudent(torch.nn.Module):
    """Two linear layers with SiLU between: DIM -> HIDDEN -> DIM."""

    fp8_weights = ("fc1", "fc2")

    def __init__(self, generator, device):
        super().__init__()
        self.fc1 = init_weight(generator, HIDDEN, DIM, device=device)
        self.fc2 = init_weight(generator, DIM, HIDDEN, device=device)

    def forward(self, x, fp8):
        return linear(F.silu(linear(x, self.fc1, fp8)), self.fc2, fp8)


class MoEStudent(torch.nn.Module):
    """One MoE layer: a bf16 router, top-2 of EXPERTS experts, each a SwiGLU MLP DIM -> 2 x EXPERT_HIDDEN -> DIM."""

    fp8_weights = ("w_up", "w_down")

    def __init__(self, generator, device):
        super().__init__()
        self.router = init_weight(generator, EXPERTS, DIM, device=device)
        self.w_up = init_weight(generator, EXPERTS, 2 * EXPERT_HIDDEN, DIM, device=device)      # gate and up halves
        self.w_down = init_weight(generator, EXPERTS, DIM, EXPERT_HIDDEN, device=device)

    def forward(self, x, fp8):
        probs = torch.softmax(F.linear(x, self.router.to(BF16)).float(), dim=-1)
        gates, experts = torch.topk(probs, TOP_K, dim=-1)
        gates = (gates / gates.sum(dim=-1, keepdim=True)).to(BF16)
        layout = ExpertLayout(experts, EXPERTS)
        if fp8:
            x_rows = x.new_zeros(layout.num_rows, x.shape[1]).index_copy(0, layout.row, x[layout.token])
            h = swiglu(FP8GroupedLinear.apply(x_rows, self.w_up, layout))
            y = FP8GroupedLinear.apply(h, self.w_down, layout)[layout.row]
        else:
            chunks = x[layout.token].split(layout.counts)
            y = torch.cat([F.linear(swiglu(F.linear(chunk, self.w_up[e].to(BF16))), self.w_down[e].to(BF16))
                           for e, chunk in enumerate(chunks)])
        pair_gates = gates.flatten()[layout.order].unsqueeze(1)
        out = torch.zeros(x.shape, dtype=torch.float32, device=x.device)
        return out.index_add(0, layout.token, (y * pair_gates).float()).to(BF16)


STUDENTS = {"linear": MLPStudent, "moe": MoEStudent}


class Teacher:
    """A fixed random tanh MLP DIM -> TEACHER_HIDDEN -> DIM in fp32, its targets scaled to unit variance."""

    def __init__(self, generator, device):
        self.w1 = torch.randn(TEACHER_HIDDEN, DIM, generator=generator, device=device) * (2.0 / DIM) ** 0.5
        self.w2 = torch.randn(DIM, TEACHER_HIDDEN, generator=generator, device=device) / TEACHER_HIDDEN ** 0.5
        probe = torch.randn(4 * TOKENS, DIM, generator=generator, device=device)
        self.w2 /= self(probe).std()

    def __call__(self, x):
        return torch.tanh(x.float() @ self.w1.t()) @ self.w2.t()


def make_batch(teacher, seed, index, device):
    """Batch `index` of the stream `seed`: bf16 inputs and fp32 targets, the same for every run."""
    generator = torch.Generator(device=device).manual_seed(seed * 1_000_003 + index)
    x = torch.randn(TOKENS, DIM, generator=generator, device=device)
    return x.to(BF16), teacher(x.to(BF16))


# ---- Training -------------------------------------------------------------------------------------------------------


def relative_error(g8, g16):
    return float((g8.double() - g16.double()).norm() / g16.double().norm().clamp(min=1e-300))


class Trainer:
    """A student, its Adam optimizer and its mode (FP8 layers or bf16 PyTorch)."""

    def __init__(self, model, fp8):
        self.model, self.fp8 = model, fp8
        self.optimizer = torch.optim.Adam(model.parameters(), lr=LEARNING_RATE)
        self.fp8_weights = [getattr(model, name) for name in model.fp8_weights] if fp8 else []

    def loss(self, x, y, fp8=None):
        return F.mse_loss(self.model(x, self.fp8 if fp8 is None else fp8).float(), y)

    def backward(self, x, y):
        self.optimizer.zero_grad(set_to_none=True)
        for weight in self.fp8_weights:
            main_grad(weight).zero_()
        loss = self.loss(x, y)
        loss.backward()
        return loss.item()

    def step(self):
        for weight in self.fp8_weights:
            weight.grad = weight.main_grad  # the FP8 layers' fp32 gradient, handed to the optimizer
        self.optimizer.step()

    @torch.no_grad()
    def evaluate(self, batches):
        return sum(float(self.loss(x, y)) for x, y in batches) / len(batches)


def train(kind, steps, seed, device="cuda"):
    """Trains the `kind` student in FP8 and in bf16 side by side; returns the list of failed checks."""
    generator = torch.Generator(device=device).manual_seed(seed)
    teacher = Teacher(generator, device)
    student = STUDENTS[kind](generator, device)
    fp8, bf16 = Trainer(student, fp8=True), Trainer(copy.deepcopy(student), fp8=False)
    eval_batches = [make_batch(teacher, seed + 1, i, device) for i in range(EVAL_BATCHES)]
    print_every = max(1, steps // 15)
    grad_steps = sorted({0, steps // 2, steps - 1})
    grad_errors, failures = [], []

    print(f"\n{kind} student ({sum(p.numel() for p in student.parameters()) / 1e6:.2f} M parameters), {steps} steps "
          f"of {TOKENS} tokens, Adam lr {LEARNING_RATE}")
    print(f"{'step':>6}{'loss fp8':>14}{'loss bf16':>14}{'fp8 / bf16':>12}")
    start = time.perf_counter()
    for step in range(steps):
        x, y = make_batch(teacher, seed, step, device)
        loss8, loss16 = fp8.backward(x, y), bf16.backward(x, y)
        if step in grad_steps:
            # The bf16 gradient at the FP8 student's weights and batch: what the FP8 GEMMs alone change.
            weights = fp8.fp8_weights
            reference = torch.autograd.grad(fp8.loss(x, y, fp8=False), weights)
            errors = {name: relative_error(w.main_grad, g) for name, w, g in
                      zip(student.fp8_weights, weights, reference)}
            grad_errors.append((step, errors))
        fp8.step()
        bf16.step()
        if step % print_every == 0 or step == steps - 1:
            print(f"{step:6d}{loss8:14.5f}{loss16:14.5f}{loss8 / loss16:12.4f}")
    elapsed = time.perf_counter() - start

    print("weight-gradient error ||g8 - g16|| / ||g16|| (bf16 gradient at the FP8 student's weights):")
    for step, errors in grad_errors:
        print(f"  step {step:5d}: " + ", ".join(f"{name} {error:.4f}" for name, error in errors.items()))
        for name, error in errors.items():
            if not error <= MAX_GRAD_ERROR:
                failures.append(f"{kind}: the FP8 gradient of {name} at step {step} is off by {error:.3f} "
                                f"(bound {MAX_GRAD_ERROR})")
    final8, final16 = fp8.evaluate(eval_batches), bf16.evaluate(eval_batches)
    gap = abs(final8 - final16) / final16
    print(f"final loss on {EVAL_BATCHES} held-out batches: fp8 {final8:.5f}, bf16 {final16:.5f} "
          f"(gap {gap:.2%}, bound {MAX_LOSS_GAP:.0%}); {elapsed:.1f} s for both runs")
    if not gap <= MAX_LOSS_GAP:
        failures.append(f"{kind}: the final FP8 loss {final8:.5f} is {gap:.2%} away from the bf16 loss "
                        f"{final16:.5f} (bound {MAX_LOSS_GAP:.0%})")
    return failures


def main(argv=None):
    args = parse_args(argv)
    if not torch.cuda.is_available():
        print("fp8_training: needs a CUDA GPU (Hopper) and PyTorch with CUDA", file=sys.stderr)
        return 2
    if args.steps < 1:
        print("fp8_training: --steps must be at least 1", file=sys.stderr)
        return 2
    print(f"FP8 training with finegemm against bf16 PyTorch on {torch.cuda.get_device_name()}, seed {args.seed}")
    kinds = ("linear", "moe") if args.model == "both" else (args.model,)
    failures = [failure for kind in kinds for failure in train(kind, args.steps, args.seed)]
    for failure in failures:
        print(f"FAIL: {failure}", file=sys.stderr)
    if failures:
        return 1
    print(f"PASS: {' and '.join(kinds)}: FP8 training within {MAX_LOSS_GAP:.0%} of bf16")
    return 0


if __name__ == "__main__":
    sys.exit(main())
