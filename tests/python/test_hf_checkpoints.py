"""Hugging Face checkpoints in and out: a random GPT2LMHeadModel built with
the `transformers` package (nothing from a hub) starts an accel-host run
through --init-from hf:DIR, trains like transformers' own model under
torch.optim.AdamW on the same batches, and comes back out through export-hf
as a directory from_pretrained loads, under one process and under fsdp."""
import json
import os
import subprocess
import re
import tempfile
import unittest

import numpy as np
import torch
import torch.nn.functional as F
from safetensors.numpy import load_file as load_numpy
from safetensors.torch import load_file

import gpt_reference as ref
from accel_testing import MPIRUN, TempDirMixin, error_lines, mpirun, read_metrics, run_host, write_tokens

try:
    import transformers
except ImportError:  # requirements-tools.txt installs it; say so rather than pass
    transformers = None

SHAPE = dict(n_layer=2, n_head=4, n_embd=64, seq_len=32, vocab_size=256)
HYPER = dict(lr=2e-3, min_lr=2e-4, warmup=5, schedule="cosine", betas=(0.9, 0.95), eps=1e-8,
             weight_decay=0.1, grad_clip=1.0)
STEPS, BATCH, ACCUM = 20, 8, 2


def hf_config(**overrides):
    config = transformers.GPT2Config(
        n_layer=SHAPE["n_layer"], n_head=SHAPE["n_head"], n_embd=SHAPE["n_embd"], n_positions=SHAPE["seq_len"],
        vocab_size=SHAPE["vocab_size"], resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0)
    for key, value in overrides.items():
        setattr(config, key, value)
    return config


def random_hf_model(seed=0):
    torch.manual_seed(seed)
    model = transformers.GPT2LMHeadModel(hf_config())
    # Non-zero biases and norms, so a transposed or misplaced tensor shows.
    with torch.no_grad():
        for name, p in model.named_parameters():
            if p.dim() == 1:
                p.add_(0.05 * torch.randn_like(p))
    return model


def next_token_loss(model, x, y):
    logits = model(input_ids=x).logits
    return F.cross_entropy(logits.reshape(-1, logits.shape[-1]), y.reshape(-1))


