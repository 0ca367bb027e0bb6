"""Write a random-weight llama-architecture GGUF model that llama.cpp's llama-server can serve.

Run standalone with a Python that has the PyPI ``gguf`` package and numpy (the provisioning scripts
keep one in its own small venv); it imports nothing from plateau_bench, so it needs no project install:

    python make_gguf_model.py --size mid --out mid.gguf

The model is meant for load tests, not for language: what matters is its size (which sets the cost of
a decode step, and so whether batching pays), a tokenizer llama-server accepts, and a chat template.

Vocabulary: SentencePiece style ("llama" tokenizer model), as llama.cpp expects for the llama
architecture: <unk>, <s>, </s>, 256 byte-fallback tokens <0xNN>, then printable ASCII characters, the
word-boundary marker "▁" and every prefix of a few hundred generated words ("▁ka", "▁kat", ...). Every
prefix is present so that llama.cpp's SPM tokenizer, which merges adjacent pieces only when the merged
piece is in the vocabulary, can reach the whole words.

Clean output: with random weights the model would also sample byte-fallback and control tokens, which
decode to nothing or to broken UTF-8, so a streamed response would carry empty or merged chunks. One
residual dimension (0) is therefore held constant: every embedding has the same value there, and no
attention or feed-forward output writes to it. After the final RMSNorm that dimension is always
positive, so a large negative output weight in that column gives every unwanted token a very negative
logit whatever the context. Generated text is then plain ASCII words, one non-empty chunk per token, and
end-of-sequence is never sampled, so every request runs to max_tokens.

Deterministic: all weights come from numpy's PCG64 seeded with --seed.
"""

from __future__ import annotations

import argparse
import random
from dataclasses import dataclass
from pathlib import Path

import gguf
import numpy as np

SPACE = "\u2581"  # SentencePiece's word-boundary marker
CHAT_TEMPLATE = (
    "{% for message in messages %}"
    "<|{{ message['role'] }}|>\n{{ message['content'] }}\n"
    "{% endfor %}"
    "{% if add_generation_prompt %}<|assistant|>\n{% endif %}"
)
SUPPRESSED_LOGIT_WEIGHT = -200.0


@dataclass(frozen=True)
class Size:
    layers: int
    hidden: int
    feed_forward: int
    heads: int
    kv_heads: int


SIZES = {
    "tiny": Size(layers=2, hidden=128, feed_forward=256, heads=2, kv_heads=2),
    # Big enough that a decode step costs milliseconds, so running 4 sequences per step pays.
    "mid": Size(layers=8, hidden=512, feed_forward=1536, heads=8, kv_heads=8),
}


def generated_words(seed: int, count: int) -> list[str]:
    """Pronounceable pseudo-words from consonant-vowel syllables; order fixed by the seed."""
    rng = random.Random(seed)
    consonants, vowels = "bdfgklmnprstvz", "aeiou"
    words: set[str] = set()
    while len(words) < count:
        syllables = rng.randint(1, 3)
        words.add("".join(rng.choice(consonants) + rng.choice(vowels) for _ in range(syllables)))
    return sorted(words)


def build_vocab(seed: int) -> tuple[list[str], list[float], list[int]]:
    """Token strings, SPM scores (higher merges first) and llama.cpp token types."""
    types = gguf.TokenType
    tokens = ["<unk>", "<s>", "</s>"]
    token_types = [types.UNKNOWN, types.CONTROL, types.CONTROL]
    tokens += [f"<0x{byte:02X}>" for byte in range(256)]
    token_types += [types.BYTE] * 256
    pieces: list[str] = [SPACE] + [chr(code) for code in range(0x21, 0x7F)]
    seen = set(pieces)
    for word in generated_words(seed, 400):
        marked = SPACE + word
        for end in range(2, len(marked) + 1):
            prefix = marked[:end]
            if prefix not in seen:
                seen.add(prefix)
                pieces.append(prefix)
    tokens += pieces
    token_types += [types.NORMAL] * len(pieces)
    # Longer pieces score higher so the tokenizer prefers whole words over their prefixes.
    scores = [0.0] * (3 + 256) + [float(len(piece)) for piece in pieces]
    return tokens, scores, [int(kind) for kind in token_types]


