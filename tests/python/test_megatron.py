"""The megatron plugin under mpirun: tensor parallelism (Megatron's column /
row-parallel blocks, vocab-parallel embedding and cross-entropy) over T ranks,
with or without sequence parallelism,
data parallel over the rest, gives the per-step losses and gradient norms of
one process with the same global batch (fp32, within 1e-5 relative); each
rank holds 1/T of every split weight; the host's tensor-parallel collectives
move the bytes Megatron's analysis predicts; checkpoints hold whole tensors
(same-layout resume bit-exact, merge-weights the full model); bad settings
fail with one clear line on every rank."""
import math
import os
import unittest

from accel_testing import MPIRUN, TempDirMixin, assert_same_safetensors, mpirun, read_metrics, run_host

COMMON = ["--model", "gpt-tiny", "--lr", 3e-3, "--warmup-steps", 2, "--log-level", "warn", "--threads", 1]
MEGATRON = ["--plugin", "megatron"]
STEPS = 10


def error_lines(stderr):
    return [line for line in stderr.splitlines() if "[error]" in line]


@unittest.skipUnless(MPIRUN, "mpirun not found")
class MegatronParity(TempDirMixin, unittest.TestCase):
    """Per-step losses and norms of `mpirun -n N --plugin megatron` against one process."""

    _references = {}

    def reference(self, batch, steps, extra=()):
        key = (batch, steps, tuple(map(str, extra)))
        if key not in self._references:
            path = self.path("reference.jsonl")
            if os.path.exists(path):
                os.remove(path)
            run_host(*COMMON, "--steps", steps, "--batch-size", batch, "--metrics-file", path, *extra)
            MegatronParity._references[key] = read_metrics(path)
        return self._references[key]

    def parity(self, n, tp, *extra, batch=12, steps=STEPS, model=()):
        multi = self.path(f"megatron{n}.jsonl")
        if os.path.exists(multi):
            os.remove(multi)
        mpirun(n, *COMMON, *MEGATRON, "--megatron.tp_degree", tp, "--steps", steps, "--batch-size", batch,
               "--metrics-file", multi, *model, *extra)
        # The host's own options (model shape, clipping, accumulation) apply
        # to both runs; the plugin's do not exist without it.
        host = [str(x) for pair in zip(extra[::2], extra[1::2]) if not str(pair[0]).startswith("--megatron.")
                for x in pair]
        a, b = self.reference(batch, steps, (*map(str, model), *host)), read_metrics(multi)
        self.assertEqual(len(b), steps)
        for x, y in zip(a, b):
            self.assertLess(abs(x["loss"] - y["loss"]) / x["loss"], 1e-5,
                            (n, tp, extra, x["step"], x["loss"], y["loss"]))
            self.assertLess(abs(x["grad_norm"] - y["grad_norm"]) / x["grad_norm"], 1e-4,
                            (n, tp, extra, x["step"], x["grad_norm"], y["grad_norm"]))
        return b

    def test_tp2_on_two_ranks(self):
        rows = self.parity(2, 2)
        self.assertEqual(rows[0]["megatron.tp_degree"], 2)
        self.assertEqual(rows[0]["megatron.data_parallel_size"], 1)

    def test_tp2_dp2_on_four_ranks(self):
        rows = self.parity(4, 2)
        self.assertEqual(rows[0]["megatron.data_parallel_size"], 2)

    def test_tp4_on_four_ranks(self):
        self.parity(4, 4)

    def test_vocabulary_not_divisible_by_tp(self):
        # 255 classes over 2 ranks: padded to 256, the padding row takes no
        # probability and never moves.
        self.parity(2, 2, model=("--vocab-size", 255))
        self.parity(4, 4, model=("--vocab-size", 254))

    def test_clipping_counts_each_parameter_once(self):
        # A clip far below the norm scales every step: a norm that counted
        # replicated LayerNorms and biases T times would scale differently.
        self.parity(4, 2, "--grad-clip", 0.05)

    def test_sequence_parallelism(self):
        # LayerNorm / residual regions split along the sequence: the same
        # losses and norms, on every layout.
        SP = ("--megatron.sequence_parallelism", "true")
        self.parity(2, 2, *SP)
        self.parity(4, 2, *SP)
        self.parity(4, 4, *SP, model=("--vocab-size", 254))
        self.parity(4, 2, *SP, "--megatron.recompute_activations", "true", "--megatron.recompute_granularity", "full", "--grad-clip", 0.05)

    def test_distributed_optimizer(self):
        # AdamW's state partitioned over the data group (ZeRO-1 over data,
        # on the sharding machinery): the same curve on every layout,
        # including a data group of one (nothing to partition) and of four.
        DO = ("--megatron.use_distributed_optimizer", "true")
        self.parity(4, 2, *DO)
        self.parity(2, 2, *DO)
        self.parity(4, 1, *DO, model=("--vocab-size", 255))
        self.parity(4, 2, *DO, "--megatron.sequence_parallelism", "true", "--grad-clip", 0.05)
        self.parity(4, 2, *DO, "--megatron.recompute_activations", "true", "--megatron.recompute_granularity", "full", "--grad-accum", 2, batch=12)

    def test_weight_decay_increment(self):
        # Megatron's weight_decay_incr_style: the decay each step uses (the
        # value at k - 1 of `--steps`), and it acts: start = end is the
        # host's constant --weight-decay to the last bit of the curve, a
        # rising decay moves the weights away from it.
        steps = 6
        WD = ("--megatron.weight_decay_incr_style",)
        rows = self.parity(2, 2, *WD, "linear", "--megatron.start_weight_decay", 0.3,
                           "--megatron.end_weight_decay", 0.3, "--weight-decay", 0.3, steps=steps)
        self.assertEqual([r["megatron.weight_decay"] for r in rows], [0.3] * steps)
        for style, coeff in (("linear", lambda r: r), ("cosine", lambda r: 0.5 * (math.cos(math.pi * (1 - r)) + 1))):
            path = self.path(f"wd_{style}.jsonl")
            mpirun(2, *COMMON, *MEGATRON, "--megatron.tp_degree", 2, "--steps", steps, "--batch-size", 12,
                   "--metrics-file", path, *WD, style, "--megatron.start_weight_decay", 0.0,
                   "--megatron.end_weight_decay", 5.0)
            got = read_metrics(path)
            want = [5.0 * coeff((k - 1) / steps) for k in range(1, steps + 1)]
            for k, (row, w) in enumerate(zip(got, want)):
                self.assertAlmostEqual(row["megatron.weight_decay"], w, places=9, msg=(style, k))
            # Decay 0 at step 1 equals the undecayed reference there; later
            # steps have shrunk the weights.
            plain = self.reference(12, steps, ("--weight-decay", "0"))
            self.assertLess(abs(got[0]["loss"] - plain[0]["loss"]) / plain[0]["loss"], 1e-6)
            self.assertGreater(abs(got[-1]["loss"] - plain[-1]["loss"]) / plain[-1]["loss"], 1e-4, style)

    def test_megatron_lr_schedule(self):
        # Any lr_ field switches to Megatron's OptimizerParamScheduler,
        # counted in samples (iteration k at (k - 1) x batch). Constant with
        # no warmup is the host's constant schedule to the curve; a warmup
        # and decay in samples give Megatron's per-step values.
        base = ["--model", "gpt-tiny", "--lr", 3e-3, "--log-level", "warn", "--threads", 1, "--batch-size", 12]
        steps, batch = 8, 12
        ref, got = self.path("lr_ref.jsonl"), self.path("lr_const.jsonl")
        run_host(*base, "--steps", steps, "--lr-schedule", "constant", "--metrics-file", ref)
        mpirun(2, *base, *MEGATRON, "--megatron.tp_degree", 2, "--steps", steps, "--metrics-file", got,
               "--megatron.lr_decay_style", "constant")
        for x, y in zip(read_metrics(ref), read_metrics(got)):
            self.assertLess(abs(x["loss"] - y["loss"]) / x["loss"], 1e-5, (x["step"], x["loss"], y["loss"]))
            self.assertEqual(y["megatron.lr"], 3e-3)
        for style in ("linear", "cosine", "inverse-square-root"):
            path = self.path(f"lr_{style}.jsonl")
            mpirun(2, *base, *MEGATRON, "--megatron.tp_degree", 2, "--steps", steps, "--metrics-file", path,
                   "--megatron.lr_decay_style", style, "--megatron.lr_warmup_samples", 2 * batch,
                   "--megatron.lr_decay_samples", 6 * batch, "--megatron.min_lr", 1e-4)
            for k, row in enumerate(read_metrics(path), start=1):
                self.assertAlmostEqual(row["megatron.lr"], megatron_lr(style, (k - 1) * batch, 3e-3, 1e-4, 2 * batch,
                                                                       6 * batch), places=12, msg=(style, k))

    def test_selective_recompute_is_the_fused_attention_kernel(self):
        # Megatron's selective recompute drops the attention scores and
        # recomputes them in backward; the host's attention is the fused
        # kernel that does exactly that (it keeps q, k, v, the output and
        # each row's log-sum-exp). Pinned by the operators the profiler
        # records: the fused forward and backward, and no softmax of scores.
        import glob
        import json
        out = self.path("trace")
        mpirun(2, *COMMON, *MEGATRON, "--megatron.tp_degree", 2, "--megatron.recompute_activations", "true",
               "--steps", 2, "--batch-size", 4, "--plugin", "profiler", "--profiler.output_trace_dir", out)
        names = set()
        for path in glob.glob(os.path.join(out, "**", "*.json"), recursive=True):
            with open(path) as f:
                names |= {e.get("name") for e in json.load(f).get("traceEvents", [])}
        self.assertIn("aten::_scaled_dot_product_flash_attention_for_cpu", names)
        self.assertIn("aten::_scaled_dot_product_flash_attention_for_cpu_backward", names)
        self.assertNotIn("aten::_softmax", names)

    def test_recompute_and_accumulation(self):
        # Only the data group splits the batch: 12 over 2 data ranks x 2
        # micro-steps on 4 ranks (world x accumulation would not divide it).
        self.parity(4, 2, "--megatron.recompute_activations", "true", "--megatron.recompute_granularity", "full", "--grad-accum", 2, batch=12)
        self.parity(4, 2, "--megatron.recompute_activations", "true", "--grad-accum", 2, batch=12)  # selective


