"""Flags shared by ``run`` and ``sweep`` (and their conversion into validated specs)."""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import Annotated
from urllib.parse import urlsplit

import typer
from rich.console import Console

from plateau_bench.errors import ConfigError
from plateau_bench.spec import TargetSpec, WorkloadSpec, parse_duration, redact_url, split_userinfo

TARGET = "Target"
WORKLOAD = "Workload"
OUTPUT = "Output"
TWIN = "Embedded twin (no --url)"

Url = Annotated[str | None, typer.Option("--url", help="OpenAI-compatible base URL. Omit to start the "
                                         "embedded simulated engine.", rich_help_panel=TARGET)]
Model = Annotated[str | None, typer.Option("--model", help="Model name (default: the first one /v1/models "
                                           "lists).", rich_help_panel=TARGET)]
Endpoint = Annotated[str, typer.Option("--endpoint", help="completions | chat", rich_help_panel=TARGET)]
ApiKey = Annotated[str | None, typer.Option("--api-key", envvar="OPENAI_API_KEY", show_envvar=True,
                                            help="Bearer token; never written to output or results.",
                                            rich_help_panel=TARGET)]
Headers = Annotated[list[str] | None, typer.Option("--header", help="Extra HTTP header K:V (repeatable).",
                                                   rich_help_panel=TARGET)]
SecretHeader = Annotated[list[str] | None, typer.Option(
    "--secret-header", metavar="NAME",
    help="A --header whose value is a secret: shown as *** in output and results (repeatable). Headers "
         "named with auth, key, token, secret, cookie, passw or session are secret already.",
    rich_help_panel=TARGET)]
Timeout = Annotated[str, typer.Option("--timeout", help="Per-request timeout, e.g. 600s.",
                                      rich_help_panel=TARGET)]
WaitReady = Annotated[str | None, typer.Option("--wait-ready", help="Wait up to this long for the server to "
                                               "become ready, e.g. 5m.", rich_help_panel=TARGET)]
MetricsUrl = Annotated[str | None, typer.Option("--metrics-url", help="Prometheus /metrics URL (default: "
                                                "the target's).", rich_help_panel=TARGET)]
NoMetrics = Annotated[bool, typer.Option("--no-metrics", help="Do not scrape /metrics (client-only "
                                         "diagnosis).", rich_help_panel=TARGET)]
InputLen = Annotated[int, typer.Option("--input-len", help="Prompt tokens per request.", rich_help_panel=WORKLOAD)]
OutputLen = Annotated[int, typer.Option("--output-len", help="Output tokens per request (max_tokens, "
                                        "ignore_eos).", rich_help_panel=WORKLOAD)]
RangeRatio = Annotated[float, typer.Option("--range-ratio", help="Spread lengths uniformly in "
                                           "len*(1±r).", rich_help_panel=WORKLOAD)]
Dataset = Annotated[Path | None, typer.Option("--dataset", help="JSONL of prompts or ShareGPT JSON.",
                                              rich_help_panel=WORKLOAD)]
Seed = Annotated[int, typer.Option("--seed", help="Same seed, same prompts.", rich_help_panel=WORKLOAD)]
Tokenizer = Annotated[str | None, typer.Option("--tokenizer", help="Local Hugging Face tokenizer dir or "
                                               "tokenizer.json (exact prompt lengths).", rich_help_panel=WORKLOAD)]
Out = Annotated[Path | None, typer.Option("--out", help="Result directory (result.json, requests.jsonl, "
                                          "telemetry.jsonl).", rich_help_panel=OUTPUT)]
Quiet = Annotated[bool, typer.Option("--quiet", "-q", help="No live view.", rich_help_panel=OUTPUT)]
Json = Annotated[bool, typer.Option("--json", help="Print the machine summary (JSON) only.",
                                    rich_help_panel=OUTPUT)]
Repeat = Annotated[int, typer.Option("--repeat", help="Measure each level N times, in interleaved rounds over "
                                     "the levels; report between-run 95 % intervals.", rich_help_panel=OUTPUT)]
Preset = Annotated[str, typer.Option("--preset", help="Twin preset when no --url is given.", rich_help_panel=TWIN)]
SimSpeed = Annotated[float, typer.Option("--sim-speed", help="Twin clock speed-up when no --url is given.",
                                         rich_help_panel=TWIN)]


_HEADER_NAME = re.compile(r"^[!#$%&'*+.^_`|~0-9A-Za-z-]+$")  # an HTTP token (RFC 9110)


def url_given(url: str | None) -> bool:
    """Whether ``--url`` was given: None means not (start the embedded twin); empty is an error."""
    if url is None:
        return False
    if not url.strip():
        raise ConfigError("--url is empty: give the server's URL (http://host:port), or omit --url to "
                          "start the embedded simulated engine")
    return True