def random_weights(size: Size, vocab: int, suppressed: np.ndarray, seed: int) -> dict[str, np.ndarray]:
    rng = np.random.Generator(np.random.PCG64(seed))
    head_dim = size.hidden // size.heads
    kv_dim = head_dim * size.kv_heads

    def matrix(rows: int, cols: int) -> np.ndarray:
        # PyTorch layout (out_features, in_features); gguf reverses it into ggml's order.
        return rng.normal(0.0, 1.0 / np.sqrt(cols), size=(rows, cols)).astype(np.float32)

    embeddings = rng.normal(0.0, 1.0, size=(vocab, size.hidden)).astype(np.float32)
    embeddings[:, 0] = 1.0  # the constant residual dimension (see the module docstring)
    tensors: dict[str, np.ndarray] = {"token_embd.weight": embeddings}
    for layer in range(size.layers):
        prefix = f"blk.{layer}"
        attn_output = matrix(size.hidden, size.hidden)
        ffn_down = matrix(size.hidden, size.feed_forward)
        attn_output[0, :] = 0.0
        ffn_down[0, :] = 0.0
        tensors |= {
            f"{prefix}.attn_norm.weight": np.ones(size.hidden, dtype=np.float32),
            f"{prefix}.attn_q.weight": matrix(size.hidden, size.hidden),
            f"{prefix}.attn_k.weight": matrix(kv_dim, size.hidden),
            f"{prefix}.attn_v.weight": matrix(kv_dim, size.hidden),
            f"{prefix}.attn_output.weight": attn_output,
            f"{prefix}.ffn_norm.weight": np.ones(size.hidden, dtype=np.float32),
            f"{prefix}.ffn_gate.weight": matrix(size.feed_forward, size.hidden),
            f"{prefix}.ffn_up.weight": matrix(size.feed_forward, size.hidden),
            f"{prefix}.ffn_down.weight": ffn_down,
        }
    output = matrix(vocab, size.hidden) * 4.0  # sharper distributions than a plain init
    output[:, 0] = 0.0
    output[suppressed, 0] = SUPPRESSED_LOGIT_WEIGHT
    tensors["output_norm.weight"] = np.ones(size.hidden, dtype=np.float32)
    tensors["output.weight"] = output
    return tensors


def write_model(out: Path, size_name: str, seed: int, context: int) -> None:
    size = SIZES[size_name]
    tokens, scores, token_types = build_vocab(seed)
    suppressed = np.array(
        [index for index, kind in enumerate(token_types) if kind != int(gguf.TokenType.NORMAL)]
    )
    tensors = random_weights(size, len(tokens), suppressed, seed)

    tmp = out.with_name(out.name + ".tmp")
    writer = gguf.GGUFWriter(str(tmp), "llama")
    writer.add_name(f"plateau-{size_name}")
    writer.add_context_length(context)
    writer.add_embedding_length(size.hidden)
    writer.add_block_count(size.layers)
    writer.add_feed_forward_length(size.feed_forward)
    writer.add_head_count(size.heads)
    writer.add_head_count_kv(size.kv_heads)
    writer.add_rope_dimension_count(size.hidden // size.heads)
    writer.add_layer_norm_rms_eps(1e-5)
    writer.add_file_type(gguf.LlamaFileType.ALL_F32)
    writer.add_vocab_size(len(tokens))
    writer.add_tokenizer_model("llama")
    writer.add_token_list(tokens)
    writer.add_token_scores(scores)
    writer.add_token_types(token_types)
    writer.add_unk_token_id(0)
    writer.add_bos_token_id(1)
    writer.add_eos_token_id(2)
    writer.add_add_bos_token(True)
    writer.add_add_eos_token(False)
    writer.add_chat_template(CHAT_TEMPLATE)
    for name, array in tensors.items():
        writer.add_tensor(name, array)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    tmp.replace(out)  # atomic: a reader never sees a half-written model


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--size", choices=sorted(SIZES), required=True)
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--seed", type=int, default=1234)
    parser.add_argument("--context", type=int, default=8192)
    args = parser.parse_args()
    args.out.parent.mkdir(parents=True, exist_ok=True)
    write_model(args.out, args.size, args.seed, args.context)
    print(f"wrote {args.out} ({args.out.stat().st_size / 1e6:.1f} MB)")


if __name__ == "__main__":
    main()
