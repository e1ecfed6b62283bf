"""The decoder's configurable choices, one family each, against transformers
(tests/python/test_llama.py's pattern: a small random model made by
transformers here, nothing from a hub): Llama 3.x (rope_scaling llama3,
tied embeddings), Qwen2.5 (tied embeddings), Qwen3 (per-head q/k RMSNorm,
a head_dim of its own), Mistral (a sliding window shorter than the
sequence), Gemma 2 and 3 (sandwich 1 + w norms, GeGLU, scaled embeddings,
a softmax scale of their own, per-layer windows; Gemma 2's capped logits,
Gemma 3's per-head norms and two rotary bases) and OLMo 2 (post-norms, q/k
normed over the whole projection); the rope types linear, dynamic, yarn
and longrope on a Llama; Phi-3/4 (fused projections on disk, longrope,
partial rotary), SmolLM3 (layers without rotary) and Granite (its four
multipliers). Each: the first step's loss within 1e-6 of transformers', 20
steps under torch.optim.AdamW within 1e-5 each, export-hf loads back as
the same class with the same logits, greedy generation equal token for
token; one parallel layout each; what a strategy cannot serve is refused
by the field's name. The families' presets resume bit for bit and train
under their layouts as one process."""
import json
import os
import unittest

import torch

import test_llama
from accel_testing import MPIRUN, TempDirMixin, error_lines, mpirun, read_metrics, run_host, write_tokens
from test_llama import SHAPE, random_llama, transformers

# Llama 3.1's scaling, its original context short enough that the 16-wide
# heads' frequencies fall in all three bands (kept, blended, divided).
LLAMA3_ROPE = {"rope_type": "llama3", "rope_theta": 10000.0, "factor": 8.0, "low_freq_factor": 1.0,
               "high_freq_factor": 4.0, "original_max_position_embeddings": 16}


class Architecture(test_llama.LlamaFromTransformers):
    """test_llama's training, export and generation checks, plus the first
    step within 1e-6 and the exported logits of the untrained model."""

    def check(self, run, metrics, theirs):
        first = read_metrics(metrics)[0]["loss"]
        self.assertLess(abs(first - theirs[0]) / theirs[0], 1e-6, f"first step: accel {first} transformers {theirs[0]}")
        return super().check(run, metrics, theirs)

    def probe_loss(self, **overrides):
        """transformers' loss on the probe windows of the saved model, with
        config keys overridden."""
        windows = torch.from_numpy(self.probe.reshape(test_llama.BATCH, -1).astype("int64"))
        model = self.model_class().from_pretrained(self.hf_dir, attn_implementation="eager", **overrides).eval()
        with torch.no_grad():
            return test_llama.next_token_loss(model, windows[:, :-1], windows[:, 1:]).item()

    def assert_moves_the_loss(self, key, value, default):
        """`key` changes transformers' loss well past the first step's
        tolerance, so the parity checks show the host honours it."""
        ours, without = self.probe_loss(**{key: value}), self.probe_loss(**{key: default})
        self.assertGreater(abs(ours - without) / ours, 1e-4, (ours, without))

    def assert_refused_on_every_rank(self, flags, text):
        proc = mpirun(2, "--init-from", "hf:" + self.hf_dir, "--steps", 1, *flags, check=False)
        self.assertNotEqual(proc.returncode, 0)
        lines = error_lines(proc.stderr)
        self.assertEqual(len(lines), 2, proc.stderr)  # one per rank
        for line in lines:
            self.assertIn(text, line)

    def test_export_of_the_loaded_weights_gives_transformers_logits(self):
        # A step of lr 1e-20 (--lr must be > 0) leaves the weights as loaded
        # (updates far below fp32's resolution): the exported model must be
        # the original, logit for logit.
        run = self.path("unchanged")
        run_host("--init-from", "hf:" + self.hf_dir, "--data", "tokens:" + self.tokens_path, "--steps", 1,
                 "--batch-size", 2, "--lr", 1e-20, "--min-lr", 0, "--warmup-steps", 0, "--save", run,
                 "--log-level", "warn", "--threads", 1)
        out = self.path("unchanged_hf")
        run_host("export-hf", run, out)
        with open(os.path.join(out, "config.json")) as f:
            written = json.load(f)
        with open(os.path.join(self.hf_dir, "config.json")) as f:
            original = json.load(f)
        self.assertEqual(written["model_type"], original["model_type"])
        for key, value in self.CONFIG.items():
            if key != "initializer_range":  # not the model's arithmetic; export writes transformers' default
                self.assertEqual(written[key], value, key)
        ids = torch.from_numpy(self.probe[:SHAPE["max_position_embeddings"]].astype("int64")).unsqueeze(0)
        with torch.no_grad():
            theirs = self.model_class().from_pretrained(self.hf_dir, attn_implementation="eager").eval()(ids).logits
            ours = self.model_class().from_pretrained(out, attn_implementation="eager").eval()(ids).logits
        self.assertLess((theirs - ours).abs().max().item(), 1e-5)