@unittest.skipUnless(transformers, "transformers is not installed (requirements-tools.txt)")
class HuggingFaceRoundTrip(TempDirMixin, unittest.TestCase):
    def setUp(self):
        super().setUp()
        self.tokens_path = self.path("tokens.bin")
        self.tokens = write_tokens(self.tokens_path, 40_000, SHAPE["vocab_size"])
        self.hf_dir = self.path("hf")
        random_hf_model().save_pretrained(self.hf_dir, safe_serialization=True)

    def host_args(self, save_dir, metrics, steps=STEPS):
        return ["--init-from", "hf:" + self.hf_dir, "--data", "tokens:" + self.tokens_path,
                "--data-order", "sequential", "--steps", steps, "--batch-size", BATCH, "--grad-accum", ACCUM,
                "--lr", HYPER["lr"], "--min-lr", HYPER["min_lr"], "--warmup-steps", HYPER["warmup"],
                "--lr-schedule", HYPER["schedule"], "--beta1", HYPER["betas"][0], "--beta2", HYPER["betas"][1],
                "--eps", HYPER["eps"], "--weight-decay", HYPER["weight_decay"], "--grad-clip", HYPER["grad_clip"],
                "--save", save_dir, "--metrics-file", metrics, "--log-level", "warn"]

    def train_transformers(self):
        model = transformers.GPT2LMHeadModel.from_pretrained(self.hf_dir, attn_implementation="eager")
        model.train()
        # The tied head appears once in parameters(): decay by rank as the host does.
        opt = ref.make_optimizer(model, HYPER["lr"], HYPER["betas"], HYPER["eps"], HYPER["weight_decay"])
        losses = []
        for step in range(STEPS):
            lr = ref.learning_rate(step, STEPS, HYPER["lr"], HYPER["min_lr"], HYPER["warmup"], HYPER["schedule"])
            for group in opt.param_groups:
                group["lr"] = lr
            opt.zero_grad()
            micro = []
            for x, y in ref.sequential_micro_batches(self.tokens, step, BATCH, ACCUM, SHAPE["seq_len"]):
                loss = next_token_loss(model, x, y)
                (loss / ACCUM).backward()
                micro.append(loss.item())
            torch.nn.utils.clip_grad_norm_(model.parameters(), HYPER["grad_clip"])
            opt.step()
            losses.append(sum(micro) / ACCUM)
        return model, losses

    def exported_logits(self, checkpoint, out_dir, tokens):
        run_host("export-hf", checkpoint, out_dir)
        with open(os.path.join(out_dir, "config.json")) as f:
            self.assertEqual(json.load(f)["architectures"], ["GPT2LMHeadModel"])
        model = transformers.GPT2LMHeadModel.from_pretrained(out_dir, attn_implementation="eager")
        model.eval()
        with torch.no_grad():
            return model(input_ids=tokens).logits

    def host_logits(self, checkpoint, tokens):
        # accel-host's own forward, through the reference test_parity_torch
        # pins it to: the merged weights in gpt_reference's GPT.
        merged = self.path(os.path.basename(checkpoint) + "_merged")
        run_host("merge-weights", checkpoint, merged)
        model = ref.GPT(**SHAPE)
        model.load_state_dict(load_file(os.path.join(merged, "model.safetensors")))
        model.eval()
        with torch.no_grad():
            x = model.wte(tokens) + model.wpe.weight[:tokens.shape[1]]
            for block in model.h:
                x = block(x)
            return F.linear(model.ln_f(x), model.wte.weight)

    def check_round_trip(self, run, metrics, theirs_losses):
        ours = read_metrics(metrics)
        self.assertEqual([m["step"] for m in ours], list(range(1, STEPS + 1)))
        for step, (mine, theirs) in enumerate(zip([m["loss"] for m in ours], theirs_losses)):
            with self.subTest(step=step + 1):
                self.assertLess(abs(mine - theirs) / theirs, 1e-5, f"step {step + 1}: accel {mine} transformers {theirs}")
        probe = torch.from_numpy(self.tokens[:2 * SHAPE["seq_len"]].astype(np.int64)).view(2, SHAPE["seq_len"])
        checkpoint = os.path.join(run, f"step_{STEPS}")
        exported = self.exported_logits(checkpoint, self.path(os.path.basename(run) + "_hf"), probe)
        host = self.host_logits(checkpoint, probe)
        self.assertLess((exported - host).abs().max().item(), 1e-5 * host.abs().max().item())

    def test_gpt2_trains_like_transformers_and_exports_back(self):
        model, theirs = self.train_transformers()
        run_host(*self.host_args(self.path("run"), self.path("metrics.jsonl")))
        self.check_round_trip(self.path("run"), self.path("metrics.jsonl"), theirs)
        # The very first loss is transformers' model's own: the weights arrived intact.
        self.assertLess(abs(read_metrics(self.path("metrics.jsonl"))[0]["loss"] - theirs[0]) / theirs[0], 1e-6)

    @unittest.skipUnless(MPIRUN, "mpirun not found")
    def test_gpt2_under_fsdp_on_two_ranks(self):
        _, theirs = self.train_transformers()
        mpirun(2, "--plugin", "fsdp", "--fsdp.auto_wrap_policy", "transformer_based_wrap",
               "--fsdp.state_dict_type", "SHARDED_STATE_DICT",
               *self.host_args(self.path("fsdp"), self.path("fsdp.jsonl")))
        self.check_round_trip(self.path("fsdp"), self.path("fsdp.jsonl"), theirs)

    @unittest.skipUnless(MPIRUN, "mpirun not found")
    def test_gpt2_under_zero3_on_two_ranks(self):
        # zero3_init_flag (the default): each rank reads only its partitions.
        _, theirs = self.train_transformers()
        mpirun(2, *ZERO3, *self.host_args(self.path("zero3"), self.path("zero3.jsonl")))
        self.check_round_trip(self.path("zero3"), self.path("zero3.jsonl"), theirs)

    def test_a_requeued_init_from_command_resumes_its_checkpoint(self):
        # A job script runs the same command each time: --init-from and
        # --resume auto. Once a checkpoint exists it is resumed, in the
        # shape config.json gives (the shape was read only when nothing was
        # resumed, so the model was the default one and the checkpoint refused).
        save, metrics = self.path("job"), self.path("job.jsonl")
        first = self.host_args(save, metrics, steps=2)
        run_host(*first, "--resume", "auto")
        again = self.host_args(save, metrics, steps=3)
        again[again.index("--log-level") + 1] = "info"
        again = run_host(*again, "--resume", "auto")
        self.assertIn("at step 2", again.stderr)
        self.assertEqual([m["step"] for m in read_metrics(metrics)], [1, 2, 3])

    def test_sharded_index_form_loads(self):
        # save_pretrained's sharded layout: model.safetensors.index.json and
        # several files, read as one model.
        sharded = self.path("hf_sharded")
        random_hf_model().save_pretrained(sharded, safe_serialization=True, max_shard_size="100KB")
        self.assertTrue(os.path.exists(os.path.join(sharded, "model.safetensors.index.json")))
        self.hf_dir = sharded
        run_host(*self.host_args(self.path("a"), self.path("a.jsonl"), steps=1))
        self.hf_dir = self.path("hf")
        run_host(*self.host_args(self.path("b"), self.path("b.jsonl"), steps=1))
        self.assertEqual(read_metrics(self.path("a.jsonl"))[0]["loss"], read_metrics(self.path("b.jsonl"))[0]["loss"])


