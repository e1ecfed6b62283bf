"""How jobs start and stop (issue 33). Preemption: SIGTERM or SIGUSR1 makes
every rank finish the step in hand after the same step, write a complete
checkpoint under --save and exit 75; the same command line with `--resume
auto` then goes on from it, bit-exact with a run that was never stopped.
Preflight: a start-up that cannot work is one line before any rank trains."""
import os
import signal
import socket
import subprocess
import time
import unittest

from accel_testing import ACCEL_HOST, MPI_ENV, MPIRUN, TempDirMixin, complete_lines, error_lines, read_metrics, run_host

STOPPED = 75  # train/stop_request.h: kExitStoppedToResume
# --lr-decay-steps fixes the schedule's horizon, so a step's loss does not
# depend on --steps and legs of different lengths follow one curve.
COMMON = ["--model", "gpt-tiny", "--batch-size", 8, "--lr", 3e-3, "--warmup-steps", 3, "--threads", 1,
          "--lr-decay-steps", 400, "--log-level", "info"]
LONG = 400  # far more steps than pass before the signal lands


def checkpoints(root):
    return sorted(int(n[5:]) for n in os.listdir(root) if n.startswith("step_") and "." not in n)


class StopOnSignal(TempDirMixin, unittest.TestCase):
    def signal_after(self, argv, metrics, steps, deliver, env=None):
        """Starts argv, waits for `steps` metrics lines, calls deliver(proc),
        and returns (returncode, stderr)."""
        proc = subprocess.Popen([str(a) for a in argv], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                                env=env)
        deadline = time.monotonic() + 120
        while complete_lines(metrics) < steps and proc.poll() is None and time.monotonic() < deadline:
            time.sleep(0.05)
        self.assertIsNone(proc.poll(), "the run ended before the signal")
        deliver(proc)
        _, err = proc.communicate(timeout=120)
        return proc.returncode, err

    def test_sigterm_saves_and_resume_auto_goes_on_bit_exact(self):
        save, metrics = self.path("save"), self.path("m.jsonl")
        # The first leg is a requeued job's first run: --resume auto with
        # nothing under --save starts afresh.
        code, err = self.signal_after([ACCEL_HOST, *COMMON, "--steps", LONG, "--save", save, "--resume", "auto",
                                       "--metrics-file", metrics], metrics, 3,
                                      lambda proc: proc.send_signal(signal.SIGTERM))
        self.assertIn("--resume auto: no checkpoint under", err)
        self.assertEqual(code, STOPPED, err)
        [stopped] = checkpoints(save)
        self.assertGreaterEqual(stopped, 3)
        self.assertLess(stopped, LONG)
        self.assertIn(f"step {stopped}: stopped on SIGTERM; the checkpoint is written", err)
        self.assertEqual(complete_lines(metrics), stopped)

        end = stopped + 2
        run_host(*COMMON, "--steps", end, "--save", save, "--resume", "auto", "--metrics-file", metrics)
        run_host(*COMMON, "--steps", end, "--metrics-file", self.path("straight.jsonl"))
        resumed, straight = read_metrics(metrics), read_metrics(self.path("straight.jsonl"))
        self.assertEqual([m["step"] for m in resumed], list(range(1, end + 1)))
        self.assertEqual([m["loss"] for m in resumed], [m["loss"] for m in straight])

    def test_without_save_it_stops_and_says_nothing_can_resume(self):
        metrics = self.path("m.jsonl")
        code, err = self.signal_after([ACCEL_HOST, *COMMON, "--steps", LONG, "--metrics-file", metrics], metrics, 2,
                                      lambda proc: proc.send_signal(signal.SIGUSR1))
        self.assertEqual(code, STOPPED, err)
        self.assertIn("stopped on SIGUSR1; without --save there is nothing to resume from", err)

    def test_resume_auto_needs_save(self):
        proc = run_host(*COMMON, "--steps", 1, "--resume", "auto", check=False)
        self.assertEqual(proc.returncode, 2, proc.stderr)
        [line] = error_lines(proc.stderr)
        self.assertIn("--resume auto needs --save DIR (where it looks)", line)


