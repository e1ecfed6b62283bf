"""The fp8 plugin: TransformerEngine's scaling recipe on every block linear.

A Python reference of the recipe written here (torch's float8 dtypes, the
host's history layout) reproduces every scale and amax history bit for bit
over 30 steps, for both formats and both amax algorithms with margin and
interval set; an FP8 GPT written from the definitions (gpt_reference.py with
its block linears quantised) gives the same per-step losses; N ranks under
ddp or fsdp train as one; resume is bit-exact with the fp8 state; bad options
fail with one line and exit 2."""
import json
import os
import unittest

import torch

import gpt_reference as ref
from accel_testing import (ACCEL_HOST, MPIRUN, TempDirMixin, assert_same_safetensors, error_lines, mpirun,
                           read_metrics, run_host, steps_from_the_same_state, write_tokens)

COMMON = ["--model", "gpt-tiny", "--lr", 3e-3, "--warmup-steps", 2, "--log-level", "warn", "--threads", 1]
FP8 = ["--plugin", "fp8"]
# A small model for the multi-rank runs: the whole suite must stay fast.
TINY = ["--n-layer", 1, "--n-embd", 32, "--n-head", 2, "--seq-len", 16, "--vocab-size", 128]

ZERO3_PARTITION_ALL = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "data", "deepspeed",
                                   "zero3_partition_everything.json")

FP8_MAX = {torch.float8_e4m3fn: 448.0, torch.float8_e5m2: 57344.0}



def read_state_log(path):
    with open(path) as f:
        return [json.loads(line) for line in f if line.strip()]


class Recipe:
    """Delayed scaling as TransformerEngine defines it: scale = fp8_max /
    amax / 2^margin from the history (max or most recent), a zero or
    non-finite amax keeping the old scale, recomputed every `interval` steps;
    the history records every step. Layout as the plugin's state: row 0 is
    the step in progress and rows shift down (TransformerEngine rotates the
    other way; the window holds the same steps)."""

    def __init__(self, linears, length, fmt, algo, margin, interval):
        self.algo, self.margin, self.interval = algo, margin, interval
        self.forward_dtype = torch.float8_e4m3fn
        self.backward_dtype = torch.float8_e5m2 if fmt == "HYBRID" else torch.float8_e4m3fn
        self.forward_history = torch.zeros(length, 2 * linears)
        self.backward_history = torch.zeros(length, linears)
        self.forward_scale = torch.ones(2 * linears)
        self.backward_scale = torch.ones(linears)

    def update(self, history, scale, dtype, recompute):
        if recompute:
            amax = history[0] if self.algo == "most_recent" else history.amax(0)
            target = torch.full_like(amax, FP8_MAX[dtype] / 2 ** self.margin)
            proposed = target / amax
            usable = torch.isfinite(amax) & (amax > 0) & torch.isfinite(proposed) & (proposed > 0)
            scale.copy_(torch.where(usable, proposed, scale))
        history[1:] = history[:-1].clone()
        history[0] = 0

    def end_step(self, step):
        recompute = (step + 1) % self.interval == 0
        self.update(self.forward_history, self.forward_scale, self.forward_dtype, recompute)
        self.update(self.backward_history, self.backward_scale, self.backward_dtype, recompute)


def quantize(x, scale, dtype):
    """The host's saturating cast: fp32 product, clamp to +-fp8_max, round to nearest even."""
    limit = FP8_MAX[dtype]
    return (x.float() * scale).clamp(-limit, limit).to(dtype)


class Fp8LinearFunction(torch.autograd.Function):
    """y = x W^T + b on FP8 operands, dgrad and wgrad on FP8 gradients,
    fp32 accumulation, the bias gradient in fp32; amax recorded in the
    recipe's row 0 (max over the step's micro-batches)."""

    @staticmethod
    def forward(ctx, x, weight, bias, recipe, slot):
        n = recipe.backward_history.shape[1]
        x2 = x.reshape(-1, x.shape[-1])
        recipe.forward_history[0, slot] = max(recipe.forward_history[0, slot], x2.abs().max())
        recipe.forward_history[0, n + slot] = max(recipe.forward_history[0, n + slot], weight.abs().max())
        sx, sw = recipe.forward_scale[slot].clone(), recipe.forward_scale[n + slot].clone()
        ix, iw = sx.reciprocal(), sw.reciprocal()
        x8, w8 = quantize(x2, sx, recipe.forward_dtype), quantize(weight, sw, recipe.forward_dtype)
        y = torch.matmul(x8.float() * ix, w8.float().t() * iw) + bias
        ctx.save_for_backward(x8, w8, ix, iw)
        ctx.recipe, ctx.slot, ctx.shape = recipe, slot, x.shape
        return y.reshape(*x.shape[:-1], y.shape[-1])

    @staticmethod
    def backward(ctx, grad):
        x8, w8, ix, iw = ctx.saved_tensors
        recipe, slot = ctx.recipe, ctx.slot
        g = grad.reshape(-1, grad.shape[-1]).contiguous()
        recipe.backward_history[0, slot] = max(recipe.backward_history[0, slot], g.abs().max())
        sg = recipe.backward_scale[slot].clone()
        ig = sg.reciprocal()
        g8 = quantize(g, sg, recipe.backward_dtype)
        dx = torch.matmul(g8.float() * ig, w8.float() * iw)
        dw = torch.matmul(g8.float().t() * ig, x8.float() * ix)
        db = torch.matmul(torch.ones(1, g.shape[0]), g).reshape(-1)
        return dx.reshape(ctx.shape), dw, db, None, None


def fp8_gpt(shape, recipe):
    """gpt_reference.GPT with its block linears (c_attn, attn.c_proj, c_fc,
    mlp.c_proj: the plugin's slot order) quantised."""
    model = ref.GPT(**shape)
    slot = 0
    for block in model.h:
        for linear in (block.attn.c_attn, block.attn.c_proj, block.mlp.c_fc, block.mlp.c_proj):
            linear.forward = (lambda s, m: lambda x: Fp8LinearFunction.apply(x, m.weight, m.bias, recipe, s))(
                slot, linear)
            slot += 1
    return model, slot


SHAPE = dict(n_layer=2, n_head=4, n_embd=64, seq_len=32, vocab_size=256)
HYPER = dict(lr=2e-3, min_lr=2e-4, warmup=5, schedule="cosine", betas=(0.9, 0.95), eps=1e-8,
             weight_decay=0.1, grad_clip=1.0)
BATCH, ACCUM = 8, 2


