"""Workload synthesis: prompts of exact token lengths, datasets, and arrival schedules."""

from plateau_bench.workload.arrivals import arrival_offsets_ns, iter_arrival_offsets_ns
from plateau_bench.workload.dataset import DatasetEntry, load_dataset
from plateau_bench.workload.lengths import LengthSampler, sample_lengths
from plateau_bench.workload.prompts import Prompt, Workload, build_prompts, synthesize
from plateau_bench.workload.tokens import (
    TOKEN_SOURCE_SERVER_TOKENIZER,
    CountRemote,
    EstimateCounter,
    LocalTokenizer,
    RemoteCounter,
    TokenCounter,
    choose_counter,
)

__all__ = [
    "TOKEN_SOURCE_SERVER_TOKENIZER",
    "CountRemote",
    "DatasetEntry",
    "EstimateCounter",
    "LengthSampler",
    "LocalTokenizer",
    "Prompt",
    "RemoteCounter",
    "TokenCounter",
    "Workload",
    "arrival_offsets_ns",
    "build_prompts",
    "choose_counter",
    "iter_arrival_offsets_ns",
    "load_dataset",
    "sample_lengths",
    "synthesize",
]
