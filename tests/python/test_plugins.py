"""Plugins end to end: the recorder plugin sees every hook in the documented
order with its options; each deliberately broken plugin is refused with one
line naming the file and the reason, exit non-zero, no crash."""
import json
import os
import re
import shutil
import stat
import subprocess
import unittest
import unittest.mock

from accel_testing import ACCEL_HOST, MPI_ENV, MPIRUN, TempDirMixin, mpirun, read_metrics, run_host

PLUGINS = os.environ.get("ACCEL_TEST_PLUGINS", os.path.join(os.path.dirname(__file__), "../../build/test_plugins"))
GOOD = os.path.join(PLUGINS, "good")
TINY = ["--steps", 2, "--batch-size", 4, "--log-level", "warn"]
DDP = os.path.join(os.path.dirname(ACCEL_HOST), "..", "lib", "accel", "plugins", "libaccel_ddp.so")


def plugin_dir(name):
    return os.path.join(PLUGINS, name)


class Recorder(TempDirMixin, unittest.TestCase):
    def run_recorder(self, *extra, check=True):
        log = self.path("hooks.log")
        proc = run_host("--plugin-path", GOOD, "--plugin", "recorder", "--recorder.log_file", log, *extra, check=check)
        lines = open(log).read().splitlines() if os.path.exists(log) else []
        return proc, lines

    def test_every_hook_in_order(self):
        _, lines = self.run_recorder(*TINY, "--grad-accum", 2)
        names = [line.split()[0] for line in lines]
        self.assertEqual(names[:3], ["create", "plan_model", "setup"])
        self.assertIn("units=4", lines[1])
        self.assertIn("first_step=0 micro=2 resuming=0", lines[2])
        units = range(4)
        forward = [f"unit_forward_pre unit={u}" for u in units]
        one_micro = []
        for u in units:
            one_micro += [f"unit_forward_pre unit={u}", f"unit_forward_post unit={u}"]
        for u in reversed(units):
            one_micro += [f"unit_backward_pre unit={u}", f"unit_backward_post unit={u}"]
        step = [l for l in lines[3:] if not l.startswith("teardown")]
        # step 0: begin, micro 0, micro 1 (+ gradients_ready), finalize, end
        self.assertTrue(step[0].startswith("step_begin step=0"))
        unit_lines = [" ".join(l.split()[:2]) for l in step if l.startswith("unit_")]
        self.assertEqual(unit_lines[:len(one_micro)], one_micro)
        self.assertEqual(unit_lines[len(one_micro):2 * len(one_micro)], one_micro)
        ready = [l for l in step if l.startswith("gradients_ready")]
        self.assertEqual([l.split()[1] for l in ready[:4]], [f"unit={u}" for u in reversed(units)])
        self.assertEqual(len(ready), 8)  # last micro-batch only, 2 steps x 4 units
        first_end = names.index("step_end")
        self.assertEqual(names[first_end - 1], "gradients_finalize")
        self.assertIn("loss=", lines[first_end])
        self.assertNotIn("loss=-1", lines[first_end])
        self.assertEqual(names[-1], "teardown")
        self.assertEqual(names.count("step_begin"), 2)
        self.assertTrue(all("last=1" in l for l in lines if l.startswith("unit_") and "micro=1" in l))
        self.assertTrue(all("last=0" in l for l in lines if l.startswith("unit_") and "micro=0" in l))
        self.assertIn("act=null", [l for l in lines if l.startswith("unit_forward_pre unit=0")][0])
        del forward

    def test_linear_chain_passes_through_every_block_linear(self):
        metrics = self.path("m.jsonl")
        _, lines = self.run_recorder(*TINY, "--metrics-file", metrics)
        forward = [l for l in lines if l.startswith("linear_forward")]
        backward = [l for l in lines if l.startswith("linear_backward")]
        self.assertEqual(len(forward), 2 * 2 * 4)  # steps x blocks x linears
        self.assertEqual(len(backward), len(forward))
        self.assertTrue(all("slot=ok" in l for l in backward))
        self.assertIn("rows=256", forward[0])  # tokens of one micro-batch: 4 sequences x 64
        run_host(*TINY, "--metrics-file", self.path("plain.jsonl"))
        chained, plain = read_metrics(metrics), read_metrics(self.path("plain.jsonl"))
        for a, b in zip(chained, plain):
            self.assertLess(abs(a["loss"] - b["loss"]) / b["loss"], 1e-5)
            self.assertLess(abs(a["grad_norm"] - b["grad_norm"]) / b["grad_norm"], 1e-4)

    def test_failing_linear_link(self):
        proc, _ = self.run_recorder(*TINY, "--recorder.fail_in", "linear_backward", check=False)
        self.assertEqual(proc.returncode, 1)
        self.assertIn("plugin recorder: linear_backward failed", proc.stderr)

    def test_options_reach_the_plugin_typed(self):
        _, lines = self.run_recorder(*TINY, "--recorder.scale", 2.5, "--recorder.verbose", "--recorder.mode", "loud",
                                     "--recorder.every", 7, "--lr", 0.002)
        self.assertIn("lr=0.002 scale=2.5 verbose=1 mode=1 every=7", lines[0])

    def test_config_file_section(self):
        cfg = self.path("run.cfg")
        with open(cfg, "w") as f:
            f.write("[recorder]\nscale = 3\nmode = loud\n")
        _, lines = self.run_recorder(*TINY, "--config", cfg)
        self.assertIn("scale=3 verbose=0 mode=1", lines[0])

    def test_bad_plugin_options(self):
        for args, words in [(["--recorder.every", 0], ["every", "minimum"]),
                            (["--recorder.mode", "shouty"], ["mode", "quiet, loud"]),
                            (["--recorder.scale", "abc"], ["scale", "not a number"]),
                            (["--recorder.verbose=maybe"], ["verbose", "bool"]),
                            (["--recorder.nope", 1], ["recorder.nope"])]:
            proc, _ = self.run_recorder(*TINY, *args, check=False)
            self.assertEqual(proc.returncode, 2, proc.stderr)
            err = [l for l in proc.stderr.splitlines() if l.strip()]
            self.assertEqual(len(err), 1, proc.stderr)
            for word in words:
                self.assertIn(word, err[0])

    def test_failing_hook_ends_the_run_but_teardown_runs(self):
        proc, lines = self.run_recorder(*TINY, "--recorder.fail_in", "step_end", check=False)
        self.assertEqual(proc.returncode, 1)
        self.assertIn("plugin recorder: step_end failed (ACCEL_ERROR_FAILED_PRECONDITION): recorder was told to fail here",
                      proc.stderr)
        self.assertEqual(lines[-1], "teardown")

    def test_metrics_carry_plugin_metrics(self):
        metrics = self.path("m.jsonl")
        self.run_recorder(*TINY, "--metrics-file", metrics)
        rows = read_metrics(metrics)
        self.assertEqual([r.get("recorder.steps_seen") for r in rows], [1.0, 2.0])

    def test_plugin_state_is_saved_and_restored(self):
        root = self.path("ckpt")
        self.run_recorder(*TINY, "--save", root)
        _, lines = self.run_recorder("--steps", 3, "--batch-size", 4, "--log-level", "warn", "--resume", root)
        load = [l for l in lines if l.startswith("load_state")]
        self.assertEqual(len(load), 1, lines)
        self.assertIn("step=2 steps_seen=2 plugins=recorder", load[0])
        setup = [l for l in lines if l.startswith("setup")][-1]
        self.assertIn("first_step=2 micro=1 resuming=1", setup)

    def test_help_shows_plugin_options(self):
        out = run_host("--plugin-path", GOOD, "--plugin", "recorder", "--help").stdout
        self.assertIn("--recorder.mode", out)
        self.assertIn("quiet|loud", out)