class RecipeAgainstReference(TempDirMixin, unittest.TestCase):
    """The recipe and the training step against the Python reference."""

    def host_args(self, steps, save_dir=None, metrics=None, extra=()):
        args = ["--model", "gpt-tiny", "--n-layer", SHAPE["n_layer"], "--n-head", SHAPE["n_head"],
                "--n-embd", SHAPE["n_embd"], "--seq-len", SHAPE["seq_len"], "--vocab-size", SHAPE["vocab_size"],
                "--data", "tokens:" + self.tokens_path, "--data-order", "sequential",
                "--steps", steps, "--batch-size", BATCH, "--grad-accum", ACCUM, "--seed", 5,
                "--lr", HYPER["lr"], "--min-lr", HYPER["min_lr"], "--warmup-steps", HYPER["warmup"],
                "--lr-schedule", HYPER["schedule"], "--beta1", HYPER["betas"][0], "--beta2", HYPER["betas"][1],
                "--eps", HYPER["eps"], "--weight-decay", HYPER["weight_decay"], "--grad-clip", HYPER["grad_clip"],
                "--log-level", "warn", "--threads", 1, *extra]
        if save_dir:
            args += ["--save", save_dir]
        if metrics:
            args += ["--metrics-file", metrics]
        return args

    def setUp(self):
        super().setUp()
        self.tokens_path = self.path("tokens.bin")
        self.tokens = write_tokens(self.tokens_path, 40_000, SHAPE["vocab_size"])

    def fp8_run(self, steps, fmt, algo, margin, interval, length):
        log = self.path(f"state_{fmt}_{algo}.jsonl")
        metrics = self.path(f"metrics_{fmt}_{algo}.jsonl")
        extra = [*FP8, "--fp8.fp8_format", fmt, "--fp8.amax_compute_algo", algo, "--fp8.margin", margin,
                 "--fp8.interval", interval, "--fp8.amax_history_len", length, "--fp8.state_log", log]
        run_host(*self.host_args(steps, metrics=metrics, extra=extra))
        return read_state_log(log), read_metrics(metrics)

    def test_every_scale_and_history_over_30_steps(self):
        # The host's step-end amax rows drive the reference recipe; every scale
        # and every history row it derives must equal the plugin's, bit for bit.
        for fmt in ("HYBRID", "E4M3"):
            for algo in ("max", "most_recent"):
                with self.subTest(fp8_format=fmt, amax_compute_algo=algo):
                    states, metrics = self.fp8_run(30, fmt, algo, margin=1, interval=3, length=4)
                    self.assertEqual([s["step"] for s in states], list(range(30)))
                    linears = len(states[0]["backward_scale"])
                    self.assertEqual(linears, 4 * SHAPE["n_layer"])
                    recipe = Recipe(linears, 4, fmt, algo, margin=1, interval=3)
                    changed = 0
                    for step, state in enumerate(states):
                        recipe.forward_history[0] = torch.tensor(state["forward_amax"])
                        recipe.backward_history[0] = torch.tensor(state["backward_amax"])
                        before = recipe.forward_scale.clone()
                        recipe.end_step(step)
                        changed += int(not torch.equal(before, recipe.forward_scale))
                        for name in ("forward_scale", "backward_scale"):
                            self.assertTrue(torch.equal(torch.tensor(state[name]), getattr(recipe, name)),
                                            (step, name, state[name], getattr(recipe, name)))
                        for name in ("forward_history", "backward_history"):
                            mine = torch.tensor(state[name]).reshape(getattr(recipe, name).shape)
                            self.assertTrue(torch.equal(mine, getattr(recipe, name)), (step, name))
                    self.assertEqual(changed, 10)  # recomputed on steps 3, 6, ..., 30 only
                    # amax metrics are the reduced rows' maxima.
                    n = linears
                    f32 = lambda v: torch.tensor(v, dtype=torch.float32).item()
                    for state, row in zip(states, metrics):
                        self.assertEqual(f32(row["fp8.amax_input"]), f32(max(state["forward_amax"][:n])))
                        self.assertEqual(f32(row["fp8.amax_weight"]), f32(max(state["forward_amax"][n:])))
                        self.assertEqual(f32(row["fp8.amax_grad"]), f32(max(state["backward_amax"])))

    def test_losses_match_an_fp8_gpt_in_python(self):
        # Every step k of a 30-step run, replayed in Python from the host's
        # weights after k steps and its scales after k updates: the loss, the
        # gradient norm (dgrad and wgrad on FP8 gradients) and every amax the
        # step records must be the reference's. (Replaying from the host's
        # state keeps the comparison per step: over many steps, last-bit
        # differences of the two AdamW implementations move an FP8 rounding
        # now and then, which Adam turns into lr-sized steps.)
        steps, fmt, algo, margin, interval, length = 30, "HYBRID", "max", 1, 2, 4
        run_host(*self.host_args(0, save_dir=self.path("init")))
        log, metrics = self.path("state.jsonl"), self.path("metrics.jsonl")
        run_host(*self.host_args(steps, save_dir=self.path("run"), metrics=metrics, extra=[
            *FP8, "--fp8.fp8_format", fmt, "--fp8.amax_compute_algo", algo, "--fp8.margin", margin,
            "--fp8.interval", interval, "--fp8.amax_history_len", length, "--fp8.state_log", log,
            "--save-every", 1]))
        states, ours = read_state_log(log), read_metrics(metrics)
        from safetensors.torch import load_file
        linears = 4 * SHAPE["n_layer"]
        for step in range(steps):
            folder = os.path.join(self.path("init"), "step_0") if step == 0 else \
                os.path.join(self.path("run"), f"step_{step}")
            recipe = Recipe(linears, length, fmt, algo, margin, interval)
            if step > 0:
                recipe.forward_scale = torch.tensor(states[step - 1]["forward_scale"])
                recipe.backward_scale = torch.tensor(states[step - 1]["backward_scale"])
            model, _ = fp8_gpt(SHAPE, recipe)
            model.load_state_dict(load_file(os.path.join(folder, "model.safetensors")))
            losses = []
            for x, y in ref.sequential_micro_batches(self.tokens, step, BATCH, ACCUM, SHAPE["seq_len"]):
                loss = model(x, y)
                (loss / ACCUM).backward()
                losses.append(loss.item())
            norm = torch.nn.utils.clip_grad_norm_(model.parameters(), HYPER["grad_clip"]).item()
            loss = sum(losses) / ACCUM
            with self.subTest(step=step + 1):
                self.assertLess(abs(ours[step]["loss"] - loss) / loss, 1e-6,
                                f"step {step + 1}: accel {ours[step]['loss']} reference {loss}")
                self.assertLess(abs(ours[step]["grad_norm"] - norm) / norm, 1e-5, (ours[step]["grad_norm"], norm))
                for name in ("forward", "backward"):
                    mine = torch.tensor(states[step][f"{name}_amax"])
                    theirs = getattr(recipe, f"{name}_history")[0]
                    self.assertTrue(torch.allclose(mine, theirs, rtol=1e-5, atol=0), (name, mine, theirs))
        self.assertLess(ours[-1]["loss"], ours[0]["loss"])  # it learns

    def test_all_gemms_overridden_is_the_plain_run(self):
        plain, over = self.path("plain.jsonl"), self.path("over.jsonl")
        run_host(*self.host_args(5, metrics=plain))
        run_host(*self.host_args(5, metrics=over, extra=[*FP8, "--fp8.override_linear_precision",
                                                          "true,true,true"]))
        self.assertEqual([r["loss"] for r in read_metrics(plain)], [r["loss"] for r in read_metrics(over)])
        # FP8 fprop alone changes the numbers.
        fprop = self.path("fprop.jsonl")
        run_host(*self.host_args(5, metrics=fprop, extra=[*FP8, "--fp8.override_linear_precision",
                                                           "false,true,true"]))
        self.assertNotEqual([r["loss"] for r in read_metrics(plain)], [r["loss"] for r in read_metrics(fprop)])


class Metrics(TempDirMixin, unittest.TestCase):
    def test_saturation_and_underflow_counts(self):
        path = self.path("m.jsonl")
        run_host(*COMMON, *FP8, "--steps", 6, "--batch-size", 8, "--fp8.amax_history_len", 1,
                 "--metrics-file", path)
        rows = read_metrics(path)
        for key in ("amax_input", "amax_weight", "amax_grad", "scale_input", "scale_weight", "scale_grad",
                    "saturated_input", "saturated_weight", "saturated_grad", "underflow_input",
                    "underflow_weight", "underflow_grad"):
            self.assertIn("fp8." + key, rows[0], key)
            self.assertTrue(all(r["fp8." + key] >= 0 for r in rows), key)
        # Step 1 casts with scale 1: gradients are far below E5M2's smallest
        # values' scale and weights (std 0.02) lose their smallest elements;
        # once the scales follow amax, far fewer elements underflow.
        self.assertEqual(rows[0]["fp8.scale_weight"], 1.0)
        self.assertGreater(rows[0]["fp8.underflow_weight"], 0)
        # Exactly: the initial block weights that are non-zero but round to
        # zero in E4M3 at scale 1, and those beyond 448 (none).
        from safetensors.torch import load_file
        run_host(*COMMON, "--steps", 0, "--batch-size", 8, "--save", self.path("init"))
        weights = load_file(os.path.join(self.path("init"), "step_0", "model.safetensors"))
        linears = [w for name, w in weights.items() if name.startswith("h.") and name.endswith("weight")
                   and w.dim() == 2]
        self.assertEqual(len(linears), 8)
        expected = sum(int(((w != 0) & (w.to(torch.float8_e4m3fn).float() == 0)).sum()) for w in linears)
        self.assertEqual(rows[0]["fp8.underflow_weight"], expected)
        self.assertEqual(rows[0]["fp8.saturated_weight"], 0)
        self.assertLess(rows[-1]["fp8.underflow_weight"], rows[0]["fp8.underflow_weight"])
        self.assertGreater(rows[-1]["fp8.scale_weight"], 1.0)