# The loader's line at start-up: what rank 0 read of the weights' files.
LOADED = re.compile(r"initial weights from hf:\S+: this rank read (\d+) of the (\d+) bytes")
FSDP_SLICES = ("--plugin", "fsdp", "--fsdp.auto_wrap_policy", "transformer_based_wrap",
               "--fsdp.sync_module_states", "true", "--fsdp.cpu_ram_efficient_loading", "true")
# DeepSpeed's default stage3_param_persistence_threshold (1e5 elements)
# keeps every unit of this small model whole on every rank: 0 partitions them all.
ZERO3_CONFIG = os.path.join(tempfile.mkdtemp(prefix="accel-hf-zero3-"), "zero3.json")
with open(ZERO3_CONFIG, "w") as _f:
    json.dump({"gradient_accumulation_steps": "auto",
               "zero_optimization": {"stage": 3, "stage3_param_persistence_threshold": 0}}, _f)
ZERO3 = ("--plugin", "deepspeed_zero", "--deepspeed_zero.hf_ds_config", ZERO3_CONFIG)
ZERO3_WHOLE_UNITS = (*ZERO3, "--deepspeed_zero.zero3_init_flag", "false")
FSDP_UNITS = ("--plugin", "fsdp", "--fsdp.auto_wrap_policy", "transformer_based_wrap")
MEGATRON_TP2 = ("--plugin", "megatron", "--megatron.tp_degree", 2)


def host_view(stored):
    """A GPT2LMHeadModel file's tensors as the host keeps them: fp32 (an
    exact widening from bf16/fp16), no "transformer." prefix, Conv1D weights
    transposed to [out, in], the causal-mask buffers dropped."""
    conv1d = (".attn.c_attn.weight", ".attn.c_proj.weight", ".mlp.c_fc.weight", ".mlp.c_proj.weight")
    out = {}
    for name, tensor in stored.items():
        name = name.removeprefix("transformer.")
        if name == "lm_head.weight" or name.endswith((".attn.bias", ".attn.masked_bias")):
            continue
        value = tensor.float()
        out[name] = value.t().contiguous() if name.endswith(conv1d) else value
    return out


def stored_tensors(hf_dir):
    tensors = {}
    for name in sorted(os.listdir(hf_dir)):
        if name.endswith(".safetensors"):
            tensors.update(load_file(os.path.join(hf_dir, name)))
    return tensors