class TakeOver(TempDirMixin, unittest.TestCase):
    """clip_gradients and optimizer_step taken over by an SDK plugin that
    works through the host's services must reproduce the host's own run."""

    def test_takeover_reproduces_the_host_optimizer(self):
        args = ["--steps", 8, "--batch-size", 4, "--grad-clip", 0.5, "--warmup-steps", 2, "--log-level", "warn"]
        run_host(*args, "--metrics-file", self.path("host.jsonl"))
        run_host(*args, "--plugin-path", GOOD, "--plugin", "takeover", "--metrics-file", self.path("plugin.jsonl"))
        host, plugin = read_metrics(self.path("host.jsonl")), read_metrics(self.path("plugin.jsonl"))
        for a, b in zip(host, plugin):
            self.assertLess(abs(a["loss"] - b["loss"]) / a["loss"], 1e-6, (a, b))
            self.assertLess(abs(a["grad_norm"] - b["grad_norm"]) / a["grad_norm"], 1e-5, (a, b))
        self.assertEqual([r["takeover.clips"] for r in plugin], [float(i) for i in range(1, 9)])
        self.assertLess(plugin[-1]["loss"], plugin[0]["loss"])

    def test_exceptions_are_contained_by_the_sdk(self):
        # Before the first step, a failure that a rerun repeats (exit 4); in a step, 1.
        for hook, code in (("create", 4), ("step_begin", 1)):
            proc = run_host(*TINY, "--plugin-path", GOOD, "--plugin", "takeover", "--takeover.throw_in", hook,
                            check=False)
            self.assertEqual(proc.returncode, code, proc.stderr)
            self.assertIn(f"plugin takeover: {hook} failed (ACCEL_ERROR_INTERNAL)", proc.stderr)
            self.assertIn(f"takeover was told to throw in {hook}", proc.stderr)

    def test_two_plugins_cannot_take_over_the_same_hook(self):
        proc = run_host(*TINY, "--plugin-path", GOOD, "--plugin-path", plugin_dir("takeover2"), "--plugin", "takeover",
                        "--plugin", "takeover2", check=False)
        self.assertEqual(proc.returncode, 4, proc.stderr)  # at start-up, on every rank
        self.assertIn("plugins takeover and takeover2 both take over clip_gradients", proc.stderr)


