"""The mixture-of-experts family (issue 36): Mixtral's block (Llama's
attention, a router and SwiGLU experts) trains through --init-from exactly
as transformers' MixtralForCausalLM under torch.optim.AdamW, its
load-balancing loss included, and so does Qwen2-MoE's (q, k and v biases,
un-normalised top-k weights, a shared expert behind a sigmoid gate) as
Qwen2MoeForCausalLM; export-hf gives them back and greedy generate
matches; ddp, fsdp and ZeRO-3 train as one process; resume is bit-exact;
the metrics count what the routers did; what it cannot be is refused."""
import json
import os
import unittest

import torch
import torch.nn.functional as F

import gpt_reference as ref
from accel_testing import (MPIRUN, TempDirMixin, error_lines, mpirun, read_metrics, run_host, steps_from_the_same_state,
                           write_tokens)

try:
    import transformers
except ImportError:  # requirements-tools.txt installs it; say so rather than pass
    transformers = None

SHAPE = dict(vocab_size=256, hidden_size=64, intermediate_size=96, num_hidden_layers=2, num_attention_heads=4,
             num_key_value_heads=2, num_local_experts=4, num_experts_per_tok=2, max_position_embeddings=32,
             rms_norm_eps=1e-6, router_aux_loss_coef=0.02)
SEQ = SHAPE["max_position_embeddings"]
HYPER = dict(lr=2e-3, min_lr=2e-4, warmup=5, schedule="cosine", betas=(0.9, 0.95), eps=1e-8, weight_decay=0.1,
             grad_clip=1.0)
STEPS, BATCH, ACCUM = 20, 8, 2
AUX = SHAPE["router_aux_loss_coef"]
# Qwen2-MoE of the same size (transformers' defaults: q, k and v biases,
# norm_topk_prob false), its shared expert 80 wide.
QWEN2_MOE_SHAPE = dict(vocab_size=256, hidden_size=64, intermediate_size=96, moe_intermediate_size=96,
                       shared_expert_intermediate_size=80, num_hidden_layers=2, num_attention_heads=4,
                       num_key_value_heads=2, num_experts=4, num_experts_per_tok=2, max_position_embeddings=32,
                       rms_norm_eps=1e-6, router_aux_loss_coef=AUX)
SHAPES = {"Mixtral": SHAPE, "Qwen2Moe": QWEN2_MOE_SHAPE}


def random_mixtral(seed=0, family="Mixtral", **overrides):
    torch.manual_seed(seed)
    config = getattr(transformers, family + "Config")(**{**SHAPES[family], **overrides})
    model = getattr(transformers, family + "ForCausalLM")(config)
    with torch.no_grad():  # norms away from one (biases away from zero), so a misplaced weight shows
        for name, p in model.named_parameters():
            if p.dim() == 1:
                p.add_(0.05 * torch.randn_like(p))
    return model


def exported_config(checkpoint, out):
    """config.json as export-hf writes it for `checkpoint` into `out`."""
    run_host("export-hf", checkpoint, out)
    with open(os.path.join(out, "config.json")) as f:
        return json.load(f)


def losses_of(model, x, y):
    """Cross-entropy and transformers' own load-balancing loss of one forward."""
    out = model(input_ids=x, output_router_logits=True)
    ce = F.cross_entropy(out.logits.reshape(-1, out.logits.shape[-1]), y.reshape(-1))
    return ce, out.aux_loss