@unittest.skipUnless(transformers, "transformers is not installed (requirements-tools.txt)")
@unittest.skipUnless(MPIRUN, "mpirun not found")
class HuggingFaceSlices(TempDirMixin, unittest.TestCase):
    """--init-from hf:DIR under strategies that keep slices (issue 30): each
    rank reads only the bytes of what it keeps (the loader's count), and the
    model every strategy starts from is the file's, bit for bit, as reading
    each tensor whole gave."""

    def setUp(self):
        super().setUp()
        self.hf_dir = self.path("hf")
        random_hf_model().save_pretrained(self.hf_dir, safe_serialization=True)
        self.runs = 0

    def start(self, n, *strategy, hf_dir=None):
        """Rank 0's (bytes read, bytes stored) and the model saved at step 0, merged."""
        self.runs += 1
        run = self.path(f"run{self.runs}")
        args = ["--init-from", "hf:" + (hf_dir or self.hf_dir), "--data", "synthetic", "--steps", 0,
                "--batch-size", 4, "--threads", 1, "--save", run, "--log-level", "info", *strategy]
        proc = mpirun(n, *args, timeout=120) if n > 1 else run_host(*args, timeout=120)
        found = LOADED.findall(proc.stderr + proc.stdout)
        self.assertEqual(len(found), 1, proc.stderr)  # rank 0's line, once
        merged = run + "_merged"
        run_host("merge-weights", os.path.join(run, "step_0"), merged)
        return int(found[0][0]), int(found[0][1]), load_file(os.path.join(merged, "model.safetensors"))

    def assert_same_bits(self, got, want, what):
        self.assertEqual(sorted(got), sorted(want), what)
        for name, value in want.items():
            with self.subTest(what=what, tensor=name):
                self.assertEqual(got[name].dtype, torch.float32)
                self.assertTrue(torch.equal(got[name].view(torch.int32), value.view(torch.int32)),
                                f"{what}: {name} is not the file's value bit for bit")

    def test_every_strategy_starts_from_the_files_values_bit_for_bit(self):
        want = host_view(stored_tensors(self.hf_dir))
        for n, strategy in ((1, ()), (2, FSDP_SLICES), (2, FSDP_UNITS), (2, ZERO3), (2, ZERO3_WHOLE_UNITS),
                            (2, MEGATRON_TP2)):
            _, _, got = self.start(n, *strategy)
            self.assert_same_bits(got, want, f"{n} ranks {' '.join(map(str, strategy))}")

    def test_a_rank_that_keeps_a_shard_reads_only_its_share(self):
        read, stored, _ = self.start(1)
        self.assertEqual(read, stored, "one process keeps, and reads, everything once")
        # cpu_ram_efficient_loading: rank 0's half of each unit (a flat shard
        # rounded up by at most one element per unit), nothing else.
        read, stored, _ = self.start(2, *FSDP_SLICES)
        self.assertLessEqual(read, stored // 2 + 4 * 8, f"fsdp: rank 0 read {read} of {stored} bytes")
        self.assertGreaterEqual(read, stored // 2 - 4 * 8)
        # ZeRO-3 (zero3_init_flag, every unit partitioned): the same.
        read, stored, _ = self.start(2, *ZERO3)
        self.assertLessEqual(read, stored // 2 + 4 * 8,
                             f"ZeRO-3: rank 0 read {read} of {stored} bytes")
        # Without cpu_ram_efficient_loading (or zero3_init_flag) each unit is
        # materialised whole, one at a time, before its shard is cut: every
        # rank reads everything (and holds one unit at most).
        for strategy in (FSDP_UNITS, ZERO3_WHOLE_UNITS):
            read, stored, _ = self.start(2, *strategy)
            self.assertEqual(read, stored, " ".join(map(str, strategy)))

    def test_a_tensor_parallel_rank_reads_its_splits_not_the_whole_model(self):
        read, stored, _ = self.start(2, *MEGATRON_TP2)
        # Split: the embeddings and every block's four projections (half
        # each); replicated on both ranks: the norms, wpe and the row-parallel biases.
        C, L, V, T = SHAPE["n_embd"], SHAPE["n_layer"], SHAPE["vocab_size"], SHAPE["seq_len"]
        replicated = 4 * (T * C + 2 * C + L * (4 * C + 2 * C))
        self.assertLess(read, stored // 2 + replicated + 4 * V, f"tp 2: rank 0 read {read} of {stored} bytes")

    def test_bf16_and_sharded_files_convert_slice_by_slice_as_whole(self):
        # A bf16 save_pretrained in its index form: conversion per slice, and
        # slices of tensors that live in different files.
        bf16 = self.path("hf_bf16")
        random_hf_model().to(torch.bfloat16).save_pretrained(bf16, safe_serialization=True, max_shard_size="50KB")
        self.assertTrue(os.path.exists(os.path.join(bf16, "model.safetensors.index.json")))
        want = host_view(stored_tensors(bf16))
        for n, strategy in ((1, ()), (2, FSDP_SLICES), (2, ZERO3), (2, MEGATRON_TP2)):
            read, stored, got = self.start(n, *strategy, hf_dir=bf16)
            self.assert_same_bits(got, want, f"bf16, {n} ranks {' '.join(map(str, strategy))}")
            if strategy == FSDP_SLICES:
                self.assertLessEqual(read, stored // 2 + 2 * 8)


@unittest.skipUnless(transformers, "transformers is not installed (requirements-tools.txt)")
class HuggingFaceBadInput(TempDirMixin, unittest.TestCase):
    """A checkpoint the host's GPT-2 cannot be: one line naming why, no run."""

    def setUp(self):
        super().setUp()
        self.hf_dir = self.path("hf")
        random_hf_model().save_pretrained(self.hf_dir, safe_serialization=True)

    def refused(self, *extra, mentions, code=4):  # 4: every rank failed before its first step
        proc = run_host("--init-from", "hf:" + self.hf_dir, "--steps", 1, *extra, check=False, timeout=120)
        self.assertEqual(proc.returncode, code, proc.stderr)
        lines = error_lines(proc.stderr)
        self.assertEqual(len(lines), 1, proc.stderr)
        for word in mentions:
            self.assertIn(word, lines[0])
        self.assertNotIn("Traceback", proc.stderr)

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
        from safetensors.numpy import save_file as save_numpy
        save_numpy(tensors, path, metadata={"format": "pt"})

    def test_another_architecture(self):
        self.edit_config(model_type="falcon", architectures=["FalconForCausalLM"])
        self.refused(mentions=["config.json", '"model_type" is "falcon"', "gpt2, llama"])

    def test_another_activation(self):
        self.edit_config(activation_function="relu")
        self.refused(mentions=["activation_function", "relu"])

    def test_a_wrong_typed_value_nested_deep_is_one_line(self):
        # 300,000 nested arrays (a 600 KB file) crashed the host with SIGSEGV:
        # the refusal printed the value with dump(), which recursed.
        path = os.path.join(self.hf_dir, "config.json")
        with open(path) as f:
            text = f.read()
        depth = 300_000
        with open(path, "w") as f:
            f.write('{"vocab_size": ' + "[" * depth + "]" * depth + ", " + text.lstrip()[1:])
        self.refused(mentions=["config.json", "deeper than 64 levels"])

    def test_numbers_are_read_by_the_json_rule(self):
        cases = [
            (dict(vocab_size=256.9), ['"vocab_size" must be an integer, got 256.9']),
            (dict(vocab_size=1e19), ['"vocab_size" must be an integer, got 1e+19']),
            (dict(vocab_size=[[[[1]]]]), ['"vocab_size" must be an integer, got an array of 1 element(s)']),
            (dict(layer_norm_epsilon=0), ['"layer_norm_epsilon" must be a finite number > 0, got 0']),
            (dict(n_head=3), ['"n_embd" (64) must be a multiple of "n_head" (3)']),
            (dict(activation_function="x" * 100_000), ["activation_function", "(100000 characters)"]),
        ]
        path = os.path.join(self.hf_dir, "config.json")
        with open(path) as f:
            original = f.read()
        for changes, mentions in cases:
            with self.subTest(changes=str(changes)[:60]):
                with open(path, "w") as f:
                    f.write(original)
                self.edit_config(**changes)
                self.refused(mentions=["config.json"] + mentions)

    def test_untied_head(self):
        self.edit_config(tie_word_embeddings=False)
        self.refused(mentions=["tie_word_embeddings"])

    def test_missing_weight(self):
        self.edit_weights(lambda t: t.pop("transformer.h.1.mlp.c_fc.weight"))
        self.refused(mentions=["h.1.mlp.c_fc.weight"])

    def test_weight_of_another_shape(self):
        def shrink(t):
            t["transformer.wpe.weight"] = t["transformer.wpe.weight"][:-1].copy()
        self.edit_weights(shrink)
        self.refused(mentions=["transformer.wpe.weight", "[31, 64]", "[32, 64]"])

    def test_a_shape_flag_that_contradicts_the_config(self):
        self.refused("--n-layer", 3, mentions=["--n-layer 3", "n_layer 2", "config.json"], code=2)

    def test_a_preset_beside_it(self):
        self.refused("--model", "gpt-small", mentions=["--model", "--init-from"], code=2)

    def test_not_a_directory(self):
        self.hf_dir = self.path("nowhere")
        self.refused(mentions=["nowhere", "not a directory"])

    def refused_without_blocking(self, mentions):
        try:
            self.refused(mentions=mentions)
        except subprocess.TimeoutExpired:
            self.fail(f"--init-from hf:{self.hf_dir} blocked on a FIFO")

    def test_fifo_as_the_weights_is_refused_without_blocking(self):
        # Issue 30: open() of model.safetensors blocked forever on a FIFO
        # with no writer (the subprocess timeout is the failure).
        weights = os.path.join(self.hf_dir, "model.safetensors")
        os.remove(weights)
        os.mkfifo(weights)
        self.refused_without_blocking([weights, "is a FIFO, not a regular file"])

    def test_fifo_as_a_shard_the_index_names_is_refused_without_blocking(self):
        self.hf_dir = self.path("hf_sharded")
        random_hf_model().save_pretrained(self.hf_dir, safe_serialization=True, max_shard_size="100KB")
        with open(os.path.join(self.hf_dir, "model.safetensors.index.json")) as f:
            shards = sorted(set(json.load(f)["weight_map"].values()))
        self.assertGreater(len(shards), 1)
        shard = os.path.join(self.hf_dir, shards[-1])
        os.remove(shard)
        os.mkfifo(shard)
        self.refused_without_blocking([shard, "is a FIFO, not a regular file"])

    def test_symlinked_files_are_followed_like_the_hugging_face_cache(self):
        # The cache's snapshots/<rev>/ holds symlinks into blobs/: a user's
        # input path is followed (accel/sdk/input_file.hpp, Symlinks::follow);
        # only what the links name must be regular files.
        blobs, snapshot = self.path("blobs"), self.path("snapshot")
        os.makedirs(blobs)
        os.makedirs(snapshot)
        for name in os.listdir(self.hf_dir):
            os.rename(os.path.join(self.hf_dir, name), os.path.join(blobs, name))
            os.symlink(os.path.join("..", "blobs", name), os.path.join(snapshot, name))
        proc = run_host("--init-from", "hf:" + snapshot, "--steps", 1, check=False, timeout=120)
        self.assertEqual(proc.returncode, 0, proc.stderr)
        # A link to a FIFO is a FIFO: refused on the descriptor, unblocked.
        os.remove(os.path.join(blobs, "model.safetensors"))
        os.mkfifo(os.path.join(blobs, "model.safetensors"))
        self.hf_dir = snapshot
        self.refused_without_blocking([os.path.join(snapshot, "model.safetensors"), "is a FIFO"])

    def test_export_of_something_that_is_not_a_checkpoint(self):
        proc = run_host("export-hf", self.hf_dir, self.path("out"), check=False, timeout=60)
        self.assertEqual(proc.returncode, 1, proc.stderr)
        self.assertIn("export-hf", error_lines(proc.stderr)[0])


if __name__ == "__main__":
    unittest.main()