class ObserverAndTrainStep(TempDirMixin, unittest.TestCase):
    def test_trace_events_reach_a_capturing_plugin(self):
        metrics = self.path("m.jsonl")
        run_host(*TINY, "--plugin-path", GOOD, "--plugin", "trace_test", "--metrics-file", metrics)
        counts = [r["trace_test.events"] for r in read_metrics(metrics)]
        self.assertGreater(counts[-1], counts[0])  # events keep arriving, step after step
        self.assertGreater(counts[0], 0)

    def test_train_step_take_over_replaces_the_host_loop(self):
        # The take-over runs every micro-batch itself through model->run_forward
        # / run_backward: the host's loop does not run, and the losses and
        # norms are the host loop's to the last bit.
        metrics = self.path("m.jsonl")
        log = self.path("hooks.log")
        run_host(*TINY, "--plugin-path", GOOD, "--plugin", "train_step_owner", "--plugin", "recorder",
                 "--recorder.log_file", log, "--metrics-file", metrics)
        rows = read_metrics(metrics)
        self.assertEqual([r["train_step_owner.calls"] for r in rows], [1.0, 2.0])
        plain = self.path("plain.jsonl")
        run_host(*TINY, "--metrics-file", plain)
        expected = read_metrics(plain)
        self.assertEqual([r["loss"] for r in rows], [r["loss"] for r in expected])
        self.assertEqual([r["grad_norm"] for r in rows], [r["grad_norm"] for r in expected])
        hooks = open(log).read()
        self.assertIn("unit_forward_pre", hooks)  # inside run_forward
        self.assertIn("gradients_finalize", hooks)

    def test_a_forward_left_without_its_backward_is_refused(self):
        proc = run_host(*TINY, "--plugin-path", GOOD, "--plugin", "train_step_owner", "--train_step_owner.misuse",
                        "true", check=False)
        self.assertNotEqual(proc.returncode, 0)
        self.assertIn("train_step returned with", proc.stderr)
        self.assertIn("lacking their backward", proc.stderr)


