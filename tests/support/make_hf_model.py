"""Write a random-weight Hugging Face LlamaForCausalLM and its tokenizer, for vLLM to serve offline.

Run standalone with the Python of the vLLM venv (it has torch, transformers and tokenizers, and the
files must suit the transformers version vLLM itself loads them with); it imports nothing from
plateau_bench:

    python make_hf_model.py --out DIR

The directory then holds config.json, model.safetensors, tokenizer.json, tokenizer_config.json (with a
chat template) and special_tokens_map.json: everything ``vllm serve DIR`` and ``vllm bench serve
--tokenizer DIR`` need, with HF_HUB_OFFLINE=1.

Shape: 2 layers, hidden 128, 2 heads of head_dim 64. The head size is not arbitrary: vLLM's CPU attention
kernels only support certain head sizes (64 works, 16 does not).

Tokenizer: byte-level BPE trained with the ``tokenizers`` library on generated pseudo-English (seeded
syllable words), so any prompt text tokenizes and the model needs nothing from a hub. Training on
the same text gives the same merges, and torch is seeded before the weights are drawn, so the output
is deterministic.
"""

from __future__ import annotations

import argparse
import random
from pathlib import Path

import torch
from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
from transformers import LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast

SPECIAL_TOKENS = ["<unk>", "<s>", "</s>", "<pad>"]
CHAT_TEMPLATE = (
    "{{ bos_token }}"
    "{% for message in messages %}"
    "<|{{ message['role'] }}|>\n{{ message['content'] }}\n"
    "{% endfor %}"
    "{% if add_generation_prompt %}<|assistant|>\n{% endif %}"
)


def training_text(seed: int, lines: int = 4000) -> list[str]:
    rng = random.Random(seed)
    consonants, vowels = "bdfgklmnprstvz", "aeiou"
    vocabulary = [
        "".join(rng.choice(consonants) + rng.choice(vowels) for _ in range(rng.randint(1, 3)))
        for _ in range(600)
    ]
    punctuation = [".", ",", "?", "!", ":", ";"]
    text = []
    for _ in range(lines):
        words = [rng.choice(vocabulary) for _ in range(rng.randint(5, 20))]
        words[0] = words[0].capitalize()
        text.append(" ".join(words) + rng.choice(punctuation) + f" {rng.randint(0, 9999)}")
    return text


def train_tokenizer(seed: int, vocab_size: int) -> PreTrainedTokenizerFast:
    tokenizer = Tokenizer(models.BPE(unk_token="<unk>"))
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tokenizer.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        special_tokens=SPECIAL_TOKENS,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tokenizer.train_from_iterator(training_text(seed), trainer=trainer)
    wrapped = PreTrainedTokenizerFast(
        tokenizer_object=tokenizer,
        unk_token="<unk>",
        bos_token="<s>",
        eos_token="</s>",
        pad_token="<pad>",
        model_max_length=4096,
    )
    wrapped.chat_template = CHAT_TEMPLATE
    return wrapped


def build_model(tokenizer: PreTrainedTokenizerFast, seed: int) -> LlamaForCausalLM:
    config = LlamaConfig(
        vocab_size=len(tokenizer),
        hidden_size=128,
        intermediate_size=256,
        num_hidden_layers=2,
        num_attention_heads=2,
        num_key_value_heads=2,
        head_dim=64,
        max_position_embeddings=4096,
        bos_token_id=tokenizer.bos_token_id,
        eos_token_id=tokenizer.eos_token_id,
        pad_token_id=tokenizer.pad_token_id,
        tie_word_embeddings=False,
    )
    torch.manual_seed(seed)
    return LlamaForCausalLM(config).to(torch.bfloat16)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--seed", type=int, default=1234)
    parser.add_argument("--vocab-size", type=int, default=2048)
    args = parser.parse_args()

    # Written beside the target and renamed last, so a present directory is always a complete model.
    tmp = args.out.with_name(args.out.name + ".tmp")
    tokenizer = train_tokenizer(args.seed, args.vocab_size)
    model = build_model(tokenizer, args.seed)
    tokenizer.save_pretrained(tmp)
    model.save_pretrained(tmp, safe_serialization=True)
    tmp.rename(args.out)
    parameters = sum(p.numel() for p in model.parameters())
    print(f"wrote {args.out} (vocab {len(tokenizer)}, {parameters} parameters)")


if __name__ == "__main__":
    main()
