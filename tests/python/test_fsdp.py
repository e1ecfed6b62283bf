"""The fsdp plugin under mpirun: N ranks sharding parameters, gradients and
optimizer state give the per-step losses of one process with the same global
batch (fp32 within 1e-5 relative) for every sharding strategy, prefetch,
offload, activation checkpointing, ignored units, accumulation and world
sizes that pad the shards; the gather/release behaviour shows in its metrics;
bad checkpoints and bad options fail with one clear line. (Checkpoints that
reshard across world sizes and strategies: test_cross_strategy.py.)"""
import os
import unittest

from accel_testing import MPIRUN, TempDirMixin, error_lines, mpirun, read_metrics, run_host

COMMON = ["--model", "gpt-tiny", "--lr", 3e-3, "--warmup-steps", 2, "--log-level", "warn", "--threads", 1]
FSDP = ["--plugin", "fsdp"]
WRAP = ["--fsdp.auto_wrap_policy", "transformer_based_wrap"]




@unittest.skipUnless(MPIRUN, "mpirun not found")
class FsdpParity(TempDirMixin, unittest.TestCase):
    """Per-step losses of `mpirun -n N --plugin fsdp` against one process."""

    _references = {}  # (batch, steps, extra) -> rows of the single-process run

    def reference(self, batch, steps, extra=()):
        key = (batch, steps, tuple(map(str, extra)))
        if key not in self._references:
            path = self.path("reference.jsonl")
            if os.path.exists(path):
                os.remove(path)
            run_host(*COMMON, "--steps", steps, "--batch-size", batch, "--metrics-file", path, *extra)
            FsdpParity._references[key] = read_metrics(path)
        return self._references[key]

    def parity(self, n, *extra, batch=12, steps=10, tolerance=1e-5, reference_extra=()):
        multi = self.path(f"fsdp{n}.jsonl")
        if os.path.exists(multi):
            os.remove(multi)
        mpirun(n, *COMMON, *FSDP, "--steps", steps, "--batch-size", batch, "--metrics-file", multi, *extra)
        a, b = self.reference(batch, steps, reference_extra), read_metrics(multi)
        self.assertEqual(len(b), steps)
        for x, y in zip(a, b):
            self.assertLess(abs(x["loss"] - y["loss"]) / x["loss"], tolerance,
                            (n, extra, x["step"], x["loss"], y["loss"]))
        return b

    def test_full_shard_on_four_ranks(self):
        rows = self.parity(4)
        self.assertEqual(rows[0]["fsdp.sharding_size"], 4)
        self.assertEqual(rows[0]["fsdp.wrap_groups"], 1)  # no_wrap: the whole model

    def test_padded_shards_on_two_and_three_ranks(self):
        # gpt-tiny's units (20480, 49984, 128 elements) split evenly over 2
        # ranks, and over 3 only with padding.
        for n in (2, 3):
            with self.subTest(ranks=n):
                self.parity(n, *WRAP)
        # Shards computed from the seed directly (init_range) pad the same way.
        self.parity(3, *WRAP, "--fsdp.sync_module_states", "true", "--fsdp.cpu_ram_efficient_loading", "true")

    def test_every_sharding_strategy(self):
        for extra in (["--fsdp.sharding_strategy", "SHARD_GRAD_OP", *WRAP],
                      ["--fsdp.sharding_strategy", "NO_SHARD"],
                      ["--fsdp.sharding_strategy", "HYBRID_SHARD", "--fsdp.hybrid_shard_group_size", 2, *WRAP],
                      ["--fsdp.sharding_strategy", "HYBRID_SHARD_ZERO2", "--fsdp.hybrid_shard_group_size", 2],
                      ["--fsdp.fsdp_version", 2, "--fsdp.reshard_after_forward", "false", *WRAP]):
            with self.subTest(extra=extra):
                rows = self.parity(4, *extra)
                if "NO_SHARD" in extra:
                    self.assertEqual(rows[0]["fsdp.sharding_size"], 1)
                    self.assertEqual(rows[0]["fsdp.gathers"], 0)
                if "HYBRID_SHARD" in extra:
                    self.assertEqual(rows[0]["fsdp.sharding_size"], 2)

    def test_prefetch(self):
        rows = self.parity(4, *WRAP, "--fsdp.forward_prefetch", "true", "--fsdp.backward_prefetch", "BACKWARD_PRE",
                           "--fsdp.limit_all_gathers", "false")
        self.assertGreater(rows[-1]["fsdp.prefetches"], 0)
        self.parity(4, *WRAP, "--fsdp.backward_prefetch", "BACKWARD_POST")

    def test_cpu_offload_and_activation_checkpointing(self):
        self.parity(4, *WRAP, "--fsdp.cpu_offload", "true", "--fsdp.activation_checkpointing", "true")

    def test_ignored_units_accumulation_and_synced_init(self):
        self.parity(4, *WRAP, "--fsdp.ignored_modules", r"block\.0", "--grad-accum", 2,
                    "--fsdp.sync_module_states", "true", "--fsdp.cpu_ram_efficient_loading", "true",
                    batch=16, reference_extra=("--grad-accum", 2))

    def test_full_shard_on_one_rank_is_the_plain_run(self):
        path = self.path("one.jsonl")
        run_host(*COMMON, *FSDP, *WRAP, "--steps", 5, "--batch-size", 12, "--metrics-file", path)
        for x, y in zip(self.reference(12, 5), read_metrics(path)):
            self.assertLess(abs(x["loss"] - y["loss"]) / x["loss"], 1e-5, (x, y))

    def test_fp16_loss_scaling_matches_ddp(self):
        # The host reads overflow from fsdp's norm of the still-scaled shards
        # and hands AdamW 1/scale. A huge initial scale forces skipped steps
        # and back-offs, then growth: the same steps skip, the scale follows
        # the same path and the losses agree with ddp's at the same world
        # size (a rank's local mean sees larger per-token gradients than one
        # process with the whole batch, so its overflows are ddp's, not the
        # single process's).
        args = ["--steps", 16, "--batch-size", 12, "--mixed-precision", "fp16", "--grad_scaler.init_scale", 1e9,
                "--grad_scaler.growth_interval", 3]
        mpirun(3, *COMMON, *args, "--plugin", "ddp", "--metrics-file", self.path("ddp.jsonl"))
        mpirun(3, *COMMON, *args, *FSDP, *WRAP, "--metrics-file", self.path("fsdp.jsonl"))
        ddp, fsdp = read_metrics(self.path("ddp.jsonl")), read_metrics(self.path("fsdp.jsonl"))
        self.assertEqual([r.get("skipped", False) for r in fsdp], [r.get("skipped", False) for r in ddp])
        self.assertEqual([r["loss_scale"] for r in fsdp], [r["loss_scale"] for r in ddp])
        self.assertTrue(any(r.get("skipped") for r in fsdp) and not all(r.get("skipped") for r in fsdp))
        self.assertGreater(fsdp[-1]["loss_scale"], min(r["loss_scale"] for r in fsdp))  # grew again
        for x, y in zip(ddp, fsdp):
            self.assertLess(abs(x["loss"] - y["loss"]) / x["loss"], 1e-5, (x, y))
            self.assertLess(abs(x["grad_norm"] - y["grad_norm"]), 1e-3 * max(1.0, x["grad_norm"]), (x, y))

    def test_bf16_parameters_stay_close(self):
        # Gathered and computed in bf16 (fp32 master shards): close, not exact.
        self.parity(2, *WRAP, "--fsdp.param_dtype", "bf16", "--fsdp.reduce_dtype", "fp32", steps=10, tolerance=2e-2)
        # Beside the host's fp32 units (ignored ones): each unit's input is
        # cast to its own dtype on the way in.
        for ignored in ("block.0", "embedding"):
            with self.subTest(ignored=ignored):
                self.parity(2, *WRAP, "--fsdp.param_dtype", "bf16", "--fsdp.ignored_modules", ignored, steps=10,
                            tolerance=2e-2)