class CheckPlugin(unittest.TestCase):
    """accel-host check-plugin: one PASS/FAIL line per check, exit 0 only if all pass."""

    def check(self, path, *extra):
        return run_host("check-plugin", path, *extra, check=False)

    def test_good_plugins_pass_every_check(self):
        for name in ("recorder", "takeover", "older_minor"):
            proc = self.check(os.path.join(GOOD, f"libaccel_{name}.so"))
            self.assertEqual(proc.returncode, 0, proc.stdout + proc.stderr)
            for check in ("file", "exports", "descriptor", "lifecycle", "resume"):
                self.assertRegex(proc.stdout, rf"PASS\s+{check}\b")
            self.assertIn("5 passed, 0 failed, 0 skipped", proc.stdout)

    def test_failures_are_reported_per_check(self):
        proc = self.check(os.path.join(plugin_dir("setup_fails"), "libaccel_setup_fails.so"))
        self.assertEqual(proc.returncode, 1)
        self.assertRegex(proc.stdout, r"FAIL\s+lifecycle\s+plugin setup_fails: setup failed")
        proc = self.check(os.path.join(plugin_dir("abi2"), "libaccel_abi2.so"))
        self.assertEqual(proc.returncode, 1)
        self.assertRegex(proc.stdout, r"FAIL\s+exports\s+does not export accel_plugin_init_v1")
        self.assertRegex(proc.stdout, r"FAIL\s+descriptor.*ABI major 2")

    def test_missing_path_is_a_usage_error(self):
        proc = run_host("check-plugin", check=False)
        self.assertEqual(proc.returncode, 2)
        self.assertIn("usage: accel-host check-plugin PATH", proc.stderr)

    def test_two_ranks(self):
        mpirun = shutil.which("mpirun")
        if not mpirun:
            self.skipTest("no mpirun")
        env = dict(os.environ, OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1",
                   OMPI_MCA_rmaps_base_oversubscribe="1")
        proc = subprocess.run([mpirun, "-n", "2", ACCEL_HOST, "check-plugin", os.path.join(GOOD, "libaccel_recorder.so")],
                              capture_output=True, text=True, env=env, timeout=120)
        self.assertEqual(proc.returncode, 0, proc.stdout + proc.stderr)
        self.assertIn("(2 ranks)", proc.stdout)
        self.assertRegex(proc.stdout, r"PASS\s+descriptor")
        self.assertRegex(proc.stdout, r"PASS\s+lifecycle")
        self.assertRegex(proc.stdout, r"PASS\s+resume")


class CheckPluginDataParallel(unittest.TestCase):
    """check-plugin on a plugin that declares ACCEL_CAP_REDUCES_GRADS: N ranks
    must train the model one rank trains. A reducer that sums instead of
    averaging, or reduces nothing, loads and trains without an error; only
    this check catches it, with one FAIL line."""

    def setUp(self):
        if not MPIRUN:
            self.skipTest("no mpirun")

    def check_two_ranks(self, path):
        return mpirun(2, "check-plugin", path, check=False, timeout=300)

    def data_parallel_line(self, proc):
        lines = [l for l in proc.stdout.splitlines() if "data-parallel" in l]
        self.assertEqual(len(lines), 1, proc.stdout + proc.stderr)
        return lines[0]

    def test_ddp_passes(self):
        proc = self.check_two_ranks(DDP)
        self.assertEqual(proc.returncode, 0, proc.stdout + proc.stderr)
        self.assertRegex(self.data_parallel_line(proc), r"PASS\s+data-parallel\s+2 ranks train the model one rank")

    def test_summing_reducer_fails(self):
        proc = self.check_two_ranks(os.path.join(plugin_dir("sum_reducer"), "libaccel_sum_reducer.so"))
        self.assertEqual(proc.returncode, 1, proc.stdout + proc.stderr)
        self.assertRegex(self.data_parallel_line(proc),
                         r"FAIL\s+data-parallel\s+step \d+ at 2 ranks.*summed across ranks instead of averaged")
        self.assertRegex(proc.stdout, r"PASS\s+lifecycle")  # it trains; only the comparison tells

    def test_reducer_that_reduces_nothing_fails(self):
        proc = self.check_two_ranks(os.path.join(plugin_dir("reduces_nothing"), "libaccel_reduces_nothing.so"))
        self.assertEqual(proc.returncode, 1, proc.stdout + proc.stderr)
        self.assertRegex(self.data_parallel_line(proc),
                         r"FAIL\s+data-parallel\s+step \d+ at 2 ranks.*do not train one model")

    def test_one_rank_check_starts_the_ranks_itself(self):
        proc = subprocess.run([ACCEL_HOST, "check-plugin",
                               os.path.join(plugin_dir("sum_reducer"), "libaccel_sum_reducer.so")],
                              capture_output=True, text=True, env=MPI_ENV, timeout=300)
        self.assertEqual(proc.returncode, 1, proc.stdout + proc.stderr)
        self.assertRegex(self.data_parallel_line(proc), r"FAIL\s+data-parallel\s+.*summed across ranks")


