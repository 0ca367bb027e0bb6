"""Prompts of an exact token count, built with a local tokenizer.

The known difficulty: decoding a list of ``N`` token ids and re-encoding the text rarely gives
``N`` ids back. Neighbouring tokens merge (``" the" + "ing"`` -> ``" thein" + "g"``), byte-level
fragments of one character split or join, and normalisers rewrite spaces. vLLM's and SGLang's
random datasets accept the drift (or truncate and re-decode once); here it is corrected until the
re-encoded length is exact.

Method:

1. **Candidates.** A sample of the vocabulary (special and added tokens excluded) is decoded one
   token at a time; a token is kept if its text is printable, not blank, has no replacement
   character, and re-encodes to itself. *Word-start* tokens are preferred: a pair of the token
   decodes with whitespace between and re-encodes to the same pair. Any sequence of word-start
   tokens re-encodes to itself under the whitespace-splitting pre-tokenizers of real models
   (byte-level BPE, Metaspace, WordPiece), so boundaries between them cannot drift.
2. **Pool.** Candidates are drawn at random into one long sequence (longest target + margin),
   decoded once and re-encoded once. It is shared by all prompts, so the cost is paid once.
3. **Prompt.** Each prompt is a random prefix of a few candidate tokens (different for every
   request, so a server's prefix cache cannot reuse one prompt for the next) followed by a slice
   of the pool at a random offset, sized to the target.
4. **Fast path.** When every candidate is a word-start token and the pool re-encoded to exactly
   the drawn ids, each prompt's count equals its target by construction. Texts are then cut out of
   the decoded pool (string slicing, no tokenizer call per prompt) and a random sample of about
   ``VERIFY_SAMPLE_TOKENS`` tokens is re-encoded to check. One miss in the sample abandons the
   fast path for step 5 on every prompt.
5. **Correction.** All prompts are decoded and re-encoded in batches (the Rust library uses every
   core). A prompt that re-encodes to ``target + d`` tokens has its slice shortened by ``d``; one
   that comes up short is extended along the pool. Drift only happens at the ends of a slice, so
   this converges in one or two rounds; a prompt caught in a cycle (``+1``, ``-1``, ``+1``) moves
   to another offset. After ``MAX_ROUNDS`` a prompt keeps its true, measured count.

``Prompt.prompt_tokens`` is the measured count (or, on the fast path, the count guaranteed by
construction and checked on the sample), special tokens excluded; ``misses`` reports how many
prompts missed their target. The cost is O(total tokens), never O(n * len^2): 10,000 prompts of
1,024 tokens take a couple of seconds (``bench/bench_prompts.py``).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np

from plateau_bench.errors import ConfigError
from plateau_bench.workload.tokens import LocalTokenizer

PREFIX_TOKENS = 4
CANDIDATE_SAMPLE = 8192
MIN_CANDIDATES = 16
POOL_MARGIN = 512
MAX_ROUNDS = 12
# The fast path re-encodes a sample of about this many tokens (and at least MIN_VERIFIED prompts).
VERIFY_SAMPLE_TOKENS = 131_072
MIN_VERIFIED = 16


@dataclass(frozen=True)
class ExactResult:
    texts: list[str]
    counts: list[int]
    misses: int        # prompts whose final count differs from the target
    rounds: int        # full decode/re-encode rounds (0: fast path, sample verified)
    verified: int      # prompts whose count was re-encoded and checked
    pool_tokens: int
    candidates: int


@dataclass(frozen=True)
class Candidates:
    ids: np.ndarray
    pieces: dict[int, str]   # each candidate's decoded text
    word_start: bool         # all candidates start a word: sequences of them re-encode locally
    concatenative: bool      # decode(a + b) == decode(a) + decode(b) for these tokens


def candidate_ids(tok: LocalTokenizer, rng: np.random.Generator) -> Candidates:
    """Vocabulary tokens that decode to printable text and re-encode to themselves.

    Word-start tokens are preferred: a pair of one decodes with whitespace between and re-encodes
    to the same pair, so any sequence of them re-encodes to itself under a whitespace-splitting
    pre-tokenizer (byte-level BPE, Metaspace, WordPiece), and the boundaries never drift.
    """
    inner = tok.tokenizer
    added = set(inner.get_added_tokens_decoder().keys())
    base = sorted(i for i in inner.get_vocab(with_added_tokens=False).values() if i not in added)
    if not base:
        raise ConfigError(f"--tokenizer {tok.name}: the vocabulary is empty")
    ids = np.asarray(base, dtype=np.int64)
    if len(ids) > CANDIDATE_SAMPLE:
        ids = np.sort(rng.choice(ids, CANDIDATE_SAMPLE, replace=False))
    texts = tok.decode_many([[int(i)] for i in ids])
    printable = [
        (int(i), t) for i, t in zip(ids, texts, strict=True)
        if t.strip() and t.isprintable() and "\ufffd" not in t
    ]
    if not printable:
        raise ConfigError(f"--tokenizer {tok.name}: no printable tokens to build prompts from")
    encodings = inner.encode_batch_fast([t for _, t in printable], add_special_tokens=False)
    stable = [(i, t) for (i, t), e in zip(printable, encodings, strict=True) if list(e.ids) == [i]]
    pairs = tok.decode_many([[i, i] for i, _ in stable])
    pair_ids = inner.encode_batch_fast(pairs, add_special_tokens=False)
    word_start = [
        (i, t, pair == t + t) for (i, t), pair, e in zip(stable, pairs, pair_ids, strict=True)
        if len(pair) > len(t) and pair[len(t)].isspace() and list(e.ids) == [i, i]
    ]
    if len(word_start) >= MIN_CANDIDATES:
        return Candidates(
            np.asarray([i for i, _, _ in word_start], dtype=np.int64),
            {i: t for i, t, _ in word_start},
            word_start=True,
            concatenative=all(c for _, _, c in word_start),
        )
    chosen = stable if len(stable) >= MIN_CANDIDATES else printable
    return Candidates(np.asarray([i for i, _ in chosen], dtype=np.int64), dict(chosen),
                      word_start=False, concatenative=False)


def build_pool(
    tok: LocalTokenizer, cands: Candidates, rng: np.random.Generator, min_len: int
) -> tuple[list[int], bool]:
    """A stable (decoded then re-encoded) id sequence of at least ``min_len`` tokens.

    Returns the pool and whether re-encoding gave back exactly the drawn ids.
    """
    pool: list[int] = []
    identity = True
    while len(pool) < min_len:
        drawn = rng.choice(cands.ids, max(min_len - len(pool), 256)).tolist()
        encoded = tok.encode(tok.decode_many([drawn])[0])
        identity = identity and encoded == drawn and not pool
        pool.extend(encoded)
    return pool, identity


@dataclass
class _Draft:
    target: int
    prefix: list[int]
    offset: int
    body: int
    seen: set[int] = field(default_factory=set)

    def ids(self, pool: Sequence[int]) -> list[int]:
        return self.prefix + list(pool[self.offset:self.offset + self.body])


def exact_texts(tok: LocalTokenizer, targets: Sequence[int], rng: np.random.Generator,
                cands: Candidates | None = None, verify_tokens: int = VERIFY_SAMPLE_TOKENS) -> ExactResult:
    """Texts whose re-encoded length equals each target (see the module docstring); ``cands``: the
    candidates chosen once for a run, for prompts built chunk after chunk (``workload.feed``), which
    also re-encode a smaller sample (``verify_tokens``): the run's first prompts checked the method."""
    if not targets:
        return ExactResult([], [], 0, 0, 0, 0, 0)
    cands = cands if cands is not None else candidate_ids(tok, rng)
    longest = max(targets)
    pool, identity = build_pool(tok, cands, rng, longest + 2 * POOL_MARGIN)
    span = len(pool) - longest - POOL_MARGIN  # offsets leave room to extend a slice

    drafts: list[_Draft] = []
    for target in targets:
        k = min(PREFIX_TOKENS, max(target - 1, 1))
        prefix = rng.choice(cands.ids, k).tolist()
        drafts.append(_Draft(target, prefix, int(rng.integers(0, span)), max(target - k, 0)))

    if cands.word_start and identity:
        fast = _fast_path(tok, cands, pool, drafts, rng, verify_tokens)
        if fast is not None:
            return fast
    return _correct(tok, cands, pool, span, drafts)