@unittest.skipUnless(MPIRUN, "mpirun not found")
class Parity(TempDirMixin, unittest.TestCase):
    """fp8 on one rank equals fp8 under ddp and under fsdp on 2 and 4 ranks:
    the amax all-reduce gives every rank the scales of the whole batch, and
    gradients are scaled as the whole batch's.

    Each step is compared from the same state: the N-rank run resumes the
    one-rank run's checkpoint of step k (weights, AdamW moments, fp8
    histories and scales) and runs step k+1 (accel_testing's
    steps_from_the_same_state says why never a free run: how far two free
    FP8 runs drift apart depends on the machine's SIMD path). Each row's
    scales are those its own step-end amax reduction gave, so the compared
    scales cover the N-rank run's amax all-reduce too."""

    ARGS = [*COMMON, "--batch-size", 8, "--lr-decay-steps", 6, "--fp8.amax_history_len", 4,
            "--fp8.amax_compute_algo", "max", "--fp8.margin", 1, *FP8]

    def check(self, x, y, what, tolerance=1e-5):
        self.assertLess(abs(x["loss"] - y["loss"]) / x["loss"], tolerance, (what, x["step"], x["loss"], y["loss"]))
        self.assertLess(abs(x["grad_norm"] - y["grad_norm"]) / x["grad_norm"], tolerance, (what, x["step"]))
        # The scales do not depend on the world size. Current scaling takes
        # the gradient's from this step's amax, which tensor-parallel slices
        # reach by another fp32 summation order: held to the loss's bound.
        for scale in ("fp8.scale_grad", "fp8.scale_weight"):
            self.assertLess(abs(x[scale] - y[scale]) / x[scale], tolerance, (what, x["step"], scale))

    def each_step_from_the_same_state(self, args, layouts, steps=(1, 4), tag="one"):
        """Runs `args` on one rank saving every step, then for each (ranks,
        strategy, *flags) layout resumes step k's checkpoint and checks step
        k+1. `tag` names the run's files: one per call within a test."""
        for (n, strategy, *flags), k, one, many in steps_from_the_same_state(
                self, args, [(n, "--plugin", strategy, *flags) for n, strategy, *flags in layouts], steps, tag):
            with self.subTest(ranks=n, strategy=strategy, flags=flags, step=k + 1):
                self.check(one, many, (n, strategy))

    def test_every_step_under_ddp_and_fsdp_on_two_and_four_ranks(self):
        self.each_step_from_the_same_state(self.ARGS, [(n, s) for n in (2, 4) for s in ("ddp", "fsdp")])

    def test_current_scaling_under_ddp(self):
        # Compared from the same state, as the delayed recipe is: a straight
        # run's last-bit differences after step 1 move FP8 roundings and,
        # through AdamW, whole lr-sized updates (seen: 2e-4 in grad_norm).
        self.each_step_from_the_same_state(
            [*COMMON, *FP8, "--batch-size", 8, "--fp8.recipe", "current", "--fp8.fp8_format", "E4M3"],
            [(2, "ddp")], steps=(1, 2))

    def test_tensor_parallel_ranks_scale_as_one_process(self):
        # megatron's tensor-parallel ranks each hold a slice of every block
        # weight (and, with sequence parallelism, of the inputs): delayed
        # scaling all-reduces the histories over WORLD, current scaling each
        # cast's amax over DATA and TENSOR, so the per-tensor scales are the
        # whole tensor's (check(): the gradient scales within 1e-6; the
        # weights' too, below) and each step gives one process's loss.
        tp = ["--megatron.tp_degree", 2]
        for recipe in ("delayed", "current"):
            with self.subTest(recipe=recipe):
                args = [*COMMON, *FP8, "--batch-size", 8, "--fp8.recipe", recipe]
                self.each_step_from_the_same_state(
                    args, [(2, "megatron", *tp), (2, "megatron", *tp, "--megatron.sequence_parallelism", "true"),
                           (4, "megatron", *tp)], steps=(0, 1, 2), tag=recipe)

    def test_bf16_fsdp_with_checkpointing_and_accumulation(self):
        # bf16 gathered weights, activation checkpointing reruns (amax folds
        # in idempotently), two micro-batches per step.
        path = self.path("bf16.jsonl")
        mpirun(2, "--model", "gpt-tiny", *TINY, "--plugin", "fsdp", "--plugin", "fp8", "--mixed-precision", "bf16",
               "--fsdp.activation_checkpointing", "true", "--fsdp.auto_wrap_policy", "transformer_based_wrap",
               "--grad-accum", 2, "--steps", 4, "--batch-size", 8, "--threads", 1, "--log-level", "warn",
               "--metrics-file", path)
        rows = read_metrics(path)
        self.assertEqual(len(rows), 4)
        self.assertEqual(rows[0]["fp8.scale_grad"], 1.0)
        self.assertGreater(rows[1]["fp8.scale_grad"], 1.0)  # the first update happened

    def test_eight_ranks_fsdp_with_fp8(self):
        # The mission's command line, at a tiny shape.
        path = self.path("eight.jsonl")
        mpirun(8, "--model", "gpt-tiny", *TINY, "--plugin", "fsdp", "--plugin", "fp8", "--steps", 20,
               "--batch-size", 8, "--lr", 3e-3, "--warmup-steps", 2, "--threads", 1, "--log-level", "warn",
               "--metrics-file", path, timeout=600)
        rows = read_metrics(path)
        self.assertEqual([r["step"] for r in rows], list(range(1, 21)))
        self.assertLess(rows[-1]["loss"], rows[0]["loss"])
        self.assertIn("fp8.amax_grad", rows[-1])


# ---------------------------------------------------------------- FP8 gather

def round_up(n, to):
    return (n + to - 1) // to * to