class BrokenPlugins(TempDirMixin, unittest.TestCase):
    def refused(self, *args, mentions, code=2):
        proc = run_host(*args, *TINY, check=False, timeout=120)
        self.assertEqual(proc.returncode, code, proc.stderr)
        err = [l for l in proc.stderr.splitlines() if l.strip()]
        self.assertEqual(len(err), 1, proc.stderr)
        for word in mentions:
            self.assertIn(word, err[0])
        return err[0]

    def test_missing_entry_symbol(self):
        self.refused("--plugin-path", plugin_dir("no_entry"), "--plugin", "no_entry",
                     mentions=["libaccel_no_entry.so", "no accel_plugin_init_v"])

    def test_unknown_abi_major(self):
        self.refused("--plugin-path", plugin_dir("abi2"), "--plugin", "abi2", mentions=["ABI major 2", "supports 1"])

    def test_wrong_struct_size(self):
        self.refused("--plugin-path", plugin_dir("struct_size"), "--plugin", "struct_size",
                     mentions=["struct_size 16", "smaller than ABI 1.0"])

    def test_bad_option_schema(self):
        self.refused("--plugin-path", plugin_dir("bad_option"), "--plugin", "bad_option",
                     mentions=["libaccel_bad_option.so", "strategy"])

    def test_declared_conflict(self):
        self.refused("--plugin-path", GOOD, "--plugin-path", plugin_dir("conflict"), "--plugin", "recorder",
                     "--plugin", "conflicting", mentions=["conflicts with 'recorder'"])

    def test_duplicate_name(self):
        self.refused("--plugin", os.path.join(plugin_dir("dup_a"), "libaccel_dup.so"),
                     "--plugin", os.path.join(plugin_dir("dup_b"), "libaccel_dup.so"), mentions=["'dup' is already loaded"])

    def test_name_mismatch(self):
        self.refused("--plugin-path", plugin_dir("misnamed"), "--plugin", "other", mentions=["'misnamed'", "'other'"])

    def test_gather_codec_rules(self):
        # ABI 1.8: the codec's three hooks come together, never from an
        # observer, and from one plugin of a run (fp8 is the other here).
        self.refused("--plugin-path", plugin_dir("observer_codec"), "--plugin", "observer_codec",
                     mentions=["libaccel_observer_codec.so", "observer plugin may not implement the gather codec"])
        self.refused("--plugin-path", plugin_dir("half_codec"), "--plugin", "half_codec",
                     mentions=["gather_codec_query, gather_encode and gather_decode must be implemented together"])
        self.refused("--plugin-path", plugin_dir("second_codec"), "--plugin", "fp8", "--plugin", "second_codec",
                     code=4, mentions=["plugins fp8 and second_codec both provide a gather codec"])

    def test_plugin_not_found(self):
        self.refused("--plugin-path", GOOD, "--plugin", "nonesuch", mentions=["libaccel_nonesuch.so not found"])

    def test_setup_failure(self):
        self.refused("--plugin-path", plugin_dir("setup_fails"), "--plugin", "setup_fails", code=4,
                     mentions=["plugin setup_fails: setup failed (ACCEL_ERROR_FAILED_PRECONDITION)"])

    def test_truncated_library(self):
        d = self.path("trunc")
        os.makedirs(d)
        src = os.path.join(GOOD, "libaccel_recorder.so")
        with open(src, "rb") as f, open(os.path.join(d, "libaccel_recorder.so"), "wb") as g:
            g.write(f.read()[:2000])
        self.refused("--plugin-path", d, "--plugin", "recorder", mentions=["libaccel_recorder.so", "not a loadable"])

    def test_world_writable_directory_and_file(self):
        d = self.path("open")
        os.makedirs(d)
        shutil.copy(os.path.join(GOOD, "libaccel_recorder.so"), d)
        os.chmod(d, 0o777)
        self.refused("--plugin-path", d, "--plugin", "recorder", mentions=["writable by other users"])
        os.chmod(d, 0o755)
        os.chmod(os.path.join(d, "libaccel_recorder.so"), 0o666)
        self.refused("--plugin-path", d, "--plugin", "recorder", mentions=["file is writable by other users"])

    def copy_recorder(self, *parts, mode=0o755):
        """A copy of the recorder plugin in tmp/<parts...>/ (directories 0755)."""
        d = os.path.join(self.tmp, *parts)
        os.makedirs(d, mode=0o755, exist_ok=True)
        dest = os.path.join(d, "libaccel_recorder.so")
        shutil.copy(os.path.join(GOOD, "libaccel_recorder.so"), dest)
        os.chmod(dest, mode)
        return d, dest

    def test_world_writable_ancestor_directory(self):
        d, _ = self.copy_recorder("open", "plugins")
        os.chmod(self.path("open"), 0o777)  # not sticky: anyone may rename plugins/ away and plant another
        err = self.refused("--plugin-path", d, "--plugin", "recorder", mentions=["writable by other users"])
        self.assertIn(f"directory {os.path.realpath(self.path('open'))} is", err)

    def test_sticky_world_writable_ancestor_is_accepted(self):
        d, _ = self.copy_recorder("sticky", "plugins")
        os.chmod(self.path("sticky"), 0o1777)  # like /tmp: others cannot rename what is ours
        run_host("--plugin-path", d, "--plugin", "recorder", *TINY)

    @unittest.skipUnless(os.geteuid() == 0, "needs root to give a directory to another user")
    def test_sticky_world_writable_directory_holding_the_plugin_is_refused(self):
        # Issue 30: accepted before. Where others may add files, they choose
        # which files sit under plugin names (a hard link to any root-owned
        # library passes every check on the file); the sticky bit stops
        # removals, not additions.
        d, _ = self.copy_recorder("sticky_holder")
        os.chmod(d, 0o1777)
        err = self.refused("--plugin-path", d, "--plugin", "recorder",
                           mentions=["writable by other users (mode 1777", "sticky bit"])
        self.assertIn(f"directory {os.path.realpath(d)} is", err)

    @unittest.skipUnless(os.geteuid() == 0, "needs root to give a symlink to another user")
    def test_symlink_of_another_user_is_not_followed(self):
        # Issue 30: the link's own owner went unchecked. In a sticky directory
        # another user's link chooses which of our files is loaded. (Group-
        # writable, not world-writable: the kernel's fs.protected_symlinks
        # guards only the latter, and would refuse before the loader looks.)
        _, target = self.copy_recorder("real")
        links = self.path("sticky_links")
        os.makedirs(links)
        os.chown(links, 0, 65534)
        os.chmod(links, 0o1775)
        link = os.path.join(links, "libaccel_recorder.so")
        os.symlink(target, link)
        os.lchown(link, 65534, 65534)
        self.refused("--plugin", link, mentions=[f"symbolic link {os.path.realpath(links)}/libaccel_recorder.so",
                                                 "owned by uid 65534"])
        os.lchown(link, 0, 0)  # root's, or ours: followed
        run_host("--plugin", link, *TINY)

    def test_misnamed_plugin_file_is_refused_before_its_code_runs(self):
        # Issue 30: the name was checked after dlopen had run the file's
        # constructors. This plugin's constructor creates the mark file.
        d = self.path("renamed")
        os.makedirs(d, mode=0o755)
        renamed = os.path.join(d, "swap.so")
        shutil.copy(os.path.join(plugin_dir("swap_untrusted"), "libaccel_swap.so"), renamed)
        os.chmod(renamed, 0o644)
        mark = self.path("constructor_ran")
        with unittest.mock.patch.dict(os.environ, ACCEL_TEST_UNTRUSTED_MARK=mark):
            self.refused("--plugin", renamed, mentions=[renamed, "refused without loading it",
                                                        "libaccel_<name>.so"])
            self.assertFalse(os.path.exists(mark), "the misnamed file's constructor ran")
            # Named right, the same file loads (its constructor runs: the mark
            # is what the refusal above did not leave).
            named = os.path.join(d, "libaccel_swap.so")
            os.rename(renamed, named)
            run_host("--plugin", named, *TINY)
            self.assertTrue(os.path.exists(mark))

    def test_directory_of_another_user_below_a_sticky_one(self):
        d, _ = self.copy_recorder("sticky", "theirs")
        os.chmod(self.path("sticky"), 0o1777)
        os.chown(d, 65534, 65534)
        self.refused("--plugin-path", d, "--plugin", "recorder", mentions=["theirs", "owned by uid 65534"])

    def test_symlink_target_is_checked(self):
        _, target = self.copy_recorder("open")
        os.chmod(self.path("open"), 0o777)
        links = self.path("links")
        os.makedirs(links, mode=0o755)
        os.symlink(target, os.path.join(links, "libaccel_recorder.so"))
        err = self.refused("--plugin-path", links, "--plugin", "recorder", mentions=["writable by other users"])
        self.assertIn(f"directory {os.path.realpath(self.path('open'))} is", err)

    def test_symlink_into_a_trusted_directory_loads(self):
        _, target = self.copy_recorder("real")
        links = self.path("links")
        os.makedirs(links, mode=0o755)
        os.symlink(os.path.relpath(target, links), os.path.join(links, "libaccel_recorder.so"))
        run_host("--plugin-path", links, "--plugin", "recorder", *TINY)

    def test_group_writable_file_is_refused(self):
        d, dest = self.copy_recorder("group", mode=0o775)
        if os.getegid() == 0:
            os.chown(dest, -1, 65534)  # root's own group may write; another may not
        self.refused("--plugin-path", d, "--plugin", "recorder", mentions=["the file is writable by its group"])

    def test_hook_table_shorter_than_1_0(self):
        self.refused("--plugin-path", plugin_dir("short_hooks"), "--plugin", "short_hooks",
                     mentions=["libaccel_short_hooks.so", "hook table struct_size", "smaller than ABI 1.0's"])

    def test_reducer_without_a_reduction_hook(self):
        self.refused("--plugin-path", plugin_dir("no_reduce_hook"), "--plugin", "no_reduce_hook",
                     mentions=["libaccel_no_reduce_hook.so", "ACCEL_CAP_REDUCES_GRADS", "gradients_ready"])

    def test_relative_plugin_path_entries_are_never_searched(self):
        env = dict(os.environ, ACCEL_PLUGIN_PATH="relative/dir::")
        proc = subprocess.run([ACCEL_HOST, "--plugin", "recorder", *map(str, TINY)], capture_output=True, text=True,
                              cwd=GOOD, env=env)
        self.assertEqual(proc.returncode, 2)
        self.assertIn("not found", proc.stderr)

    def test_abi_1_0_plugin_loads_and_runs(self):
        run_host("--plugin-path", GOOD, "--plugin", "older_minor", *TINY)

    def test_list_plugins_shows_good_and_unloadable(self):
        out = run_host("--plugin-path", GOOD, "--plugin-path", plugin_dir("abi2"), "--list-plugins").stdout
        self.assertIn("recorder", out)
        self.assertIn("records every hook call", out)
        self.assertIn("older_minor", out)
        self.assertRegex(out, r"libaccel_abi2.so\s+-\s+unloadable.*ABI major 2")

    def test_every_rank_stops_on_a_bad_plugin(self):
        mpirun = shutil.which("mpirun")
        if not mpirun:
            self.skipTest("no mpirun")
        env = dict(os.environ, OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1",
                   OMPI_MCA_rmaps_base_oversubscribe="1")
        proc = subprocess.run([mpirun, "-n", "2", ACCEL_HOST, "--plugin-path", plugin_dir("abi2"), "--plugin", "abi2",
                               *map(str, TINY)], capture_output=True, text=True, env=env, timeout=120)
        self.assertNotEqual(proc.returncode, 0)
        self.assertIn("ABI major 2", proc.stderr)