@unittest.skipUnless(MPIRUN, "mpirun not found")
class StopOnSignalAcrossRanks(TempDirMixin, unittest.TestCase):
    """Every rank stops after the same step, whichever rank was signalled."""

    def run_ranks(self, deliver):
        save, metrics = self.path("save"), self.path("m.jsonl")
        host = " ".join(f"'{a}'" for a in [ACCEL_HOST, *COMMON, "--steps", LONG, "--save", save,
                                             "--metrics-file", metrics])
        # Each rank records its pid, so one rank alone can be signalled.
        rank_cmd = f"echo $$ > {self.tmp}/pid.$OMPI_COMM_WORLD_RANK; exec {host}"
        proc = subprocess.Popen([MPIRUN, "-n", "2", "sh", "-c", rank_cmd], stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE, text=True, env=MPI_ENV)
        deadline = time.monotonic() + 120
        while complete_lines(metrics) < 2 and proc.poll() is None and time.monotonic() < deadline:
            time.sleep(0.05)
        self.assertIsNone(proc.poll(), "the run ended before the signal")
        deliver(proc)
        _, err = proc.communicate(timeout=120)
        self.assertEqual(proc.returncode, STOPPED, err)
        [stopped] = checkpoints(save)
        self.assertEqual(complete_lines(metrics), stopped)
        self.assertTrue(os.path.exists(os.path.join(save, f"step_{stopped}", "manifest.json")))
        self.assertEqual(error_lines(err), [], err)
        return err

    def test_sigusr1_to_mpirun_reaches_every_rank(self):
        err = self.run_ranks(lambda proc: proc.send_signal(signal.SIGUSR1))
        self.assertIn("stopped on SIGUSR1; the checkpoint is written", err)

    def test_sigterm_to_rank_1_alone_stops_rank_0_too(self):
        def signal_rank_1(_):
            with open(self.path("pid.1")) as f:
                os.kill(int(f.read()), signal.SIGTERM)
        err = self.run_ranks(signal_rank_1)
        # Rank 0 reports, and it was not the one signalled.
        self.assertIn("stopped because another rank was asked to stop; the checkpoint is written", err)


TEMPLATES = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "data", "accelerate",
                         "config_yaml_templates")
TINY = ["--model", "gpt-tiny", "--batch-size", 8, "--lr", 3e-3, "--warmup-steps", 2, "--threads", 1,
        "--log-level", "warn"]


def launch(*args, cwd=None, check=True):
    """accel-host launch ARGS; returns the CompletedProcess."""
    proc = subprocess.run([ACCEL_HOST, "launch", *map(str, args)], capture_output=True, text=True, env=MPI_ENV,
                          cwd=cwd, timeout=300)
    if check and proc.returncode != 0:
        raise AssertionError(f"launch {args} failed ({proc.returncode}):\n{proc.stdout}\n{proc.stderr}")
    return proc


def command_line(proc):
    """The command launch printed (its first line: 'accel-host launch: ...')."""
    [line] = [l for l in proc.stdout.splitlines() if l.startswith("accel-host launch: ")]
    return line[len("accel-host launch: "):]


