"""tokenizer.json files of each family's kind, made by the `tokenizers`
package itself (tiny BPE models trained on a small text with the family's
normalizer, pre-tokenizer, decoder and post-processor; nothing from a hub),
for test_tokenizer.py and test_generate_tokenizer.py."""
import json

from tokenizers import Regex, Tokenizer, decoders, models, normalizers, pre_tokenizers, processors, trainers

GPT2_PATTERN = r"""'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+"""
LLAMA3_PATTERN = (r"""(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*"""
                  r"""|\s*[\r\n]+|\s+(?!\S)|\s+""")
QWEN2_PATTERN = LLAMA3_PATTERN.replace(r"\p{N}{1,3}", r"\p{N}")
_WORDS = (r"""[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]*[\p{Ll}\p{Lm}\p{Lo}\p{M}]+{s}"""
          r"""|[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]+[\p{Ll}\p{Lm}\p{Lo}\p{M}]*{s}""")
_REST = r"""| ?[^\s\p{L}\p{N}]+[\r\n/]*|\s*[\r\n]+|\s+(?!\S)|\s+"""
O200K_PATTERN = _WORDS.replace("{s}", r"(?i:'s|'t|'re|'ve|'m|'ll|'d)?") + r"|\p{N}{1,3}" + _REST  # GPT-4o's
TEKKEN_PATTERN = _WORDS.replace("{s}", "") + r"|\p{N}" + _REST  # Mistral Nemo's, Ministral's
SPACE = "\u2581"

CORPUS = """The quick brown fox jumps over the lazy dog. It's 2024, and they're testing tokenizers!
Les élèves naïfs mangent des crêpes au café. Ça va? Der Bär läuft über die Straße.
We'll see whether the merges work: the the the then there these those. I'd say 1234567890 3.14159.
    indented code() { return x + y; }  // comment
	tab	separated	values
Numbers 42 and 007 and 1,000,000; URL http://example.com/a?b=c&d=e.
日本語のテキストも少し。中文也有一点。 Emoji 👋 are rare.
"""


def _train(tokenizer, vocab_size, special, **kwargs):
    trainer = trainers.BpeTrainer(vocab_size=vocab_size, special_tokens=special, show_progress=False, **kwargs)
    tokenizer.train_from_iterator([CORPUS] * 3, trainer=trainer)
    return tokenizer


def _byte_level(pre_tokenizer, special, ignore_merges=False, bos=None, normalizer=None):
    tokenizer = Tokenizer(models.BPE(ignore_merges=ignore_merges))
    tokenizer.normalizer = normalizer
    tokenizer.pre_tokenizer = pre_tokenizer
    tokenizer.decoder = decoders.ByteLevel()
    _train(tokenizer, 600, special, initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    if bos:
        tokenizer.post_processor = processors.Sequence([
            processors.ByteLevel(trim_offsets=False),
            processors.TemplateProcessing(single=f"{bos} $A", special_tokens=[(bos, tokenizer.token_to_id(bos))])])
    else:
        tokenizer.post_processor = processors.ByteLevel(trim_offsets=False)
    return tokenizer


def _with_byte_tokens(tokenizer):
    """SentencePiece's vocabulary holds <0x00>..<0xFF> as ordinary tokens."""
    data = json.loads(tokenizer.to_str())
    vocab = data["model"]["vocab"]
    for b in range(256):
        vocab.setdefault(f"<0x{b:02X}>", len(vocab))
    return Tokenizer.from_str(json.dumps(data))


def _sentencepiece(normalizer, pre_tokenizer, decoder, special, bos):
    tokenizer = Tokenizer(models.BPE(unk_token="<unk>", fuse_unk=True, byte_fallback=True))
    tokenizer.normalizer = normalizer
    tokenizer.pre_tokenizer = pre_tokenizer
    tokenizer.decoder = decoder
    _train(tokenizer, 500, special, limit_alphabet=60)
    tokenizer.post_processor = processors.TemplateProcessing(
        single=f"{bos} $A", special_tokens=[(bos, tokenizer.token_to_id(bos))])
    return _with_byte_tokens(tokenizer)


def _sentencepiece_decoder(strip=True):
    steps = [decoders.Replace(SPACE, " "), decoders.ByteFallback(), decoders.Fuse()]
    return decoders.Sequence(steps + ([decoders.Strip(" ", 1, 0)] if strip else []))


def families():
    """name -> a Tokenizer of that family's kind."""
    byte_level = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)
    return {
        "gpt2": _byte_level(pre_tokenizers.ByteLevel(add_prefix_space=False), ["<|endoftext|>"]),
        "gpt2_prefix_space": _byte_level(pre_tokenizers.ByteLevel(add_prefix_space=True), ["<|endoftext|>"]),
        "llama3": _byte_level(pre_tokenizers.Sequence([pre_tokenizers.Split(Regex(LLAMA3_PATTERN), "isolated"),
                                                       byte_level]),
                              ["<|begin_of_text|>", "<|end_of_text|>"], ignore_merges=True, bos="<|begin_of_text|>"),
        "qwen2": _byte_level(pre_tokenizers.Sequence([pre_tokenizers.Split(Regex(QWEN2_PATTERN), "isolated"),
                                                      byte_level]),
                             ["<|endoftext|>", "<|im_start|>", "<|im_end|>"], normalizer=normalizers.NFC()),
        "o200k": _byte_level(pre_tokenizers.Sequence([pre_tokenizers.Split(Regex(O200K_PATTERN), "isolated"),
                                                      byte_level]), ["<|endoftext|>"]),
        "tekken": _byte_level(pre_tokenizers.Sequence([pre_tokenizers.Split(Regex(TEKKEN_PATTERN), "isolated"),
                                                       byte_level]), ["<unk>", "<s>", "</s>"], bos="<s>"),
        "granite": _byte_level(pre_tokenizers.Sequence([pre_tokenizers.Digits(individual_digits=True),
                                                        pre_tokenizers.ByteLevel(add_prefix_space=False)]),
                               ["<|end_of_text|>"]),
        "llama2": _sentencepiece(normalizers.Sequence([normalizers.Prepend(SPACE), normalizers.Replace(" ", SPACE)]),
                                 None, _sentencepiece_decoder(), ["<unk>", "<s>", "</s>"], "<s>"),
        "mistral_metaspace": _sentencepiece(None, pre_tokenizers.Metaspace(SPACE, prepend_scheme="first", split=False),
                                            decoders.Sequence([decoders.Metaspace(SPACE, prepend_scheme="first"),
                                                               decoders.ByteFallback(), decoders.Fuse()]),
                                            ["<unk>", "<s>", "</s>"], "<s>"),
        "metaspace_split": _sentencepiece(None, pre_tokenizers.Metaspace(SPACE, prepend_scheme="always", split=True),
                                          decoders.Sequence([decoders.ByteFallback(), decoders.Metaspace(SPACE)]),
                                          ["<unk>", "<s>", "</s>"], "<s>"),
        "gemma": _sentencepiece(normalizers.Replace(" ", SPACE),
                                pre_tokenizers.Split(" ", "merged_with_previous"), _sentencepiece_decoder(strip=False),
                                ["<pad>", "<eos>", "<bos>", "<unk>", "<start_of_turn>", "<end_of_turn>"], "<bos>"),
    }