class Llama3TiedFromTransformers(Architecture):
    """Llama 3.2: llama3 rotary scaling and the head tied to embed_tokens
    (fsdp shards the one table both use)."""
    # initializer_range (no arithmetic of the model's): q and k large enough
    # that the rotation moves the loss well past the first step's tolerance.
    CONFIG = dict(rope_parameters=LLAMA3_ROPE, tie_word_embeddings=True, initializer_range=0.05)

    def test_the_scaling_changes_the_rotation(self):
        self.assert_moves_the_loss("rope_parameters", LLAMA3_ROPE, {"rope_type": "default", "rope_theta": 10000.0})


class Qwen25TiedFromTransformers(Architecture):
    """Qwen2.5 0.5B's shape: q, k and v biases and tied embeddings, under
    tensor and sequence parallelism (the tied table split by vocabulary)."""
    FAMILY = "Qwen2"
    CONFIG = dict(tie_word_embeddings=True)
    PARALLEL = ["--plugin", "megatron", "--megatron.tp_degree", 2, "--megatron.sequence_parallelism", "true"]


class Qwen3FromTransformers(Architecture):
    """Qwen3: q and k RMSNormed per head, heads 24 wide (4 x 24 != 64)."""
    FAMILY = "Qwen3"
    CONFIG = dict(head_dim=24)
    PARALLEL = ["--plugin", "deepspeed_zero", "--deepspeed_zero.zero_stage", 3]

    @unittest.skipUnless(MPIRUN, "mpirun not found")
    def test_tensor_parallelism_refuses_the_per_head_norms(self):
        self.assert_refused_on_every_rank(["--plugin", "megatron", "--megatron.tp_degree", 2],
                                          "tensor parallelism does not serve qk_norm")


class MistralFromTransformers(Architecture):
    """Mistral: each query sees the 8 latest positions of 32, as
    transformers masks them (and the pipeline's stages split the blocks)."""
    FAMILY = "Mistral"
    CONFIG = dict(sliding_window=8)
    PARALLEL = ["--plugin", "megatron", "--megatron.pp_degree", 2]

    def test_the_window_changes_attention(self):
        self.assert_moves_the_loss("sliding_window", 8, None)

    @unittest.skipUnless(MPIRUN, "mpirun not found")
    def test_context_parallelism_refuses_the_window(self):
        self.assert_refused_on_every_rank(["--plugin", "megatron", "--megatron.cp_degree", 2],
                                          "context parallelism does not serve sliding_window 8")


GEMMA2_LAYERS = ["sliding_attention", "full_attention"]


class Gemma2FromTransformers(Architecture):
    """Gemma 2: sandwich norms scaled by 1 + w, GeGLU, embeddings times
    sqrt(hidden_size), the softmax scale query_pre_attn_scalar^-1/2, capped
    attention and output logits, a window on the first layer only; fsdp
    shards the tied table."""
    FAMILY = "Gemma2"
    # pad_token_id None: transformers' embedding would hold the pad row's
    # gradient at zero (padding_idx), which accel-host does not model.
    # initializer_range 0.1 and small caps: the caps and the scale move the
    # loss well past the tolerance (test_each_key_changes_the_loss).
    CONFIG = dict(head_dim=16, query_pre_attn_scalar=1, attn_logit_softcapping=2.0, final_logit_softcapping=2.0,
                  sliding_window=8, layer_types=GEMMA2_LAYERS, pad_token_id=None, initializer_range=0.1)

    def test_each_key_changes_the_loss(self):
        for key, value, default in (("attn_logit_softcapping", 2.0, None), ("final_logit_softcapping", 2.0, None),
                                    ("query_pre_attn_scalar", 1, 16),
                                    ("layer_types", GEMMA2_LAYERS, ["full_attention"] * 2)):
            with self.subTest(key):
                self.assert_moves_the_loss(key, value, default)

    @unittest.skipUnless(MPIRUN, "mpirun not found")
    def test_context_parallelism_refuses_the_window_the_scale_and_the_cap(self):
        cp = ["--plugin", "megatron", "--megatron.cp_degree", 2]
        self.assert_refused_on_every_rank(cp, "context parallelism does not serve sliding_window 8")
        path = os.path.join(self.hf_dir, "config.json")
        with open(path) as f:
            config = json.load(f)
        # Without windows, the softmax scale and then the cap are refused by
        # name (a scalar equal to head_dim is the default scale).
        config.update(sliding_window=None, layer_types=["full_attention"] * 2)
        for changes, text in ((dict(), "does not serve query_pre_attn_scalar 1"),
                              (dict(query_pre_attn_scalar=16), "does not serve attn_logit_softcap 2")):
            with self.subTest(text):
                with open(path, "w") as f:
                    json.dump({**config, **changes}, f)
                self.assert_refused_on_every_rank(cp, text)


