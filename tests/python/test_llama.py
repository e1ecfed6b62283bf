"""The llama family (RMSNorm, rotary positions, SwiGLU, grouped-query
attention, untied head): a random LlamaForCausalLM built with `transformers`
(nothing from a hub) trains through --init-from exactly as transformers'
own model under torch.optim.AdamW, one process and fsdp; so does a
Qwen2ForCausalLM (the same block with q, k and v biases), one process and
megatron's tensor and sequence parallelism; export-hf gives them back;
greedy generate matches; ddp and fsdp at 2 and 4 ranks train as one
process; resume is bit-exact; what the host's Llama cannot be is refused."""
import json
import os
import unittest

import numpy as np
import torch
import torch.nn.functional as F
from safetensors.numpy import load_file as load_numpy, save_file as save_numpy

import gpt_reference as ref
from accel_testing import MPIRUN, TempDirMixin, error_lines, mpirun, read_metrics, run_host, write_tokens

try:
    import transformers
except ImportError:  # requirements-tools.txt installs it; say so rather than pass
    transformers = None

SHAPE = dict(vocab_size=256, hidden_size=64, intermediate_size=176, num_hidden_layers=2, num_attention_heads=4,
             num_key_value_heads=2, max_position_embeddings=32, rms_norm_eps=1e-6)
SEQ = SHAPE["max_position_embeddings"]
HYPER = dict(lr=2e-3, min_lr=2e-4, warmup=5, schedule="cosine", betas=(0.9, 0.95), eps=1e-8, weight_decay=0.1,
             grad_clip=1.0)
STEPS, BATCH, ACCUM = 20, 8, 2


def random_llama(seed=0, family="Llama", config_class=None, **extra):
    """A random <family>ForCausalLM of SHAPE, `extra` config keys on top
    (its config class <family>Config unless named)."""
    torch.manual_seed(seed)
    config = getattr(transformers, config_class or family + "Config")(**{**SHAPE, **extra})
    model = getattr(transformers, family + "ForCausalLM")(config)
    with torch.no_grad():  # norms away from one (biases away from zero), so a misplaced weight shows
        for name, p in model.named_parameters():
            if p.dim() == 1:
                p.add_(0.05 * torch.randn_like(p))
    return model


def next_token_loss(model, x, y):
    logits = model(input_ids=x).logits
    return F.cross_entropy(logits.reshape(-1, logits.shape[-1]), y.reshape(-1))


