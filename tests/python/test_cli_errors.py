"""Bad input: each case exits non-zero with one clear error line naming the
problem, never a crash (signal) or a traceback, and harms nothing on disk."""
import os
import subprocess
import unittest

from accel_testing import ACCEL_HOST, TempDirMixin, read_metrics, run_host


class BadInput(TempDirMixin, unittest.TestCase):
    def expect_error(self, *args, mentions, code=None):
        proc = run_host(*args, "--log-level", "warn", check=False) if args and args[0].startswith("--") and \
            not any(a in ("--help", "--version") for a in map(str, args)) else run_host(*args, check=False)
        self.assertGreater(proc.returncode, 0, f"exit {proc.returncode} (a signal is negative)\n{proc.stderr}")
        if code is not None:
            self.assertEqual(proc.returncode, code)
        lines = [line for line in proc.stderr.splitlines() if line.strip()]
        self.assertEqual(len(lines), 1, f"expected one line, got:\n{proc.stderr}")
        for word in mentions:
            self.assertIn(word, lines[0])
        return lines[0]

    def test_unknown_option(self):
        self.expect_error("--no-such-flag", mentions=["no-such-flag"], code=2)

    def test_bad_values(self):
        self.expect_error("--steps", "ten", mentions=["steps"], code=2)
        self.expect_error("--lr", "0", mentions=["--lr"], code=2)
        self.expect_error("--mixed-precision", "fp64", mentions=["fp64"], code=2)
        self.expect_error("--batch-size", 7, "--grad-accum", 2, mentions=["--batch-size 7"], code=2)
        self.expect_error("--model", "gpt-huge", mentions=["gpt-huge"], code=2)
        self.expect_error("--n-embd", 30, "--n-head", 4, mentions=["--n-embd"], code=2)

    def test_usage_errors_exit_2_with_one_line(self):
        self.expect_error("--model", "gpt-huge", mentions=["--model", "gpt-huge", "gpt-tiny, gpt-small"], code=2)
        self.expect_error("--n-head", 3, "--n-embd", 64, mentions=["--n-embd 64", "--n-head 3"], code=2)
        self.expect_error("--n-layer", 0, mentions=["--n-layer", ">= 1"], code=2)
        self.expect_error("--n-embd", -64, mentions=["--n-embd -64"], code=2)
        self.expect_error("--seq-len", -1, mentions=["--seq-len"], code=2)
        self.expect_error("--vocab-size", -5, mentions=["--vocab-size"], code=2)
        # (expect_error adds --log-level warn; this one runs as given)
        proc = run_host("--log-level", "verbose", "--steps", 1, check=False)
        self.assertEqual(proc.returncode, 2, proc.stderr)
        lines = [line for line in proc.stderr.splitlines() if line.strip()]
        self.assertEqual(len(lines), 1, proc.stderr)
        self.assertIn("--log-level: 'verbose' is not one of: trace, debug, info, warn, error, off", lines[0])

    def test_stray_positionals_and_unknown_commands(self):
        # A typo of merge-weights must not start a training run.
        self.expect_error("merge-weight", "ckpt", "out", mentions=["merge-weight", "check-plugin, merge-weights"],
                          code=2)
        self.expect_error("train", mentions=["train"], code=2)
        self.expect_error("--steps", 1, "extra", mentions=["unexpected argument 'extra'"], code=2)

    def test_config_that_is_a_directory(self):
        self.expect_error("--config", self.tmp, mentions=["--config", self.tmp, "is a directory"], code=2)

    def test_timeout_outside_its_range(self):
        for value in ("0", "-5", "inf", "-inf", "nan", "1e300", "1e10", "0.0004"):
            with self.subTest(timeout=value):
                self.expect_error("--init_process_group.timeout", value,
                                  mentions=["--init_process_group.timeout"], code=2)
        # The range's ends are accepted by the parser. (1 ms is a real deadline:
        # on a loaded machine the run may then time out, exit 1, which is not
        # a refusal of the value; only a usage error would be.)
        low = run_host("--steps", 1, "--init_process_group.timeout", "0.001", "--log-level", "warn", check=False)
        self.assertNotEqual(low.returncode, 2, low.stderr)
        self.assertNotIn("--init_process_group.timeout", low.stderr)
        run_host("--steps", 1, "--init_process_group.timeout", "604800", "--log-level", "warn")

    NON_FINITE = [("lr", "--lr"), ("weight-decay", "--weight-decay"), ("eps", "--eps"),
                  ("grad-clip", "--grad-clip"), ("min-lr", "--min-lr"),
                  ("grad_scaler.init_scale", "--grad_scaler.init_scale"),
                  ("grad_scaler.growth_factor", "--grad_scaler.growth_factor")]

    def test_non_finite_hyperparameters_on_the_command_line(self):
        # One check serves every option (cli/options.cpp): each option is
        # tried once, the values taking turns, so each option shows it is
        # wired to the check and each value that the check refuses it. An
        # overflowing literal is refused by the parser, naming the option.
        values = ("inf", "nan", "1e999", "-inf")
        for i, (option, flag) in enumerate(self.NON_FINITE):
            value = values[i % len(values)]
            with self.subTest(option=option, value=value):
                why = "1e999" if value == "1e999" else "not a finite number"
                self.expect_error(flag, value, mentions=[flag, why], code=2)

    def test_non_finite_plugin_option(self):
        # A plugin's double option is held to the same rule as the host's.
        for value in ("inf", "-inf", "nan"):
            with self.subTest(value=value):
                self.expect_error("--plugin", "ddp", "--ddp.bucket_cap_mb", value,
                                  mentions=["bucket_cap_mb", "not a finite number"], code=2)

    def test_non_finite_hyperparameters_in_a_config_file(self):
        for option, flag in self.NON_FINITE:
            section, _, name = option.rpartition(".")
            with open(self.path("run.cfg"), "w") as f:
                f.write(f"[{section}]\n{name} = inf\n" if section else f"{name} = inf\n")
            with self.subTest(option=option):
                self.expect_error("--config", self.path("run.cfg"), mentions=[flag, "not a finite number"], code=2)

    def test_huge_shapes_are_refused_before_allocating(self):
        line = self.expect_error("--n-embd", 1 << 20, "--n-head", 1, mentions=["--n-embd", "GiB"], code=2)
        self.assertIn("n_embd=1048576", line)
        # Past an option's own range the range check answers first (issue 30:
        # every integer option has one), before any product is formed.
        self.expect_error("--n-layer", 1 << 40, mentions=["--n-layer", "must be >= 1 and <="], code=2)
        self.expect_error("--vocab-size", 1 << 62, mentions=["--vocab-size", "must be >= 2 and <="], code=2)
        self.expect_error("--seq-len", 1 << 40, mentions=["--seq-len", "must be >= 1 and <="], code=2)

    @unittest.skipIf(os.environ.get("ACCEL_SANITIZED") == "1",
                     "AddressSanitizer reserves terabytes of address space for its shadow: no RLIMIT_AS cap fits")
    def test_an_allocation_that_fails_is_one_line(self):
        # A shape below the up-front bound that still cannot be allocated:
        # the address space is capped (RLIMIT_AS) so the failure is certain
        # and harmless to the machine.
        import resource
        import subprocess
        from accel_testing import ACCEL_HOST

        def cap():
            resource.setrlimit(resource.RLIMIT_AS, (6 << 30, 6 << 30))
        proc = subprocess.run([ACCEL_HOST, "--steps", "1", "--log-level", "warn", "--vocab-size", "3000000"],
                              capture_output=True, text=True, timeout=300, preexec_fn=cap)
        self.assertEqual(proc.returncode, 1, proc.stderr)
        lines = [line for line in proc.stderr.splitlines() if line.strip()]
        self.assertEqual(len(lines), 1, proc.stderr)
        self.assertIn("out of memory: the model (", lines[0])
        self.assertIn("vocab_size=3000000", lines[0])

    def test_a_loss_that_becomes_non_finite_stops_the_run(self):
        # A huge learning rate without clipping: step 1's update throws the
        # weights to ~1e30, step 2's logits overflow and the loss is NaN.
        metrics = self.path("m.jsonl")
        args = ["--steps", 6, "--lr", 1e30, "--grad-clip", 0, "--lr-schedule", "constant", "--metrics-file", metrics]
        line = self.expect_error(*args, mentions=["step 2", "loss", "--nonfinite-loss-skips 0"], code=3)
        self.assertRegex(line, r"is (-?nan|-?inf)")
        self.assertEqual(len(read_metrics(metrics)), 1)  # step 1 was fine and recorded
        # Allowing skips: two steps are skipped (no update), the third stops.
        os.remove(metrics)
        self.expect_error(*args, "--nonfinite-loss-skips", 2, mentions=["step 4", "after 2 skipped"], code=3)
        rows = read_metrics(metrics)
        self.assertEqual([r.get("skipped", False) for r in rows], [False, True, True])

    def test_device_choice(self):
        self.expect_error("--device", "tpu", mentions=["--device", "auto, cpu, cuda"], code=2)
        import torch
        if not torch.cuda.is_available():
            self.expect_error("--device", "cuda", mentions=["--device cuda: no CUDA device"])
        run_host("--device", "cpu", "--steps", 1)  # explicit CPU works everywhere

    def test_missing_or_bad_data_file(self):
        self.expect_error("--data", "tokens:" + self.path("missing.bin"), mentions=["missing.bin", "cannot open"])
        with open(self.path("odd.bin"), "wb") as f:
            f.write(b"\x01\x02\x03")
        self.expect_error("--data", "tokens:" + self.path("odd.bin"), mentions=["odd.bin"])

    def test_corrupt_checkpoint(self):
        root = self.path("ckpt")
        run_host("--steps", 2, "--save", root, "--log-level", "warn")
        model = os.path.join(root, "step_2", "model.safetensors")
        with open(model, "r+b") as f:
            f.truncate(os.path.getsize(model) // 2)
        self.expect_error("--steps", 4, "--resume", os.path.join(root, "step_2"), mentions=["step_2"])
        # A root whose only checkpoint is damaged holds no complete checkpoint.
        self.expect_error("--steps", 4, "--resume", root, mentions=["no complete checkpoint"])
        self.assertTrue(os.path.exists(model))  # nothing deleted

    def test_malformed_header_with_a_valid_manifest_is_caught_by_the_reader(self):
        root = self.path("ckpt")
        run_host("--steps", 1, "--save", root, "--log-level", "warn")
        step = os.path.join(root, "step_1")
        os.remove(os.path.join(step, "manifest.json"))
        with open(os.path.join(step, "model.safetensors"), "r+b") as f:
            f.write(b"\xff" * 8)  # header length beyond the file
        # Without a manifest the directory is treated as a root holding nothing.
        self.expect_error("--steps", 2, "--resume", step, mentions=["no complete checkpoint"])

    def test_checkpoint_of_another_model_shape(self):
        root = self.path("ckpt")
        run_host("--steps", 1, "--save", root, "--log-level", "warn")
        self.expect_error("--steps", 2, "--n-layer", 3, "--resume", root, mentions=["n_layer=2", "n_layer=3"])

    def test_metrics_file_in_missing_directory(self):
        self.expect_error("--steps", 1, "--metrics-file", self.path("no/such/dir/m.jsonl"), mentions=["metrics"],
                          code=2)

    def test_help_and_version_succeed(self):
        self.assertIn("--batch-size", run_host("--help").stdout)
        self.assertIn("accel-host", run_host("--version").stdout)

    def test_version_names_the_allocator_a_preload_chose(self):
        """glibc's malloc by default; jemalloc preloaded (the lower-memory choice of docs/benchmarks.md,
        "Allocators") is named, so a user sees the preload took effect and the ledger reads its statistics."""
        self.assertIn("malloc glibc)", run_host("--version").stdout)
        jemalloc = "/usr/lib/x86_64-linux-gnu/libjemalloc.so.2"
        if os.environ.get("ACCEL_SANITIZED"):
            self.skipTest("ASan's runtime must come first: no allocator can be preloaded")
        if not os.path.exists(jemalloc):
            self.skipTest(f"{jemalloc} is not installed (scripts/install-deps.sh installs it)")
        out = subprocess.run([ACCEL_HOST, "--version"], capture_output=True, text=True, timeout=60,
                             env=dict(os.environ, LD_PRELOAD=jemalloc), check=True).stdout
        self.assertIn("malloc jemalloc)", out)


if __name__ == "__main__":
    unittest.main()