# The full layers' rotation scaled linearly (Gemma 3 4B-27B's rope_type).
GEMMA3_ROPE = {"sliding_attention": {"rope_type": "default", "rope_theta": 10000.0},
               "full_attention": {"rope_type": "linear", "factor": 8.0, "rope_theta": 100.0}}


class Gemma3FromTransformers(Architecture):
    """Gemma 3 (text): Gemma's block with q and k normed per head (1 + w),
    the sliding layers rotated by rope_local_base_freq and the full ones by
    rope_theta scaled linearly; the pipeline's stages split the blocks."""
    FAMILY = "Gemma3"
    CONFIG_CLASS = "Gemma3TextConfig"
    CONFIG = dict(head_dim=16, query_pre_attn_scalar=1, sliding_window=8, layer_types=GEMMA2_LAYERS,
                  rope_parameters=GEMMA3_ROPE, pad_token_id=None, initializer_range=0.1)
    PARALLEL = ["--plugin", "megatron", "--megatron.pp_degree", 2]

    def test_each_key_changes_the_loss(self):
        one_base = {kind: {"rope_type": "default", "rope_theta": 100.0} for kind in GEMMA3_ROPE}
        unscaled = {**GEMMA3_ROPE, "full_attention": {"rope_type": "default", "rope_theta": 100.0}}
        for key, value, default in (("rope_parameters", GEMMA3_ROPE, one_base),
                                    ("rope_parameters", GEMMA3_ROPE, unscaled), ("query_pre_attn_scalar", 1, 16),
                                    ("layer_types", GEMMA2_LAYERS, ["full_attention"] * 2)):
            with self.subTest(key, default=default):
                self.assert_moves_the_loss(key, value, default)

    @unittest.skipUnless(MPIRUN, "mpirun not found")
    def test_tensor_parallelism_refuses_the_per_head_norms(self):
        self.assert_refused_on_every_rank(["--plugin", "megatron", "--megatron.tp_degree", 2],
                                          "tensor parallelism does not serve qk_norm")


class Olmo2FromTransformers(Architecture):
    """OLMo 2: the norms after each sub-layer, none before, and q and k
    normed over the whole projection; ZeRO-3 shards every parameter."""
    FAMILY = "Olmo2"
    CONFIG = dict(pad_token_id=None, eos_token_id=None)
    PARALLEL = ["--plugin", "deepspeed_zero", "--deepspeed_zero.zero_stage", 3]

    @unittest.skipUnless(MPIRUN, "mpirun not found")
    def test_tensor_parallelism_refuses_the_whole_projection_norms(self):
        self.assert_refused_on_every_rank(["--plugin", "megatron", "--megatron.tp_degree", 2],
                                          "tensor parallelism does not serve qk_norm_whole")


# OLMo 3's rotation by layer kind: the sliding layers by the default
# embedding, the full ones by yarn (its long-context extension).
OLMO3_ROPE = {"sliding_attention": {"rope_type": "default", "rope_theta": 10000.0},
              "full_attention": {"rope_type": "yarn", "rope_theta": 500.0, "factor": 4.0,
                                 "original_max_position_embeddings": 16, "beta_fast": 32.0, "beta_slow": 1.0}}


