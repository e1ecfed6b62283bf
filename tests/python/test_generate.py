"""accel-host generate: greedy decoding through the key/value cache equals
transformers' greedy generate of the exported model token for token (byte
prompts and id prompts), sampling repeats under a seed, a token-trained model
round-trips text through a tokenizer (in Python, and through --tokenizer's
tokenizer.json in accel-host), bad arguments get one line."""
import os
import unittest

import numpy as np
import torch

from accel_testing import MPIRUN, TempDirMixin, error_lines, mpirun, run_host, write_tokens

try:
    import transformers
except ImportError:  # requirements-tools.txt installs it; say so rather than pass
    transformers = None

SEQ = 48
TEXT = ("It was the best of times, it was the worst of times, it was the age of wisdom, "
        "it was the age of foolishness, it was the epoch of belief, it was the epoch of incredulity. ") * 60


class Generate(TempDirMixin, unittest.TestCase):
    def train(self, data, vocab=256, steps=30):
        save = self.path(f"ckpt{len(os.listdir(self.tmp))}")
        run_host("--model", "gpt-tiny", "--seq-len", SEQ, "--vocab-size", vocab, "--batch-size", 8, "--steps", steps,
                 "--lr", 3e-3, "--warmup-steps", 0, "--threads", 1, "--log-level", "warn", "--data", data,
                 "--save", save)
        return save

    def byte_model(self):
        text = self.path("text.txt")
        with open(text, "w") as f:
            f.write(TEXT)
        return self.train("text:" + text)

    def generate(self, checkpoint, *args, check=True):
        return run_host("generate", checkpoint, *args, check=check)

    def assert_usage_errors(self, checkpoint, cases):
        """Each (args, message): exit 2 and one error line holding message."""
        for args, message in cases.items():
            with self.subTest(args=args):
                proc = self.generate(checkpoint, *args, check=False)
                self.assertEqual(proc.returncode, 2, proc.stderr)
                errors = error_lines(proc.stderr)
                self.assertEqual(len(errors), 1, proc.stderr)
                self.assertIn(message, errors[0])

    def transformers_greedy(self, checkpoint, prompt_ids, new_tokens):
        out = self.path("hf")
        run_host("export-hf", checkpoint, out)
        model = transformers.GPT2LMHeadModel.from_pretrained(out, attn_implementation="eager").eval()
        with torch.no_grad():
            ids = model.generate(torch.tensor([prompt_ids]), max_new_tokens=new_tokens, min_new_tokens=new_tokens,
                                 do_sample=False, pad_token_id=0, eos_token_id=None)
        return ids[0, len(prompt_ids):].tolist()

    @unittest.skipUnless(transformers, "transformers is not installed (requirements-tools.txt)")
    def test_greedy_bytes_equal_transformers_greedy_generate(self):
        checkpoint = self.byte_model()
        prompt = "it was the age of "
        ids = self.generate(checkpoint, "--prompt", prompt, "--max-new-tokens", 24, "--temperature", 0,
                            "--output", "ids").stdout.split()
        self.assertEqual([int(i) for i in ids], self.transformers_greedy(checkpoint, list(prompt.encode()), 24))
        text = self.generate(checkpoint, "--prompt", prompt, "--max-new-tokens", 24, "--temperature", 0).stdout
        self.assertEqual(text, bytes(int(i) for i in ids).decode())  # the training text is ASCII

    @unittest.skipUnless(transformers, "transformers is not installed (requirements-tools.txt)")
    def test_greedy_ids_of_a_token_model_equal_transformers(self):
        data = self.path("tokens.bin")
        write_tokens(data, 20_000, 1000)
        checkpoint = self.train("tokens:" + data, vocab=1000, steps=10)
        prompt = [17, 400, 999, 3, 250]
        got = self.generate(checkpoint, "--prompt-ids", ",".join(map(str, prompt)), "--max-new-tokens", 40,
                            "--temperature", 0).stdout.split()
        self.assertEqual([int(i) for i in got], self.transformers_greedy(checkpoint, prompt, 40))

    def test_sampling_repeats_under_a_seed_and_stops_at_eos(self):
        checkpoint = self.byte_model()
        args = ["--prompt", "it was", "--max-new-tokens", 30, "--temperature", 1.2, "--top-k", 20, "--output", "ids"]
        first = self.generate(checkpoint, *args, "--seed", 7).stdout.split()
        self.assertEqual(len(first), 30)
        self.assertEqual(self.generate(checkpoint, *args, "--seed", 7).stdout.split(), first)
        others = {tuple(self.generate(checkpoint, *args, "--seed", s).stdout.split()) for s in (8, 9, 10)}
        self.assertTrue(others - {tuple(first)})
        stop = first[4]
        stopped = self.generate(checkpoint, *args, "--seed", 7, "--eos-id", stop).stdout.split()
        self.assertEqual(stopped, first[: first.index(stop) + 1])

    def test_the_tokenizer_round_trip_of_the_readme(self):
        try:
            from tokenizers import Tokenizer, models, pre_tokenizers
        except ImportError:
            self.skipTest("the tokenizers package is not installed (requirements-tools.txt)")
        words = sorted({piece for piece, _ in pre_tokenizers.Whitespace().pre_tokenize_str(TEXT)})
        tokenizer = Tokenizer(models.WordLevel({w: i for i, w in enumerate(["[UNK]", *words])}, unk_token="[UNK]"))
        tokenizer.pre_tokenizer = pre_tokenizers.Whitespace()
        data = self.path("words.bin")
        np.asarray(tokenizer.encode(TEXT).ids, dtype="<u2").tofile(data)
        checkpoint = self.train("tokens:" + data, vocab=256, steps=60)
        prompt = tokenizer.encode("it was the").ids
        ids = self.generate(checkpoint, "--prompt-ids", " ".join(map(str, prompt)), "--max-new-tokens", 12,
                            "--temperature", 0).stdout.split()
        text = tokenizer.decode([int(i) for i in ids])
        self.assertEqual(len(text.split()), 12)  # every id is a word of the vocabulary
        self.assertTrue(set(text.split()) <= set(words), text)

    def test_tokenizer_encodes_the_prompt_and_decodes_the_continuation(self):
        try:
            import tokenizer_files
        except ImportError:
            self.skipTest("the tokenizers package is not installed (requirements-tools.txt)")
        prompt = "it was the age of"
        for family in ("gpt2", "llama2"):  # byte-level BPE; SentencePiece-style with <s> before the prompt
            with self.subTest(family=family):
                tokenizer = tokenizer_files.families()[family]
                os.makedirs(self.path(family))
                tokenizer.save(os.path.join(self.path(family), "tokenizer.json"))
                data = self.path(family + ".bin")
                np.asarray(tokenizer.encode(TEXT, add_special_tokens=False).ids, dtype="<u2").tofile(data)
                checkpoint = self.train("tokens:" + data, vocab=640, steps=30)
                args = ["--max-new-tokens", 16, "--temperature", 0]
                ids = tokenizer.encode(prompt).ids
                expected = self.generate(checkpoint, "--prompt-ids", " ".join(map(str, ids)), *args).stdout.split()
                got = self.generate(checkpoint, "--tokenizer", self.path(family), "--prompt", prompt, *args,
                                    "--output", "ids").stdout.split()
                self.assertEqual(got, expected)
                text = self.generate(checkpoint, "--tokenizer", self.path(family), "--prompt", prompt, *args).stdout
                self.assertEqual(text, tokenizer.decode([int(i) for i in expected], skip_special_tokens=False))
                self.assertTrue(text.strip())

    def test_a_tokenizer_the_checkpoint_cannot_embed_or_read_is_one_line(self):
        try:
            import tokenizer_files
            from tokenizers import Tokenizer, models
        except ImportError:
            self.skipTest("the tokenizers package is not installed (requirements-tools.txt)")
        checkpoint = self.byte_model()
        bpe = tokenizer_files.families()["gpt2"]
        bpe.save(self.path("bpe.json"))
        Tokenizer(models.WordLevel({"[UNK]": 0, "a": 1}, unk_token="[UNK]")).save(self.path("words.json"))
        cases = {
            ("--tokenizer", self.path("bpe.json"), "--prompt", "it was"):
                f"--tokenizer: its ids reach {bpe.get_vocab_size(with_added_tokens=True) - 1}, beyond",
            ("--tokenizer", self.path("words.json"), "--prompt", "a"): "the model WordLevel is not supported",
            ("--tokenizer", self.path("nowhere"), "--prompt", "a"): "cannot be read",
        }
        self.assert_usage_errors(checkpoint, cases)

    def test_bad_arguments_are_one_line(self):
        checkpoint = self.byte_model()
        cases = {
            (): "give one of --prompt TEXT and --prompt-ids IDS",
            ("--prompt", "a", "--prompt-ids", "1"): "give one of --prompt TEXT and --prompt-ids IDS",
            ("--prompt", ""): "--prompt is empty",
            ("--prompt", "a", "--temperature", "-1"): "--temperature must be a finite number >= 0",
            ("--prompt", "a", "--temperature", "nan"): "--temperature must be a finite number >= 0",
            ("--prompt", "a", "--top-k", "x"): "--top-k: 'x' is not a number",
            ("--prompt", "a", "--max-new-tokens", 48): "the prompt's 1 tokens and 48 new ones pass the model's "
                                                      "context of 48 positions",
            # Regression (issue 30): the sum wrapped and passed the check.
            ("--prompt", "a", "--max-new-tokens", 9223372036854775807):
                "the prompt's 1 tokens and 9223372036854775807 new ones pass the model's context of 48 positions",
            ("--prompt-ids", "1 256"): "the prompt holds token id 256, outside the model's vocabulary of 256",
            ("--prompt", "a", "--output", "json"): "--output: 'json' is not text or ids",
            ("--prompt", "a", "--beam", "2"): "unknown option '--beam'",
            ("--prompt",): "--prompt needs a value",
        }
        self.assert_usage_errors(checkpoint, cases)
        proc = self.generate(self.path("nowhere"), "--prompt", "a", check=False)
        self.assertEqual(proc.returncode, 1, proc.stderr)
        self.assertEqual(len(error_lines(proc.stderr)), 1, proc.stderr)
        self.assertIn("generate:", error_lines(proc.stderr)[0])

    @unittest.skipUnless(MPIRUN, "mpirun not found")
    def test_under_mpirun_it_is_refused(self):
        checkpoint = self.byte_model()
        proc = mpirun(2, "generate", checkpoint, "--prompt", "a", check=False)
        self.assertNotEqual(proc.returncode, 0)
        self.assertIn("generate runs as one process, not on 2 ranks", proc.stderr)


if __name__ == "__main__":
    unittest.main()
