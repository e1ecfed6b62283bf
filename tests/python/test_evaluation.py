"""--eval-every / --eval-steps / --eval-data / --eval-fraction: the held-out
loss in the metrics line equals transformers' own loss of the exported model
on the same windows; training never reads a held-out window; the figure is
the same under every strategy and at any world size, survives a resume bit
for bit, reaches TensorBoard; bad values are refused in one line."""
import math
import os
import unittest

import numpy as np
import torch
import torch.nn.functional as F

import test_profiler as prof  # its trace readers
from accel_testing import MPIRUN, TempDirMixin, error_lines, mpirun, read_metrics, run_host, write_tokens

try:
    import transformers
except ImportError:  # requirements-tools.txt installs it; say so rather than pass
    transformers = None

SEQ, VOCAB, BATCH, ACCUM = 32, 256, 4, 2
WINDOWS = 200                       # the token file holds exactly this many windows
FRACTION = 0.1                      # so 20 are held out, 180 train
HELD = int(WINDOWS * FRACTION)
EVAL_STEPS = 3                      # 3 batches of 4 windows: 12 of the 20
COMMON = ["--model", "gpt-tiny", "--seq-len", SEQ, "--vocab-size", VOCAB, "--batch-size", BATCH,
          "--grad-accum", ACCUM, "--threads", 1, "--log-level", "warn", "--lr", 1e-2, "--warmup-steps", 0]
EVAL = ["--eval-every", 2, "--eval-steps", EVAL_STEPS, "--eval-fraction", FRACTION]
STEPS = 5
HORIZON = ["--lr-decay-steps", STEPS]  # a run stopped early keeps the whole run's schedule


def eval_lines(lines):
    return {line["step"]: line["eval_loss"] for line in lines if "eval_loss" in line}