def target_spec(url: str, model: str | None, endpoint: str, api_key: str | None, headers: list[str] | None,
                timeout: str, secret_headers: list[str] | None = None) -> TargetSpec:
    """The validated target. Messages never show a secret: the URL is shown redacted, a header by name."""
    if endpoint not in ("completions", "chat"):
        raise ConfigError(f"--endpoint must be 'completions' or 'chat' (got {endpoint!r})")
    url_given(url)
    url = url.strip()
    if not url.startswith(("http://", "https://")):
        raise ConfigError(f"--url must start with http:// or https:// (got {redact_url(url)!r})")
    try:
        parts = urlsplit(url)
        _ = parts.port  # raises on a port that is not a number in range
    except ValueError as exc:
        raise ConfigError(f"--url {redact_url(url)!r} is not a valid URL ({exc})") from None
    if not parts.hostname:
        raise ConfigError(f"--url {redact_url(url)!r} names no host")
    named = tuple(n.strip() for n in secret_headers or [])
    parsed: dict[str, str] = {}
    for h in headers or []:
        key, sep, value = h.partition(":")
        key = key.strip()
        if not sep or not key:
            raise ConfigError("--header must look like Name:value; one has no 'Name:' part (not shown in "
                              "case it holds a secret)")
        if not _HEADER_NAME.match(key):
            raise ConfigError("--header names must be HTTP tokens (letters, digits, -); got one that is not "
                              "(not shown in case it holds a secret)")
        if "\r" in value or "\n" in value:
            raise ConfigError(f"--header {key}: the value holds a line break")
        parsed[key] = value.strip()
    lowered = {k.lower() for k in parsed}
    for name in named:
        if name.lower() not in lowered:
            raise ConfigError(f"--secret-header {name} names no --header given (check the spelling)")
    if api_key is not None and ("\r" in api_key or "\n" in api_key):
        raise ConfigError("--api-key holds a line break")
    if split_userinfo(url)[1] is not None and (api_key or "authorization" in lowered):
        given = "--api-key" if api_key else "--header Authorization"
        raise ConfigError(f"--url carries credentials (user:password@) and {given} is given too: both are the "
                          "Authorization header; give one")
    return TargetSpec(url=url.rstrip("/"), model=model, endpoint=endpoint,  # type: ignore[arg-type]
                      api_key=api_key or None, headers=parsed, timeout_s=parse_duration(timeout, "--timeout"),
                      secret_headers=named)


def workload_spec(input_len: int, output_len: int, range_ratio: float, dataset: Path | None, seed: int,
                  tokenizer: str | None) -> WorkloadSpec:
    if dataset is not None and not os.access(dataset, os.R_OK):
        raise ConfigError(f"cannot read dataset {dataset}")
    if tokenizer is not None and not Path(tokenizer).exists():
        raise ConfigError(f"--tokenizer {tokenizer}: no such file or directory")
    spec = WorkloadSpec(input_len=input_len, output_len=output_len, range_ratio=range_ratio,
                        dataset=str(dataset) if dataset else None, seed=seed, tokenizer=tokenizer)
    spec.validate()
    return spec


def wide_console() -> Console:
    """Tables keep one line per level: when stdout is not a terminal, do not wrap at 80 columns."""
    console = Console()
    return console if console.is_terminal else Console(width=160)


Overwrite = Annotated[bool, typer.Option("--overwrite", help="Replace the results already in --out (default: "
                                         "refuse, so nothing measured is lost).", rich_help_panel=OUTPUT)]


def check_load_size(connections: int) -> None:
    """Refuse what cannot work before anything is allocated; raise the open-file limit when it allows."""
    from plateau_bench.driver.limits import ensure_open_files, files_needed

    note = ensure_open_files(files_needed(connections))
    if note:
        typer.echo(f"plateau: {note}", err=True)


GpuMetricsUrl = Annotated[list[str] | None, typer.Option(
    "--gpu-metrics-url", metavar="URL",
    help="An NVIDIA DCGM exporter's /metrics (repeatable, one per node): GPU power, SM activity, memory "
         "bandwidth and PCIe/NVLink traffic per level, read by the verdict. Run the exporter with -c 1000 "
         "(its default collects every 30 s).", rich_help_panel=TARGET)]


def gpu_metrics_urls(urls: list[str] | None) -> list[str]:
    """Each ``--gpu-metrics-url`` checked and completed to its ``/metrics`` path."""
    out = []
    for url in urls or []:
        if not url.startswith(("http://", "https://")):
            raise ConfigError(f"--gpu-metrics-url must start with http:// or https:// (got {redact_url(url)!r})")
        out.append(url if urlsplit(url).path not in ("", "/") else url.rstrip("/") + "/metrics")
    return out
