"""Checkpoints across strategies and world sizes: fsdp, deepspeed_zero,
megatron and fp8 store every tensor by name and global offset, so a
checkpoint resumes at another world size, under another strategy (fsdp, ZeRO
stages 1-3, megatron's tensor and pipeline parallelism, ddp) or in one process, continuing the uninterrupted curve within 1e-5 (fp8: its scales
travel too, compared one step from the same state); a same-strategy, same-world resume is bit-exact; merge-weights
assembles a sharded checkpoint. Every composed layout has a generated row
of its own in test_composed_layouts.py. (One copy of these rows: the
strategies' own suites, test_fsdp.py, test_deepspeed_zero.py,
test_megatron.py and test_moe.py, point here.)"""
import os
import unittest

from accel_testing import MPIRUN, TempDirMixin, assert_same_safetensors, mpirun, one_step_from, read_metrics, run_host

COMMON = ["--model", "gpt-tiny", "--lr", 3e-3, "--warmup-steps", 2, "--log-level", "warn", "--threads", 1]
FSDP = ["--plugin", "fsdp"]
WRAP = ["--fsdp.auto_wrap_policy", "transformer_based_wrap"]


@unittest.skipUnless(MPIRUN, "mpirun not found")
class CrossStrategyCheckpoints(TempDirMixin, unittest.TestCase):
    """Checkpoints are stored by global offset: they resume at another world
    size, another strategy (fsdp, deepspeed_zero, megatron, ddp), or in one
    process."""

    def resume(self, save_n, save_extra, load_n, load_extra, straight_extra=(), tolerance=1e-5, common=COMMON):
        straight, split = self.path("straight.jsonl"), self.path("split.jsonl")
        ckpt = self.path("ckpt")
        run_host(*common, "--steps", 8, "--batch-size", 12, "--metrics-file", straight, *straight_extra)
        save_args = [*common, "--steps", 4, "--lr-decay-steps", 8, "--batch-size", 12, "--save", ckpt,
                     "--metrics-file", split, *save_extra]
        resume_args = [*common, "--steps", 8, "--batch-size", 12, "--resume", ckpt, "--metrics-file", split,
                       *load_extra]
        for n, args in ((save_n, save_args), (load_n, resume_args)):
            if n == 1:
                run_host(*args)
            else:
                mpirun(n, *args)
        a, b = read_metrics(straight), read_metrics(split)
        self.assertEqual([r["step"] for r in b], list(range(1, 9)))
        for x, y in zip(a, b):
            self.assertLess(abs(x["loss"] - y["loss"]) / x["loss"], tolerance, (x, y))
        return a, b

    def bit_exact_resume(self, n, extra):
        # 6 steps straight vs 3 + resume 3 at the same world size: the same
        # losses to the last bit, and the same final checkpoint, file by file.
        args = [*COMMON, *FSDP, *WRAP, "--batch-size", 12, "--lr-decay-steps", 6, *extra]
        straight, split = self.path("straight"), self.path("split")
        mpirun(n, *args, "--steps", 6, "--save", straight, "--metrics-file", self.path("straight.jsonl"))
        mpirun(n, *args, "--steps", 3, "--save", split, "--metrics-file", self.path("split.jsonl"))
        mpirun(n, *args, "--steps", 6, "--save", split, "--resume", split, "--metrics-file", self.path("split.jsonl"))
        a, b = read_metrics(self.path("straight.jsonl")), read_metrics(self.path("split.jsonl"))
        self.assertEqual([r["loss"] for r in a], [r["loss"] for r in b])
        files = assert_same_safetensors(self, os.path.join(straight, "step_6"), os.path.join(split, "step_6"))
        self.assertIn("plugin_state.safetensors", files)
        return files

    def test_full_state_dict_resume_is_bit_exact(self):
        files = self.bit_exact_resume(2, ["--fsdp.state_dict_type", "FULL_STATE_DICT"])
        self.assertNotIn("plugin_state.rank1.safetensors", files)  # rank 0 writes the whole model

    def test_sharded_state_dict_resume_is_bit_exact(self):
        files = self.bit_exact_resume(3, ["--fsdp.state_dict_type", "SHARDED_STATE_DICT"])
        self.assertIn("plugin_state.rank2.safetensors", files)  # every rank writes its shard

    def test_local_state_dict_resume_is_bit_exact(self):
        self.bit_exact_resume(2, ["--fsdp.state_dict_type", "LOCAL_STATE_DICT", "--fsdp.sharding_strategy",
                                  "SHARD_GRAD_OP"])

    def test_sharded_state_dict_on_four_resumes_on_two(self):
        self.resume(4, [*FSDP, *WRAP, "--fsdp.state_dict_type", "SHARDED_STATE_DICT"], 2, [*FSDP])

    def test_full_state_dict_on_three_resumes_in_one_process_without_fsdp(self):
        self.resume(3, [*FSDP, *WRAP], 1, [])

    def test_merge_weights_of_a_sharded_checkpoint(self):
        # merge_fsdp_weights: the shards' rectangles (padded over 3 ranks)
        # assemble into the weights a single process trains.
        from safetensors.numpy import load_file
        args = [*COMMON, "--steps", 3, "--batch-size", 12]
        run_host(*args, "--save", self.path("plain"))
        mpirun(3, *args, *FSDP, *WRAP, "--fsdp.state_dict_type", "SHARDED_STATE_DICT", "--save", self.path("sharded"))
        for name in ("plain", "sharded"):
            run_host("merge-weights", self.path(name), self.path(name + "_merged"))
        plain = load_file(os.path.join(self.path("plain_merged"), "model.safetensors"))
        sharded = load_file(os.path.join(self.path("sharded_merged"), "model.safetensors"))
        self.assertEqual(sorted(plain), sorted(sharded))
        for name, tensor in plain.items():
            self.assertEqual(tensor.shape, sharded[name].shape, name)
            self.assertLess(abs(tensor - sharded[name]).max(), 1e-5, name)

    def test_plain_run_resumes_sharded_on_two(self):
        self.resume(1, [], 2, [*FSDP, *WRAP, "--fsdp.sharding_strategy", "SHARD_GRAD_OP"])

    # FP8 rows compare one step from the same state (accel_testing's
    # steps_from_the_same_state says why never free runs): the saver runs on
    # to step 5 from its own step 4, the loader resumes that checkpoint for
    # step 5 under its strategy and world size. Both runs of step 5 start
    # from the same weights, moments and fp8 histories, so they agree within
    # fp32's 1e-5, scales included, which only travelled histories give
    # (fresh ones start at 1, ~1e7 away).
    FP8 = ["--plugin", "fp8", "--fp8.amax_history_len", 4, "--fp8.amax_compute_algo", "max"]

    def step_five_both_ways(self, save_n, save_extra, load_n, load_extra):
        ckpt, saved = self.path("ckpt"), self.path("saver.jsonl")
        args = [*COMMON, "--lr-decay-steps", 8, "--batch-size", 12]
        save = [*args, "--steps", 5, "--save", ckpt, "--save-every", 4, "--metrics-file", saved, *save_extra]
        (run_host(*save) if save_n == 1 else mpirun(save_n, *save))
        loaded = one_step_from(load_n, [*args, *load_extra], os.path.join(ckpt, "step_4"), 4, self.path("loaded.jsonl"))
        return read_metrics(saved)[4], loaded

    def fp8_resume(self, save_n, save_extra, load_n, load_extra):
        x, y = self.step_five_both_ways(save_n, [*save_extra, *self.FP8], load_n, [*load_extra, *self.FP8])
        for key in ("loss", "grad_norm", "fp8.scale_grad", "fp8.scale_input", "fp8.scale_weight"):
            self.assertLess(abs(x[key] - y[key]) / x[key], 1e-5, (key, x[key], y[key]))
        self.assertGreater(y["fp8.scale_grad"], 100.0)  # travelled, not fresh

    def test_fp8_full_shard_on_four_resumes_under_ddp_on_two(self):
        self.fp8_resume(4, [*FSDP, *WRAP], 2, ["--plugin", "ddp"])

    def test_fp8_one_process_resumes_sharded_on_two(self):
        self.fp8_resume(1, [], 2, [*FSDP, *WRAP, "--fsdp.state_dict_type", "SHARDED_STATE_DICT"])

    # MS-AMP O2 (fp8 --fp8.backend msamp): the moments live as E4M3 / FP16
    # with per-tensor scales, in the host's AdamW and in the sharded one, and
    # are saved as their exact fp32 values, so they travel like fp32 ones.
    # Step 5 from the same state, as the fp8 rows: the loss is fp32's 1e-5.
    # The gradient norm is not: O2 reduces gradients in FP8 on several ranks
    # (one process reduces nothing), each element within half an E4M3 step
    # of the exact sum, 2^-4 of it, so the norm lies within 2^-4 too.
    MSAMP_O2 = ["--plugin", "fp8", "--fp8.backend", "msamp", "--fp8.opt_level", "O2"]

    def msamp_resume(self, save_n, save_extra, load_n, load_extra):
        x, y = self.step_five_both_ways(save_n, [*save_extra, *self.MSAMP_O2], load_n, [*load_extra, *self.MSAMP_O2])
        self.assertLess(abs(x["loss"] - y["loss"]) / x["loss"], 1e-5, (x, y))
        self.assertLess(abs(x["grad_norm"] - y["grad_norm"]) / x["grad_norm"], 2 ** -4, (x, y))

    def test_msamp_o2_fsdp_on_two_resumes_in_one_process(self):
        self.msamp_resume(2, [*FSDP, *WRAP], 1, [])

    def test_msamp_o2_one_process_resumes_under_zero2_on_two(self):
        self.msamp_resume(1, [], 2, ["--plugin", "deepspeed_zero", "--deepspeed_zero.zero_stage", 2])

    # deepspeed_zero's partitions are stored by global offset too: a ZeRO-3
    # checkpoint from 4 ranks continues under fsdp, ddp and one process, and
    # checkpoints of those continue under ZeRO stages 1, 2 and 3.
    ZERO3 = ["--plugin", "deepspeed_zero", "--deepspeed_zero.hf_ds_config",
             os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "data", "deepspeed",
                          "zero3_partition_everything.json")]

    def test_zero3_on_four_resumes_under_fsdp_on_two(self):
        self.resume(4, self.ZERO3, 2, [*FSDP, *WRAP])

    def test_zero3_on_four_resumes_under_ddp_on_three(self):
        self.resume(4, self.ZERO3, 3, ["--plugin", "ddp"])

    def test_zero3_on_four_resumes_in_one_process(self):
        self.resume(4, self.ZERO3, 1, [])

    def test_one_process_resumes_under_zero1_on_two(self):
        self.resume(1, [], 2, ["--plugin", "deepspeed_zero", "--deepspeed_zero.zero_stage", 1])

    def test_fsdp_on_two_resumes_under_zero2_on_three(self):
        self.resume(2, [*FSDP, *WRAP], 3, ["--plugin", "deepspeed_zero", "--deepspeed_zero.zero_stage", 2])

    def test_ddp_on_three_resumes_under_zero3_on_four(self):
        self.resume(3, ["--plugin", "ddp"], 4, self.ZERO3)

    # NVMe offload keeps the moments in a swap file; its checkpoints are the
    # same tensors by global offset, both ways.
    def nvme(self, stage_args):
        swap = self.path("swap")
        os.makedirs(swap, exist_ok=True)
        return [*stage_args, "--deepspeed_zero.offload_optimizer_device", "nvme",
                "--deepspeed_zero.offload_optimizer_nvme_path", swap]

    def test_zero3_nvme_on_two_resumes_under_fsdp_on_three(self):
        self.resume(2, self.nvme(self.ZERO3), 3, [*FSDP, *WRAP])

    def test_fsdp_on_two_resumes_under_zero2_nvme_on_three(self):
        self.resume(2, [*FSDP, *WRAP], 3,
                    self.nvme(["--plugin", "deepspeed_zero", "--deepspeed_zero.zero_stage", 2]))

    # ZeRO-Infinity: the master partitions are in the swap file too.
    def infinity(self):
        swap = self.path("swap")
        os.makedirs(swap, exist_ok=True)
        return [*self.nvme(self.ZERO3), "--deepspeed_zero.offload_param_device", "nvme",
                "--deepspeed_zero.offload_param_nvme_path", swap]

    def test_zero3_params_in_nvme_on_two_resumes_under_ddp_on_three(self):
        self.resume(2, self.infinity(), 3, ["--plugin", "ddp"])

    def test_fsdp_on_three_resumes_under_zero3_params_in_nvme_on_two(self):
        self.resume(3, [*FSDP, *WRAP], 2, self.infinity())

    # megatron stores its split tensors at their global offsets (the host
    # its parameters, the plugin its AdamW moments, slice by slice), so a
    # tensor-parallel checkpoint resumes anywhere, and back.
    MEGATRON_TP2 = ["--plugin", "megatron", "--megatron.tp_degree", 2]
    DISTRIBUTED_OPTIMIZER = ["--megatron.use_distributed_optimizer", "true"]

    def test_tp2_dp2_distributed_optimizer_resumes_under_zero3_on_three(self):
        self.resume(4, [*self.MEGATRON_TP2, *self.DISTRIBUTED_OPTIMIZER], 3, self.ZERO3)

    def test_tp2_dp2_resumes_as_tp1_dp4_distributed_optimizer(self):
        self.resume(4, self.MEGATRON_TP2, 4, ["--plugin", "megatron", *self.DISTRIBUTED_OPTIMIZER])

    def test_one_process_resumes_as_tp2_dp2_distributed_optimizer(self):
        self.resume(1, [], 4, [*self.MEGATRON_TP2, *self.DISTRIBUTED_OPTIMIZER])

    def test_tp2_dp2_resumes_in_one_process(self):
        self.resume(4, self.MEGATRON_TP2, 1, [])

    def test_tp2_dp2_sequence_parallel_resumes_under_fsdp_on_two(self):
        self.resume(4, [*self.MEGATRON_TP2, "--megatron.sequence_parallelism", "true"], 2, [*FSDP, *WRAP])

    def test_fsdp_on_two_resumes_as_tp2_dp2(self):
        self.resume(2, [*FSDP, *WRAP, "--fsdp.state_dict_type", "SHARDED_STATE_DICT"], 4, self.MEGATRON_TP2)

    def test_one_process_resumes_as_tp4(self):
        self.resume(1, [], 4, ["--plugin", "megatron", "--megatron.tp_degree", 4])

    def test_zero3_on_four_resumes_as_tp2(self):
        self.resume(4, self.ZERO3, 2, self.MEGATRON_TP2)

    # Context parallelism leaves no trace in a checkpoint: every tensor is
    # whole (or a tensor-parallel slice at its global offset) whatever the
    # context degree, so cp resumes without it and the reverse.
    def test_cp2_ring_resumes_in_one_process(self):
        self.resume(2, ["--plugin", "megatron", "--megatron.cp_degree", 2], 1, [])

    def test_cp2_ulysses_resumes_under_fsdp_on_two(self):
        self.resume(2, ["--plugin", "megatron", "--megatron.cp_degree", 2, "--megatron.cp_comm_type", "a2a"], 2,
                    [*FSDP, *WRAP])

    def test_one_process_resumes_at_cp4_a2a_p2p_with_tp(self):
        self.resume(1, [], 8, ["--plugin", "megatron", "--megatron.cp_degree", 4, "--megatron.cp_comm_type", "a2a+p2p",
                               "--megatron.tp_degree", 2])

    # megatron's pipeline: each stage saves its units (rank 0 writes the
    # model whole, the other stages' parameters sent to it; each stage's
    # ranks their AdamW moments), so a pp 2 x tp 2 checkpoint resumes in any
    # layout, and back.
    PP2_TP2 = ["--plugin", "megatron", "--megatron.pp_degree", 2, "--megatron.tp_degree", 2]

    def test_pp2_tp2_resumes_in_one_process(self):
        self.resume(4, self.PP2_TP2, 1, [])

    def test_one_process_resumes_as_pp2_tp2(self):
        self.resume(1, [], 4, self.PP2_TP2)

    def test_pp2_tp2_resumes_under_fsdp_on_three(self):
        self.resume(4, self.PP2_TP2, 3, [*FSDP, *WRAP])

    def test_fsdp_on_two_resumes_as_pp2_tp2(self):
        self.resume(2, [*FSDP, *WRAP, "--fsdp.state_dict_type", "SHARDED_STATE_DICT"], 4, self.PP2_TP2)

    def test_pp2_tp2_resumes_under_zero3_on_two(self):
        self.resume(4, self.PP2_TP2, 2, self.ZERO3)

    def test_zero3_on_four_resumes_as_pp2_tp2(self):
        self.resume(4, self.ZERO3, 4, self.PP2_TP2)

    def test_zero2_on_three_resumes_as_pp2_dp2_distributed_optimizer(self):
        self.resume(3, ["--plugin", "deepspeed_zero", "--deepspeed_zero.zero_stage", 2], 4,
                    ["--plugin", "megatron", "--megatron.pp_degree", 2, *self.DISTRIBUTED_OPTIMIZER])

    # A mixture of experts (moe-tiny, dropless): its stacked experts are
    # parameters like any other, stored whole by name, so they move between
    # sharded, pipelined, context-split and single layouts alike.
    MOE = ["--model", "moe-tiny", *COMMON[2:]]

    def test_moe_zero3_on_four_resumes_under_fsdp_on_two(self):
        self.resume(4, self.ZERO3, 2, [*FSDP, *WRAP], common=self.MOE)

    def test_moe_fsdp_sharded_on_two_resumes_in_one_process(self):
        self.resume(2, [*FSDP, *WRAP, "--fsdp.state_dict_type", "SHARDED_STATE_DICT"], 1, [], common=self.MOE)

    def test_moe_one_process_resumes_as_pp2_dp2(self):
        self.resume(1, [], 4, ["--plugin", "megatron", "--megatron.pp_degree", 2], common=self.MOE)

    def test_moe_cp2_resumes_under_zero2_on_three(self):
        self.resume(2, ["--plugin", "megatron", "--megatron.cp_degree", 2], 3,
                    ["--plugin", "deepspeed_zero", "--deepspeed_zero.zero_stage", 2], common=self.MOE)

    # Expert parallelism: each rank holds E / ep experts, saved by name as
    # slices at their global offsets (the host's parameters whole).
    def test_moe_ep2_dp2_resumes_in_one_process(self):
        self.resume(4, ["--plugin", "megatron", "--megatron.ep_degree", 2], 1, [], common=self.MOE)

    def test_moe_zero3_on_two_resumes_as_ep2(self):
        self.resume(2, self.ZERO3, 2, ["--plugin", "megatron", "--megatron.ep_degree", 2], common=self.MOE)

    def test_moe_zero3_ep2_dp2_resumes_as_megatron_ep4(self):
        self.resume(4, [*self.ZERO3, "--deepspeed_zero.ep_size", 2], 4,
                    ["--plugin", "megatron", "--megatron.ep_degree", 4], common=self.MOE)

    def test_moe_fsdp_ep2_on_four_resumes_as_megatron_ep2_on_two(self):
        self.resume(4, [*FSDP, *WRAP, "--fsdp.ep_size", 2], 2, ["--plugin", "megatron", "--megatron.ep_degree", 2],
                    common=self.MOE)

    def test_moe_ep2_distributed_optimizer_on_four_resumes_under_zero3_on_two(self):
        self.resume(4, ["--plugin", "megatron", "--megatron.ep_degree", 2, *self.DISTRIBUTED_OPTIMIZER], 2,
                    self.ZERO3, common=self.MOE)

    # The blocks holding experts are partitioned over the ranks holding the
    # same experts: a full state dict gathers them there and over the expert
    # group; ZeRO-3 offloads its partitions of them to host memory.
    def test_moe_fsdp_ep2_full_state_dict_on_four_resumes_under_zero3_ep2_offloaded(self):
        self.resume(4, [*FSDP, *WRAP, "--fsdp.ep_size", 2, "--fsdp.state_dict_type", "FULL_STATE_DICT"], 4,
                    ["--plugin", "deepspeed_zero", "--deepspeed_zero.zero_stage", 3, "--deepspeed_zero.ep_size", 2,
                     "--deepspeed_zero.offload_optimizer_device", "cpu"], common=self.MOE)

    def test_moe_ep4_resumes_under_fsdp_on_two(self):
        self.resume(4, ["--plugin", "megatron", "--megatron.ep_degree", 4], 2, [*FSDP, *WRAP], common=self.MOE)

    def test_hybrid_with_ignored_unit_resumes_as_full_shard(self):
        self.resume(4, [*FSDP, *WRAP, "--fsdp.sharding_strategy", "HYBRID_SHARD", "--fsdp.hybrid_shard_group_size",
                        2, "--fsdp.ignored_modules", r"block\.1", "--fsdp.state_dict_type", "LOCAL_STATE_DICT"],
                    3, [*FSDP, *WRAP])

if __name__ == "__main__":
    unittest.main()