@unittest.skipUnless(MPIRUN, "mpirun not found")
class AccelerateLaunch(TempDirMixin, unittest.TestCase):
    """Accelerate's published YAML templates, unchanged, through `accel-host
    launch --config_file` and `accel-host --config`: the job equals the
    one the plugin flags give."""

    def test_fsdp_template_launches_and_configures_as_its_flags(self):
        yaml = os.path.join(TEMPLATES, "fsdp.yaml")
        proc = launch("--config_file", yaml, "--", *TINY, "--steps", 3, "--metrics-file", self.path("launch.jsonl"))
        command = command_line(proc)
        self.assertTrue(command.startswith("mpirun -n 2 --bind-to none "), command)
        for flag in ("--plugin fsdp", "--fsdp.auto_wrap_policy transformer_based_wrap",
                     "--fsdp.sharding_strategy FULL_SHARD", "--fsdp.backward_prefetch BACKWARD_PRE",
                     "--fsdp.state_dict_type SHARDED_STATE_DICT", "--mixed-precision bf16"):
            self.assertIn(flag, command)
        # The same YAML as accel-host's own --config, and the flags by hand.
        subprocess.run([MPIRUN, "-n", "2", ACCEL_HOST, "--config", yaml, *map(str, TINY), "--steps", "3",
                        "--metrics-file", self.path("config.jsonl")], check=True, env=MPI_ENV, capture_output=True)
        subprocess.run([MPIRUN, "-n", "2", ACCEL_HOST, "--plugin", "fsdp", "--fsdp.auto_wrap_policy",
                        "transformer_based_wrap", "--fsdp.backward_prefetch", "BACKWARD_PRE",
                        "--fsdp.state_dict_type", "SHARDED_STATE_DICT", "--fsdp.sync_module_states", "true",
                        "--fsdp.cpu_ram_efficient_loading", "true", "--mixed-precision", "bf16", *map(str, TINY),
                        "--steps", "3", "--metrics-file", self.path("flags.jsonl")],
                       check=True, env=MPI_ENV, capture_output=True)
        runs = [read_metrics(self.path(n)) for n in ("launch.jsonl", "config.jsonl", "flags.jsonl")]
        self.assertEqual(len(runs[0]), 3)
        self.assertEqual(runs[0][0]["fsdp.sharding_size"], 2)
        for other in runs[1:]:
            self.assertEqual([r["loss"] for r in runs[0]], [r["loss"] for r in other])

    def test_deepspeed_template_and_its_json_run_unchanged(self):
        # The YAML names its JSON relative to the working directory, as in
        # accelerate; the JSON's fp16 block asks for fp16 and its scaler.
        proc = launch("--config_file", "deepspeed.yaml", "--", *TINY, "--steps", 2, "--mixed-precision", "fp16",
                      "--grad_scaler.growth_interval", 1000, "--grad_scaler.hysteresis", 2,
                      "--grad_scaler.min_scale", 1, "--metrics-file", self.path("m.jsonl"), cwd=TEMPLATES)
        self.assertIn("--deepspeed_zero.hf_ds_config ../deepspeed_config_templates/zero_stage1_config.json",
                      command_line(proc))
        rows = read_metrics(self.path("m.jsonl"))
        self.assertEqual(rows[0]["deepspeed_zero.zero_stage"], 1)

    def test_megatron_config_as_accelerate_config_writes_it(self):
        yaml = self.path("megatron.yaml")
        with open(yaml, "w") as f:
            f.write("compute_environment: LOCAL_MACHINE\ndistributed_type: MEGATRON_LM\nmachine_rank: 0\n"
                    "megatron_lm_config:\n  megatron_lm_gradient_clipping: 1.0\n  megatron_lm_pp_degree: 1\n"
                    "  megatron_lm_recompute_activations: true\n  megatron_lm_sequence_parallelism: true\n"
                    "  megatron_lm_tp_degree: 2\n  megatron_lm_use_distributed_optimizer: false\n"
                    "mixed_precision: 'no'\nnum_machines: 1\nnum_processes: 2\nrdzv_backend: static\n"
                    "same_network: true\nuse_cpu: true\n")
        proc = launch("--config_file", yaml, "--", *TINY, "--steps", 2, "--metrics-file", self.path("m.jsonl"))
        self.assertIn("--megatron.tp_degree 2", command_line(proc))
        self.assertEqual(len(read_metrics(self.path("m.jsonl"))), 2)

    def test_fp8_template_is_one_process_with_the_fp8_plugin(self):
        proc = launch("--config_file", os.path.join(TEMPLATES, "fp8.yaml"), "--dry_run", "--", "--steps", 1)
        command = command_line(proc)
        self.assertTrue(command.startswith("mpirun -n 1 "), command)
        self.assertIn("--plugin fp8 --fp8.amax_history_len 1024 --fp8.backend te --fp8.fp8_format E4M3", command)

    def test_training_options_win_over_the_file(self):
        proc = launch("--config_file", os.path.join(TEMPLATES, "fsdp.yaml"), "--num_processes", 4,
                      "--mixed_precision", "fp16", "--dry_run", "--", "--plugin", "fsdp",
                      "--fsdp.sharding_strategy", "SHARD_GRAD_OP")
        command = command_line(proc)
        self.assertTrue(command.startswith("mpirun -n 4 "), command)
        self.assertEqual(command.count("--plugin fsdp"), 1, command)
        self.assertEqual(command.count("--fsdp.sharding_strategy"), 1, command)
        self.assertTrue(command.endswith("--plugin fsdp --fsdp.sharding_strategy SHARD_GRAD_OP"), command)
        self.assertIn("--mixed-precision fp16", command)
        self.assertNotIn("bf16", command)

    def test_what_cannot_start_is_one_line_before_any_rank(self):
        multi_node = os.path.join(TEMPLATES, "multi_node.yaml")
        hosts = self.path("hosts")
        with open(hosts, "w") as f:
            f.write("node0 slots=2\nnode1 slots=2  # the second machine\n")
        env = {k: v for k, v in MPI_ENV.items() if k != "OMPI_MCA_rmaps_base_oversubscribe"}
        cases = [
            ((multi_node,), {}, 2, "num_machines 2: name the machines in a hostfile"),
            ((multi_node, "--hostfile", hosts), env, 2, f"--hostfile {hosts} has 4 slot(s) for 8 ranks"),
            ((multi_node, "--machine_rank", 1), {}, 0, "machine_rank 1: mpirun on machine 0 starts the ranks"),
        ]
        for args, environment, code, message in cases:
            with self.subTest(args=args):
                proc = subprocess.run([ACCEL_HOST, "launch", "--config_file", *map(str, args), "--dry_run"],
                                      capture_output=True, text=True, env=environment or MPI_ENV, timeout=60)
                self.assertEqual(proc.returncode, code, proc.stderr)
                self.assertIn(message, proc.stderr)
                self.assertLessEqual(len(error_lines(proc.stderr)), 1, proc.stderr)
                self.assertNotIn("mpirun", proc.stdout)  # nothing was started
        # The YAML as --config of a job whose rank count is another.
        proc = run_host("--config", os.path.join(TEMPLATES, "fsdp.yaml"), *TINY, "--steps", 1, check=False)
        self.assertEqual(proc.returncode, 2, proc.stderr)
        self.assertIn("fsdp.yaml: num_processes 2, but this job has 1 rank(s)", proc.stderr)


