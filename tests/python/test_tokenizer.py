"""The C++ tokenizer.json reader (host/tokenizer/) against the `tokenizers`
package: tokenizers of each family's kind (tokenizer_files.py: byte-level
BPE as GPT-2, Llama 3, Qwen2 (NFC), GPT-4o (o200k), Mistral's Tekken and
Granite configure it; SentencePiece-style
BPE with byte fallback as Llama 2, Mistral and Gemma do), the same ids for
varied text (accents, CJK, emoji, digit runs, newlines, runs of spaces,
contractions, special tokens inside the text, added tokens that strip
whitespace) with and without the post-processor's tokens, and the same text
from those ids and from random ids; what it cannot read is refused in one
line naming the part. Runs build/bin/accel_tokenizer_probe."""
import json
import os
import random
import subprocess
import unittest

from accel_testing import ACCEL_HOST, TempDirMixin

try:
    from tokenizers import AddedToken, Tokenizer, normalizers
    import tokenizer_files
except ImportError:  # requirements-tools.txt installs it; say so rather than pass
    Tokenizer = None

PROBE = os.path.join(os.path.dirname(ACCEL_HOST), "accel_tokenizer_probe")

TEXTS = [
    "Hello world", "The quick brown fox.", " leading space", "trailing spaces   ", "   ", "", "a",
    "It's 2024; they're here, I'LL go, WE'VE won, you'd, she'd've. 'ſ",
    "café naïve élève crème brûlée Straße", "e\u0301 composed vs \u00e9",
    "한국어 \u1112\u1161\u11ab\u1100\u1173\u11af A\u030a \u212b a\u0323\u0302 q\u0307\u0323 \u0344 \u0958 \u0301x",
    "日本語のテキスト, 中文字符", "👋🏽 hi 🇯🇵 flags 🧑‍💻 emoji",
    "1234567890 3.14159 007 1,000,000 ١٢٣ Ⅻ", "line one\nline two\n\n\nline five\r\nwindows\r\n",
    "multiple    spaces   here\t\ttabs \t mixed", "code() { return x + y; }  // comment\n    indented",
    "\u00a0non-breaking\u2009thin\u3000ideographic", "<|endoftext|>start and end<|endoftext|>",
    "mid<|endoftext|>dle <s> x </s>y<eos><bos>", "<s>Hello </s> world", "<|end|> spaced <|end|>x", "<|begin_of_text|>Hi<|im_start|>user\nhey<|im_end|>",
    "unseen: ЖЩЮ αβγ ※ ∑∫ ﬁ", "CamelCaseWords HTTPServer iPhone ǅemal x'LL ÉCOLE naïve\u0308s path/to/file\n", "<start_of_turn>user\nHello<end_of_turn>\n", "x" * 300,
]


def probe(path, lines):
    """The probe's answer for each JSON line; (None, stderr) if it refused the file."""
    proc = subprocess.run([PROBE, path], input="\n".join(json.dumps(line) for line in lines) + "\n",
                          capture_output=True, text=True, timeout=60)
    if proc.returncode != 0:
        return None, proc.stderr
    return [json.loads(line) for line in proc.stdout.splitlines()], proc.stderr