def _fast_path(
    tok: LocalTokenizer, cands: Candidates, pool: list[int], drafts: list[_Draft], rng: np.random.Generator,
    verify_tokens: int = VERIFY_SAMPLE_TOKENS,
) -> ExactResult | None:
    """Every token is a word-start candidate and the pool re-encodes to itself: counts are exact
    by construction. Texts are sliced from the decoded pool, and a sample is re-encoded to make
    sure; ``None`` (any miss) sends every prompt through the full correction instead."""
    if cands.concatenative:
        pieces = [cands.pieces[i] for i in pool]
        starts = np.concatenate(([0], np.cumsum([len(p) for p in pieces]))).tolist()
        pool_text = "".join(pieces)
        texts = [
            "".join(cands.pieces[p] for p in d.prefix) + pool_text[starts[d.offset]:starts[d.offset + d.body]]
            for d in drafts
        ]
    else:
        texts = tok.decode_many([d.ids(pool) for d in drafts])
    n = len(drafts)
    per_prompt = max(1, sum(d.target for d in drafts) // n)
    n_sample = min(n, max(MIN_VERIFIED, verify_tokens // per_prompt))
    sample = range(n) if n_sample == n else sorted(rng.choice(n, n_sample, replace=False).tolist())
    lengths = tok.encode_lengths([texts[i] for i in sample])
    if any(length != drafts[i].target for i, length in zip(sample, lengths, strict=True)):
        return None
    return ExactResult(texts, [d.target for d in drafts], 0, 0, n_sample, len(pool), len(cands.ids))


def _correct(
    tok: LocalTokenizer, cands: Candidates, pool: list[int], span: int, drafts: list[_Draft]
) -> ExactResult:
    """Decode, re-encode, and resize each slice by its error until every count is exact."""
    texts = [""] * len(drafts)
    counts = [0] * len(drafts)
    pending = list(range(len(drafts)))
    rounds = 0
    while pending and rounds < MAX_ROUNDS:
        rounds += 1
        decoded = tok.decode_many([drafts[i].ids(pool) for i in pending])
        lengths = tok.encode_lengths(decoded)
        still: list[int] = []
        for i, text, n in zip(pending, decoded, lengths, strict=True):
            texts[i], counts[i] = text, n
            d = drafts[i]
            if n == d.target:
                continue
            d.seen.add(d.body)
            d.body = max(d.body + d.target - n, 0)
            if d.body in d.seen:
                # a cycle: this cut point cannot hit the target, try another stretch of the pool
                d.offset = (d.offset + 1 + d.target) % span
                d.body = max(d.target - len(d.prefix), 0)
                d.seen.clear()
            if d.body == 0 and n > d.target and len(d.prefix) > 1:
                d.prefix = d.prefix[:-1]
            still.append(i)
        pending = still
    return ExactResult(texts, counts, len(pending), rounds, len(drafts), len(pool), len(cands.ids))