class Olmo3FromTransformers(Architecture):
    """OLMo 3: OLMo 2's block with a window on the first layer (layer_types)
    and each layer kind rotated by its own rope_parameters; fsdp shards it."""
    FAMILY = "Olmo3"
    CONFIG = dict(sliding_window=8, layer_types=GEMMA2_LAYERS, rope_parameters=OLMO3_ROPE, pad_token_id=None,
                  eos_token_id=None, initializer_range=0.1)

    def test_each_key_changes_the_loss(self):
        unscaled = {**OLMO3_ROPE, "full_attention": {"rope_type": "default", "rope_theta": 500.0}}
        for key, value, default in (("rope_parameters", OLMO3_ROPE, unscaled),
                                    ("layer_types", GEMMA2_LAYERS, ["full_attention"] * 2)):
            with self.subTest(key):
                self.assert_moves_the_loss(key, value, default)
DEFAULT_ROPE = {"rope_type": "default", "rope_theta": 10000.0}


class RopeMovesTheLoss:
    """The rope type changes transformers' loss, so parity shows it is built."""

    def test_the_scaling_changes_the_rotation(self):
        self.assert_moves_the_loss("rope_parameters", dict(self.CONFIG["rope_parameters"]), DEFAULT_ROPE)


class LlamaLinearRopeFromTransformers(RopeMovesTheLoss, Architecture):
    """rope_type linear: every frequency divided by the factor."""
    CONFIG = dict(rope_parameters={"rope_type": "linear", "rope_theta": 10000.0, "factor": 4.0},
                  initializer_range=0.05)


class LlamaDynamicRopeFromTransformers(RopeMovesTheLoss, Architecture):
    """rope_type dynamic: 32-position windows of a model of 16 positions
    (--seq-len 32), so the base grows with the sequence as transformers'
    dynamic update grows it, in training and token by token in generation."""
    CONFIG = dict(rope_parameters={"rope_type": "dynamic", "rope_theta": 10000.0, "factor": 8.0},
                  max_position_embeddings=16, initializer_range=0.1)

    def host_args(self, save_dir, metrics):
        return super().host_args(save_dir, metrics) + ["--seq-len", SHAPE["max_position_embeddings"]]


class LlamaYarnRopeFromTransformers(RopeMovesTheLoss, Architecture):
    """rope_type yarn: the ramp between beta_fast and beta_slow rotations
    and the cos/sin scale from the factor (mscale)."""
    CONFIG = dict(rope_parameters={"rope_type": "yarn", "rope_theta": 10000.0, "factor": 4.0,
                                   "original_max_position_embeddings": 2048, "beta_fast": 32.0, "beta_slow": 1.0},
                  initializer_range=0.05)


class LlamaLongRopeFromTransformers(RopeMovesTheLoss, Architecture):
    """rope_type longrope on a Llama: training's 32 positions pass the
    original 28 (the long factors), generation's 24 stay within (the short)."""
    CONFIG = dict(rope_parameters={"rope_type": "longrope", "rope_theta": 10000.0, "factor": 2.0,
                                   "original_max_position_embeddings": 28,
                                   "short_factor": [1.0, 1.0, 1.5, 2.0, 2.5, 3.0, 4.0, 5.0],
                                   "long_factor": [1.0, 2.0, 3.0, 4.0, 6.0, 8.0, 10.0, 12.0]},
                  initializer_range=0.05)


# Phi-4-mini's choices at test size: longrope (its original length 16 under
# the 32 positions, so training takes the long factors and generation
# switches at position 17), 3/4 of each 16-wide head rotated (6 factors).
PHI3_ROPE = {"rope_type": "longrope", "rope_theta": 10000.0, "factor": 2.0, "original_max_position_embeddings": 16,
             "partial_rotary_factor": 0.75, "short_factor": [1.0, 1.0, 1.25, 1.5, 2.0, 3.0],
             "long_factor": [1.0, 1.5, 2.0, 3.0, 4.0, 6.0]}