@unittest.skipUnless(transformers, "transformers is not installed (requirements-tools.txt)")
class LlamaFromTransformers(TempDirMixin, unittest.TestCase):
    FAMILY = "Llama"  # transformers' <FAMILY>ForCausalLM and <FAMILY>Config
    CONFIG_CLASS = None  # the config class when not <FAMILY>Config (Gemma3TextConfig)
    CONFIG = {}  # config keys beside SHAPE
    # A parallel plugin on two ranks the family trains under as one process.
    PARALLEL = ["--plugin", "fsdp", "--fsdp.auto_wrap_policy", "transformer_based_wrap"]

    def model_class(self):
        return getattr(transformers, self.FAMILY + "ForCausalLM")

    def setUp(self):
        super().setUp()
        self.tokens_path = self.path("tokens.bin")
        self.tokens = write_tokens(self.tokens_path, 40_000, SHAPE["vocab_size"])
        self.probe_path = self.path("probe.bin")
        self.probe = write_tokens(self.probe_path, BATCH * (SEQ + 1), SHAPE["vocab_size"], seed=5)
        self.hf_dir = self.path("hf")
        random_llama(family=self.FAMILY, config_class=self.CONFIG_CLASS, **self.CONFIG).save_pretrained(self.hf_dir, safe_serialization=True)

    def host_args(self, save_dir, metrics):
        return ["--init-from", "hf:" + self.hf_dir, "--data", "tokens:" + self.tokens_path,
                "--data-order", "sequential", "--steps", STEPS, "--batch-size", BATCH, "--grad-accum", ACCUM,
                "--lr", HYPER["lr"], "--min-lr", HYPER["min_lr"], "--warmup-steps", HYPER["warmup"],
                "--lr-schedule", HYPER["schedule"], "--beta1", HYPER["betas"][0], "--beta2", HYPER["betas"][1],
                "--eps", HYPER["eps"], "--weight-decay", HYPER["weight_decay"], "--grad-clip", HYPER["grad_clip"],
                # the host's own forward on the probe windows after the last step
                "--eval-every", STEPS, "--eval-steps", 1, "--eval-data", "tokens:" + self.probe_path,
                "--save", save_dir, "--metrics-file", metrics, "--log-level", "warn", "--threads", 1]

    def train_transformers(self):
        model = self.model_class().from_pretrained(self.hf_dir, attn_implementation="eager")
        model.train()
        opt = ref.make_optimizer(model, HYPER["lr"], HYPER["betas"], HYPER["eps"], HYPER["weight_decay"])
        losses = []
        for step in range(STEPS):
            lr = ref.learning_rate(step, STEPS, HYPER["lr"], HYPER["min_lr"], HYPER["warmup"], HYPER["schedule"])
            for group in opt.param_groups:
                group["lr"] = lr
            opt.zero_grad()
            micro = []
            for x, y in ref.sequential_micro_batches(self.tokens, step, BATCH, ACCUM, SEQ):
                loss = next_token_loss(model, x, y)
                (loss / ACCUM).backward()
                micro.append(loss.item())
            torch.nn.utils.clip_grad_norm_(model.parameters(), HYPER["grad_clip"])
            opt.step()
            losses.append(sum(micro) / ACCUM)
        return losses

    def check(self, run, metrics, theirs):
        ours = read_metrics(metrics)
        self.assertEqual([m["step"] for m in ours], list(range(1, STEPS + 1)))
        for step, (mine, their) in enumerate(zip([m["loss"] for m in ours], theirs)):
            self.assertLess(abs(mine - their) / their, 1e-5, f"step {step + 1}: accel {mine} transformers {their}")
        out = self.path(os.path.basename(run) + "_hf")
        run_host("export-hf", run, out)
        with open(os.path.join(out, "config.json")) as f:
            self.assertEqual(json.load(f)["architectures"], [self.FAMILY + "ForCausalLM"])
        exported = self.model_class().from_pretrained(out, attn_implementation="eager").eval()
        windows = torch.from_numpy(self.probe.reshape(BATCH, SEQ + 1))
        with torch.no_grad():
            theirs_probe = next_token_loss(exported, windows[:, :-1], windows[:, 1:]).item()
        host_probe = ours[-1]["eval_loss"]
        self.assertLess(abs(host_probe - theirs_probe) / theirs_probe, 1e-5, (host_probe, theirs_probe))
        return exported

    def test_trains_like_transformers_exports_back_and_generates_alike(self):
        theirs = self.train_transformers()
        run_host(*self.host_args(self.path("run"), self.path("m.jsonl")))
        exported = self.check(self.path("run"), self.path("m.jsonl"), theirs)
        prompt = [5, 17, 200, 3]
        with torch.no_grad():
            expected = exported.generate(torch.tensor([prompt]), max_new_tokens=20, min_new_tokens=20,
                                         do_sample=False, pad_token_id=0)[0, len(prompt):].tolist()
        got = run_host("generate", self.path("run"), "--prompt-ids", " ".join(map(str, prompt)),
                       "--max-new-tokens", 20, "--temperature", 0).stdout.split()
        self.assertEqual([int(i) for i in got], expected)

    @unittest.skipUnless(MPIRUN, "mpirun not found")
    def test_under_a_parallel_plugin_on_two_ranks(self):
        theirs = self.train_transformers()
        mpirun(2, *self.PARALLEL, *self.host_args(self.path("parallel"), self.path("p.jsonl")))
        self.check(self.path("parallel"), self.path("p.jsonl"), theirs)


class Qwen2FromTransformers(LlamaFromTransformers):
    """Qwen2: Llama's block with q, k and v biases (column-parallel: each
    tensor rank holds its heads' biases)."""
    FAMILY = "Qwen2"
    PARALLEL = ["--plugin", "megatron", "--megatron.tp_degree", 2, "--megatron.sequence_parallelism", "true"]

    def test_a_flag_that_contradicts_the_biases_names_both(self):
        proc = run_host("--init-from", "hf:" + self.hf_dir, "--qkv-bias", "false", "--steps", 1, check=False)
        self.assertEqual(proc.returncode, 2, proc.stderr)
        self.assertIn("--qkv-bias false contradicts a Qwen2 (q, k and v biases) of", proc.stderr)