def write(path, text):
    with open(path, "w") as f:
        f.write(text)
    return path


@unittest.skipUnless(MPIRUN, "mpirun not found")
class AccelerateDropIn(TempDirMixin, unittest.TestCase):
    """issue 50, items 5-13: accelerate's files and launch flags, tried as a
    user would, run with accelerate's meaning or are refused in one line."""

    def test_a_precision_flag_replaces_the_files_fp8_whole(self):
        # Item 5: the fp8 plugin and its options went with the file's precision.
        for precision in ("no", "bf16", "fp16"):
            with self.subTest(precision=precision):
                proc = launch("--config_file", os.path.join(TEMPLATES, "fp8.yaml"), "--mixed_precision", precision,
                              "--dry_run", "--", "--steps", 1)
                command = command_line(proc)
                self.assertNotIn("fp8", command)
                self.assertIn(f"--mixed-precision {precision}", command)

    def test_use_cpu_over_a_file_that_says_use_cpu_runs(self):
        # Item 6: one --device cpu, and the job runs.
        yaml = write(self.path("cpu.yaml"), "distributed_type: 'NO'\nuse_cpu: true\nnum_processes: 1\n")
        proc = launch("--config_file", yaml, "--use_cpu", "--", *TINY, "--steps", 1)
        self.assertEqual(command_line(proc).count("--device cpu"), 1)

    def test_the_training_accumulation_replaces_the_files_and_micro_batches_alone_run(self):
        # Item 7: --grad-accum after -- replaces the file's accumulation, the
        # plugin's copy included; megatron_lm_num_micro_batches alone runs.
        ds = write(self.path("ds.yaml"), "distributed_type: DEEPSPEED\nnum_processes: 1\ndeepspeed_config:\n"
                                         "  gradient_accumulation_steps: 4\n  zero_stage: 1\n")
        proc = launch("--config_file", ds, "--", *TINY, "--steps", 1, "--grad-accum", 2,
                      "--metrics-file", self.path("ds.jsonl"))
        self.assertNotIn("gradient_accumulation_steps", command_line(proc))
        self.assertEqual(read_metrics(self.path("ds.jsonl"))[0]["deepspeed_zero.zero_stage"], 1)
        megatron = write(self.path("megatron.yaml"), "distributed_type: MEGATRON_LM\nnum_processes: 1\n"
                                                     "megatron_lm_config:\n  megatron_lm_num_micro_batches: 2\n")
        proc = launch("--config_file", megatron, "--", *TINY, "--steps", 1)
        self.assertIn("--megatron.num_micro_batches 2 --grad-accum 2", command_line(proc))

    def test_a_hash_in_a_yaml_value_is_part_of_the_value(self):
        # Item 8: "ds#1.json" is that file, never a file named "ds".
        write(self.path("ds#1.json"), '{"zero_optimization": {"stage": 1}, "train_micro_batch_size_per_gpu": "auto"}')
        write(self.path("ds"), "not json")
        write(self.path("c.yaml"), 'distributed_type: DEEPSPEED\nnum_processes: 1\ndeepspeed_config:\n'
                                   '  deepspeed_config_file: "ds#1.json"\n')
        proc = subprocess.run([ACCEL_HOST, "--config", "c.yaml", *map(str, TINY), "--steps", "1", "--metrics-file",
                               "m.jsonl"], capture_output=True, text=True, cwd=self.tmp, env=MPI_ENV, timeout=120)
        self.assertEqual(proc.returncode, 0, proc.stderr)
        self.assertEqual(read_metrics(self.path("m.jsonl"))[0]["deepspeed_zero.zero_stage"], 1)

    def test_hostfile_slots_are_whole_numbers_of_a_sane_size(self):
        # Item 10.
        env = {k: v for k, v in MPI_ENV.items() if k != "OMPI_MCA_rmaps_base_oversubscribe"}
        for hosts, word in (("node0 slots=-4\n", "slots=-4"), ("node0 slots=2abc\n", "slots=2abc"),
                            ("a slots=9223372036854775807\nb slots=9223372036854775807\n",
                             "slots=9223372036854775807")):
            with self.subTest(hosts=hosts):
                hostfile = write(self.path("hosts"), hosts)
                proc = subprocess.run([ACCEL_HOST, "launch", "--num_processes", "2", "--hostfile", hostfile,
                                       "--dry_run"], capture_output=True, text=True, env=env, timeout=60)
                self.assertEqual(proc.returncode, 2, proc.stderr)
                [line] = error_lines(proc.stderr)
                self.assertIn(f"'{word}' is not slots=N with N from 1 to 1048576", line)
                self.assertNotIn("mpirun", proc.stdout)

    def test_the_yaml_reads_as_pyyaml_safe_load_reads_it(self):
        # Item 9: the last of a repeated key; a second document or a list
        # where a scalar belongs refused naming it.
        yaml = write(self.path("twice.yaml"), "distributed_type: MULTI_CPU\nnum_processes: 1\nnum_processes: 2\n")
        self.assertTrue(command_line(launch("--config_file", yaml, "--dry_run")).startswith("mpirun -n 2 "))
        for text, message in (("distributed_type: 'NO'\n---\ndistributed_type: FSDP\n", "holds more than one YAML document"),
                              ("distributed_type: 'NO'\nnum_processes: [1, 2]\n",
                               "num_processes must be a plain value, got a list")):
            with self.subTest(text=text):
                proc = launch("--config_file", write(self.path("c.yaml"), text), "--dry_run", check=False)
                self.assertEqual(proc.returncode, 2, proc.stderr)
                self.assertIn(message, proc.stderr)

    def test_main_process_ip_says_it_is_not_used(self):
        # Item 11, as main_process_port says it.
        yaml = write(self.path("c.yaml"), "distributed_type: 'NO'\nmain_process_ip: 10.1.2.3\n")
        proc = launch("--config_file", yaml, "--dry_run")
        self.assertIn('main_process_ip "10.1.2.3": mpirun starts every rank from the machine it runs on', proc.stderr)

    def test_the_deepspeed_template_runs_as_its_json_says(self):
        # Item 12: the JSON's fp16 block and concrete loss scale decide,
        # without repeating them as flags.
        proc = launch("--config_file", "deepspeed.yaml", "--", *TINY, "--steps", 2,
                      "--metrics-file", self.path("m.jsonl"), cwd=TEMPLATES)
        command = command_line(proc)
        for flag in ("--mixed-precision fp16", "--grad_scaler.init_scale 65536", "--grad_scaler.growth_interval 1000",
                     "--grad_scaler.hysteresis 2", "--grad_scaler.min_scale 1", "--grad-accum 1"):
            self.assertIn(flag, command)
        self.assertEqual(len(read_metrics(self.path("m.jsonl"))), 2)

    def test_accelerates_launch_flags_are_read(self):
        # Item 13: flags a normal accelerate invocation carries.
        proc = launch("--multi_gpu", "--num_processes", 2, "--main_process_port", 29500, "--same_network",
                      "--rdzv_backend", "static", "--dynamo_backend", "no", "--monitor_interval", 0.1, "--debug",
                      "--enable_cpu_affinity", "--mpirun_hostfile", write(self.path("hosts"), "localhost slots=2\n"),
                      "--dry_run", "--", "--steps", 1)
        command = command_line(proc)
        self.assertTrue(command.startswith("mpirun -n 2 --hostfile "), command)
        self.assertIn("--bind-to numa -x ACCEL_COMM_VERIFY=ops", command)
        self.assertIn("--plugin ddp", command)
        for refused, message in ((("--dynamo_backend", "inductor"), "--dynamo_backend is not honoured"),
                                 (("--main_process_ip", "--dry_run"), "--main_process_ip needs a value"),
                                 (("--tpu",), "--tpu is not honoured: there are no TPUs")):
            with self.subTest(refused=refused):
                proc = launch(*refused, "--", "--steps", 1, check=False)
                self.assertEqual(proc.returncode, 2, proc.stderr)
                [line] = error_lines(proc.stderr)
                self.assertIn(message, line)
                self.assertNotIn("mpirun", proc.stdout)

    def test_help_lists_launch_flags_and_the_subcommands(self):
        proc = launch("--help")
        self.assertIn("Usage: accel-host launch", proc.stdout)
        self.assertIn("--fsdp_offload_params V", proc.stdout)
        proc = subprocess.run([ACCEL_HOST, "--help"], capture_output=True, text=True, env=MPI_ENV, timeout=60)
        self.assertEqual(proc.returncode, 0, proc.stderr)
        for command in ("launch [flags]", "check-plugin", "merge-weights", "export-hf", "generate"):
            self.assertIn(command, proc.stdout)

    def test_a_failing_srun_mpi_list_is_reported_as_that(self):
        # Item 13: inside Slurm, srun --mpi=list failing is not a missing PMIx.
        bin_dir = self.path("bin")
        os.mkdir(bin_dir)
        srun = write(os.path.join(bin_dir, "srun"), "#!/bin/sh\necho 'srun: error: slurm_load_partitions: "
                                                      "Unable to contact slurm controller' >&2\nexit 1\n")
        os.chmod(srun, 0o755)
        env = {k: v for k, v in MPI_ENV.items() if not k.startswith("SLURM_")}
        env.update(SLURM_JOB_ID="7", SLURM_NTASKS="2", PATH=bin_dir + os.pathsep + env.get("PATH", ""))
        proc = subprocess.run([ACCEL_HOST, "launch", "--dry_run", "--", "--steps", "1"], capture_output=True,
                              text=True, env=env, timeout=60)
        self.assertEqual(proc.returncode, 2, proc.stderr)
        [line] = error_lines(proc.stderr)
        self.assertIn("srun --mpi=list failed (exit 1): srun: error: slurm_load_partitions: Unable to contact", line)
        self.assertNotIn("PMIx", line)