def megatron_lr(style, num, max_lr, min_lr, warmup, decay):
    """Megatron-LM's OptimizerParamScheduler.get_lr (lr_warmup_init 0)."""
    if warmup > 0 and num <= warmup:
        return max_lr * num / warmup
    if style == "constant":
        return max_lr
    if num > decay:
        return min_lr
    if style == "inverse-square-root":
        return max(min_lr, max_lr * max(warmup, 1) ** 0.5 / max(num, 1) ** 0.5)
    ratio = (num - warmup) / (decay - warmup)
    coeff = 1.0 - ratio if style == "linear" else 0.5 * (math.cos(math.pi * ratio) + 1.0)
    return min_lr + coeff * (max_lr - min_lr)


def local_parameters(tp, C=64, V=256, S=64, L=2):
    """gpt-tiny's parameters one tensor rank holds: split weights 1/T (the
    vocabulary padded to a multiple of T), LayerNorms, wpe and row biases whole."""
    padded = -(-V // tp) * tp
    block = (2 * C + (3 * C * C + 3 * C) // tp + C * C // tp + C  # ln_1, c_attn, attn.c_proj
             + 2 * C + (4 * C * C + 4 * C) // tp + 4 * C * C // tp + C)  # ln_2, c_fc, mlp.c_proj
    return padded // tp * C + S * C + L * block + 2 * C


def unit_parameters(tp, C=64, V=256, S=64, L=2):
    """local_parameters by unit: the embedding (wte's slice, wpe), each
    block, the head (ln_f; lm_head is wte)."""
    padded = -(-V // tp) * tp
    block = (local_parameters(tp, C, V, S, L) - padded // tp * C - S * C - 2 * C) // L
    return [padded // tp * C + S * C] + [block] * L + [2 * C]


@unittest.skipUnless(MPIRUN, "mpirun not found")
class MegatronTheory(TempDirMixin, unittest.TestCase):
    """Memory and communication per rank equal Megatron's accounting."""

    def run_tp(self, n, tp, *extra, batch=12):
        path = self.path(f"run{len(os.listdir(self.tmp))}.jsonl")  # the metrics file appends
        mpirun(n, *COMMON, *MEGATRON, "--megatron.tp_degree", tp, "--steps", 2, "--batch-size", batch,
               "--metrics-file", path, *extra)
        return read_metrics(path)

    def test_parameter_gradient_and_optimizer_bytes(self):
        for n, tp, vocab in ((2, 2, 256), (4, 4, 254)):
            with self.subTest(tp=tp):
                row = self.run_tp(n, tp, "--vocab-size", vocab)[0]
                local = 4 * local_parameters(tp, V=vocab)
                peaks = row["memory_startup_peak_bytes"]
                self.assertEqual(peaks["params"], local)
                self.assertEqual(peaks["grads"], local)
                self.assertEqual(peaks["optimizer"], 2 * local)  # AdamW's two fp32 moments

    def test_distributed_optimizer_bytes(self):
        # use_distributed_optimizer over a data group of d: Megatron's table
        # for fp32, 8 + 8/d bytes per parameter. The host keeps this rank's
        # parameters and gradients (4 + 4); the partition's master and
        # gradient are slices of those buffers, stepped and reduced in place,
        # and AdamW's moments (8/d) are all it allocates. (Units here are
        # multiples of d; one that is not pads its partition and keeps its
        # own slices.)
        for n, tp in ((4, 2), (4, 1)):
            with self.subTest(tp=tp):
                d = n // tp
                row = self.run_tp(n, tp, "--megatron.use_distributed_optimizer", "true")[0]
                local = local_parameters(tp)
                self.assertTrue(all(numel % d == 0 for numel in unit_parameters(tp)))
                peaks = row["memory_startup_peak_bytes"]
                self.assertEqual(peaks["params"], 4 * local)
                self.assertEqual(peaks["grads"], 4 * local)
                self.assertEqual(peaks["optimizer"], 8 * local // d)
                self.assertEqual(row["megatron.param_allgather_elements"], local)

    def test_communicated_bytes_per_step(self):
        # Per micro-batch of b sequences of S tokens, width C, L blocks:
        # forward all-reduces the vocab-parallel embedding and two g's per
        # block (b S C each), and the loss's max, target logit and sum of
        # exponentials (b S each); backward all-reduces two f's per block
        # and the head's f (b S C each). fp32.
        b, S, C, L = 12, 64, 64, 2
        expected = 4 * ((4 * L + 2) * b * S * C + 3 * b * S)
        rows = self.run_tp(2, 2)
        self.assertEqual([r["host.tensor_parallel_bytes"] for r in rows], [expected, expected])
        # tp 2 x dp 2: each data rank's micro-batch is half the batch; the
        # data group's gradient all-reduce is the plugin's (comm_bytes).
        rows = self.run_tp(4, 2)
        half = 4 * ((4 * L + 2) * (b // 2) * S * C + 3 * (b // 2) * S)
        self.assertEqual(rows[0]["host.tensor_parallel_bytes"], half)
        self.assertEqual(rows[0]["comm_bytes"], 4 * local_parameters(2) + 8)  # gradients + the norm (f64)
        # Full recompute runs every block's forward again: two more g's each.
        rows = self.run_tp(2, 2, "--megatron.recompute_activations", "true", "--megatron.recompute_granularity", "full")
        self.assertEqual(rows[0]["host.tensor_parallel_bytes"], expected + 4 * 2 * L * b * S * C)
        # Selective recompute re-runs no block: the attention core is
        # recomputed inside the fused attention kernel's backward.
        rows = self.run_tp(2, 2, "--megatron.recompute_activations", "true")
        self.assertEqual(rows[0]["host.tensor_parallel_bytes"], expected)
        # Sequence parallel: each all-reduce becomes a reduce-scatter and an
        # all-gather of the same tensor (the same bus traffic as the one
        # all-reduce), in forward and backward alike: the embedding's and
        # each row-parallel output's reduce-scatter, each column-parallel
        # input's and the head's all-gather, each counted at the full b S C.
        rows = self.run_tp(2, 2, "--megatron.sequence_parallelism", "true")
        self.assertEqual(rows[0]["host.tensor_parallel_bytes"], 4 * (2 * (4 * L + 2) * b * S * C + 3 * b * S))


@unittest.skipUnless(MPIRUN, "mpirun not found")
class MegatronBadInput(TempDirMixin, unittest.TestCase):
    """One clear line on every rank and a non-zero exit."""

    def refused(self, n, *args, mentions):
        proc = mpirun(n, *COMMON, *MEGATRON, "--steps", 2, "--batch-size", 12, *args, check=False, timeout=120)
        self.assertNotEqual(proc.returncode, 0)
        lines = error_lines(proc.stderr)
        for rank in range(n):
            mine = [line for line in lines if f"[rank {rank}]" in line]
            self.assertTrue(mine, f"rank {rank} printed no error:\n{proc.stderr}")
            self.assertEqual(len(mine), 1, proc.stderr)
            for word in mentions:
                self.assertIn(word, mine[0], proc.stderr)

    def test_tp_not_dividing_the_world(self):
        self.refused(3, "--megatron.tp_degree", 2, mentions=["tp_degree 2", "world size 3"])

    def test_degrees_whose_product_leaves_int64(self):
        # Regression (issue 30): tp x pp wrapped. 2^32 x 2^32 is 0 mod 2^64:
        # `world % 0` killed every rank with SIGFPE; 7 x 7905747460161236407
        # is 1 mod 2^64: it "divided" the world and failed later, elsewhere.
        self.refused(1, "--megatron.tp_degree", 4294967296, "--megatron.pp_degree", 4294967296,
                     mentions=["--megatron.tp_degree", "maximum"])
        self.refused(1, "--megatron.tp_degree", 7, "--megatron.pp_degree", 7905747460161236407,
                     mentions=["--megatron.pp_degree", "maximum"])

    def test_tp_not_dividing_the_heads(self):
        self.refused(4, "--megatron.tp_degree", 4, "--n-head", 2, "--n-embd", 64, mentions=["4", "2 attention heads"])

    def test_constant_weight_decay_that_changes(self):
        self.refused(2, "--megatron.start_weight_decay", 0.0, "--megatron.end_weight_decay", 0.1,
                     mentions=["weight_decay_incr_style constant", "start_weight_decay"])

    def test_a_batch_the_data_group_does_not_split(self):
        # tp 2 on 4 ranks: 2 data ranks x 2 micro-steps do not split 6.
        proc = mpirun(4, *COMMON, *MEGATRON, "--megatron.tp_degree", 2, "--steps", 2, "--batch-size", 6,
                      "--grad-accum", 2, check=False, timeout=120)
        self.assertNotEqual(proc.returncode, 0)
        for rank in range(4):
            mine = [line for line in error_lines(proc.stderr) if f"[rank {rank}]" in line]
            self.assertEqual(len(mine), 1, proc.stderr)
            self.assertIn("--batch-size 6 does not split evenly into 2 rank(s) x 2 micro-step(s)", mine[0])

    def test_two_lr_horizons_for_one_setting(self):
        self.refused(2, "--megatron.lr_decay_iters", 4, "--megatron.lr_decay_samples", 48,
                     mentions=["lr_decay_iters", "lr_decay_samples"])
        self.refused(2, "--megatron.lr_warmup_iters", 8, "--megatron.lr_decay_iters", 4,
                     mentions=["warmup", "decay horizon"])

    def test_fields_other_settings_serve_name_them(self):
        self.refused(2, "--megatron.train_iters", 5, mentions=["train_iters", "--steps"])
        self.refused(2, "--megatron.train_samples", 48, mentions=["train_samples", "--steps"])

    def test_fields_of_models_the_host_lacks_name_the_model(self):
        self.refused(2, "--megatron.train_step_class", "T5TrainStep", mentions=["T5TrainStep", "T5 encoder-decoder"])
        self.refused(2, "--megatron.train_step_class", "BertTrainStep", mentions=["BertTrainStep", "BERT"])
        self.refused(2, "--megatron.encoder_seq_length", 128, mentions=["encoder_seq_length", "T5"])
        self.refused(2, "--megatron.pipeline_model_parallel_split_rank", 1,
                     mentions=["pipeline_model_parallel_split_rank", "T5"])

    def test_megatron_evaluation_fields_name_the_host_settings(self):
        self.refused(2, "--megatron.eval_iters", 5, mentions=["eval_iters", "--eval-steps"])
        self.refused(2, "--megatron.eval_interval", 5, mentions=["eval_interval", "--eval-every"])

    def test_sequence_parallelism_without_tp(self):
        self.refused(2, "--megatron.sequence_parallelism", "true", mentions=["sequence_parallelism", "tp_degree"])

    def test_sequence_parallelism_with_a_sequence_the_group_does_not_split(self):
        self.refused(4, "--megatron.tp_degree", 4, "--megatron.sequence_parallelism", "true", "--seq-len", 62,
                     mentions=["sequence parallelism", "seq_len 62"])


@unittest.skipUnless(MPIRUN, "mpirun not found")
class MegatronCheckpoints(TempDirMixin, unittest.TestCase):
    """A tensor-parallel checkpoint holds whole tensors (global shapes): the
    same layout resumes to the last bit, and merge-weights gives the model a
    single process trains. Cross-strategy rows: tests/python/test_cross_strategy.py."""

    TP2 = [*MEGATRON, "--megatron.tp_degree", 2]

    def test_same_layout_resume_is_bit_exact(self):
        for extra in ([], ["--megatron.sequence_parallelism", "true"], ["--megatron.use_distributed_optimizer", "true"]):
            with self.subTest(extra=extra):
                args = [*COMMON, *self.TP2, *extra, "--batch-size", 12, "--lr-decay-steps", 6, "--vocab-size", 255]
                tag = len(os.listdir(self.tmp))
                straight, split = self.path(f"straight{tag}"), self.path(f"split{tag}")
                mpirun(4, *args, "--steps", 6, "--save", straight, "--metrics-file", straight + ".jsonl")
                mpirun(4, *args, "--steps", 3, "--save", split, "--metrics-file", split + ".jsonl")
                mpirun(4, *args, "--steps", 6, "--save", split, "--resume", split, "--metrics-file", split + ".jsonl")
                a, b = read_metrics(straight + ".jsonl"), read_metrics(split + ".jsonl")
                self.assertEqual([r["step"] for r in b], list(range(1, 7)))
                self.assertEqual([r["loss"] for r in a], [r["loss"] for r in b])
                # The model (the host's) and the AdamW moments (the plugin's
                # state, one file per rank that holds a slice).
                names = assert_same_safetensors(self, os.path.join(straight, "step_6"), os.path.join(split, "step_6"))
                self.assertIn("plugin_state.safetensors", names)

    def test_merge_weights_gives_the_full_model(self):
        from safetensors.numpy import load_file
        import numpy as np
        args = [*COMMON, "--steps", 3, "--batch-size", 12, "--vocab-size", 255]
        run_host(*args, "--save", self.path("plain"))
        mpirun(4, *args, *self.TP2, "--save", self.path("tp"))
        for name in ("plain", "tp"):
            run_host("merge-weights", self.path(name), self.path(name + "_merged"))
        plain = load_file(os.path.join(self.path("plain_merged"), "model.safetensors"))
        tp = load_file(os.path.join(self.path("tp_merged"), "model.safetensors"))
        self.assertEqual(sorted(plain), sorted(tp))
        for name in plain:
            self.assertEqual(plain[name].shape, tp[name].shape, name)  # global shapes, wte 255 rows
            # Close, not equal: AdamW normalises each element's step, so where
            # a gradient is ~0 (the key bias's is exactly 0: softmax ignores a
            # per-query constant) rounding differences between layouts become
            # steps of up to ~2e-5 after 3 steps. A misplaced slice would be
            # off by the weights' own scale (~2e-2).
            np.testing.assert_allclose(tp[name], plain[name], rtol=1e-3, atol=1e-4, err_msg=name)


def write_megatron_dataset(prefix, documents, dtype="uint16"):
    """Megatron-LM's MMapIndexedDataset (indexed_dataset.py), written the way
    its writer does: PREFIX.bin the sequences' tokens back to back, PREFIX.idx
    the header, int32 lengths, int64 byte pointers and int64 document
    indices. One sequence per document here, as preprocess_data.py writes
    without sentence splitting."""
    import struct
    import numpy as np
    code = {"uint8": 1, "int32": 4, "uint16": 8}[dtype]
    arrays = [np.asarray(d, dtype=dtype) for d in documents]
    with open(prefix + ".bin", "wb") as f:
        for a in arrays:
            f.write(a.tobytes(order="C"))
    lengths = np.array([len(a) for a in arrays], dtype=np.int32)
    pointers = np.concatenate([[0], np.cumsum(lengths[:-1].astype(np.int64) * np.dtype(dtype).itemsize)]).astype(
        np.int64)
    doc_index = np.arange(len(arrays) + 1, dtype=np.int64)
    with open(prefix + ".idx", "wb") as f:
        f.write(b"MMIDIDX\x00\x00")
        f.write(struct.pack("<Q", 1))
        f.write(struct.pack("<B", code))
        f.write(struct.pack("<Q", len(lengths)))
        f.write(struct.pack("<Q", len(doc_index)))
        f.write(lengths.tobytes(order="C"))
        f.write(pointers.tobytes(order="C"))
        f.write(doc_index.tobytes(order="C"))
    return np.concatenate(arrays)


@unittest.skipUnless(MPIRUN, "mpirun not found")
class MegatronDataset(TempDirMixin, unittest.TestCase):
    """`--data megatron:PREFIX`: a corpus preprocessed for Megatron-LM trains
    here as the token stream of its sequences in index order."""

    def test_trains_on_the_token_stream_of_an_indexed_dataset(self):
        import numpy as np
        rng = np.random.default_rng(7)
        documents = [rng.integers(0, 256, size=n) for n in (300, 1000, 57, 2200, 900)]
        prefix = self.path("corpus_text_document")
        stream = write_megatron_dataset(prefix, documents)
        flat = self.path("stream.bin")
        stream.astype(np.uint16).tofile(flat)  # the same tokens as a headerless uint16 file
        args = [*COMMON, "--steps", 6, "--batch-size", 8]
        runs = {}
        for name, data, n, extra in (("megatron", f"megatron:{prefix}", 1, []),
                                     ("tokens", f"tokens:{flat}", 1, []),
                                     ("tp2", f"megatron:{prefix}", 2, [*MEGATRON, "--megatron.tp_degree", 2])):
            path = self.path(name + ".jsonl")
            if n == 1:
                run_host(*args, "--data", data, "--metrics-file", path)
            else:
                mpirun(n, *args, *extra, "--data", data, "--metrics-file", path)
            runs[name] = [r["loss"] for r in read_metrics(path)]
        self.assertEqual(runs["megatron"], runs["tokens"])
        for a, b in zip(runs["megatron"], runs["tp2"]):
            self.assertLess(abs(a - b) / a, 1e-5)
        self.assertLess(runs["megatron"][-1], runs["megatron"][0])

    def test_an_index_that_does_not_match_its_bin_is_one_line_on_every_rank(self):
        prefix = self.path("broken")
        write_megatron_dataset(prefix, [list(range(200)), list(range(100))])
        with open(prefix + ".bin", "r+b") as f:
            f.truncate(500)  # the .idx describes 600 bytes
        proc = mpirun(2, *COMMON, *MEGATRON, "--megatron.tp_degree", 2, "--steps", 2, "--batch-size", 4,
                      "--data", f"megatron:{prefix}", check=False, timeout=120)
        self.assertNotEqual(proc.returncode, 0)
        for rank in range(2):
            mine = [line for line in error_lines(proc.stderr) if f"[rank {rank}]" in line]
            self.assertEqual(len(mine), 1, proc.stderr)
            self.assertIn("does not match its .bin", mine[0])
