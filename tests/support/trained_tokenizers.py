"""Tokenizers trained from generated text: no downloads, real ``tokenizers`` objects."""

from __future__ import annotations

import random

from tokenizers import Tokenizer, decoders, models, normalizers, pre_tokenizers, trainers

from plateau_bench.workload.words import WORDS

SUFFIXES = ("", "", "s", "ing", "ed", ",", ".", "'s", "-")


def corpus(lines: int = 1500, seed: int = 0) -> list[str]:
    rng = random.Random(seed)
    return [" ".join(rng.choice(WORDS) + rng.choice(SUFFIXES) for _ in range(24)) for _ in range(lines)]


def train_byte_bpe(vocab: int = 2000) -> Tokenizer:
    """A GPT-2 style tokenizer: byte-level pre-tokenizer and decoder, BPE, two special tokens."""
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=vocab, special_tokens=["<s>", "</s>"], show_progress=False,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    tok.train_from_iterator(corpus(), trainer)
    return tok


def train_metaspace_bpe(vocab: int = 1500) -> Tokenizer:
    """A SentencePiece style tokenizer: Metaspace, so decoding is not plain concatenation."""
    tok = Tokenizer(models.BPE(unk_token="<unk>"))
    tok.normalizer = normalizers.NFKC()
    tok.pre_tokenizer = pre_tokenizers.Metaspace()
    tok.decoder = decoders.Metaspace()
    trainer = trainers.BpeTrainer(vocab_size=vocab, special_tokens=["<unk>", "<s>"], show_progress=False)
    tok.train_from_iterator(corpus(seed=1), trainer)
    return tok


def train_char_bpe(vocab: int = 600) -> Tokenizer:
    """No pre-tokenizer at all: merges cross word boundaries, so nothing is stable for free."""
    tok = Tokenizer(models.BPE(unk_token="<unk>"))
    tok.decoder = decoders.BPEDecoder()
    trainer = trainers.BpeTrainer(vocab_size=vocab, special_tokens=["<unk>"], show_progress=False)
    tok.train_from_iterator(corpus(lines=400, seed=2), trainer)
    return tok