class Evaluation(TempDirMixin, unittest.TestCase):
    def setUp(self):
        super().setUp()
        self.data = self.path("tokens.bin")
        self.tokens = write_tokens(self.data, WINDOWS * (SEQ + 1), VOCAB)

    def args(self, *extra, steps=STEPS, data=None):
        return [*COMMON, "--data", "tokens:" + (data or self.data), "--steps", steps, *map(str, extra)]

    def train(self, *extra, steps=STEPS, ranks=1, data=None):
        metrics = self.path(f"m{len(os.listdir(self.tmp))}.jsonl")
        args = self.args(*extra, "--metrics-file", metrics, steps=steps, data=data)
        if ranks == 1:
            run_host(*args)
        else:
            mpirun(ranks, *args)
        return read_metrics(metrics)

    def test_evaluations_follow_every_nth_step_and_the_last(self):
        lines = self.train(*EVAL)
        self.assertEqual(sorted(eval_lines(lines)), [2, 4, 5])
        for line in lines:
            if "eval_loss" in line:
                self.assertAlmostEqual(line["eval_ppl"], math.exp(line["eval_loss"]), places=9)
            else:
                self.assertNotIn("eval_ppl", line)

    def test_the_held_out_loss_falls_as_the_model_learns_the_walk(self):
        losses = eval_lines(self.train("--eval-every", 20, "--eval-steps", EVAL_STEPS, steps=60))
        self.assertEqual(sorted(losses), [20, 40, 60])
        self.assertLess(losses[60], losses[40], losses)
        self.assertLess(losses[40], losses[20], losses)

    @unittest.skipUnless(transformers, "transformers is not installed (requirements-tools.txt)")
    def test_the_held_out_loss_is_transformers_loss_on_the_held_out_windows(self):
        save = self.path("ckpt")
        lines = self.train(*EVAL, "--save", save)
        out = self.path("hf")
        run_host("export-hf", save, out)
        model = transformers.GPT2LMHeadModel.from_pretrained(out, attn_implementation="eager").eval()
        # Evaluation batch k is held-out windows [k*B, (k+1)*B), in order.
        windows = self.tokens.reshape(WINDOWS, SEQ + 1)[WINDOWS - HELD:][: EVAL_STEPS * BATCH]
        batch = torch.from_numpy(windows)
        with torch.no_grad():
            logits = model(input_ids=batch[:, :-1]).logits
            expected = F.cross_entropy(logits.reshape(-1, VOCAB), batch[:, 1:].reshape(-1)).item()
        self.assertAlmostEqual(eval_lines(lines)[STEPS], expected, delta=1e-5 * expected)

    def test_training_never_reads_a_held_out_window_and_eval_data_is_the_same_as_a_held_out_tail(self):
        # The same run three ways: the tail held out of one file; the head
        # file with the tail as --eval-data; the head file alone, no eval.
        head, tail = self.path("head.bin"), self.path("tail.bin")
        cut = (WINDOWS - HELD) * (SEQ + 1)
        self.tokens[:cut].astype("<u2").tofile(head)
        self.tokens[cut:].astype("<u2").tofile(tail)
        held_out = self.train(*EVAL)
        separate = self.train(*EVAL[:4], "--eval-data", "tokens:" + tail, data=head)
        plain = self.train(data=head)
        self.assertEqual([l["loss"] for l in held_out], [l["loss"] for l in plain])
        self.assertEqual([l["loss"] for l in held_out], [l["loss"] for l in separate])
        self.assertEqual(eval_lines(held_out), eval_lines(separate))

    @unittest.skipUnless(transformers, "transformers is not installed (requirements-tools.txt)")
    def test_fp8_evaluates_in_full_precision_unless_autocast_during_eval(self):
        # FP8RecipeKwargs.use_autocast_during_eval false (the default): the
        # evaluation forward of the FP8-trained weights is the fp32 one, so it
        # equals transformers' loss of the exported weights; true: FP8 GEMMs,
        # close to it but not equal.
        windows = torch.from_numpy(self.tokens.reshape(WINDOWS, SEQ + 1)[WINDOWS - HELD:][: EVAL_STEPS * BATCH])
        for autocast in ("false", "true"):
            with self.subTest(use_autocast_during_eval=autocast):
                save, out = self.path(f"fp8_{autocast}"), self.path(f"fp8_{autocast}_hf")
                lines = self.train(*EVAL, "--plugin", "fp8", "--fp8.use_autocast_during_eval", autocast, "--save", save)
                run_host("export-hf", save, out)
                model = transformers.GPT2LMHeadModel.from_pretrained(out, attn_implementation="eager").eval()
                with torch.no_grad():
                    logits = model(input_ids=windows[:, :-1]).logits
                    full = F.cross_entropy(logits.reshape(-1, VOCAB), windows[:, 1:].reshape(-1)).item()
                got = eval_lines(lines)[STEPS]
                if autocast == "false":
                    self.assertAlmostEqual(got, full, delta=1e-5 * full)
                else:
                    self.assertNotAlmostEqual(got, full, delta=1e-6 * full)
                    self.assertAlmostEqual(got, full, delta=0.02 * full)

    def test_a_resumed_run_evaluates_bit_for_bit_as_the_uninterrupted_one(self):
        save = self.path("ckpt")
        whole = self.train(*EVAL, *HORIZON)
        self.train(*EVAL, *HORIZON, "--save", save, steps=3)
        resumed = self.train(*EVAL, *HORIZON, "--resume", save)
        self.assertEqual(len(eval_lines(resumed)), 2)
        self.assertEqual(eval_lines(resumed), {s: v for s, v in eval_lines(whole).items() if s > 3})

    @unittest.skipUnless(MPIRUN, "mpirun not found")
    def test_every_strategy_evaluates_as_one_process_does(self):
        reference = eval_lines(self.train(*EVAL))
        strategies = {
            "ddp": ["--plugin", "ddp"],
            "fsdp": ["--plugin", "fsdp"],
            "deepspeed_zero stage 3": ["--plugin", "deepspeed_zero", "--deepspeed_zero.zero_stage", 3],
            "megatron tp 2": ["--plugin", "megatron", "--megatron.tp_degree", 2],
        }
        for name, plugin in strategies.items():
            with self.subTest(name):
                got = eval_lines(self.train(*EVAL, *plugin, ranks=2))
                self.assertEqual(sorted(got), sorted(reference))
                for step, loss in reference.items():
                    self.assertAlmostEqual(got[step], loss, delta=1e-5 * loss, msg=f"{name} step {step}")

    def test_the_profiler_schedule_counts_training_steps_only(self):
        # Evaluations after steps 2 and 4 (1-based) do not advance the
        # schedule: it still records exactly training steps 2 and 3
        # (0-based), and an evaluation counts towards the step after it, as
        # code between two torch.profiler steps does.
        traces = self.path("traces")
        self.train(*EVAL, "--plugin", "profiler", "--profiler.output_trace_dir", traces, "--profiler.activities",
                   "cuda", "--profiler.wait", 1, "--profiler.warmup", 1, "--profiler.active", 2)
        trace = prof.load_trace(self, os.path.join(traces, "profile_0.json"))
        self.assertEqual(sorted(s["args"]["step"] for s in prof.slices(trace, name="step")), [2, 3])
        self.assertEqual({e["args"]["step"] for e in prof.slices(trace)}, {2, 3})
        self.assertEqual([s["args"]["step"] for s in prof.slices(trace, name="evaluate")], [2])

    def test_tensorboard_holds_the_eval_scalars(self):
        from tensorboard.backend.event_processing.event_accumulator import EventAccumulator
        board = self.path("tb")
        lines = self.train(*EVAL, "--tensorboard-dir", board)
        accumulator = EventAccumulator(board, size_guidance={"scalars": 0})
        accumulator.Reload()
        for tag, key in (("eval/loss", "eval_loss"), ("eval/ppl", "eval_ppl")):
            events = {e.step: e.value for e in accumulator.Scalars(tag)}
            expected = {l["step"]: l[key] for l in lines if key in l}
            self.assertEqual(sorted(events), sorted(expected))
            for step, value in expected.items():
                self.assertAlmostEqual(events[step], value, delta=abs(value) * 1e-6)

    def test_bad_values_are_refused_in_one_line(self):
        small = self.path("small.bin")
        write_tokens(small, 5 * (SEQ + 1), VOCAB)
        cases = {
            ("--eval-every", 2, "--eval-steps", 0): "--eval-steps 0: must be >= 1",
            ("--eval-every", -1): "--eval-every -1: must be >= 0",
            ("--eval-every", 2, "--eval-steps", 9223372036854775807): "--eval-steps 9223372036854775807: must be >= 1 "
                                                                       "and <= 1000000000",
            ("--eval-every", 2, "--eval-fraction", 1): "--eval-fraction must be in (0, 1), got 1",
            ("--eval-every", 2, "--eval-fraction", "nan"): "--eval-fraction must be in (0, 1)",
            ("--eval-data", "tokens:" + self.data): "--eval-data is given but --eval-every is 0",
            ("--eval-every", 2, "--eval-data", "synthetic"): "leave --eval-data out",
            ("--eval-every", 2, "--eval-data", "tokens:" + self.path("missing.bin")):
                f"--eval-data: cannot open '{self.path('missing.bin')}'",
            ("--eval-every", 2, "--eval-fraction", 0.1):
                "--eval-fraction 0.1 of --data's 5 windows of 33 tokens holds out 0",
        }
        for extra, message in cases.items():
            with self.subTest(extra=extra):
                data = small if "--eval-fraction" in extra and 0.1 in extra else None
                proc = run_host(*self.args(*extra, steps=2, data=data), check=False)
                self.assertNotEqual(proc.returncode, 0)
                errors = error_lines(proc.stderr)
                self.assertEqual(len(errors), 1, proc.stderr)
                self.assertIn(message, errors[0])


if __name__ == "__main__":
    unittest.main()