class LlamaStrategies(TempDirMixin, unittest.TestCase):
    COMMON = ["--model", "llama-tiny", "--seq-len", 32, "--batch-size", 8, "--lr", 3e-3, "--warmup-steps", 2,
              "--lr-decay-steps", 8, "--threads", 1, "--log-level", "warn"]

    def losses(self, *extra, ranks=1, steps=8):
        metrics = self.path(f"m{len(os.listdir(self.tmp))}.jsonl")
        args = [*self.COMMON, "--steps", steps, "--metrics-file", metrics, *extra]
        (run_host(*args) if ranks == 1 else mpirun(ranks, *args))
        return [m["loss"] for m in read_metrics(metrics)]

    @unittest.skipUnless(MPIRUN, "mpirun not found")
    def test_ddp_and_fsdp_at_two_and_four_ranks_train_as_one_process(self):
        one = self.losses()
        for ranks in (2, 4):
            for plugin in (["--plugin", "ddp"], ["--plugin", "fsdp"]):
                with self.subTest(ranks=ranks, plugin=plugin[1]):
                    got = self.losses(*plugin, ranks=ranks)
                    for step, (a, b) in enumerate(zip(one, got)):
                        self.assertLess(abs(a - b) / a, 1e-5, f"step {step + 1}: {a} vs {b}")

    @unittest.skipUnless(MPIRUN, "mpirun not found")
    def test_zero3_trains_as_one_process_and_fp8_joins_the_bias_free_linears(self):
        one = self.losses()
        zero3 = self.losses("--plugin", "deepspeed_zero", "--deepspeed_zero.zero_stage", 3, ranks=2)
        for step, (a, b) in enumerate(zip(one, zero3)):
            self.assertLess(abs(a - b) / a, 1e-5, f"ZeRO-3 step {step + 1}: {a} vs {b}")
        # Every block linear of a Llama has no bias: the linear chain carries
        # none (the FP8 emulation then trains close to fp32, not equal).
        for extra, ranks in ((["--plugin", "fp8"], 1), (["--plugin", "fsdp", "--plugin", "fp8"], 2)):
            with self.subTest(extra=extra):
                fp8 = self.losses(*extra, ranks=ranks)
                for step, (a, b) in enumerate(zip(one, fp8)):
                    self.assertLess(abs(a - b) / a, 0.02, f"{extra} step {step + 1}: {a} vs {b}")

    def test_resume_is_bit_exact(self):
        whole, save = self.losses("--save", self.path("a")), self.path("b")
        first = self.losses("--save", save, steps=4)
        rest = self.losses("--save", save, "--resume", save)
        self.assertEqual(first + rest, whole)

    @unittest.skipUnless(MPIRUN, "mpirun not found")
    def test_fsdp_resume_is_bit_exact(self):
        fsdp = ["--plugin", "fsdp"]
        whole, save = self.losses(*fsdp, ranks=2), self.path("b")
        first = self.losses(*fsdp, "--save", save, ranks=2, steps=4)
        rest = self.losses(*fsdp, "--save", save, "--resume", save, ranks=2)
        self.assertEqual(first + rest, whole)

    @unittest.skipUnless(MPIRUN, "mpirun not found")
    def test_megatron_tensor_and_sequence_parallel_train_as_one_process(self):
        one = self.losses()
        tp = ["--plugin", "megatron", "--megatron.tp_degree", 2]
        for name, extra, ranks in (("tp 2", tp, 2), ("tp 2 sequence parallel", [*tp, "--megatron.sequence_parallelism", "true"], 2),
                                   ("tp 2 x dp 2", tp, 4)):
            with self.subTest(name):
                got = self.losses(*extra, ranks=ranks)
                for step, (a, b) in enumerate(zip(one, got)):
                    self.assertLess(abs(a - b) / a, 1e-5, f"{name} step {step + 1}: {a} vs {b}")

    @unittest.skipUnless(MPIRUN, "mpirun not found")
    def test_a_tensor_group_larger_than_the_key_value_heads_is_refused(self):
        proc = mpirun(2, *self.COMMON, "--steps", 1, "--n-kv-head", 1, "--plugin", "megatron",
                      "--megatron.tp_degree", 2, check=False)
        self.assertNotEqual(proc.returncode, 0)
        self.assertIn("tensor parallel size 2 does not divide the 1 key/value heads", proc.stderr)