@unittest.skipUnless(transformers, "transformers is not installed (requirements-tools.txt)")
class MixtralFromTransformers(TempDirMixin, unittest.TestCase):
    FAMILY = "Mixtral"  # transformers' <FAMILY>ForCausalLM and <FAMILY>Config
    EXPERT_KEYS = ("num_local_experts", "num_experts_per_tok")
    # A source whose keys beyond the shape the host must carry to export-hf.
    SOURCE_OVERRIDES = {}

    def model_class(self):
        return getattr(transformers, self.FAMILY + "ForCausalLM")

    def setUp(self):
        super().setUp()
        self.tokens_path = self.path("tokens.bin")
        self.tokens = write_tokens(self.tokens_path, 40_000, SHAPE["vocab_size"])
        self.probe_path = self.path("probe.bin")
        self.probe = write_tokens(self.probe_path, BATCH * (SEQ + 1), SHAPE["vocab_size"], seed=5)
        self.hf_dir = self.path("hf")
        random_mixtral(family=self.FAMILY).save_pretrained(self.hf_dir, safe_serialization=True)

    def host_args(self, save_dir, metrics):
        return ["--init-from", "hf:" + self.hf_dir, "--data", "tokens:" + self.tokens_path,
                "--data-order", "sequential", "--steps", STEPS, "--batch-size", BATCH, "--grad-accum", ACCUM,
                "--lr", HYPER["lr"], "--min-lr", HYPER["min_lr"], "--warmup-steps", HYPER["warmup"],
                "--lr-schedule", HYPER["schedule"], "--beta1", HYPER["betas"][0], "--beta2", HYPER["betas"][1],
                "--eps", HYPER["eps"], "--weight-decay", HYPER["weight_decay"], "--grad-clip", HYPER["grad_clip"],
                "--moe-aux-loss-coef", AUX,
                "--eval-every", STEPS, "--eval-steps", 1, "--eval-data", "tokens:" + self.probe_path,
                "--save", save_dir, "--metrics-file", metrics, "--log-level", "warn", "--threads", 1]

    def train_transformers(self):
        model = self.model_class().from_pretrained(self.hf_dir, attn_implementation="eager")
        model.train()
        opt = ref.make_optimizer(model, HYPER["lr"], HYPER["betas"], HYPER["eps"], HYPER["weight_decay"])
        losses, aux_losses = [], []
        for step in range(STEPS):
            lr = ref.learning_rate(step, STEPS, HYPER["lr"], HYPER["min_lr"], HYPER["warmup"], HYPER["schedule"])
            for group in opt.param_groups:
                group["lr"] = lr
            opt.zero_grad()
            micro, micro_aux = [], []
            for x, y in ref.sequential_micro_batches(self.tokens, step, BATCH, ACCUM, SEQ):
                ce, aux = losses_of(model, x, y)
                loss = ce + AUX * aux  # what both classes add with output_router_logits
                (loss / ACCUM).backward()
                micro.append(loss.item())
                micro_aux.append(AUX * aux.item())
            torch.nn.utils.clip_grad_norm_(model.parameters(), HYPER["grad_clip"])
            opt.step()
            losses.append(sum(micro) / ACCUM)
            aux_losses.append(sum(micro_aux) / ACCUM)
        return losses, aux_losses

    def test_trains_like_transformers_exports_back_and_generates_alike(self):
        theirs, their_aux = self.train_transformers()
        run, metrics = self.path("run"), self.path("m.jsonl")
        run_host(*self.host_args(run, metrics))
        ours = read_metrics(metrics)
        self.assertEqual([m["step"] for m in ours], list(range(1, STEPS + 1)))
        for step, (mine, their) in enumerate(zip(ours, theirs)):
            self.assertLess(abs(mine["loss"] - their) / their, 1e-5, f"step {step + 1}: accel {mine} transformers {their}")
        for step, (mine, their) in enumerate(zip(ours, their_aux)):
            self.assertLess(abs(mine["moe_aux_loss"] - their), 1e-6, f"aux, step {step + 1}")
            # Dropless: every token's two choices, in each of the 2 layers, over the step's 8 x 32 tokens.
            self.assertEqual(sum(mine["moe_tokens_per_expert"]), 2 * 2 * BATCH * SEQ)
            self.assertEqual(mine["moe_dropped_tokens"], 0)

        out = self.path("exported")
        run_host("export-hf", run, out)
        with open(os.path.join(out, "config.json")) as f:
            config = json.load(f)
        self.assertEqual(config["architectures"], [self.FAMILY + "ForCausalLM"])
        self.assertEqual(tuple(config[key] for key in self.EXPERT_KEYS), (4, 2))
        exported = self.model_class().from_pretrained(out, attn_implementation="eager").eval()
        windows = torch.from_numpy(self.probe.reshape(BATCH, SEQ + 1))
        with torch.no_grad():
            ce, _ = losses_of(exported, windows[:, :-1], windows[:, 1:])
        # The evaluation reports the cross-entropy alone.
        self.assertLess(abs(ours[-1]["eval_loss"] - ce.item()) / ce.item(), 1e-5, (ours[-1]["eval_loss"], ce.item()))

        prompt = [5, 17, 200, 3]
        with torch.no_grad():
            expected = exported.generate(torch.tensor([prompt]), max_new_tokens=20, min_new_tokens=20,
                                         do_sample=False, pad_token_id=0)[0, len(prompt):].tolist()
        got = run_host("generate", run, "--prompt-ids", " ".join(map(str, prompt)), "--max-new-tokens", 20,
                       "--temperature", 0).stdout.split()
        self.assertEqual([int(i) for i in got], expected)

    def test_export_writes_the_source_config_back_with_the_runs_aux_coefficient(self):
        # Issue 50: export-hf wrote router_aux_loss_coef 0.001 whatever the
        # run used, and Qwen2-MoE's intermediate_size as the expert width.
        # Every key both files have comes back as the source's, but the
        # coefficient a run trained with and what the host has no tokenizer
        # for (and head_dim, null in the source: hidden_size / heads).
        source_dir = self.path("source")
        random_mixtral(family=self.FAMILY, **self.SOURCE_OVERRIDES).save_pretrained(source_dir,
                                                                                    safe_serialization=True)
        with open(os.path.join(source_dir, "config.json")) as f:
            source = json.load(f)
        init = ["--init-from", "hf:" + source_dir, "--log-level", "error", "--threads", 1]

        unlike = {"router_aux_loss_coef", "bos_token_id", "eos_token_id", "head_dim"}
        for extra, coef in (([], AUX), (["--moe-aux-loss-coef", 0.05], 0.05)):
            with self.subTest(coef=coef):
                run = self.path(f"run{coef}")
                run_host(*init, "--steps", 0, "--save", run, *extra)
                config = exported_config(run, self.path(f"out{coef}"))
                self.assertEqual({key: (config[key], source[key]) for key in set(source) & set(config) - unlike
                                  if config[key] != source[key]}, {}, "(exported, source)")
                self.assertEqual(config["router_aux_loss_coef"], coef)

    def test_a_shared_expert_and_unnormalised_top_k_compute_as_qwen2_moe_blocks(self):
        # --shared-expert-size and --normalize-top-k false: each block's MLP is
        # transformers' Qwen2MoeSparseMoeBlock (norm_topk_prob false, a shared
        # expert behind a sigmoid gate). The reference is a MixtralForCausalLM
        # whose MLPs are those blocks, loaded with the host's initial weights:
        # the first step's loss and gradient norm must agree.
        from safetensors.torch import load_file
        shape = ["--model", "moe-tiny", "--seq-len", SEQ, "--shared-expert-size", 96, "--normalize-top-k", "false",
                 "--data", "tokens:" + self.tokens_path, "--data-order", "sequential", "--batch-size", BATCH,
                 "--grad-accum", ACCUM, "--threads", 1, "--log-level", "warn"]
        init, metrics = self.path("init"), self.path("m.jsonl")
        run_host(*shape, "--steps", 0, "--save", init)
        run_host(*shape, "--steps", 1, "--metrics-file", metrics)
        ours = read_metrics(metrics)[0]
        config = dict(vocab_size=256, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                      num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=SEQ, rms_norm_eps=1e-5,
                      rope_parameters={"rope_type": "default", "rope_theta": 10000.0})  # moe-tiny's (Mixtral's is 1e6)
        model = transformers.MixtralForCausalLM(transformers.MixtralConfig(**config, num_local_experts=4,
                                                                           num_experts_per_tok=2))
        qwen = transformers.Qwen2MoeConfig(**config, num_experts=4, num_experts_per_tok=2, moe_intermediate_size=128,
                                           shared_expert_intermediate_size=96, norm_topk_prob=False)
        from transformers.models.qwen2_moe.modeling_qwen2_moe import Qwen2MoeSparseMoeBlock
        for layer in model.model.layers:
            layer.mlp = Qwen2MoeSparseMoeBlock(qwen)
        weights = load_file(os.path.join(init, "step_0", "model.safetensors"))
        state = {(k if k.startswith("lm_head") else "model." + k): v for k, v in weights.items()}
        self.assertEqual(sorted(state), sorted(model.state_dict()))
        model.load_state_dict(state)
        model.config._attn_implementation = "eager"
        losses = []
        for x, y in ref.sequential_micro_batches(self.tokens, 0, BATCH, ACCUM, SEQ):
            logits = model(input_ids=x).logits
            loss = F.cross_entropy(logits.reshape(-1, logits.shape[-1]), y.reshape(-1))
            (loss / ACCUM).backward()
            losses.append(loss.item())
        norm = torch.nn.utils.clip_grad_norm_(model.parameters(), float("inf")).item()
        loss = sum(losses) / ACCUM
        self.assertLess(abs(ours["loss"] - loss) / loss, 1e-6, (ours["loss"], loss))
        self.assertLess(abs(ours["grad_norm"] - norm) / norm, 1e-5, (ours["grad_norm"], norm))
        # export-hf writes it as a Qwen2MoeForCausalLM without attention
        # biases (qkv_bias false), which computes the same first loss.
        out = self.path("out")
        run_host("export-hf", os.path.join(init, "step_0"), out)
        exported = transformers.Qwen2MoeForCausalLM.from_pretrained(out, attn_implementation="eager").eval()
        self.assertFalse(exported.config.qkv_bias)
        self.assertFalse(exported.config.norm_topk_prob)
        x, y = next(iter(ref.sequential_micro_batches(self.tokens, 0, BATCH, ACCUM, SEQ)))
        with torch.no_grad():
            logits = exported(input_ids=x).logits
        first = F.cross_entropy(logits.reshape(-1, logits.shape[-1]), y.reshape(-1)).item()
        self.assertLess(abs(first - losses[0]) / losses[0], 1e-6, (first, losses[0]))
        # --normalize-top-k false alone is no transformers class (Mixtral
        # renormalises; Qwen2-MoE always has a shared expert).
        plain = self.path("plain")
        run_host(*shape[:4], *shape[6:], "--steps", 0, "--save", plain)
        proc = run_host("export-hf", os.path.join(plain, "step_0"), self.path("out2"), check=False)
        self.assertNotEqual(proc.returncode, 0)
        self.assertIn("export-hf: no transformers class computes", proc.stderr)
        self.assertIn("n_experts=4 experts_per_token=2 normalize_top_k=false (supported model types:", proc.stderr)

    def test_a_mixtral_or_qwen2_moe_the_host_cannot_be_is_refused_by_name(self):
        for family, overrides, message in [
            ("Mixtral", dict(sliding_window=16),
             "sliding_window\" is 16; accel-host's Mixtral attends to the whole sequence"),
            ("Mixtral", dict(router_jitter_noise=0.1), "router_jitter_noise\" is 0.1; accel-host's router adds no noise"),
            ("Qwen2Moe", dict(decoder_sparse_step=2),
             "decoder_sparse_step\" is 2; accel-host's Qwen2-MoE has experts in every layer (1)"),
            ("Qwen2Moe", dict(mlp_only_layers=[1]), "mlp_only_layers\" is an array of 1 element(s); accel-host's "
                                                    "Qwen2-MoE has experts in every layer ([])"),
            ("Qwen2Moe", dict(use_sliding_window=True), "use_sliding_window"),
        ]:
            with self.subTest(overrides):
                bad = self.path("bad" + list(overrides)[0])
                random_mixtral(family=family, **overrides).save_pretrained(bad, safe_serialization=True)
                proc = run_host("--init-from", "hf:" + bad, "--steps", 1, check=False)
                self.assertEqual(proc.returncode, 4, proc.stderr)  # as every unreadable checkpoint: before the first step
                [line] = error_lines(proc.stderr)
                self.assertIn(message, line)