@unittest.skipUnless(MPIRUN, "mpirun not found")
class FsdpGathers(TempDirMixin, unittest.TestCase):
    """Peak number of wrap groups whose full parameters are alive at once."""

    def peak(self, *extra):
        path = self.path("gathers.jsonl")
        mpirun(2, *COMMON, *FSDP, *WRAP, "--steps", 2, "--batch-size", 8, "--metrics-file", path, *extra)
        return read_metrics(path)[-1]

    def test_full_shard_keeps_one_block_beside_the_tied_group(self):
        row = self.peak()
        self.assertEqual(row["fsdp.wrap_groups"], 3)  # [embedding head] [block.0] [block.1]
        self.assertEqual(row["fsdp.max_gathered_groups"], 2)
        # forward: [embedding head], block.0, block.1; backward regathers both blocks
        self.assertEqual(row["fsdp.gathers"], 5)

    def test_shard_grad_op_keeps_everything_from_forward_to_backward(self):
        row = self.peak("--fsdp.sharding_strategy", "SHARD_GRAD_OP")
        self.assertEqual(row["fsdp.max_gathered_groups"], 3)
        self.assertEqual(row["fsdp.gathers"], 3)

    def test_limit_all_gathers_caps_prefetch(self):
        prefetch = ["--fsdp.forward_prefetch", "true", "--fsdp.backward_prefetch", "BACKWARD_PRE"]
        unlimited = self.peak(*prefetch, "--fsdp.limit_all_gathers", "false")
        self.assertEqual(unlimited["fsdp.max_gathered_groups"], 3)
        self.assertGreater(unlimited["fsdp.prefetches"], 0)
        limited = self.peak(*prefetch)
        self.assertEqual(limited["fsdp.max_gathered_groups"], 2)
        self.assertGreater(limited["fsdp.prefetches"], 0)  # deferred to the previous block's release, not dropped
        post = self.peak("--fsdp.backward_prefetch", "BACKWARD_POST", "--fsdp.limit_all_gathers", "false")
        self.assertEqual(post["fsdp.prefetches"], 1)  # block.0 after block.1's backward; nothing after the root's
        for row in (unlimited, limited, post):
            self.assertEqual(row["fsdp.gathers"], 5)  # a prefetch replaces a gather, never adds one

    def test_activation_checkpointing_regathers_for_the_recompute(self):
        row = self.peak("--fsdp.activation_checkpointing", "true")
        self.assertEqual(row["fsdp.max_gathered_groups"], 2)
        self.assertEqual(row["fsdp.gathers"], 5)
        self.assertEqual(row["fsdp.recompute_gathers"], 2)  # both blocks, released after forward
        self.assertEqual(self.peak()["fsdp.recompute_gathers"], 0)
        kept = self.peak("--fsdp.activation_checkpointing", "true", "--fsdp.sharding_strategy", "SHARD_GRAD_OP")
        self.assertEqual(kept["fsdp.recompute_gathers"], 0)

    def test_no_rank_ever_holds_the_whole_model(self):
        # Each ddp rank holds the whole model. fsdp by default materialises
        # one unit at a time to cut its shard: the start-up peak is the shards
        # plus at most the largest unit (a block). With
        # cpu_ram_efficient_loading every rank computes only its shard's
        # slice of the seeded weights (model->init_range): the peak is the
        # shards alone, a quarter of the model on 4 ranks.
        args = [*COMMON, "--steps", 1, "--batch-size", 8, "--n-layer", 4]
        mpirun(4, *args, "--plugin", "ddp", "--metrics-file", self.path("ddp.jsonl"))
        mpirun(4, *args, *FSDP, *WRAP, "--metrics-file", self.path("unit.jsonl"))
        mpirun(4, *args, *FSDP, *WRAP, "--fsdp.sync_module_states", "true", "--fsdp.cpu_ram_efficient_loading",
               "true", "--metrics-file", self.path("shard.jsonl"))
        whole = read_metrics(self.path("ddp.jsonl"))[0]["memory_startup_peak_bytes"]["params"]
        by_unit = read_metrics(self.path("unit.jsonl"))[0]["memory_startup_peak_bytes"]
        by_shard = read_metrics(self.path("shard.jsonl"))[0]["memory_startup_peak_bytes"]
        block = 4 * 49984
        self.assertEqual(whole, 4 * (20480 + 4 * 49984 + 128))  # embedding, 4 blocks, ln_f
        self.assertEqual(by_shard["optimizer"], 2 * whole // 4)  # moments of a quarter of the model
        self.assertLessEqual(by_unit["params"], whole // 4 + block)
        self.assertGreater(by_unit["params"], whole // 4)
        self.assertEqual(by_shard["params"], whole // 4)

    def test_memory_matches_the_sharding_theory(self):
        # gpt-tiny on 2 ranks: per rank a shard of every unit, 10240 + 2 x
        # 24992 + 64 = 60288 fp32 elements; full parameters (and gradients)
        # of at most [embedding head] (20608) and one block (49984) at once.
        shard, alive = 4 * 60288, 4 * (20608 + 49984)
        peak = self.peak()["memory_peak_bytes"]
        self.assertEqual(peak["optimizer"], 2 * shard)
        self.assertEqual(peak["params"], shard + alive)
        self.assertEqual(peak["grads"], shard + alive)
        kept = self.peak("--fsdp.sharding_strategy", "SHARD_GRAD_OP")["memory_peak_bytes"]
        self.assertEqual(kept["params"], shard + 4 * 120576)  # every group kept from forward to backward


@unittest.skipUnless(MPIRUN, "mpirun not found")
class FsdpReleases(TempDirMixin, unittest.TestCase):
    """Gathered parameters are really freed when the plan says so: the host
    reports, after each unit's forward, the bytes of full-parameter storage
    of fsdp's units still allocated in the unit storage pool (counted where
    the bytes are handed out and given back: whatever still holds them,
    autograd's saved views included, keeps them counted)."""

    PAGE = os.sysconf("SC_PAGE_SIZE")

    def pages(self, numel):
        return -(-4 * numel // self.PAGE) * self.PAGE

    def alive_after_forward(self, *extra):
        path = self.path("alive.jsonl")
        mpirun(2, *COMMON, *FSDP, *WRAP, "--steps", 2, "--batch-size", 8, "--metrics-file", path, *extra)
        return read_metrics(path)[-1]["param_bytes_alive_after_forward"]

    def test_full_shard_frees_each_block_after_its_forward(self):
        # gpt-tiny: [embedding head] (20480 + 128 elements) is the root group,
        # kept from its forward to its backward; each block (49984) is freed
        # at the end of its own forward although the graph still views it.
        root = self.pages(20480) + self.pages(128)
        alive = self.alive_after_forward()
        self.assertEqual(alive, {"embedding": root, "block.0": root, "block.1": root, "head": root})

    def test_shard_grad_op_keeps_every_group_until_backward(self):
        root, block = self.pages(20480) + self.pages(128), self.pages(49984)
        alive = self.alive_after_forward("--fsdp.sharding_strategy", "SHARD_GRAD_OP")
        self.assertEqual(alive, {"embedding": root, "block.0": root + block, "block.1": root + 2 * block,
                                 "head": root + 2 * block})

    def test_activation_checkpointing_keeps_only_the_block_being_recomputed(self):
        # The largest figure per block is its recompute in backward, which
        # keeps that block (its backward follows at once) and nothing else:
        # the other block's gather from forward or backward is gone.
        root, block = self.pages(20480) + self.pages(128), self.pages(49984)
        alive = self.alive_after_forward("--fsdp.activation_checkpointing", "true")
        self.assertEqual(alive, {"embedding": root, "block.0": root + block, "block.1": root + block, "head": root})

    def test_per_unit_samples_are_taken_on_logged_steps_only(self):
        # Steps 1, 3 (--log-every 3) and 4 (the last) carry the per-unit
        # samples; step 2 only the end-of-step ledger, so nothing was sampled
        # during it (each sample reads /proc and the allocator's statistics).
        path = self.path("interval.jsonl")
        mpirun(2, *COMMON, *FSDP, *WRAP, "--steps", 4, "--batch-size", 8, "--log-every", 3,
               "--metrics-file", path)
        rows = read_metrics(path)
        per_unit = [r["step"] for r in rows if "param_bytes_alive_after_forward" in r]
        peaks = [r["step"] for r in rows if "memory_ledger_peak" in r]
        self.assertEqual(per_unit, [1, 3, 4])
        self.assertEqual(peaks, [1, 3, 4])
        self.assertEqual([r["step"] for r in rows if "memory_ledger" in r], [1, 2, 3, 4])

    def test_first_reduce_scatter_writes_into_the_zeroed_shard(self):
        # gpt-tiny's units split evenly over 2 ranks in fp32, so no staging is
        # needed: the step's reduce_scatters write straight into the zeroed
        # gradient shards and no communication buffer is ever allocated (on
        # main, an output chunk per shape stayed idle through every step).
        # Reduced in bf16, the chunk is not the fp32 shard: it goes through
        # a chunk buffer (and a cast input), as before.
        path = self.path("chunks.jsonl")
        mpirun(2, *COMMON, *FSDP, *WRAP, "--steps", 2, "--batch-size", 8, "--metrics-file", path)
        self.assertEqual([r["fsdp.comm_buffers_allocated"] for r in read_metrics(path)], [0, 0])
        cast = self.path("cast.jsonl")
        mpirun(2, *COMMON, *FSDP, *WRAP, "--steps", 2, "--batch-size", 8, "--fsdp.reduce_dtype", "bf16",
               "--metrics-file", cast)
        self.assertGreater(read_metrics(cast)[0]["fsdp.comm_buffers_allocated"], 0)

    def test_no_shard_gathers_nothing(self):
        path = self.path("alive.jsonl")
        mpirun(2, *COMMON, *FSDP, "--fsdp.sharding_strategy", "NO_SHARD", "--steps", 1, "--batch-size", 8,
               "--metrics-file", path)
        self.assertNotIn("param_bytes_alive_after_forward", read_metrics(path)[-1])


@unittest.skipUnless(MPIRUN, "mpirun not found")
class MemoryLedger(TempDirMixin, unittest.TestCase):
    """The metrics' memory ledger adds up to the process's resident memory:
    on a run where activations, allocator caches and the runtime are a large
    part of it (gpt-small width and vocabulary, 1 block, 2 ranks), not only
    the model states the accounted categories know of."""

    @unittest.skipIf(os.environ.get("ACCEL_SANITIZED") == "1",
                     "AddressSanitizer's shadow memory and quarantine are resident memory no ledger accounts for")
    def test_ledger_total_is_within_ten_percent_of_resident_memory(self):
        path = self.path("ledger.jsonl")
        mpirun(2, "--model", "gpt-small", "--n-layer", 1, "--seq-len", 128, "--batch-size", 4, "--steps", 3,
               "--threads", 1, "--log-level", "warn", *FSDP, *WRAP, "--metrics-file", path)
        rows = read_metrics(path)
        self.assertEqual([r["step"] for r in rows if "memory_ledger_peak" in r], [1, 3])  # the logged steps
        for row in rows:
            now, peak = row["memory_ledger"], row.get("memory_ledger_peak")
            parts = ("model_states", "comm_buffers", "activations", "allocator_caches", "runtime")
            self.assertEqual(now["total"], sum(now[p] for p in parts))
            self.assertGreater(now["rss"], 500 << 20)
            self.assertLess(abs(now["total"] - now["rss"]) / now["rss"], 0.10, (row["step"], now))
            # the ledger of old (model states alone) would be far off: more
            # than the 10% the whole ledger keeps (35% here once LibTorch's
            # CUDA library stopped loading on CPU runs, 45% before)
            self.assertGreater(abs(now["rss"] - now["model_states"]) / now["rss"], 0.25, (row["step"], now))
            if peak is None:
                continue
            # the step's sample of highest resident memory, and how near the
            # kernel's own peak it came
            self.assertLess(abs(peak["total"] - peak["rss"]) / peak["rss"], 0.10, (row["step"], peak))
            self.assertGreater(peak["rss"], 0.8 * peak["peak_rss"])
            self.assertLessEqual(peak["rss"], peak["peak_rss"])

    def test_the_rings_scratch_is_a_communication_buffer_of_a_few_segments(self):
        """ddp's gradient all-reduces run on the MPI ring, one per unit in
        flight. Their scratch is the ledger's comm_buffers (ddp accounts no
        buffer of its own), and it is the rings' receive windows (4 segments
        of 1 MiB; at most 4 kept idle), not a chunk per ring: gpt-small's
        embedding alone is a 77 MiB chunk on 2 ranks."""
        path = self.path("ddp.jsonl")
        mpirun(2, "--model", "gpt-small", "--n-layer", 1, "--seq-len", 64, "--batch-size", 2, "--steps", 2,
               "--threads", 1, "--log-level", "warn", "--plugin", "ddp", "--metrics-file", path)
        for row in read_metrics(path):
            for ledger in (row["memory_ledger"], row.get("memory_ledger_peak")):
                if ledger is None:
                    continue
                self.assertGreater(ledger["comm_buffers"], 0, (row["step"], ledger))
                self.assertLessEqual(ledger["comm_buffers"], 16 << 20, (row["step"], ledger))


@unittest.skipUnless(MPIRUN, "mpirun not found")
class FsdpBadCheckpoints(TempDirMixin, unittest.TestCase):
    """A checkpoint that cannot resume: every rank stops with one clear line."""

    def saved(self):
        ckpt = self.path("ckpt")
        mpirun(2, *COMMON, *FSDP, *WRAP, "--steps", 2, "--batch-size", 8, "--save", ckpt,
               "--fsdp.state_dict_type", "SHARDED_STATE_DICT")
        return ckpt

    def refused_on_every_rank(self, ckpt, *extra, mentions):
        proc = mpirun(2, *COMMON, *FSDP, *WRAP, "--steps", 4, "--batch-size", 8, "--resume", ckpt, *extra,
                      check=False, timeout=120)
        self.assertNotEqual(proc.returncode, 0)
        lines = error_lines(proc.stderr)
        for rank in (0, 1):
            mine = [line for line in lines if f"[rank {rank}]" in line]
            self.assertTrue(mine, f"rank {rank} printed no error:\n{proc.stderr}")
            for word in mentions:
                self.assertIn(word, mine[0], proc.stderr)

    def test_checkpoint_of_another_model_shape(self):
        self.refused_on_every_rank(self.saved(), "--n-layer", 3, mentions=["n_layer=2", "n_layer=3"])

    def test_missing_shard_file(self):
        ckpt = self.saved()
        os.remove(os.path.join(ckpt, "step_2", "plugin_state.rank1.safetensors"))
        self.refused_on_every_rank(os.path.join(ckpt, "step_2"), mentions=["plugin_state.rank1.safetensors"])


@unittest.skipUnless(MPIRUN, "mpirun not found")
class FsdpOptions(unittest.TestCase):
    """A bad option or combination: non-zero exit, one line saying why."""

    def refused(self, *args, mentions, ranks=1):
        cmd = [*COMMON, *FSDP, "--steps", 1, "--batch-size", 8, *args]
        proc = mpirun(ranks, *cmd, check=False, timeout=120) if ranks > 1 else run_host(*cmd, check=False, timeout=120)
        self.assertNotEqual(proc.returncode, 0)
        lines = error_lines(proc.stderr)
        self.assertTrue(lines, proc.stderr)
        for word in mentions:
            self.assertIn(word, lines[0], proc.stderr)

    def test_unknown_sharding_strategy(self):
        self.refused("--fsdp.sharding_strategy", "SHARD_EVERYTHING",
                     mentions=["--fsdp.sharding_strategy", "SHARD_EVERYTHING", "FULL_SHARD"])

    def test_ignored_modules_that_do_not_compile(self):
        self.refused("--fsdp.ignored_modules", "block.(",
                     mentions=["ignored_modules", "not a valid regular expression"])

    def test_contradicting_strategy_and_reshard_after_forward(self):
        self.refused("--fsdp.sharding_strategy", "SHARD_GRAD_OP", "--fsdp.reshard_after_forward", "true",
                     mentions=["SHARD_GRAD_OP", "reshard_after_forward"])

    def test_fsdp2_reads_reshard_after_forward_as_bool(self):
        self.refused("--fsdp.fsdp_version", 2, "--fsdp.reshard_after_forward", "FULL_SHARD",
                     mentions=["fsdp_version 2", "true or false"])

    def test_hybrid_group_that_does_not_divide_the_world(self):
        self.refused("--fsdp.sharding_strategy", "HYBRID_SHARD", "--fsdp.hybrid_shard_group_size", 3,
                     mentions=["hybrid_shard_group_size 3 does not divide the world size 2"], ranks=2)

    def test_ram_efficient_loading_needs_synced_states(self):
        self.refused("--fsdp.cpu_ram_efficient_loading", "true", mentions=["requires sync_module_states"])
        # A combination refused by create (ACCEL_ERROR_INVALID_ARGUMENT) is a
        # usage error, like a value the schema refuses: exit 2.
        proc = run_host(*COMMON, *FSDP, "--steps", 1, "--batch-size", 8, "--fsdp.cpu_ram_efficient_loading", "true",
                        check=False, timeout=120)
        self.assertEqual(proc.returncode, 2, proc.stderr)

    def test_shard_options_under_no_shard(self):
        self.refused("--fsdp.sharding_strategy", "NO_SHARD", "--fsdp.param_dtype", "bf16",
                     mentions=["NO_SHARD", "param_dtype", "no effect"])

    def test_wrap_name_that_matches_no_unit(self):
        self.refused(*WRAP, "--fsdp.transformer_cls_names_to_wrap", "GPT2Block", mentions=["GPT2Block", "block.0"])

    def test_conflicts_with_ddp(self):
        self.refused("--plugin", "ddp", mentions=["ddp"])

    def test_accepted_options_run(self):
        run_host(*COMMON, *FSDP, "--steps", 1, "--batch-size", 8, "--fsdp.use_orig_params", "true",
                 "--fsdp.param_init_fn", "to_empty", "--fsdp.state_dict_config", "FullStateDictConfig",
                 "--fsdp.optim_state_dict_config", "FullOptimStateDictConfig", "--fsdp.buffer_dtype", "bf16",
                 "--fsdp.auto_wrap_policy", "size_based_wrap", "--fsdp.min_num_params", 30000)


if __name__ == "__main__":
    unittest.main()