@unittest.skipIf(Tokenizer is None, "the tokenizers package is missing (pip install -r requirements-tools.txt)")
class TokenizerMatchesTokenizers(TempDirMixin, unittest.TestCase):

    def save(self, name, tokenizer):
        path = os.path.join(self.tmp, f"{name}.json")
        tokenizer.save(path)
        return path

    def compare(self, name, tokenizer, texts=TEXTS):
        path = self.save(name, tokenizer)
        answers, err = probe(path, texts)
        self.assertIsNotNone(answers, err)
        for text, got in zip(texts, answers):
            with self.subTest(family=name, text=text):
                ids = tokenizer.encode(text, add_special_tokens=False).ids
                special = tokenizer.encode(text).ids
                self.assertEqual(got["ids"], ids)
                self.assertEqual(got["ids_special"], special)
                self.assertEqual(got["decoded"], tokenizer.decode(ids, skip_special_tokens=False))
                self.assertEqual(got["decoded_skip"], tokenizer.decode(special, skip_special_tokens=True))
        rng = random.Random(7)
        vocab = tokenizer.get_vocab_size(with_added_tokens=True)
        id_lists = [[rng.randrange(vocab) for _ in range(rng.randrange(1, 12))] for _ in range(200)]
        answers, err = probe(path, id_lists)
        self.assertIsNotNone(answers, err)
        for ids, got in zip(id_lists, answers):
            with self.subTest(family=name, ids=ids):
                self.assertEqual(got["decoded"], tokenizer.decode(ids, skip_special_tokens=False))
                self.assertEqual(got["decoded_skip"], tokenizer.decode(ids, skip_special_tokens=True))

    def test_each_family_encodes_and_decodes_as_tokenizers_does(self):
        for name, tokenizer in tokenizer_files.families().items():
            self.compare(name, tokenizer)

    def test_random_text_encodes_and_decodes_as_tokenizers_does(self):
        # Runs drawn from every kind of character the files treat apart,
        # special tokens and their fragments, "▁" itself and contractions.
        pool = ["a", "Z", "é", "ß", "ǅ", "ж", "日", "한", "👋", "🏽", "\u200d", "\u0301", "0", "7", "٣", "Ⅻ", "½",
                " ", "  ", "\n", "\r\n", "\t", "\u00a0", "\u3000", "\u2581", "'s", "'LL", "'t", "!", "...", "/", "_",
                "<s>", "</s>", "<|endoftext|>", "<|end_of_text|>", "<eos>", "<", "|>", "\x00", "\x7f", "\ufeff"]
        rng = random.Random(11)
        texts = ["".join(rng.choice(pool) for _ in range(rng.randrange(1, 24))) for _ in range(150)]
        for name, tokenizer in tokenizer_files.families().items():
            self.compare(name + "_random", tokenizer, texts)

    def test_nfc_composes_as_tokenizers_does(self):
        # Qwen2's NFC on random runs of letters, combining marks of several
        # classes, Hangul jamo and syllables, precomposed letters, singletons
        # (U+212B, U+2126) and characters excluded from composition (U+0958).
        pool = ("aAeEoOuUnNcsqzkK \u00e9\u00c5\u1ea1\u0300\u0301\u0302\u0303\u0308\u030a\u0323\u0327"
                "\u0328\u0345\u0344\u0340\u05b0\u05b8\u0591\u1100\u1161\u11a8\u11ab\uac00\ud55c"
                "\u212b\u2126\u0958\u0915\u093c\u0f73\u1e0b\u1e9b\u03d2\u0301\u1f00\u0345\u3099\u304b")
        rng = random.Random(3)
        texts = ["".join(rng.choice(pool) for _ in range(rng.randrange(1, 16))) for _ in range(400)]
        self.compare("qwen2_nfc", tokenizer_files.families()["qwen2"], texts)

    def test_added_tokens_that_strip_whitespace_or_are_normalized(self):
        for name in ("gpt2", "llama2"):
            tokenizer = tokenizer_files.families()[name]
            tokenizer.add_special_tokens([AddedToken("<|end|>", rstrip=True, lstrip=True, normalized=False)])
            tokenizer.add_tokens([AddedToken("crème", normalized=True), AddedToken("ab c", normalized=False)])
            self.compare(name + "_added", tokenizer)

    def test_truncation_and_batch_padding_as_tokenizers_applies_them(self):
        for name, direction in (("llama3", "right"), ("llama2", "left")):
            tokenizer = tokenizer_files.families()[name]
            tokenizer.enable_truncation(max_length=7, direction=direction)
            tokenizer.enable_padding()  # to the batch's longest: one sequence stays as it is
            self.compare(f"{name}_truncated", tokenizer)

    def test_what_it_cannot_read_is_refused_in_one_line(self):
        tokenizer = tokenizer_files.families()["gpt2"]
        tokenizer.normalizer = normalizers.NFKC()
        answers, err = probe(self.save("nfkc", tokenizer), ["x"])
        self.assertIsNone(answers)
        self.assertEqual(len(err.strip().splitlines()), 1, err)
        self.assertIn("the normalizer NFKC is not supported", err)


if __name__ == "__main__":
    unittest.main()