class Preflight(unittest.TestCase):
    def test_srun_without_a_pmi_is_refused_on_every_task(self):
        # What each task of `srun -n 2 accel-host` sees when Slurm has no
        # PMI plugin in the step: Slurm's variables and none of a PMI's.
        env = {k: v for k, v in os.environ.items() if not k.startswith(("OMPI_", "PMIX_", "PMI_", "SLURM_"))}
        env.update(SLURM_STEP_NUM_TASKS="2", SLURM_PROCID="1", SLURM_STEP_ID="0")
        proc = subprocess.run([ACCEL_HOST, *map(str, COMMON), "--steps", "1"], capture_output=True, text=True, env=env,
                              timeout=60)
        self.assertEqual(proc.returncode, 2, proc.stderr)
        [line] = error_lines(proc.stderr)
        self.assertIn("[rank 1]", line)
        self.assertIn("srun started 2 tasks without a PMI, so each would train alone: launch with srun --mpi=pmix",
                      line)


class EmbeddedDefault(TempDirMixin, unittest.TestCase):
    """One process without mpirun is an Open MPI singleton. Open MPI 4 keeps
    every singleton's session files under one shared directory that each
    creates and removes, so one-process runs starting together raced on it
    and lost in MPI_Init (a CI run of this suite did). Each now has its own."""

    def run_alone(self, extra_env):
        env = {k: v for k, v in os.environ.items() if not k.startswith(("OMPI_", "PMIX_", "PMI_", "SLURM_"))}
        env.update(TMPDIR=self.tmp, **extra_env)
        return subprocess.run([ACCEL_HOST, *map(str, COMMON), "--steps", "1"], capture_output=True, text=True,
                              env=env, timeout=60)

    def block_the_shared_session_directory(self):
        # A file where the shared tree's job-family directory would go: what
        # a racing process's half-made or half-removed tree looks like.
        shared = self.path(f"ompi.{socket.gethostname()}.{os.getuid()}")
        os.mkdir(shared)
        open(os.path.join(shared, "jf.0"), "w").close()
        return shared

    def test_a_one_process_run_keeps_its_session_files_to_itself_and_removes_them(self):
        shared = self.block_the_shared_session_directory()
        proc = self.run_alone({})
        self.assertEqual(proc.returncode, 0, proc.stderr)
        self.assertEqual(os.listdir(self.tmp), [os.path.basename(shared)])  # its own directory is gone

    def test_a_killed_one_process_run_leaves_nothing_behind(self):
        # Issue 50 (22): every killed one-process run left its
        # $TMPDIR/accel-mpi-XXXXXX behind; SIGKILL runs no cleanup, so the
        # directory goes as soon as MPI_Init has read it.
        env = {k: v for k, v in os.environ.items() if not k.startswith(("OMPI_", "PMIX_", "PMI_", "SLURM_"))}
        env.update(TMPDIR=self.tmp)
        metrics = self.path("metrics.jsonl")
        proc = subprocess.Popen([ACCEL_HOST, *map(str, COMMON), "--steps", str(LONG), "--metrics-file", metrics],
                                env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        try:
            deadline = time.monotonic() + 120
            while not complete_lines(metrics):  # training: past MPI_Init
                self.assertIsNone(proc.poll(), "the run ended before its first step")
                self.assertLess(time.monotonic(), deadline, "no step within 120 s")
                time.sleep(0.05)
        finally:
            proc.kill()
            proc.wait()
        self.assertEqual(proc.returncode, -signal.SIGKILL)
        self.assertEqual([n for n in os.listdir(self.tmp) if n.startswith("accel-mpi-")], [])

    def test_a_root_abandoned_before_its_owner_removed_it_goes_with_the_next_run(self):
        # Killed inside MPI_Init, a run leaves its root with its lock file,
        # whose flock died with it: the next one-process run removes it. A
        # root whose lock is held (a run still starting) and a directory
        # without Accel's lock file stay.
        import fcntl
        abandoned, live, foreign = (self.path(f"accel-mpi-{name}") for name in ("dead00", "live00", "other0"))
        os.makedirs(os.path.join(abandoned, "ompi.host.0", "jf.0"))
        open(os.path.join(abandoned, "accel-owner.lock"), "w").close()
        os.mkdir(live)
        os.mkdir(foreign)
        with open(os.path.join(live, "accel-owner.lock"), "w") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            proc = self.run_alone({})
        self.assertEqual(proc.returncode, 0, proc.stderr)
        self.assertEqual(sorted(os.listdir(self.tmp)), ["accel-mpi-live00", "accel-mpi-other0"])

    def test_a_users_own_session_directory_setting_wins(self):
        self.block_the_shared_session_directory()
        proc = self.run_alone({"OMPI_MCA_orte_tmpdir_base": self.tmp})
        self.assertNotEqual(proc.returncode, 0)
        self.assertIn("unable to create the desired directory", proc.stdout + proc.stderr)


if __name__ == "__main__":
    unittest.main()