class BundledLibraries(TempDirMixin, unittest.TestCase):
    """A plugin whose RUNPATH is $ORIGIN and that needs a library beside it
    (tests/plugins/origin_plugin.c, origin_helper.c): vendors ship plugins
    this way. Loaded through /proc/self/fd/N, $ORIGIN meant /proc/self/fd and
    the helper was not found (issue 30); the helper is now checked and
    loaded from the plugin's real directory, under the plugin's rules."""

    HELPER = "libvendor_origin_helper.so"

    def setUp(self):
        super().setUp()
        self.dir = self.path("vendor")
        os.makedirs(self.dir, mode=0o755)
        for name in ("libaccel_origin.so", self.HELPER):
            shutil.copy(os.path.join(plugin_dir("origin"), name), self.dir)
            os.chmod(os.path.join(self.dir, name), 0o755)

    def test_runpath_origin_is_what_the_plugin_needs(self):
        dynamic = subprocess.run(["readelf", "-d", os.path.join(self.dir, "libaccel_origin.so")],
                                 capture_output=True, text=True).stdout
        if not dynamic:
            self.skipTest("no readelf")
        self.assertIn(f"Shared library: [{self.HELPER}]", dynamic)
        self.assertRegex(dynamic, r"\(RUNPATH\)\s+Library runpath: \[\$ORIGIN\]")

    def test_plugin_with_a_helper_beside_it_loads_and_runs(self):
        out = run_host("--plugin-path", self.dir, "--list-plugins").stdout
        self.assertIn("its bundled helper answered 41", out)
        # teardown fails unless the helper counted each of the two steps
        run_host("--plugin-path", self.dir, "--plugin", "origin", *TINY)

    def test_through_a_symlink_origin_is_the_real_directory(self):
        links = self.path("links")
        os.makedirs(links, mode=0o755)
        os.symlink(os.path.join(self.dir, "libaccel_origin.so"), os.path.join(links, "libaccel_origin.so"))
        run_host("--plugin-path", links, "--plugin", "origin", *TINY)

    def test_helper_is_checked_like_the_plugin(self):
        helper = os.path.join(self.dir, self.HELPER)
        os.chmod(helper, 0o666)
        proc = run_host("--plugin-path", self.dir, "--plugin", "origin", *TINY, check=False, timeout=120)
        self.assertEqual(proc.returncode, 2, proc.stderr)
        err = [l for l in proc.stderr.splitlines() if l.strip()]
        self.assertEqual(len(err), 1, proc.stderr)
        self.assertIn(f"{helper}: refused: the file is writable by other users", err[0])

    def test_missing_helper_is_one_line(self):
        os.remove(os.path.join(self.dir, self.HELPER))
        proc = run_host("--plugin-path", self.dir, "--plugin", "origin", *TINY, check=False, timeout=120)
        self.assertEqual(proc.returncode, 2, proc.stderr)
        err = [l for l in proc.stderr.splitlines() if l.strip()]
        self.assertEqual(len(err), 1, proc.stderr)
        self.assertIn(self.HELPER, err[0])