class Phi3FromTransformers(Architecture):
    """Phi-3/4: fused qkv_proj and gate_up_proj on disk (split on loading,
    joined by export), longrope with a partial rotation and a tied head,
    under megatron's tensor parallelism (q, k, v split by heads)."""
    FAMILY = "Phi3"
    # pad_token_id: Phi3Config's 32000 lies outside the test's vocabulary.
    CONFIG = dict(rope_parameters=PHI3_ROPE, original_max_position_embeddings=16, tie_word_embeddings=True,
                  pad_token_id=None, initializer_range=0.1)
    PARALLEL = ["--plugin", "megatron", "--megatron.tp_degree", 2]

    def test_the_partial_rotation_and_the_factors_change_the_loss(self):
        self.assert_moves_the_loss("rope_parameters", PHI3_ROPE, {**PHI3_ROPE, "partial_rotary_factor": 1.0,
                                                                  "short_factor": [1.0] * 8, "long_factor": [1.0] * 8})
        self.assert_moves_the_loss("rope_parameters", PHI3_ROPE, {**PHI3_ROPE, "long_factor": PHI3_ROPE["short_factor"]})

    def test_generation_computes_again_where_longrope_switches(self):
        # From the loaded weights (a step of lr 1e-20 leaves them), 4 + 20
        # tokens pass the original 16 positions: transformers' Phi-3 computes
        # the whole sequence again with the long factors there; keeping the
        # cached keys (short factors) gives other tokens on this model.
        run = self.path("loaded")
        run_host("--init-from", "hf:" + self.hf_dir, "--data", "tokens:" + self.tokens_path, "--steps", 1,
                 "--batch-size", 2, "--lr", 1e-20, "--min-lr", 0, "--warmup-steps", 0, "--save", run, "--threads", 1)
        prompt = [5, 17, 200, 3]
        model = self.model_class().from_pretrained(self.hf_dir, attn_implementation="eager").eval()
        with torch.no_grad():
            expected = model.generate(torch.tensor([prompt]), max_new_tokens=20, min_new_tokens=20, do_sample=False,
                                      pad_token_id=0)[0, len(prompt):].tolist()
        got = run_host("generate", run, "--prompt-ids", " ".join(map(str, prompt)), "--max-new-tokens", 20,
                       "--temperature", 0).stdout.split()
        self.assertEqual([int(i) for i in got], expected)

    def test_the_weights_stay_fused_on_disk(self):
        from safetensors import safe_open
        run = self.path("fused")
        run_host("--init-from", "hf:" + self.hf_dir, "--data", "tokens:" + self.tokens_path, "--steps", 1,
                 "--batch-size", 2, "--save", run, "--threads", 1)
        out = self.path("fused_hf")
        run_host("export-hf", run, out)
        with safe_open(os.path.join(out, "model.safetensors"), "pt") as f:
            names = set(f.keys())
        self.assertIn("model.layers.0.self_attn.qkv_proj.weight", names)
        self.assertIn("model.layers.1.mlp.gate_up_proj.weight", names)
        self.assertFalse([n for n in names if "q_proj" in n or "gate_proj" in n], names)

    @unittest.skipUnless(MPIRUN, "mpirun not found")
    def test_its_sliding_window_is_mistrals(self):
        # Read as Mistral's window: context parallelism refuses it by name.
        self.assert_moves_the_loss("sliding_window", 8, None)
        path = os.path.join(self.hf_dir, "config.json")
        with open(path) as f:
            config = json.load(f)
        config["sliding_window"] = 8
        with open(path, "w") as f:
            json.dump(config, f)
        self.assert_refused_on_every_rank(["--plugin", "megatron", "--megatron.cp_degree", 2],
                                          "context parallelism does not serve sliding_window 8")


class SmolLM3FromTransformers(Architecture):
    """SmolLM3: its second layer attends without rotary positions (NoPE),
    rope_theta 2e6 and a tied head by default; under fsdp."""
    FAMILY = "SmolLM3"
    CONFIG = dict(no_rope_layers=[1, 0], pad_token_id=None, initializer_range=0.1)
    PARALLEL = ["--plugin", "fsdp"]

    def test_the_layer_without_rotary_changes_the_loss(self):
        self.assert_moves_the_loss("no_rope_layers", [1, 0], [1, 1])


class GraniteFromTransformers(Architecture):
    """Granite 3: embeddings, residual branches, logits and the softmax
    scaled by its four multipliers; under ZeRO-3."""
    FAMILY = "Granite"
    CONFIG = dict(embedding_multiplier=4.0, residual_multiplier=0.5, logits_scaling=2.0, attention_multiplier=0.125,
                  initializer_range=0.1)
    PARALLEL = ["--plugin", "deepspeed_zero", "--deepspeed_zero.zero_stage", 3]

    def test_each_multiplier_changes_the_loss(self):
        for key, value in self.CONFIG.items():
            if key == "initializer_range":
                continue
            with self.subTest(key):
                self.assert_moves_the_loss(key, value, 1.0)

    @unittest.skipUnless(MPIRUN, "mpirun not found")
    def test_context_parallelism_refuses_the_softmax_scale(self):
        self.assert_refused_on_every_rank(["--plugin", "megatron", "--megatron.cp_degree", 2],
                                          "context parallelism does not serve attention_multiplier 0.125")


