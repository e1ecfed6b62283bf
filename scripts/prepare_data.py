#!/usr/bin/env python3
"""Text files -> the token files accel-host trains on (--data tokens:PATH).

    scripts/prepare_data.py --tokenizer MODEL_DIR_OR_tokenizer.json \\
        --out DIR [--val-fraction 0.1] [--eot TOKEN] TEXT_FILE...

Each input file is one document, encoded whole with the tokenizer's own
rules (a Hugging Face tokenizer.json: GPT-2's byte-level BPE, Llama's
SentencePiece-style BPE, or any other the `tokenizers` package reads; no
hub download ever happens), and preceded by the end-of-text token, as
llm.c's data scripts do, so the model sees where documents start. Without
--eot that token is the one the model directory names (tokenizer_config.json's
eos_token, else config.json's eos_token_id: Gemma's <eos>, Mistral's </s>),
else the first of <|endoftext|>, <|end_of_text|>, </s> the tokenizer has. The
token stream goes to DIR/train.bin, its last --val-fraction to DIR/val.bin
(for accel-host's --eval-data), in llm.c's format: a header of 256
little-endian int32 (magic, version, token count) then the tokens, uint16
(magic 20240520, version 1) when the vocabulary fits, else uint32 (magic
20240801, version 7). accel-host checks that header and refuses ids beyond
the model's --vocab-size with one line.

Exit status 2 with one line for bad input (a missing file, a tokenizer that
cannot be read, an unknown --eot, inputs that encode to no tokens, an --out
that cannot be written, an output too large for llm.c's int32 token count); every file is written beside its final name and renamed into
place, so an interrupted run leaves no half-written token file.
"""
import argparse
import json
import os
import sys

import numpy as np

HEADER_INTS = 256
LAYOUTS = {2: (20240520, 1, "<u2"), 4: (20240801, 7, "<u4")}  # bytes per token -> magic, version, dtype
MAX_TOKENS = 2**31 - 1  # the header's count is an int32
# Tried in order when --eot is not given and the model directory names no
# eos token: GPT-2's, Llama 3's, Llama 2's.
EOT_CANDIDATES = ("<|endoftext|>", "<|end_of_text|>", "</s>")


class UsageError(Exception):
    pass


def load_tokenizer(path):
    try:
        from tokenizers import Tokenizer
    except ImportError as e:
        raise UsageError("the `tokenizers` package is missing (pip install -r requirements-tools.txt)") from e
    file = os.path.join(path, "tokenizer.json") if os.path.isdir(path) else path
    if not os.path.isfile(file):
        raise UsageError(f"--tokenizer: no tokenizer.json at '{file}'")
    try:
        return Tokenizer.from_file(file)
    except Exception as e:  # the library's own message says what is wrong
        raise UsageError(f"--tokenizer: cannot read '{file}': {str(e).splitlines()[0]}") from e


def read_json(path):
    try:
        with open(path, encoding="utf-8") as f:
            return json.load(f)
    except (OSError, ValueError) as e:
        raise UsageError(f"--tokenizer: cannot read '{path}': {e}") from e


def model_eos_id(tokenizer, path):
    """The end-of-sequence id a model directory names, or None: its
    tokenizer_config.json's eos_token (a string, or an AddedToken's
    {"content": ...}), else its config.json's eos_token_id (the first of a
    list)."""
    if not os.path.isdir(path):
        return None
    config_file = os.path.join(path, "tokenizer_config.json")
    if os.path.isfile(config_file):
        token = read_json(config_file).get("eos_token")
        if isinstance(token, dict):
            token = token.get("content")
        if isinstance(token, str):
            token_id = tokenizer.token_to_id(token)
            if token_id is None:
                raise UsageError(f"--eot: {config_file} names the eos_token '{token}', which is not in the "
                                 "tokenizer's vocabulary; name the end-of-text token with --eot")
            return token_id
    config_file = os.path.join(path, "config.json")
    if os.path.isfile(config_file):
        token_id = read_json(config_file).get("eos_token_id")
        if isinstance(token_id, list) and token_id:
            token_id = token_id[0]
        if isinstance(token_id, int) and not isinstance(token_id, bool):
            if not 0 <= token_id < tokenizer.get_vocab_size(with_added_tokens=True):
                raise UsageError(f"--eot: {config_file}'s eos_token_id {token_id} is not an id of the tokenizer; "
                                 "name the end-of-text token with --eot")
            return token_id
    return None


