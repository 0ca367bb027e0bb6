"""Tokenizers trained in the test from generated text: no downloads, real ``tokenizers`` objects."""

from __future__ import annotations

from pathlib import Path

import pytest
from tokenizers import Tokenizer

from support.trained_tokenizers import train_byte_bpe, train_char_bpe, train_metaspace_bpe


@pytest.fixture(scope="session")
def byte_bpe() -> Tokenizer:
    return train_byte_bpe()


@pytest.fixture(scope="session")
def metaspace_bpe() -> Tokenizer:
    return train_metaspace_bpe()


@pytest.fixture(scope="session")
def char_bpe() -> Tokenizer:
    return train_char_bpe()


@pytest.fixture
def tokenizer_dir(tmp_path: Path, byte_bpe: Tokenizer) -> Path:
    d = tmp_path / "model"
    d.mkdir()
    byte_bpe.save(str(d / "tokenizer.json"))
    return d