class ShippedSchemas(unittest.TestCase):
    """Issue 30: an integer option without bounds let products of options
    leave int64 (megatron's tp x pp wrapped to 0: SIGFPE; the profiler's
    cycle to 0: `step % 0`). Every INT option of every plugin this build
    ships gives both a min_value and a max_value, read back from the
    schema as `accel-host --help --plugin NAME` prints it ("[int, MIN..MAX]")."""

    SHIPPED = os.path.join(os.path.dirname(ACCEL_HOST), "..", "lib", "accel", "plugins")
    TYPE = re.compile(r"\[(bool|int|double|string|enum)\b([^\]]*)\]")

    def schema(self, name):
        """{option: (type, details)} of plugin `name`, from its --help section."""
        text = " ".join(run_host("--plugin", name, "--help").stdout.split())
        options = {}
        for entry in re.split(r"(?= --%s\.)" % re.escape(name), text)[1:]:
            option = re.match(r" --%s\.(\w+)" % re.escape(name), entry).group(1)
            kind = self.TYPE.search(entry)
            self.assertIsNotNone(kind, f"--{name}.{option}: no [type] in its help: {entry}")
            options[option] = (kind.group(1), kind.group(2))
        return options

    def test_every_int_option_of_every_shipped_plugin_has_a_min_and_a_max(self):
        names = sorted(f[len("libaccel_"):-len(".so")] for f in os.listdir(self.SHIPPED)
                       if f.startswith("libaccel_") and f.endswith(".so"))
        self.assertLessEqual({"ddp", "fsdp", "deepspeed_zero", "megatron", "fp8", "profiler"}, set(names), names)
        unbounded = []
        for name in names:
            schema = self.schema(name)
            self.assertTrue(schema, f"{name}: no options found in its --help")
            for option, (kind, details) in schema.items():
                if kind != "int":
                    continue
                bounds = re.fullmatch(r", (-?\d+)\.\.(-?\d+)", details)
                if bounds is None or int(bounds.group(1)) > int(bounds.group(2)):
                    unbounded.append(f"--{name}.{option} [int{details}]")
        self.assertEqual(unbounded, [], "INT options without both bounds")

    def test_the_schema_reader_sees_bounds_and_their_absence(self):
        # The reader itself: megatron's tp_degree is bounded on both sides,
        # its double gradient_clipping only below (DOUBLE options may be).
        schema = self.schema("megatron")
        self.assertEqual(schema["tp_degree"], ("int", ", 1..2147483647"))
        self.assertEqual(schema["gradient_clipping"], ("double", ", 0.."))


if __name__ == "__main__":
    unittest.main()