class Qwen2MoeFromTransformers(MixtralFromTransformers):
    FAMILY = "Qwen2Moe"
    EXPERT_KEYS = ("num_experts", "num_experts_per_tok")
    SOURCE_OVERRIDES = {"intermediate_size": 160}  # the dense MLP no layer has, unlike the experts' 96

    # The family-independent tests run once, under Mixtral.
    test_a_shared_expert_and_unnormalised_top_k_compute_as_qwen2_moe_blocks = None
    test_a_mixtral_or_qwen2_moe_the_host_cannot_be_is_refused_by_name = None


TRAINING = ["--seq-len", 32, "--batch-size", 8, "--lr", 3e-3, "--warmup-steps", 2, "--lr-decay-steps", 8,
            "--threads", 1, "--log-level", "warn"]


class MoeStrategies(TempDirMixin, unittest.TestCase):
    COMMON = ["--model", "moe-tiny", *TRAINING]

    def run_metrics(self, *extra, ranks=1, steps=8):
        metrics = self.path(f"m{len(os.listdir(self.tmp))}.jsonl")
        args = [*self.COMMON, "--steps", steps, "--metrics-file", metrics, *extra]
        (run_host(*args) if ranks == 1 else mpirun(ranks, *args))
        return read_metrics(metrics)

    def losses(self, *extra, ranks=1, steps=8):
        return [m["loss"] for m in self.run_metrics(*extra, ranks=ranks, steps=steps)]

    def assert_close(self, expected, got, what, tolerance=1e-5):
        self.assertEqual(len(expected), len(got), what)
        for step, (a, b) in enumerate(zip(expected, got)):
            self.assertLess(abs(a - b) / a, tolerance, f"{what} step {step + 1}: {a} vs {b}")

    @unittest.skipUnless(MPIRUN, "mpirun not found")
    def test_ddp_fsdp_and_zero3_train_as_one_process(self):
        one = self.losses()
        for name, extra in (("ddp", ["--plugin", "ddp"]), ("fsdp", ["--plugin", "fsdp"]),
                            ("ZeRO-3", ["--plugin", "deepspeed_zero", "--deepspeed_zero.zero_stage", 3])):
            with self.subTest(name):
                self.assert_close(one, self.losses(*extra, ranks=2), name)

    @unittest.skipUnless(MPIRUN, "mpirun not found")
    def test_deepspeeds_transformer_moe_cls_names_names_the_blocks_zero3_keeps_whole(self):
        zero3 = ["--plugin", "deepspeed_zero", "--deepspeed_zero.zero_stage", 3]
        named = ["--deepspeed_zero.transformer_moe_cls_names", "MixtralSparseMoeBlock"]
        info = [a if a != "warn" else "info" for a in self.COMMON]
        proc = mpirun(2, *info, "--steps", 2, *zero3, *named)
        self.assertIn("transformer_moe_cls_names: 2 mixture-of-experts blocks, each gathered whole", proc.stderr)
        # Issue 50 (20): Qwen2-MoE's class (a shared expert), which the
        # DeepSpeed page names, on a Qwen2-MoE-shaped model.
        qwen2_moe = ["--shared-expert-size", 32]
        proc = mpirun(2, *info, "--steps", 2, *qwen2_moe, *zero3,
                      "--deepspeed_zero.transformer_moe_cls_names", "Qwen2MoeSparseMoeBlock")
        self.assertIn("transformer_moe_cls_names: 2 mixture-of-experts blocks, each gathered whole", proc.stderr)
        for model, extra, name, message in (
                ("moe-tiny", [], "JetMoEBlock", "its mixture-of-experts blocks are MixtralSparseMoeBlock"),
                ("moe-tiny", qwen2_moe, "MixtralSparseMoeBlock",
                 "its mixture-of-experts blocks are Qwen2MoeSparseMoeBlock"),
                ("llama-tiny", [], "MixtralSparseMoeBlock", "the model has no mixture-of-experts blocks")):
            with self.subTest(model=model, name=name):
                proc = mpirun(2, *TRAINING, "--model", model, *extra, "--steps", 1, *zero3,
                              "--deepspeed_zero.transformer_moe_cls_names", name, check=False)
                self.assertEqual(proc.returncode, 2, proc.stderr)  # an option refusal, as the others
                self.assertIn(message, proc.stderr)

    @unittest.skipUnless(MPIRUN, "mpirun not found")
    def test_recomputed_blocks_take_the_auxiliary_gradient_too(self):
        # Activation checkpointing reruns each block's forward in backward:
        # the auxiliary loss's gradient must reach the rerun's router logits.
        aux = ["--moe-aux-loss-coef", 0.05, "--moe-z-loss-coef", 0.01, "--plugin", "fsdp", "--grad-accum", 2]
        plain = self.losses(*aux, ranks=2)
        recomputed = self.losses(*aux, "--fsdp.activation_checkpointing", "true", ranks=2)
        self.assert_close(plain, recomputed, "activation checkpointing", tolerance=1e-6)

    def test_resume_is_bit_exact_with_the_auxiliary_losses(self):
        # Qwen2-MoE's routing variant too: its fields travel in trainer_state.json.
        aux = ["--moe-aux-loss-coef", 0.01, "--moe-z-loss-coef", 0.001, "--shared-expert-size", 32,
               "--normalize-top-k", "false"]
        whole, save = self.losses(*aux), self.path("b")
        first = self.losses(*aux, "--save", save, steps=4)
        rest = self.losses(*aux, "--save", save, "--resume", save)
        self.assertEqual(first + rest, whole)

    def test_the_auxiliary_losses_join_the_loss_and_steer_the_router(self):
        plain = self.run_metrics()
        aux = self.run_metrics("--moe-aux-loss-coef", 0.01, "--moe-z-loss-coef", 0.001)
        self.assertNotIn("moe_aux_loss", plain[0])
        # The first step's loss is the same cross-entropy plus the auxiliary part.
        self.assertAlmostEqual(aux[0]["loss"], plain[0]["loss"] + aux[0]["moe_aux_loss"], delta=1e-6)
        self.assertGreater(aux[0]["moe_aux_loss"], 0.01)  # at least the coefficient: E x sum f P >= 1
        # Their gradient reaches the router: the next steps differ.
        self.assertNotAlmostEqual(aux[1]["loss"] - aux[1]["moe_aux_loss"], plain[1]["loss"], delta=1e-7)

    def test_capacity_drops_and_counts_assignments(self):
        tokens = 2 * 2 * 8 * 32  # layers x top 2 x batch x sequence
        dropless = self.run_metrics(steps=2)
        self.assertEqual([sum(m["moe_tokens_per_expert"]) for m in dropless], [tokens, tokens])
        self.assertEqual(len(dropless[0]["moe_tokens_per_expert"]), 4)
        capped = self.run_metrics("--moe-capacity-factor", 0.5, steps=2)
        for m in capped:
            # Capacity ceil(0.5 x 256 x 2 / 4) = 64 per expert and layer: at most half of the assignments stay.
            self.assertEqual(sum(m["moe_tokens_per_expert"]) + m["moe_dropped_tokens"], tokens)
            self.assertLessEqual(sum(m["moe_tokens_per_expert"]), tokens // 2)
            self.assertTrue(all(n <= 64 * 2 for n in m["moe_tokens_per_expert"]), m["moe_tokens_per_expert"])
        # Issue 50 (17): "never drop" as a huge factor overflowed into a cap of 1.
        for m in self.run_metrics("--moe-capacity-factor", 1e300, steps=1):
            self.assertEqual((sum(m["moe_tokens_per_expert"]), m["moe_dropped_tokens"]), (tokens, 0))

    def test_bad_expert_options_are_one_line(self):
        for args, message in [
            (["--model", "moe-tiny", "--n-experts", 4, "--experts-per-token", 5],
             "--experts-per-token 5 must lie in [1, --n-experts 4]"),
            # Issue 50 (19): named --experts-per-token, which was not given.
            (["--model", "moe-tiny", "--n-experts", 1],
             "--n-experts 1 is fewer than the 2 experts each token takes in moe-tiny: give --experts-per-token too"),
            (["--model", "llama-tiny", "--experts-per-token", 2], "--experts-per-token needs experts"),
            (["--model", "gpt-tiny", "--n-experts", 4], "--n-experts shapes llama-family models"),
            (["--model", "moe-tiny", "--moe-aux-loss-coef", -1], "--moe-aux-loss-coef must be >= 0"),
            (["--model", "llama-tiny", "--shared-expert-size", 32], "--shared-expert-size needs experts"),
            (["--model", "llama-tiny", "--normalize-top-k", "false"], "--normalize-top-k needs experts"),
            (["--model", "gpt-tiny", "--qkv-bias", "true"], "--qkv-bias shapes llama-family models"),
        ]:
            with self.subTest(args):
                proc = run_host(*TRAINING, *args, "--steps", 1, check=False)
                self.assertEqual(proc.returncode, 2, proc.stderr)
                self.assertIn(message, proc.stderr)

    def test_export_keeps_the_aux_coefficient_a_run_trained_with_across_a_resume(self):
        # Issue 50: export-hf wrote router_aux_loss_coef 0.001 whatever the
        # run used. A Qwen2-MoE of the preset's shape, trained one step with
        # the load-balancing loss, then resumed without it: the checkpoint
        # carries the coefficient it trained with.
        qwen = [*self.COMMON, "--shared-expert-size", 96, "--normalize-top-k", "false"]
        root = self.path("ckpt")
        run_host(*qwen, "--steps", 1, "--save", root, "--moe-aux-loss-coef", 0.05)
        run_host(*qwen, "--steps", 2, "--save", root, "--resume", "auto")
        config = exported_config(os.path.join(root, "step_2"), self.path("out"))
        self.assertEqual(config["architectures"], ["Qwen2MoeForCausalLM"])
        self.assertEqual(config["router_aux_loss_coef"], 0.05)

    @unittest.skipUnless(MPIRUN, "mpirun not found")
    def test_tensor_parallel_attention_around_whole_or_expert_parallel_experts(self):
        # Attention split over the tensor group, the experts whole on every
        # tensor rank (each routes the tokens it holds: all of them, or its
        # sequence slice), or split over expert groups beside it.
        clip = ["--grad-clip", 0.5]
        tp = ["--plugin", "megatron", "--megatron.tp_degree", 2]
        one = self.losses(*clip)
        for ranks, extra in ((2, []), (2, ["--megatron.sequence_parallelism", "true"]),
                             (4, ["--megatron.ep_degree", 2])):
            with self.subTest(extra):
                self.assert_close(one, self.losses(*clip, *tp, *extra, ranks=ranks), f"tp 2 {extra}")
        # The layout (accel/comm.h): expert peers share the tensor index, so
        # with tp 2 rank 0's expert group is world ranks 0 and 2.
        info = [a if a != "warn" else "info" for a in self.COMMON]
        proc = mpirun(4, *info, "--steps", 1, *tp, "--megatron.ep_degree", 2)
        self.assertIn("expert parallelism: each layer's 4 experts over 2 ranks, 2 each; rank 0's expert group is "
                      "world ranks [0, 2]", proc.stderr)
        proc = mpirun(2, *self.COMMON, "--steps", 1, *tp, "--megatron.sequence_parallelism", "true",
                      "--moe-aux-loss-coef", 0.01, check=False)
        self.assertNotEqual(proc.returncode, 0)
        self.assertIn("--moe-aux-loss-coef and --moe-z-loss-coef with sequence parallelism", proc.stderr)

    def test_fp8_casts_every_experts_projections(self):
        # The experts' GEMMs go through the linear chain as their stacked
        # parameter: fp8 scales each stacked tensor once (its weight amax is
        # the largest of every expert's matrices) and the run stays near
        # the fp32 one.
        init, log = self.path("init"), self.path("fp8.jsonl")
        run_host(*self.COMMON, "--steps", 0, "--save", init)
        plain = self.losses(steps=4)
        fp8 = self.losses("--plugin", "fp8", "--fp8.state_log", log, steps=4)  # the same seed: init's weights
        with open(log) as f:
            states = [json.loads(line) for line in f if line.strip()]
        linears = len(states[0]["forward_amax"]) // 2
        self.assertEqual(linears, 2 * 6)  # per layer: q, k, v, o, gate_up_proj, down_proj
        from safetensors.torch import load_file
        weights = load_file(os.path.join(init, "step_0", "model.safetensors"))
        for layer in range(2):
            for slot, name in ((4, "gate_up_proj"), (5, "down_proj")):
                stacked = weights[f"layers.{layer}.mlp.experts.{name}"]
                logged = torch.tensor(states[0]["forward_amax"][linears + 6 * layer + slot], dtype=torch.float32)
                self.assertEqual(logged.item(), stacked.abs().max().item(), f"layer {layer} {name}")
        for step, (a, b) in enumerate(zip(plain, fp8)):
            self.assertLess(abs(a - b) / a, 0.02, f"step {step + 1}: fp32 {a} fp8 {b}")
        self.assertNotEqual(plain, fp8)

    @unittest.skipUnless(MPIRUN, "mpirun not found")
    def test_fp8_experts_under_expert_parallelism_scale_as_one_process(self):
        # Delayed scaling's step-end MAX over the world makes every rank's
        # scales the whole batch's and the whole stacked tensor's. Compared
        # one step from the same state (steps_from_the_same_state says why):
        # free runs of 4 steps drifted 2.4e-5 apart under AVX-512 and
        # 1e-5 held under AVX2 (issue 50).
        ep = (2, "--plugin", "megatron", "--megatron.ep_degree", 2)
        for _, k, one, many in steps_from_the_same_state(self, [*self.COMMON, "--plugin", "fp8"], [ep], (0, 1, 3),
                                                         "fp8"):
            with self.subTest(step=k + 1):
                for key in ("loss", "grad_norm", "fp8.scale_grad", "fp8.scale_input"):
                    self.assertLess(abs(one[key] - many[key]) / one[key], 1e-5, (key, k + 1, one[key], many[key]))

    EP = ["--plugin", "megatron", "--megatron.ep_degree"]

    @unittest.skipUnless(MPIRUN, "mpirun not found")
    def test_expert_parallel_trains_as_one_process(self):
        # The experts split over 2 and 4 ranks, tokens exchanged by
        # all_to_all_v: the same losses and gradient norms (the clipping
        # norm, 0.5 here so it clips, sums the expert slices over the
        # expert group) as one process.
        clip = ["--grad-clip", 0.5]
        one = self.run_metrics(*clip)
        for ranks, ep in ((2, 2), (4, 2), (4, 4)):
            with self.subTest(ranks=ranks, ep=ep):
                got = self.run_metrics(*clip, *self.EP, ep, ranks=ranks)
                self.assert_close([m["loss"] for m in one], [m["loss"] for m in got], f"ep {ep} on {ranks} ranks")
                self.assert_close([m["grad_norm"] for m in one], [m["grad_norm"] for m in got],
                                  f"ep {ep} on {ranks} ranks, gradient norm")
                self.assertEqual(got[0]["megatron.ep_degree"], ep)
        # The load-balancing loss is each rank's over its own tokens (a
        # product of means: data parallelism changes it), so with it ep 2
        # equals the same ranks' data parallelism, ep 1.
        aux = [*clip, "--moe-aux-loss-coef", 0.01]
        self.assert_close(self.losses(*aux, *self.EP, 1, ranks=2), self.losses(*aux, *self.EP, 2, ranks=2),
                          "ep 2 with the auxiliary loss")

    # Expert parallelism composed with tp, sp, pp, cp, the distributed
    # optimizer, full recompute, ZeRO and fsdp: each layout trains as one
    # process, saves, and resumes bit-exact in its layout and in one process
    # (test_cross_strategy.py, ComposedLayouts: one generated row per layout).

    @unittest.skipUnless(MPIRUN, "mpirun not found")
    def test_zero_stages_and_fsdp_with_expert_parallelism_train_as_one_process(self):
        # DeepSpeed-MoE's ep_size: the blocks holding experts partitioned over
        # the ranks holding the same experts (EXPERT_DATA), the rest over the
        # data group; ep 2 x dp 2 under ZeRO-3 (each rank initialising only
        # its partitions), ZeRO-2 (two micro-batches) and ZeRO-1 (partitions
        # that are slices of the host's buffers), ep 4 under ZeRO-1, fsdp ep 2 x dp 2
        # with rank 0's weights broadcast (expert slices from their first
        # holders) and with each rank's slice computed where it lies.
        clip = ["--grad-clip", 0.5]
        one = self.losses(*clip)
        zero = ["--plugin", "deepspeed_zero", "--deepspeed_zero.zero_stage"]
        for stage, ep, extra in ((3, 2, ["--deepspeed_zero.zero3_init_flag", "true"]), (2, 2, ["--grad-accum", 2]),
                                 (1, 2, []), (1, 4, [])):
            with self.subTest(stage=stage, ep=ep):
                got = self.run_metrics(*clip, *zero, stage, "--deepspeed_zero.ep_size", ep, *extra, ranks=4)
                self.assert_close(one, [m["loss"] for m in got], f"ZeRO-{stage} ep {ep}")
                self.assertEqual(got[0]["deepspeed_zero.ep_size"], ep)
        sync = ["--fsdp.sync_module_states", "true"]
        for ranks, extra in ((2, []), (4, sync), (4, [*sync, "--fsdp.cpu_ram_efficient_loading", "true"])):
            with self.subTest(fsdp=ranks, extra=extra):
                fsdp = self.run_metrics(*clip, "--plugin", "fsdp", "--fsdp.ep_size", 2, *extra, ranks=ranks)
                self.assert_close(one, [m["loss"] for m in fsdp], f"fsdp ep 2 on {ranks} ranks {extra}")
        proc = mpirun(2, *self.COMMON, "--steps", 1, *zero, 3, "--deepspeed_zero.ep_size", 4, check=False)
        self.assertNotEqual(proc.returncode, 0)
        self.assertIn("ep_size 4 does not divide the world size 2", proc.stderr)

    # moe-tiny's parameters: the embedding and the head (with the final
    # norm) whole on every rank under ZeRO-3's persistence threshold; each
    # block's attention, norms and router, and its 4 experts' three 64 x 128
    # matrices.
    WHOLE_UNITS = 256 * 64 + 256 * 64 + 64
    BLOCK_SHARED = 64 * 64 * 2 + 64 * 32 * 2 + 2 * 64 + 4 * 64
    EXPERT = 3 * 64 * 128

    @unittest.skipUnless(MPIRUN, "mpirun not found")
    def test_expert_blocks_partition_over_the_ranks_holding_the_same_experts(self):
        # The AdamW moments a rank holds (8 bytes per element, the ledger's
        # peak): at ep 2 on 4 ranks each block keeps 2 of the 4 experts and
        # halves over its EXPERT_DATA pair; the megatron distributed optimizer
        # cuts every unit over the data group alike, the blocks over
        # EXPERT_DATA.
        def moments(*extra):
            return self.run_metrics(*extra, ranks=4, steps=1)[0]["memory_peak_bytes"]["optimizer"]

        block = self.BLOCK_SHARED + 2 * self.EXPERT  # its local part at ep 2
        zero3 = moments("--plugin", "deepspeed_zero", "--deepspeed_zero.zero_stage", 3, "--deepspeed_zero.ep_size", 2)
        self.assertEqual(zero3, 8 * (self.WHOLE_UNITS + 2 * block // 2))
        megatron = moments(*self.EP, 2, "--megatron.use_distributed_optimizer", "true")
        self.assertEqual(megatron, 8 * (256 * 64 // 4 + (256 * 64 + 64) // 4 + 2 * block // 2))

    @unittest.skipUnless(MPIRUN, "mpirun not found")
    def test_zero3_model_file_holds_whole_experts(self):
        # zero3_save_16bit_model at ep 2 x dp 2: world rank 0 gathers each
        # block over EXPERT_DATA, then the experts over EXPERT, and writes
        # every tensor whole, equal to merge-weights of the same checkpoint.
        import torch
        from safetensors.torch import load_file
        root = self.path("ep")
        mpirun(4, *self.COMMON, "--steps", 2, "--plugin", "deepspeed_zero", "--deepspeed_zero.zero_stage", 3,
               "--deepspeed_zero.ep_size", 2, "--deepspeed_zero.zero3_save_16bit_model", "true", "--save", root)
        step = os.path.join(root, "step_2")
        run_host("merge-weights", step, self.path("merged"))
        model_file = load_file(os.path.join(step, "model_16bit.safetensors"))
        merged = load_file(os.path.join(self.path("merged"), "model.safetensors"))
        self.assertEqual(sorted(model_file), sorted(merged))
        self.assertEqual(tuple(model_file["layers.0.mlp.experts.gate_up_proj"].shape)[0], 4)
        for name, weights in merged.items():
            self.assertTrue(model_file[name].equal(weights.to(torch.bfloat16)), name)

    @unittest.skipUnless(MPIRUN, "mpirun not found")
    def test_expert_parallel_bytes_are_the_routed_rows(self):
        # ep 2 on 2 ranks: rank 0 sends the rows its tokens route to experts
        # 2 and 3, and the outputs of the rows rank 1 routes to experts 0
        # and 1; backward sends both back as gradients. Rank 1's share of
        # the first step's routing is the whole batch's (one process, same
        # weights) less rank 0's. Each layer also sends its 2 expert counts.
        whole = self.run_metrics(steps=1)[0]["moe_tokens_per_expert"]
        step = self.run_metrics(*self.EP, 2, ranks=2, steps=1)[0]
        mine = step["moe_tokens_per_expert"]
        theirs = [a - b for a, b in zip(whole, mine)]
        rows = mine[2] + mine[3] + theirs[0] + theirs[1]
        width, layers, fp32, count = 64, 2, 4, 8
        self.assertEqual(step["host.expert_parallel_bytes"], 2 * rows * width * fp32 + layers * 2 * count)

    @unittest.skipUnless(MPIRUN, "mpirun not found")
    def test_expert_parallel_that_cannot_be_is_one_line(self):
        for ranks, extra, message in [
            (2, [*self.EP, 3], "ep_degree 3 does not divide the data-parallel size 2"),
            (4, [*self.EP, 4, "--n-experts", 6], "expert parallel size 4 does not divide the 6 experts"),
            (4, ["--plugin", "fsdp", "--fsdp.ep_size", 2, "--fsdp.sharding_strategy", "HYBRID_SHARD",
                 "--fsdp.hybrid_shard_group_size", 2], "ep_size with a hybrid sharding strategy"),
        ]:
            with self.subTest(extra):
                proc = mpirun(ranks, *self.COMMON, "--steps", 1, *extra, check=False)
                self.assertNotEqual(proc.returncode, 0)
                self.assertIn(message, proc.stderr)
        proc = mpirun(2, *TRAINING, "--model", "llama-tiny", "--steps", 1, *self.EP, 2, check=False)
        self.assertNotEqual(proc.returncode, 0)
        self.assertIn("the mesh's expert size is 2, but the model has no experts", proc.stderr)

    @unittest.skipUnless(MPIRUN, "mpirun not found")
    def test_pipeline_stages_train_as_one_process_and_refuse_the_auxiliary_losses(self):
        pp = ["--plugin", "megatron", "--megatron.pp_degree", 2]
        self.assert_close(self.losses(), self.losses(*pp, ranks=2), "pp 2")
        proc = mpirun(2, *self.COMMON, "--steps", 1, *pp, "--moe-aux-loss-coef", 0.01, check=False)
        self.assertNotEqual(proc.returncode, 0)
        self.assertIn("--moe-aux-loss-coef and --moe-z-loss-coef need every block on the stage with the loss",
                      proc.stderr)


if __name__ == "__main__":
    unittest.main()