# Ministral 3's rotation at test size: yarn over an original length of 16,
# so positions 16..31 of training's 32 take a query scale of 1 + beta * log 2.
MINISTRAL3_ROPE = {"rope_type": "yarn", "rope_theta": 10000.0, "factor": 2.0, "original_max_position_embeddings": 16,
                   "beta_fast": 32.0, "beta_slow": 1.0, "mscale": 1.0, "mscale_all_dim": 1.0,
                   "llama_4_scaling_beta": 4.0}


class Ministral3FromTransformers(Architecture):
    """Ministral 3: Mistral's block rotated by yarn, each query scaled by its
    position (llama_4_scaling_beta); tensor parallelism splits the heads."""
    FAMILY = "Ministral3"
    CONFIG = dict(rope_parameters=MINISTRAL3_ROPE, sliding_window=None, pad_token_id=None, bos_token_id=None,
                  eos_token_id=None, initializer_range=0.1)
    PARALLEL = ["--plugin", "megatron", "--megatron.tp_degree", 2]

    def test_the_query_scale_changes_the_loss(self):
        self.assert_moves_the_loss("rope_parameters", MINISTRAL3_ROPE, {**MINISTRAL3_ROPE, "llama_4_scaling_beta": 0.0})


class ArchitecturePresets(TempDirMixin, unittest.TestCase):
    """The families' presets (--model llama3-tiny, ...): resume bit for bit,
    and train under each family's parallel layout as one process, resuming
    there in one process (another strategy and world size)."""
    COMMON = ["--seq-len", 32, "--batch-size", 8, "--lr", 3e-3, "--warmup-steps", 2, "--lr-decay-steps", 8,
              "--threads", 1, "--log-level", "warn"]
    LAYOUTS = {
        "llama3-tiny": ["--plugin", "fsdp"],
        "qwen2-tiny": ["--plugin", "megatron", "--megatron.tp_degree", 2],
        "qwen3-tiny": ["--plugin", "deepspeed_zero", "--deepspeed_zero.zero_stage", 3],
        "mistral-tiny": ["--plugin", "megatron", "--megatron.pp_degree", 2],
        "gemma2-tiny": ["--plugin", "megatron", "--megatron.tp_degree", 2, "--megatron.sequence_parallelism", "true"],
        "gemma3-tiny": ["--plugin", "deepspeed_zero", "--deepspeed_zero.zero_stage", 3],
        "olmo2-tiny": ["--plugin", "megatron", "--megatron.pp_degree", 2],
        "olmo3-tiny": ["--plugin", "fsdp"],
        "phi3-tiny": ["--plugin", "megatron", "--megatron.tp_degree", 2],
        "smollm3-tiny": ["--plugin", "fsdp"],
        "granite-tiny": ["--plugin", "deepspeed_zero", "--deepspeed_zero.zero_stage", 3],
    }

    def losses(self, preset, *extra, ranks=1, steps=8):
        metrics = self.path(f"m{len(os.listdir(self.tmp))}.jsonl")
        args = ["--model", preset, *self.COMMON, "--steps", steps, "--metrics-file", metrics, *extra]
        (run_host(*args) if ranks == 1 else mpirun(ranks, *args))
        return [m["loss"] for m in read_metrics(metrics)]

    def test_each_preset_resumes_bit_exact(self):
        for preset in self.LAYOUTS:
            with self.subTest(preset):
                whole, save = self.losses(preset), self.path(preset)
                first = self.losses(preset, "--save", save, steps=4)
                self.assertEqual(first + self.losses(preset, "--save", save, "--resume", save), whole)

    @unittest.skipUnless(MPIRUN, "mpirun not found")
    def test_each_preset_trains_under_its_layout_and_resumes_in_one_process(self):
        for preset, layout in self.LAYOUTS.items():
            with self.subTest(preset):
                one, save = self.losses(preset), self.path(preset)
                parallel = self.losses(preset, *layout, "--save", save, ranks=2, steps=4)
                got = parallel + self.losses(preset, "--save", save, "--resume", save)
                for step, (a, b) in enumerate(zip(one, got)):
                    self.assertLess(abs(a - b) / a, 1e-5, f"step {step + 1}: {a} vs {b}")


del Architecture  # a base, not a test of its own

if __name__ == "__main__":
    unittest.main()