@unittest.skipUnless(transformers, "transformers is not installed (requirements-tools.txt)")
class LlamaBadInput(TempDirMixin, unittest.TestCase):
    """A Llama checkpoint the host cannot be: one line naming why, no run."""

    def setUp(self):
        super().setUp()
        self.hf_dir = self.path("hf")
        random_llama().save_pretrained(self.hf_dir, safe_serialization=True)

    def refused(self, *mentions):
        proc = run_host("--init-from", "hf:" + self.hf_dir, "--steps", 1, check=False, timeout=120)
        self.assertEqual(proc.returncode, 4, proc.stderr)  # refused before the first step
        lines = error_lines(proc.stderr)
        self.assertEqual(len(lines), 1, proc.stderr)
        for word in mentions:
            self.assertIn(word, lines[0])

    def edit_config(self, **changes):
        path = os.path.join(self.hf_dir, "config.json")
        with open(path) as f:
            config = json.load(f)
        config.update(changes)
        with open(path, "w") as f:
            json.dump(config, f)

    def edit_weights(self, edit):
        path = os.path.join(self.hf_dir, "model.safetensors")
        tensors = load_numpy(path)
        edit(tensors)
        save_numpy(tensors, path, metadata={"format": "pt"})

    def test_each_unsupported_setting_is_named(self):
        cases = [
            (dict(rope_parameters={"rope_type": "su", "factor": 2.0, "rope_theta": 10000.0}), ["rope_type", "su"]),
            (dict(rope_parameters={"rope_type": "linear", "factor": 2.0, "rope_theta": 10000.0, "beta_fast": 8.0}),
             ["rope_parameters.beta_fast", "rope_type linear"]),
            (dict(partial_rotary_factor=0.5), ["partial_rotary_factor", "0.5"]),
            (dict(rope_scaling={"type": "dynamic", "factor": 2.0}), ["rope_scaling"]),
            (dict(rope_parameters={"rope_type": "llama3", "factor": 8.0, "rope_theta": 10000.0}),
             ["rope_parameters.low_freq_factor"]),
            (dict(attention_bias=True), ["attention_bias"]),
            (dict(mlp_bias=True), ["mlp_bias"]),
            (dict(hidden_act="gelu"), ["hidden_act", "gelu"]),
            (dict(head_dim=15), ["head_dim", "15", "odd"]),
            (dict(num_key_value_heads=3), ['"num_attention_heads" (4) must be a multiple of "num_key_value_heads" (3)']),
            (dict(model_type="falcon"), ['"model_type" is "falcon"', "gpt2, llama"]),
        ]
        with open(os.path.join(self.hf_dir, "config.json")) as f:
            original = f.read()
        for changes, mentions in cases:
            with self.subTest(changes=changes):
                with open(os.path.join(self.hf_dir, "config.json"), "w") as f:
                    f.write(original)
                self.edit_config(**changes)
                self.refused("config.json", *mentions)

    def test_numbers_are_read_by_the_json_rule(self):
        # rms_norm_eps 0 trained and saved a checkpoint nothing could read
        # back; -1.0 gave a NaN first loss; 256.9 ran as 256; 1e19 was
        # reported as -9223372036854775808.
        cases = [
            (dict(rms_norm_eps=0), ['"rms_norm_eps" must be a finite number > 0, got 0']),
            (dict(rms_norm_eps=-1.0), ['"rms_norm_eps" must be a finite number > 0, got -1.0']),
            (dict(rope_parameters={"rope_type": "default", "rope_theta": 0.0}), ['"rope_parameters.rope_theta"']),
            (dict(vocab_size=256.9), ['"vocab_size" must be an integer, got 256.9']),
            (dict(vocab_size=1e19), ['"vocab_size" must be an integer, got 1e+19']),
            (dict(max_position_embeddings=0), ['"max_position_embeddings" must be at least 1, got 0']),
        ]
        with open(os.path.join(self.hf_dir, "config.json")) as f:
            original = f.read()
        for changes, mentions in cases:
            with self.subTest(changes=changes):
                with open(os.path.join(self.hf_dir, "config.json"), "w") as f:
                    f.write(original)
                self.edit_config(**changes)
                self.refused("config.json", *mentions)

    def test_a_missing_weight_and_a_shape_mismatch(self):
        self.edit_weights(lambda t: t.pop("model.layers.1.mlp.up_proj.weight"))
        self.refused("model.layers.1.mlp.up_proj.weight")
        random_llama().save_pretrained(self.hf_dir, safe_serialization=True)
        self.edit_config(intermediate_size=128)
        self.refused("_proj.weight is [", "176", "ffn_size=128", "needs [")  # whichever MLP weight comes first


if __name__ == "__main__":
    unittest.main()