def unit_gather_bytes(sizes, encoded, parts, param_bytes):
    """Bytes one all-gather of a unit moves, computed from its parameters'
    sizes (flat order) as plugins/sharding/codec_plan.h lays the packets out:
    per rank, its encoded elements at 1 byte, then from the next multiple of
    16 its other elements at param_bytes; every rank's packet as large as the
    fullest rank's, rounded to 16. Without encoded parameters: the padded
    unit in the parameter dtype."""
    numel = sum(sizes)
    shard = -(-numel // parts)
    if not any(encoded):
        return shard * parts * param_bytes
    need = []
    for r in range(parts):
        lo, hi = r * shard, min((r + 1) * shard, numel)
        codes = values = offset = 0
        for size, enc in zip(sizes, encoded):
            part = max(0, min(hi, offset + size) - max(lo, offset))
            offset += size
            if enc:
                codes += part
            else:
                values += part
        need.append(round_up(codes, 16) + values * param_bytes if values else codes)
    return parts * round_up(max(max(need), 1), 16)


def model_units(checkpoint):
    """The model's units as lists of (name, numel) in flat order, from a
    saved model's shapes: embedding, blocks, head (the host's unit order,
    host/model/gpt.cpp). A unit's flat buffer holds the weight-decayed
    parameters first — a block's four linear weights — then the others,
    each group in declaration order (host/model/unit.cpp)."""
    from safetensors.torch import load_file
    shapes = {k: v.numel() for k, v in load_file(os.path.join(checkpoint, "step_0", "model.safetensors")).items()}
    block_order = ["ln_1.weight", "ln_1.bias", "attn.c_attn.weight", "attn.c_attn.bias", "attn.c_proj.weight",
                   "attn.c_proj.bias", "ln_2.weight", "ln_2.bias", "mlp.c_fc.weight", "mlp.c_fc.bias",
                   "mlp.c_proj.weight", "mlp.c_proj.bias"]
    layers = sorted({int(k.split(".")[1]) for k in shapes if k.startswith("h.")})
    units = [[(n, shapes[n]) for n in ("wte.weight", "wpe.weight")]]
    block_order = [n for n in block_order if is_block_linear_weight("h.0." + n)] + \
        [n for n in block_order if not is_block_linear_weight("h.0." + n)]
    units += [[(f"h.{i}.{n}", shapes[f"h.{i}.{n}"]) for n in block_order] for i in layers]
    units.append([(n, shapes[n]) for n in ("ln_f.weight", "ln_f.bias")])
    return units


def is_block_linear_weight(name):
    return name.startswith("h.") and name.endswith(".weight") and ".ln_" not in name


class GatherCodecRoundTrip(unittest.TestCase):
    """The numerics the FP8 weight gather rests on (plugins/fp8/
    fp8_gather_codec.h), computed as the host's kernels compute them
    (kernel_services.cpp's cast: x.float() * scale, saturated to the FP8
    range, rounded to nearest even): decoding every E4M3 code with
    scale_inv = 1/scale into the parameter dtype and re-casting with the
    same scale gives the same code back, bit for bit — negative zero,
    subnormals and the saturated codes included — and casting shards gives
    the whole tensor's codes."""

    def cast(self, x, scale, dtype):
        limit = FP8_MAX.get(dtype)
        y = x.float() * scale
        return (y.clamp(-limit, limit) if limit else y).to(dtype)

    def test_every_code_survives_decode_and_recast(self):
        codes = torch.arange(256, dtype=torch.uint8).view(torch.float8_e4m3fn)
        finite = ~codes.float().isnan()
        gen = torch.Generator().manual_seed(10)
        scales = [1.0, 2.0 ** -7, 2.0 ** 11, 448.0, 448.0 / 3.1, 448.0 / 1e-3, 448.0 / 7e4]
        scales += (torch.rand(200, generator=gen, dtype=torch.float64) * 30 - 15).exp2().tolist()
        for dtype in (torch.bfloat16, torch.float32):
            for s in scales:
                scale = torch.tensor(s, dtype=torch.float32)
                scale_inv = torch.tensor(1.0, dtype=torch.float32) / scale
                decoded = self.cast(codes, scale_inv, dtype)
                again = self.cast(decoded, scale, torch.float8_e4m3fn)
                self.assertTrue(torch.equal(again.view(torch.uint8)[finite], codes.view(torch.uint8)[finite]),
                                (dtype, s))
                self.assertTrue(again.float()[~finite].isnan().all())

    def test_saturated_and_negative_zero_weights(self):
        # Weights beyond the scale's range saturate to +-448 at encode and
        # stay there; tiny negative ones round to -0 and stay -0.
        w = torch.tensor([1e9, -1e9, 3.0, -1e-30, 0.0, -0.0, 1e-6], dtype=torch.bfloat16)
        scale = torch.tensor(448.0 / 2.0)
        codes = self.cast(w, scale, torch.float8_e4m3fn)
        decoded = self.cast(codes, torch.tensor(1.0) / scale, torch.bfloat16)
        self.assertTrue(torch.equal(self.cast(decoded, scale, torch.float8_e4m3fn).view(torch.uint8),
                                    codes.view(torch.uint8)))
        self.assertEqual(codes.view(torch.uint8)[3].item(), 0x80)  # -0

    def test_shards_cast_as_the_whole(self):
        gen = torch.Generator().manual_seed(3)
        w = (torch.randn(96, 32, generator=gen) * 0.05).to(torch.bfloat16)
        scale = torch.tensor(448.0) / w.float().abs().max()
        whole = self.cast(w, scale, torch.float8_e4m3fn).view(torch.uint8).flatten()
        flat = w.flatten()
        shards = [self.cast(flat[i:i + 1000], scale, torch.float8_e4m3fn).view(torch.uint8)
                  for i in range(0, flat.numel(), 1000)]
        self.assertTrue(torch.equal(torch.cat(shards), whole))
        amax = max(flat[i:i + 1000].float().abs().max() for i in range(0, flat.numel(), 1000))
        self.assertEqual(amax, w.float().abs().max())


@unittest.skipUnless(MPIRUN, "mpirun not found")
class Fp8WeightGather(TempDirMixin, unittest.TestCase):
    """fsdp and ZeRO-3 all-gather the block linears' weights as E4M3 codes
    (fp8_weight_gather, on by default) and train bit for bit as with the
    option off — losses, gradient norms and the fp8 metrics of every step,
    for both recipes, bf16 and fp32 parameters, and with activation
    checkpointing re-gathering in backward — while the gathers move the
    bytes the packet layout predicts from the model's shapes: the linear
    weights at 1 byte per element (half of bf16, a quarter of fp32)."""

    SHAPE = ["--n-layer", 2, "--n-embd", 32, "--n-head", 2, "--seq-len", 16, "--vocab-size", 128]
    ARGS = [*COMMON, *SHAPE, *FP8, "--batch-size", 8, "--fp8.amax_history_len", 4, "--fp8.margin", 1]
    STEPS = 10
    COMPARED = ["loss", "grad_norm", "fp8.amax_weight", "fp8.scale_weight", "fp8.saturated_weight",
                "fp8.underflow_weight", "fp8.amax_input", "fp8.scale_grad"]

    def run2(self, tag, *extra):
        path = self.path(tag + ".jsonl")
        mpirun(2, *self.ARGS, "--steps", self.STEPS, "--metrics-file", path, *extra, timeout=600)
        rows = read_metrics(path)
        self.assertEqual(len(rows), self.STEPS)
        return rows

    def assert_same_training(self, on, off, what):
        for a, b in zip(on, off):
            for key in self.COMPARED:
                self.assertEqual(a[key], b[key], (what, a["step"], key))

    def pair(self, tag, *extra):
        on = self.run2(tag + "_on", *extra)
        off = self.run2(tag + "_off", *extra, "--fp8.fp8_weight_gather", "false")
        self.assert_same_training(on, off, tag)
        return on, off

    def units(self):
        ckpt = self.path("init")
        if not os.path.isdir(ckpt):
            run_host(*COMMON, *self.SHAPE, "--steps", 0, "--save", ckpt)
        return model_units(ckpt)

    def expected_bytes(self, param_bytes, encoded):
        """One step's gather bytes (no_wrap: every unit gathered once)."""
        total = 0
        for unit in self.units():
            sizes = [n for _, n in unit]
            flags = [encoded and is_block_linear_weight(name) for name, _ in unit]
            total += unit_gather_bytes(sizes, flags, 2, param_bytes)
        return total

    def test_fsdp_gathers_fp8_weights_bit_for_bit_both_recipes(self):
        units = self.units()
        linear = sum(n for unit in units for name, n in unit if is_block_linear_weight(name))
        for recipe in ("delayed", "current"):
            for dtype, width in (("bf16", 2), ("fp32", 4)):
                with self.subTest(recipe=recipe, param_dtype=dtype):
                    on, off = self.pair(f"fsdp_{recipe}_{dtype}", "--plugin", "fsdp", "--fsdp.param_dtype", dtype,
                                        "--fp8.recipe", recipe)
                    plain, fp8 = self.expected_bytes(width, False), self.expected_bytes(width, True)
                    for a, b in zip(on, off):
                        self.assertEqual(b["fsdp.gather_bytes"], plain)
                        self.assertEqual(a["fsdp.gather_bytes"], fp8)
                        self.assertEqual(a["fsdp.encoded_gathers"], len(units) - 2)  # the blocks
                        self.assertEqual(b["fsdp.encoded_gathers"], 0)
                        if recipe == "delayed":  # nothing else moves differently: the host's counter agrees
                            self.assertEqual(b["comm_bytes"] - a["comm_bytes"], plain - fp8)
                    # The linear weights travel at 1 byte per element
                    # (the layout puts each once in its rank's packet),
                    # against 2 (bf16) or 4 (fp32) in the plain gather; the
                    # other elements as before, plus each rank's alignment
                    # and the fuller rank's share.
                    rest = sum(n for unit in units for _, n in unit) - linear
                    self.assertGreaterEqual(fp8 - linear, rest * width - width * len(units))
                    self.assertLessEqual(fp8 - linear, rest * width + (width - 1) * rest + 2 * 32 * len(units))

    def test_fsdp_regathers_in_backward_with_checkpointing(self):
        # One wrap group per block, resharded after forward: backward
        # re-gathers (through the codec again) and activation checkpointing
        # reruns the linears on the re-gathered, decoded weights.
        on, off = self.pair("fsdp_wrap", "--plugin", "fsdp", "--mixed-precision", "bf16",
                            "--fsdp.auto_wrap_policy", "transformer_based_wrap",
                            "--fsdp.activation_checkpointing", "true", "--grad-accum", 2)
        self.assertGreater(on[0]["fsdp.encoded_gathers"], len(self.units()) - 2)  # re-gathers too
        self.assertLess(on[0]["fsdp.gather_bytes"], off[0]["fsdp.gather_bytes"])

    def test_zero3_gathers_fp8_weights_bit_for_bit(self):
        for recipe in ("delayed", "current"):
            for precision in ("bf16", "no"):
                with self.subTest(recipe=recipe, precision=precision):
                    # Stage 3 with every unit partitioned (the default
                    # persistence threshold keeps units this small whole).
                    on, off = self.pair(f"zero3_{recipe}_{precision}", "--plugin", "deepspeed_zero",
                                        "--deepspeed_zero.hf_ds_config", ZERO3_PARTITION_ALL,
                                        "--mixed-precision", precision, "--fp8.recipe", recipe)
                    self.assertGreater(on[0]["deepspeed_zero.encoded_gathers"], 0)
                    self.assertLess(on[0]["deepspeed_zero.gather_bytes"], off[0]["deepspeed_zero.gather_bytes"])

    def test_msamp_o2_gathers_fp8_weights_bit_for_bit(self):
        # The two ABI 1.8 areas together (built apart): MS-AMP O2's precision
        # policy (FP8 gradient reduce-scatter, scaled moments) beside the
        # gather codec, on or off, trains alike, and the codec still
        # shrinks the gathers.
        on, off = self.pair("fsdp_msamp_o2", "--plugin", "fsdp", "--fsdp.auto_wrap_policy",
                            "transformer_based_wrap", "--fp8.backend", "msamp", "--fp8.opt_level", "O2")
        self.assertGreater(on[0]["fsdp.encoded_gathers"], 0)
        self.assertLess(on[0]["fsdp.gather_bytes"], off[0]["fsdp.gather_bytes"])


MSAMP = ["--fp8.backend", "msamp"]
E4M3_MAX = 448.0


def load_safetensors(path):
    from safetensors.torch import load_file
    return load_file(path)


def checkpoint_moments(step_dir):
    """`<param>.exp_avg` / `.exp_avg_sq` of a checkpoint, whoever saved them:
    the host's optimizer.safetensors, or a sharding plugin's
    plugin_state*.safetensors, whose metadata places each slice at its global
    offset (docs/checkpoint_format.md)."""
    host = os.path.join(step_dir, "optimizer.safetensors")
    if os.path.exists(host):
        return load_safetensors(host)
    from safetensors import safe_open
    out = {}
    for fn in sorted(os.listdir(step_dir)):
        if not (fn.startswith("plugin_state") and fn.endswith(".safetensors")):
            continue
        with safe_open(os.path.join(step_dir, fn), "pt") as f:
            index = json.loads(f.metadata()["accel.plugin_state"])["tensors"]
            for entry in index.values():
                if entry["space"] != "optimizer":
                    continue
                moment, name = entry["name"].split("/", 1)
                whole = out.setdefault(name + "." + moment, torch.zeros(entry["global_shape"]))
                for piece in entry["slices"]:
                    t = f.get_tensor(piece["tensor"])
                    whole[tuple(slice(o, o + n) for o, n in zip(piece["offset"], t.shape))] = t
    return out


def unit_of(name):
    """The host unit a GPT parameter's flat buffer belongs to (host/model/gpt.cpp):
    the embeddings, each block, the head's final norm."""
    if name.startswith("h."):
        return ".".join(name.split(".")[:2])
    return "embedding" if name.split(".")[0] in ("wte", "wpe") else "head"


def fp8_comm_scale(amax, summands):
    """accel/precision.h: the largest power of two s with amax * s * H <= 448,
    H = N (1 + 2^-4)^(N - 2) for N > 2, else N; 1 for a zero amax."""
    if amax == 0 or not torch.isfinite(amax):
        return 1.0
    headroom = float(summands)
    for _ in range(2, summands):
        headroom *= 1.0 + 2.0 ** -4
    return 2.0 ** int(torch.floor(torch.log2(torch.tensor(E4M3_MAX, dtype=torch.float64) /
                                             (amax.double() * headroom))))


def fp8_all_reduce_reference(grads):
    """MS-AMP O1's gradient all-reduce as the host computes it: one scale per
    tensor from the MAX over ranks of its amax, each rank's g * s cast to
    E4M3, summed in fp32 and rounded to E4M3 once per combine (two ranks: one
    combine), decoded as fp32(q) * (1 / (s N))."""
    n = len(grads)
    assert n == 2, "the reference sums two terms: one combine, in any order"
    amax = torch.stack([g.abs().max() for g in grads]).max()
    s = torch.tensor(fp8_comm_scale(amax, n), dtype=torch.float32)
    q = [(g * s).to(torch.float8_e4m3fn).float() for g in grads]
    total = (q[0] + q[1]).to(torch.float8_e4m3fn).float()
    return total * (torch.tensor(1.0, dtype=torch.float32) / (s * n))


class TokenFileMixin:
    """A learnable token file in the test's directory, read in order."""

    def setUp(self):
        super().setUp()
        self.tokens_path = self.path("tokens.bin")
        write_tokens(self.tokens_path, 40_000, 256)

    def data(self):
        return ["--data", "tokens:" + self.tokens_path, "--data-order", "sequential"]


@unittest.skipUnless(MPIRUN, "mpirun not found")
class MsAmpO1(TokenFileMixin, TempDirMixin, unittest.TestCase):
    """MS-AMP O1: the parallel plugins all-reduce (ddp) and reduce-scatter
    (fsdp, through plugins/sharding) gradients as scaled E4M3, a quarter of
    the fp32 bytes; one step's reduced gradients equal a Python reference of
    the numerics; training stays within 2 % of the te backend's loss."""

    def test_gradient_bytes_are_a_quarter_of_fp32(self):
        ckpt = self.path("shapes")
        run_host(*COMMON, *self.data(), "--steps", 1, "--batch-size", 4, "--save", ckpt)
        params = load_safetensors(os.path.join(ckpt, "step_1", "model.safetensors"))
        units = {}
        for name, t in params.items():
            units[unit_of(name)] = units.get(unit_of(name), 0) + t.numel()
        tensors = len(params)
        for strategy in ("ddp", "fsdp"):
            with self.subTest(strategy=strategy):
                n = 2
                # Elements on the wire: every unit's flat gradient once, padded
                # to a multiple of N by the sharding machinery.
                wire = sum(-(-numel // n) * n for numel in units.values()) if strategy == "fsdp" else \
                    sum(units.values())
                rows = {}
                for backend in ("te", "msamp"):
                    path = self.path(f"{strategy}_{backend}.jsonl")
                    extra = MSAMP + ["--fp8.opt_level", "O1"] if backend == "msamp" else []
                    mpirun(n, *COMMON, *FP8, *self.data(), "--steps", 3, "--batch-size", 8, "--plugin", strategy,
                           "--metrics-file", path, *extra)
                    rows[backend] = read_metrics(path)
                for te, o1 in zip(rows["te"][1:], rows["msamp"][1:]):
                    # The same traffic besides the gradients: te's fp32 gradients
                    # are 4 bytes an element, O1's E4M3 ones 1, plus one fp32
                    # amax per tensor for the scale agreement.
                    other_te = te["comm_bytes"] - 4 * wire
                    other_o1 = o1["comm_bytes"] - 1 * wire - 4 * tensors
                    self.assertEqual(other_te, other_o1, (te["comm_bytes"], o1["comm_bytes"], wire, tensors))
                    self.assertGreater(other_te, 0)

    def test_one_step_equals_the_reference_of_the_fp8_all_reduce(self):
        # Plain GEMMs (override_linear_precision all true) make each rank's
        # local gradient reproducible by one process; lr 1e-30 leaves the
        # weights bit-identical (w - 1e-30 x is w in fp32) and beta1 0 makes
        # exp_avg after a step the gradient the optimizer saw, exactly.
        common = ["--model", "gpt-tiny", "--log-level", "warn", "--threads", 1, *FP8, *self.data(),
                  "--fp8.override_linear_precision", "true,true,true", "--lr", 1e-30, "--min-lr", 0,
                  "--beta1", 0.0, "--grad-clip", 0]
        local = self.path("local")
        run_host(*common, "--steps", 2, "--batch-size", 4, "--save", local, "--save-every", 1)
        # Rank r of 2 at batch 8 reads sequences [4r, 4r + 4): step r + 1 at batch 4.
        shares = [load_safetensors(os.path.join(local, f"step_{k}", "optimizer.safetensors")) for k in (1, 2)]
        # ddp's bucket all-reduce; the sharding machinery's reduce-scatter
        # (fsdp, ZeRO-2/3, ZeRO-1 reducing the host's gradients in place) and
        # its all-reduce of host-owned units (ZeRO-0): one codec, one result.
        layouts = (("ddp",), ("fsdp",), *(("deepspeed_zero", "--deepspeed_zero.zero_stage", st) for st in (0, 1, 3)))
        for strategy, *flags in layouts:
            with self.subTest(strategy=strategy, flags=flags):
                out = self.path("reduced_" + strategy + "".join(map(str, flags[1:])))
                mpirun(2, *common, *MSAMP, "--fp8.opt_level", "O1", "--plugin", strategy, *flags, "--steps", 1,
                       "--batch-size", 8, "--save", out)
                reduced = checkpoint_moments(os.path.join(out, "step_1"))
                names = [k for k in reduced if k.endswith(".exp_avg")]
                self.assertGreater(len(names), 4)
                for name in names:
                    expected = fp8_all_reduce_reference([shares[0][name], shares[1][name]])
                    self.assertEqual(reduced[name].numel(), expected.numel(), name)
                    reduced[name] = reduced[name].view(expected.shape)
                    self.assertTrue(torch.equal(reduced[name], expected),
                                    (strategy, name, (reduced[name] - expected).abs().max().item()))
                    # and FP8 did change something: not the fp32 average
                    if name.startswith("h.0.mlp.c_fc.weight"):
                        fp32 = (shares[0][name] + shares[1][name]) / 2
                        self.assertFalse(torch.equal(reduced[name], fp32))

    def test_loss_stays_within_two_percent_of_te(self):
        losses = {}
        for backend in ("te", "msamp"):
            path = self.path(backend + ".jsonl")
            extra = MSAMP + ["--fp8.opt_level", "O1"] if backend == "msamp" else []
            mpirun(2, *COMMON, *FP8, *self.data(), "--steps", 300, "--batch-size", 8, "--plugin", "ddp",
                   "--metrics-file", path, *extra, timeout=900)
            losses[backend] = [r["loss"] for r in read_metrics(path)]
        # The mean of the last 10 steps (one step's loss is one batch's).
        # Measured: te 4.8629, O1 4.8614 (0.03 %) after 300 steps.
        te, o1 = (sum(v[-10:]) / 10 for v in (losses["te"], losses["msamp"]))
        self.assertLess(te, losses["te"][0] * 0.9)  # it learned
        self.assertLess(abs(o1 - te) / te, 0.02, (te, o1))


TEST_PLUGINS = os.environ.get("ACCEL_TEST_PLUGINS", os.path.join(os.path.dirname(__file__), "../../build/test_plugins"))
O2 = [*FP8, *MSAMP, "--fp8.opt_level", "O2"]
F16_MAX = 65504.0


def moment_scale(amax, fmt_max):
    """MS-AMP's ScalingMeta.compute_scaling_factor (margin 0): 2^floor(log2(max / amax)), 1 for amax 0."""
    amax = float(amax)
    if amax == 0.0:
        return 1.0
    return 2.0 ** int(torch.floor(torch.log2(torch.tensor(fmt_max, dtype=torch.float64) / amax)))


def store_moment(values, fmt, fmt_max):
    """A moment stored MS-AMP's way: (scale, fmt(values * scale))."""
    s = moment_scale(values.abs().max(), fmt_max)
    return s, (values * s).to(fmt)


class ScaledAdamW:
    """MS-AMP O2's AdamW step, written from its definition (msamp/optim/adamw.py,
    adamw.cu): dequantise m (E4M3) and v (f16), update both in fp32, step the
    parameter from the unquantised new moments, re-choose each moment's
    per-tensor scale from its new amax and store it."""

    def __init__(self, m, v):
        self.m = store_moment(m, torch.float8_e4m3fn, E4M3_MAX)
        self.v = store_moment(v, torch.float16, F16_MAX)

    def moments(self):
        return self.m[1].float() / self.m[0], self.v[1].float() / self.v[0]

    def step(self, p, g, step, lr, betas, eps, weight_decay):
        m, v = self.moments()
        m = torch.lerp(m, g, 1 - betas[0])
        v = v.mul(betas[1]).addcmul_(g, g, value=1 - betas[1])
        if weight_decay:
            p = p * (1 - lr * weight_decay)
        step_size = lr / (1 - betas[0] ** step)
        denom = (v.sqrt() / (1 - betas[1] ** step) ** 0.5).add_(eps)
        p = p.addcdiv(m, denom, value=-step_size)
        self.m = store_moment(m, torch.float8_e4m3fn, E4M3_MAX)
        self.v = store_moment(v, torch.float16, F16_MAX)
        return p


class MsAmpO2(TokenFileMixin, TempDirMixin, unittest.TestCase):
    """MS-AMP O2: AdamW with an E4M3 first moment and an FP16 second moment,
    each with a per-tensor scale re-chosen every step (the host's AdamW and
    the sharding machinery's); fp32 moments in checkpoints."""

    STEPS = 4

    def test_one_process_step_against_a_python_reference(self):
        grads, ckpt, metrics = self.path("grads"), self.path("ckpt"), self.path("m.jsonl")
        betas, eps, wd = (0.9, 0.95), 1e-8, 0.1
        run_host(*COMMON, *O2, *self.data(), "--steps", self.STEPS, "--batch-size", 8, "--grad-clip", 0,
                 "--beta1", betas[0], "--beta2", betas[1], "--eps", eps, "--weight-decay", wd,
                 "--save", ckpt, "--save-every", 1, "--metrics-file", metrics,
                 "--plugin-path", os.path.join(TEST_PLUGINS, "grad_dump"), "--plugin", "grad_dump",
                 "--grad_dump.dir", grads)
        rows = read_metrics(metrics)
        state = lambda k, f: load_safetensors(os.path.join(ckpt, f"step_{k}", f))
        params, moments = state(1, "model.safetensors"), state(1, "optimizer.safetensors")
        checked = 0
        for name, p in params.items():
            # The checkpoint's fp32 moments re-quantise to themselves: the
            # resume path's exactness (power-of-two scales).
            opt = ScaledAdamW(moments[name + ".exp_avg"], moments[name + ".exp_avg_sq"])
            m, v = opt.moments()
            self.assertTrue(torch.equal(m, moments[name + ".exp_avg"]), name)
            self.assertTrue(torch.equal(v, moments[name + ".exp_avg_sq"]), name)
            for k in range(2, self.STEPS + 1):
                g = torch.from_file(os.path.join(grads, f"step_{k}", name + ".bin"), size=p.numel(),
                                    dtype=torch.float32).view(p.shape)
                p = opt.step(p, g, k, rows[k - 1]["lr"], betas, eps, wd if p.dim() >= 2 else 0.0)
                host_p = state(k, "model.safetensors")[name]
                host_m = state(k, "optimizer.safetensors")[name + ".exp_avg"]
                host_v = state(k, "optimizer.safetensors")[name + ".exp_avg_sq"]
                scale = p.abs().max().item()
                self.assertLess((host_p - p).abs().max().item() / scale, 1e-6, (name, k))
                m, v = opt.moments()
                self.assertLess((host_m - m).abs().max().item() / m.abs().max().item(), 1e-6, (name, k))
                self.assertLess((host_v - v).abs().max().item() / v.abs().max().item(), 1e-6, (name, k))
                checked += 1
        self.assertGreater(checked, 10)

    def test_memory_ledger_counts_three_bytes_per_parameter(self):
        rows = {}
        for level in ("O1", "O2"):
            path = self.path(level + ".jsonl")
            run_host(*COMMON, *FP8, *MSAMP, "--fp8.opt_level", level, *self.data(), "--steps", 1,
                     "--batch-size", 4, "--metrics-file", path, "--save", self.path("ckpt" + level))
            rows[level] = read_metrics(path)[0]
        params = load_safetensors(os.path.join(self.path("ckptO1"), "step_1", "model.safetensors"))
        numel, tensors = sum(t.numel() for t in params.values()), len(params)
        # The ledger's accounted optimizer bytes (memory_peak_bytes by
        # category; model_states sums params, grads and these): fp32 moments
        # under O1; E4M3 exp_avg, f16 exp_avg_sq and one fp32 scale per tensor
        # and moment under O2.
        self.assertEqual(rows["O1"]["memory_peak_bytes"]["optimizer"], 8 * numel)
        self.assertEqual(rows["O2"]["memory_peak_bytes"]["optimizer"], 3 * numel + 2 * 4 * tensors)
        self.assertEqual(rows["O1"]["memory_ledger"]["model_states"] - rows["O2"]["memory_ledger"]["model_states"],
                         5 * numel - 2 * 4 * tensors)

    @unittest.skipUnless(MPIRUN, "mpirun not found")
    def test_sharded_steps_equal_one_process(self):
        # From the same state (the one-process run's checkpoint of step k,
        # moments re-quantised exactly), fsdp and ZeRO-2 on 2 ranks choose
        # every parameter's moment scales as one process (the amaxes are
        # all-reduced with MAX), so step k+1's update matches: the loss of
        # step k+2 (which sees that update) within 1e-5. What differs is the
        # gradients: O2 includes O1's FP8 gradient reduction, and one process
        # reduces nothing: each gradient element moves by up to half an E4M3
        # step (2^-4 relative), which moved the loss 1.3e-5 here; 1e-4 bounds
        # it. The sharded layouts run the same numerics (one codec, one
        # sharded AdamW, the offloaded partitions through the same kernel),
        # and ddp's all-reduce and the host's one-shot scaled AdamW compute
        # the same bits (MsAmpO1's reference; tests/runtime's two-pass
        # kernel test), so all four agree with each other to the last bit.
        one = self.path("one")
        run_host(*COMMON, *O2, *self.data(), "--steps", 3, "--batch-size", 8, "--save", one, "--save-every", 1,
                 "--metrics-file", self.path("one.jsonl"))
        ref = read_metrics(self.path("one.jsonl"))
        layouts = (("fsdp",), ("deepspeed_zero", "--deepspeed_zero.zero_stage", 2),
                   ("deepspeed_zero", "--deepspeed_zero.zero_stage", 2, "--deepspeed_zero.offload_optimizer_device",
                    "cpu"), ("ddp",))
        losses = []
        for strategy, *flags in layouts:
            with self.subTest(strategy=strategy, flags=flags):
                path = self.path("two.jsonl")
                if os.path.exists(path):
                    os.remove(path)
                mpirun(2, *COMMON, *O2, *self.data(), "--steps", 3, "--batch-size", 8, "--plugin", strategy, *flags,
                       "--resume", os.path.join(one, "step_1"), "--metrics-file", path)
                rows = read_metrics(path)
                self.assertEqual([r["step"] for r in rows], [2, 3])
                self.assertLess(abs(rows[0]["loss"] - ref[1]["loss"]) / ref[1]["loss"], 1e-6)  # the same state
                self.assertLess(abs(rows[1]["loss"] - ref[2]["loss"]) / ref[2]["loss"], 1e-4, (rows, ref))
                losses.append([r["loss"] for r in rows])
        for other in losses[1:]:
            self.assertEqual(losses[0], other)

    def test_resume_is_bit_exact(self):
        args = [*COMMON, *O2, *self.data(), "--batch-size", 8, "--lr-decay-steps", 6]
        straight, split = self.path("straight"), self.path("split")
        run_host(*args, "--steps", 6, "--save", straight, "--metrics-file", self.path("a.jsonl"))
        run_host(*args, "--steps", 3, "--save", split, "--metrics-file", self.path("b.jsonl"))
        run_host(*args, "--steps", 6, "--save", split, "--resume", split, "--metrics-file", self.path("b.jsonl"))
        a, b = read_metrics(self.path("a.jsonl")), read_metrics(self.path("b.jsonl"))
        self.assertEqual([r["loss"] for r in a], [r["loss"] for r in b])
        assert_same_safetensors(self, os.path.join(straight, "step_6"), os.path.join(split, "step_6"))

    @unittest.skipUnless(MPIRUN, "mpirun not found")
    def test_sharded_resume_is_bit_exact(self):
        args = [*COMMON, *O2, *self.data(), "--batch-size", 8, "--lr-decay-steps", 6, "--plugin", "fsdp",
                "--fsdp.state_dict_type", "SHARDED_STATE_DICT"]
        straight, split = self.path("straight"), self.path("split")
        mpirun(2, *args, "--steps", 6, "--save", straight, "--metrics-file", self.path("a.jsonl"))
        mpirun(2, *args, "--steps", 3, "--save", split, "--metrics-file", self.path("b.jsonl"))
        mpirun(2, *args, "--steps", 6, "--save", split, "--resume", split, "--metrics-file", self.path("b.jsonl"))
        a, b = read_metrics(self.path("a.jsonl")), read_metrics(self.path("b.jsonl"))
        self.assertEqual([r["loss"] for r in a], [r["loss"] for r in b])
        assert_same_safetensors(self, os.path.join(straight, "step_6"), os.path.join(split, "step_6"))


class Conformance(unittest.TestCase):
    def test_check_plugin_passes(self):
        plugin = os.path.join(os.path.dirname(ACCEL_HOST), "..", "lib", "accel", "plugins", "libaccel_fp8.so")
        proc = run_host("check-plugin", plugin, timeout=300)
        self.assertIn("0 failed", proc.stdout + proc.stderr)


class Resume(TempDirMixin, unittest.TestCase):
    RECIPE = [*COMMON, *FP8, "--batch-size", 8, "--lr-decay-steps", 8, "--fp8.amax_compute_algo", "max",
              "--fp8.interval", 2]
    ARGS = [*RECIPE, "--fp8.amax_history_len", 4]

    def test_resume_is_bit_exact_with_the_fp8_state(self):
        straight, split = self.path("straight"), self.path("split")
        run_host(*self.ARGS, "--steps", 8, "--save", straight, "--metrics-file", self.path("a.jsonl"))
        run_host(*self.ARGS, "--steps", 5, "--save", split, "--metrics-file", self.path("b.jsonl"))
        run_host(*self.ARGS, "--steps", 8, "--save", split, "--resume", split, "--metrics-file",
                 self.path("b.jsonl"))
        a, b = read_metrics(self.path("a.jsonl")), read_metrics(self.path("b.jsonl"))
        self.assertEqual([r["step"] for r in b], list(range(1, 9)))
        self.assertEqual([r["loss"] for r in a], [r["loss"] for r in b])
        self.assertEqual([r["fp8.scale_grad"] for r in a], [r["fp8.scale_grad"] for r in b])
        for name in ("model.safetensors", "optimizer.safetensors", "plugin_state.safetensors"):
            with open(os.path.join(straight, "step_8", name), "rb") as x, \
                    open(os.path.join(split, "step_8", name), "rb") as y:
                self.assertTrue(x.read() == y.read(), f"{name} differs after resume")

    def test_a_checkpoint_without_fp8_state_resumes_with_fresh_scales(self):
        ckpt = self.path("plain")
        run_host(*COMMON, "--batch-size", 8, "--steps", 2, "--save", ckpt)
        proc = run_host(*self.ARGS, "--steps", 4, "--resume", ckpt, "--metrics-file", self.path("m.jsonl"))
        rows = read_metrics(self.path("m.jsonl"))
        self.assertEqual([r["step"] for r in rows], [3, 4])
        self.assertIn("holds no fp8 state", proc.stderr + proc.stdout)

    def test_another_history_length_is_refused(self):
        ckpt = self.path("ckpt")
        run_host(*self.ARGS, "--steps", 2, "--save", ckpt)
        proc = run_host(*self.RECIPE, "--steps", 4, "--resume", ckpt, "--fp8.amax_history_len", 8, check=False)
        self.assertNotEqual(proc.returncode, 0)
        lines = error_lines(proc.stderr)
        self.assertEqual(len(lines), 1, proc.stderr)
        self.assertIn("forward_amax_history", lines[0])
        self.assertIn("amax_history_len", lines[0])


class BadOptions(unittest.TestCase):
    """One line naming the option and the limit, exit 2."""

    def refused(self, *args, mentions):
        proc = run_host(*COMMON, *FP8, "--steps", 1, "--batch-size", 4, *args, check=False, timeout=120)
        self.assertEqual(proc.returncode, 2, proc.stderr)
        lines = error_lines(proc.stderr)
        self.assertEqual(len(lines), 1, proc.stderr)
        for word in mentions:
            self.assertIn(word, lines[0])

    def test_unknown_fp8_format(self):
        self.refused("--fp8.fp8_format", "E5M3", mentions=["fp8_format", "E5M3", "HYBRID"])

    # The schema's bounds (issue 30: every INT option has a range) refuse
    # these as the option is parsed, before the plugin runs.
    def test_negative_margin(self):
        self.refused("--fp8.margin", -1, mentions=["--fp8.margin", "'-1'", "minimum 0"])
        self.refused("--fp8.margin", 65, mentions=["--fp8.margin", "'65'", "maximum 64"])

    def test_zero_history_length(self):
        self.refused("--fp8.amax_history_len", 0, mentions=["--fp8.amax_history_len", "'0'", "minimum 1"])
        self.refused("--fp8.amax_history_len", 1048577, mentions=["--fp8.amax_history_len", "maximum 1048576"])

    def test_interval_out_of_range(self):
        self.refused("--fp8.interval", 0, mentions=["--fp8.interval", "minimum 1"])
        self.refused("--fp8.interval", 9223372036854775807, mentions=["--fp8.interval", "maximum 1000000000"])

    def test_opt_level_o3(self):
        self.refused("--fp8.backend", "msamp", "--fp8.opt_level", "O3", mentions=["O3", "DeepSpeed-only"])

    def test_unknown_backend(self):
        self.refused("--fp8.backend", "cuda", mentions=["backend", "cuda", "te or msamp"])

    def test_fp16_mixed_precision(self):
        self.refused("--mixed-precision", "fp16", mentions=["fp16", "fp8"])

    def test_unknown_amax_algo_and_override_spelling(self):
        self.refused("--fp8.amax_compute_algo", "mean", mentions=["amax_compute_algo", "mean"])
        self.refused("--fp8.override_linear_precision", "true,false", mentions=["override_linear_precision"])

    def test_msamp_levels_run(self):
        for level in ("O1", "O2"):
            proc = run_host("--model", "gpt-tiny", "--threads", 1, "--log-level", "info", *FP8, "--steps", 1,
                            "--batch-size", 4, "--fp8.backend", "msamp", "--fp8.opt_level", level)
            self.assertIn("msamp O" + level[1], proc.stderr)
            self.assertNotIn("[warn", proc.stderr)

    @unittest.skipUnless(MPIRUN, "mpirun not found")
    def test_o2_with_moments_in_nvme_is_refused(self):
        # deepspeed_zero's NVMe-swapped moments are fp32 files: scaled
        # moments there are not built, and the run says so at start.
        proc = mpirun(2, *COMMON, *FP8, "--steps", 1, "--batch-size", 4, "--fp8.backend", "msamp",
                      "--plugin", "deepspeed_zero", "--deepspeed_zero.zero_stage", 3,
                      "--deepspeed_zero.offload_optimizer_device", "nvme",
                      "--deepspeed_zero.offload_optimizer_nvme_path", "/tmp", check=False, timeout=120)
        self.assertNotEqual(proc.returncode, 0)
        lines = error_lines(proc.stderr)
        self.assertTrue(lines, proc.stderr)
        self.assertEqual(len(set(line.split("]", 2)[-1] for line in lines)), 1, lines)  # one line (per rank)
        self.assertIn("NVMe", lines[0])
        self.assertIn("O1", lines[0])

    @unittest.skipUnless(MPIRUN, "mpirun not found")
    def test_a_reducer_without_fp8_communication_is_refused(self):
        # megatron reduces gradients itself and does not declare the FP8
        # gradient communication O1 asks for: refused before anything runs.
        proc = mpirun(2, *COMMON, *FP8, "--steps", 1, "--batch-size", 4, "--fp8.backend", "msamp",
                      "--fp8.opt_level", "O1", "--plugin", "megatron", "--megatron.tp_degree", 2, check=False,
                      timeout=120)
        self.assertEqual(proc.returncode, 2, proc.stderr)
        lines = error_lines(proc.stderr)
        self.assertTrue(lines, proc.stderr)
        self.assertIn("FP8 gradient communication", lines[0])
        self.assertIn("megatron", lines[0])


if __name__ == "__main__":
    unittest.main()