def end_of_text_id(tokenizer, requested, path):
    if requested == "none":
        return None
    if not requested:
        token_id = model_eos_id(tokenizer, path)
        if token_id is not None:
            return token_id
    names = [requested] if requested else EOT_CANDIDATES
    for name in names:
        token_id = tokenizer.token_to_id(name)
        if token_id is not None:
            return token_id
    if requested:
        raise UsageError(f"--eot: '{requested}' is not in the tokenizer's vocabulary")
    raise UsageError(f"--eot: the tokenizer has none of {', '.join(EOT_CANDIDATES)}; name its end-of-text "
                     "token, or say --eot none")


def encode_documents(tokenizer, paths, eot):
    """One array of ids per input file, the end-of-text token first."""
    for path in paths:
        try:
            with open(path, encoding="utf-8") as f:
                text = f.read()
        except (OSError, UnicodeDecodeError) as e:
            raise UsageError(f"cannot read '{path}': {e}") from e
        ids = tokenizer.encode(text, add_special_tokens=False).ids
        yield np.asarray(([eot] if eot is not None else []) + ids, dtype=np.int64)


def write_token_file(path, tokens, vocab):
    """llm.c's layout: uint16 when the vocabulary fits, else uint32 (one
    width for every file of a tokenizer); atomic (rename)."""
    if len(tokens) > MAX_TOKENS:
        raise UsageError(f"'{path}' would hold {len(tokens)} tokens, more than llm.c's int32 header counts; "
                         "prepare the corpus in several parts")
    width = 2 if vocab <= 2**16 else 4
    magic, version, dtype = LAYOUTS[width]
    header = np.zeros(HEADER_INTS, dtype="<i4")
    header[:3] = (magic, version, len(tokens))
    partial = path + ".partial"
    with open(partial, "wb") as f:
        f.write(header.tobytes())
        f.write(tokens.astype(dtype).tobytes())
        f.flush()
        os.fsync(f.fileno())
    os.replace(partial, path)
    return width


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("inputs", nargs="+", metavar="TEXT_FILE", help="UTF-8 text, one document per file")
    parser.add_argument("--tokenizer", required=True, help="a tokenizer.json, or a model directory holding one")
    parser.add_argument("--out", required=True, help="directory for train.bin (and val.bin)")
    parser.add_argument("--val-fraction", type=float, default=0.1,
                        help="share of the token stream, from its end, written to val.bin (0: none)")
    parser.add_argument("--eot", default=None,
                        help="end-of-text token put before each document (default: the eos token the model "
                             "directory's tokenizer_config.json or config.json names, else the tokenizer's "
                             "<|endoftext|>, <|end_of_text|> or </s>; 'none' for no separator)")
    args = parser.parse_args(argv)
    try:
        if not 0.0 <= args.val_fraction < 1.0:
            raise UsageError(f"--val-fraction must be in [0, 1), got {args.val_fraction}")
        tokenizer = load_tokenizer(args.tokenizer)
        eot = end_of_text_id(tokenizer, args.eot, args.tokenizer)
        documents = list(encode_documents(tokenizer, args.inputs, eot))
        stream = np.concatenate(documents) if documents else np.zeros(0, dtype=np.int64)
        val_count = int(len(stream) * args.val_fraction)
        if args.val_fraction > 0 and val_count == 0:
            raise UsageError(f"--val-fraction {args.val_fraction} of {len(stream)} tokens is none; "
                             "give more text or --val-fraction 0")
        if len(stream) == 0:
            # A 0-token train.bin would only fail later, in accel-host.
            raise UsageError("the inputs encode to no tokens (empty text and --eot none); nothing to write")
        outputs = [("train.bin", stream[: len(stream) - val_count])]
        if val_count:
            outputs.append(("val.bin", stream[len(stream) - val_count:]))
        vocab = tokenizer.get_vocab_size(with_added_tokens=True)
        try:
            os.makedirs(args.out, exist_ok=True)
            for name, tokens in outputs:
                path = os.path.join(args.out, name)
                width = write_token_file(path, tokens, vocab)
                print(f"{path}: {len(tokens)} tokens, uint{8 * width}")
        except OSError as e:  # an --out that is a file, under a file, read-only, or a full disk
            raise UsageError(f"--out: cannot write '{e.filename or args.out}': {e.strerror or e}") from e
        print(f"{len(documents)} documents; vocabulary {vocab} (train with --vocab-size >= {vocab})")
    except UsageError as e:
        print(f"prepare_data.py: {e}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
