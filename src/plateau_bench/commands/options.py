"""Flags shared by ``run`` and ``sweep`` (and their conversion into validated specs)."""

from __future__ import annotations

import os
import re
import secrets
from pathlib import Path
from typing import Annotated
from urllib.parse import urlsplit

import typer
from rich.console import Console

from plateau_bench.commands.config_file import load_config
from plateau_bench.commands.groups import OptionGroup
from plateau_bench.errors import ConfigError, PlateauError
from plateau_bench.redaction import redact_url, split_userinfo
from plateau_bench.spec import (
    DEFAULT_SESSION_HEADER,
    LengthSpec,
    TargetSpec,
    WorkloadSpec,
    parse_duration,
    parse_length,
)
from plateau_bench.sweep.job import Placement, Telemetry, Twin

TARGET = "Target"
WORKLOAD = "Workload"
OUTPUT = "Output"
TWIN = "Simulated engine"

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
_DISTS = "N, uniform:lo,hi, normal:mean,sd, lognormal:mean,sd or file:PATH"
InputLen = Annotated[str, typer.Option("--input-len", help=f"Prompt tokens per request: {_DISTS}.",
                                       rich_help_panel=WORKLOAD)]
OutputLen = Annotated[str, typer.Option("--output-len", help="Output tokens per request (max_tokens, "
                                        f"ignore_eos): {_DISTS}.", rich_help_panel=WORKLOAD)]
RangeRatio = Annotated[float, typer.Option("--range-ratio", help="Spread plain lengths: len*(1±r), or as "
                                           "--length-convention says.", rich_help_panel=WORKLOAD)]
LengthConvention = Annotated[str, typer.Option(
    "--length-convention", help="How --range-ratio spreads lengths: plateau (len*(1±r)), vllm (vLLM's random "
    "dataset: floor/ceil of len*(1±r), its seed stream) or sglang (bench_serving's random dataset: "
    "[max(1, r*len), len], its seed stream).", rich_help_panel=WORKLOAD)]
PrefixGroups = Annotated[int, typer.Option("--prefix-groups", help="Shared prefixes: G distinct system prompts; "
                                           "each request starts with one (needs --prefix-len).",
                                           rich_help_panel=WORKLOAD)]
PrefixLen = Annotated[int, typer.Option("--prefix-len", help="Tokens of each shared prefix; --input-len is each "
                                        "request's own suffix after it.", rich_help_panel=WORKLOAD)]
Sessions = Annotated[int, typer.Option("--sessions", help="Multi-turn: N conversations, each carrying its "
                                       "history; --concurrency counts conversations (closed loop).",
                                       rich_help_panel=WORKLOAD)]
Turns = Annotated[str, typer.Option("--turns", help=f"Turns per conversation: {_DISTS}.",
                                    rich_help_panel=WORKLOAD)]
ThinkTime = Annotated[str, typer.Option("--think-time", help="Pause between an answer and the next turn, e.g. "
                                        "2s (default 0).", rich_help_panel=WORKLOAD)]
SessionHeader = Annotated[str, typer.Option("--session-header", help="Header carrying each conversation's id, "
                                            "for session-affine routers.", rich_help_panel=WORKLOAD)]
Trace = Annotated[Path | None, typer.Option("--trace", help="Replay a trace at its recorded times and lengths: "
                                            "Azure CSV, Mooncake JSONL (hash_ids), or plain JSONL/CSV "
                                            "(time_s, input_len, output_len).", rich_help_panel=WORKLOAD)]
Dataset = Annotated[Path | None, typer.Option("--dataset", help="JSONL of prompts or ShareGPT JSON.",
                                              rich_help_panel=WORKLOAD)]
AllowReuse = Annotated[bool, typer.Option("--allow-reuse", help="--dataset: repeat its prompts once every one was "
                                          "sent (each repeat counted) instead of stopping.",
                                          rich_help_panel=WORKLOAD)]
Seed = Annotated[int, typer.Option("--seed", help="Same seed, same lengths and schedule (every request its own "
                                   "prompt).", rich_help_panel=WORKLOAD)]
PromptSalt = Annotated[int | None, typer.Option("--prompt-salt", help="The prompts' text: new for every run by "
                                                "default (a server's prefix cache outlives a run); give a run's "
                                                "spec.workload.prompt_salt to send its prompts again.",
                                                rich_help_panel=WORKLOAD)]
Tokenizer = Annotated[str | None, typer.Option("--tokenizer", help="Local Hugging Face tokenizer dir or "
                                               "tokenizer.json (exact prompt lengths).", rich_help_panel=WORKLOAD)]
Out = Annotated[Path | None, typer.Option("--out", help="Result directory (result.json, requests.jsonl, "
                                          "telemetry.jsonl).", rich_help_panel=OUTPUT)]
Quiet = Annotated[bool, typer.Option("--quiet", "-q", help="Show no progress while measuring (the live view; "
                                     "tune's line per server start and level).", rich_help_panel=OUTPUT)]
CONFIG = "Config file"
ConfigFile = Annotated[Path | None, typer.Option(
    "--config", help="Read the flags from this YAML file (keys: the flags without the dashes, e.g. input-len: "
    "1024); flags given here override it. A result directory's config.yaml measures the same thing again.",
    is_eager=True, callback=load_config, expose_value=False, rich_help_panel=CONFIG)]
PrintConfig = Annotated[bool, typer.Option(
    "--print-config", help="Print the flags given (file and command line) as a config file, and exit.",
    rich_help_panel=CONFIG)]
Json = Annotated[bool, typer.Option("--json", help="Print the result as JSON only (for scripts).",
                                    rich_help_panel=OUTPUT)]
Workers = Annotated[str | None, typer.Option(
    "--workers", metavar="N|auto",
    help="Run the load in N processes on this machine (each its own event loop and connections), started "
         "once and sharing every level exactly; auto: one per 512 streams, up to the cores. Default: one process.",
    rich_help_panel=TARGET)]
Ray = Annotated[str | None, typer.Option(
    "--ray", metavar="auto|ADDRESS",
    help="Run the load as Ray actors on every node of a Ray cluster (auto: the one this machine belongs to; "
         "else its head's address). Needs plateau-bench[ray] on every node.", rich_help_panel=TARGET)]
WorkersPerNode = Annotated[int | None, typer.Option(
    "--workers-per-node", help="--ray: load actors per node (default 1).", rich_help_panel=TARGET)]
Repeat = Annotated[int, typer.Option("--repeat", help="Measure each level N times, in interleaved rounds over "
                                     "the levels; report between-run 95 % intervals.", rich_help_panel=OUTPUT)]
Drain = Annotated[bool, typer.Option(
    "--drain/--no-drain", help="--no-drain: a steady level whose estimate is precise cancels its requests in "
    "flight instead of waiting for them (none of their tokens is in its window): cheaper, with latency "
    "statistics from a window up to a cycle shorter.", rich_help_panel="Sweep")]
Preset = Annotated[str | None, typer.Option("--preset", help="The simulated engine's preset (see `plateau presets`; "
                                            "default tiny); run and sweep start it when no --url is given.",
                                            rich_help_panel=TWIN)]
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


def workload_spec(input_len: str | int, output_len: str | int, range_ratio: float, dataset: Path | None, seed: int,
                  tokenizer: str | None, length_convention: str = "plateau", prefix_groups: int = 0,
                  prefix_len: int = 0, sessions: int = 0, turns: str = "4", think_time: str = "0",
                  session_header: str = DEFAULT_SESSION_HEADER, *, closed_loop: bool = True,
                  trace: Path | None = None, trace_requests: int | None = None,
                  allow_reuse: bool = False, prompt_salt: int | None = None) -> WorkloadSpec:
    """The validated workload; ``closed_loop``: false for a sweep of bursts (sessions refuse those)."""
    if dataset is not None and not os.access(dataset, os.R_OK):
        raise ConfigError(f"cannot read dataset {dataset}")
    if tokenizer is not None and not Path(tokenizer).exists():
        raise ConfigError(f"--tokenizer {tokenizer}: no such file or directory")
    if trace is not None and not os.access(trace, os.R_OK):
        raise ConfigError(f"--trace {trace}: cannot read the file")
    in_len, in_dist = length_option(input_len, "--input-len")
    out_len, out_dist = length_option(output_len, "--output-len")
    spec = WorkloadSpec(input_len=in_len, output_len=out_len, range_ratio=range_ratio,
                        dataset=str(dataset) if dataset else None, allow_reuse=allow_reuse, seed=seed,
                        prompt_salt=prompt_salt,
                        tokenizer=tokenizer,
                        input_dist=in_dist, output_dist=out_dist,
                        length_convention=length_convention,  # type: ignore[arg-type]
                        prefix_groups=prefix_groups, prefix_len=prefix_len, sessions=sessions,
                        turns=parse_length(turns, "--turns") if sessions else None,
                        think_time_s=_think_time(think_time), session_header=session_header.strip(),
                        trace=str(trace) if trace is not None else None,
                        trace_requests=trace_requests if trace is not None else None)
    spec.validate()
    if spec.sessions and not closed_loop:
        raise ConfigError("--sessions sweeps steady closed loops or open-loop rates of conversations; burst "
                          "levels (num-requests = C) would send only their first turns")
    return spec


def prompt_salt(given: int | None, resume: Path | None = None) -> int:
    """The run's prompt salt: as given, else the resumed run's own (its prompts go on), else a new one."""
    if given is not None:
        if given < 0:
            raise ConfigError(f"--prompt-salt must be >= 0 (got {given})")
        return given
    if resume is not None:
        from plateau_bench.store import load_result

        try:
            saved = load_result(resume).spec.workload.prompt_salt
        except PlateauError:
            saved = None   # resuming it fails later, with the reason
        if saved is not None:
            return saved
    return secrets.randbits(63)


def _think_time(text: str) -> float:
    return 0.0 if text.strip() in ("0", "0s", "0ms") else parse_duration(text, "--think-time")


def length_option(value: str | int, flag: str) -> tuple[int, LengthSpec | None]:
    """A length flag as (nominal length, distribution or None for a plain number)."""
    from plateau_bench.workload.lengths import nominal_length

    spec = parse_length(str(value), flag)
    if spec.kind == "fixed":
        return int(spec.a), None
    return nominal_length(spec, flag), spec


def wide_console() -> Console:
    """Tables keep one line per level: when stdout is not a terminal, do not wrap at 80 columns."""
    console = Console()
    return console if console.is_terminal else Console(width=160)


Overwrite = Annotated[bool, typer.Option("--overwrite", help="Replace the results already in --out (default: "
                                         "refuse, so nothing measured is lost).", rich_help_panel=OUTPUT)]


def check_load_size(connections: int) -> None:
    """Refuse what cannot work before anything is allocated; raise the open-file limit when it allows."""
    from plateau_bench.driver.limits import check_local_ports, ensure_open_files, files_needed

    needed = files_needed(connections)
    check_local_ports(connections)
    note = ensure_open_files(needed)
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


MAX_WORKERS = 1024
OVERSUBSCRIBED = 8   # load processes per usable core beyond which --workers is refused


def parse_workers(text: str | None, cores: int | None = None) -> int | str | None:
    """``--workers``: None (one process, as always), ``"auto"`` or a count >= 1 (ConfigError otherwise).

    More processes than this machine's usable ``cores`` share them (a warning on stderr: each process's
    event loop then waits for a core, which the verdict would see as a load-generator limit); more than
    ``OVERSUBSCRIBED`` per core is refused."""
    if text is None:
        return None
    value = text.strip().lower()
    if value == "auto":
        return "auto"
    try:
        count = int(value)
    except ValueError:
        raise ConfigError(f"--workers must be a number of processes or 'auto' (got {text!r})") from None
    if not 1 <= count <= MAX_WORKERS:
        raise ConfigError(f"--workers must be between 1 and {MAX_WORKERS} (got {count})")
    if cores is None:
        from plateau_bench.driver.split import usable_cores

        cores = usable_cores()
    if count > OVERSUBSCRIBED * cores:
        raise ConfigError(f"--workers {count} is more than {OVERSUBSCRIBED} load processes per core on this "
                          f"machine's {cores} usable core(s): give at most {OVERSUBSCRIBED * cores}, or auto "
                          "(or --ray to spread the load over several machines)")
    if count > cores:
        typer.echo(f"plateau: --workers {count} on {cores} usable core(s): the processes share the cores, and "
                   "a level they cannot drive is named as load-generator bound", err=True)
    return count


def load_placement(workers: str | None, ray: str | None,
                   workers_per_node: int | None) -> tuple[int | str | None, str | None, int]:
    """``--workers``, ``--ray`` and ``--workers-per-node`` checked together: (workers, ray address, per node)."""
    if ray is not None and workers is not None:
        raise ConfigError("--ray places its workers on the cluster's nodes (--workers-per-node); drop --workers")
    if workers_per_node is not None and ray is None:
        raise ConfigError("--workers-per-node places Ray actors: give --ray auto|ADDRESS too (or use --workers)")
    per_node = 1 if workers_per_node is None else workers_per_node
    if not 1 <= per_node <= MAX_WORKERS:
        raise ConfigError(f"--workers-per-node must be between 1 and {MAX_WORKERS} (got {per_node})")
    if ray is not None and not ray.strip():
        raise ConfigError("--ray is empty: give auto or the cluster's address (host:port or ray://host:port)")
    return parse_workers(workers), ray.strip() if ray is not None else None, per_node
# -- option groups (``commands.groups``): the flags above, as the structs the commands take --------------

class TargetFlags(OptionGroup, frozen=True, kw_only=True):
    """The server, how to reach it, and where its telemetry is (run, sweep)."""

    url: Url = None
    model: Model = None
    endpoint: Endpoint = "completions"
    api_key: ApiKey = None
    header: Headers = None
    secret_header: SecretHeader = None
    timeout: Timeout = "600s"
    wait_ready: WaitReady = None
    metrics_url: MetricsUrl = None
    no_metrics: NoMetrics = False
    gpu_metrics_url: GpuMetricsUrl = None

    def spec(self, base_url: str) -> TargetSpec:
        """The validated target at ``base_url`` (the URL given, or the embedded twin's)."""
        return target_spec(base_url, self.model, self.endpoint, self.api_key, self.header, self.timeout,
                           self.secret_header)

    def wait_ready_s(self) -> float | None:
        return parse_duration(self.wait_ready, "--wait-ready") if self.wait_ready else None

    def dcgm_urls(self) -> list[str]:
        return gpu_metrics_urls(self.gpu_metrics_url)

    def telemetry(self) -> Telemetry:
        return Telemetry(self.metrics_url, self.no_metrics, tuple(self.dcgm_urls()))


class TwinFlags(OptionGroup, frozen=True, kw_only=True):
    """The simulated engine started when no ``--url`` is given."""

    preset: Preset = "tiny"
    sim_speed: SimSpeed = 1.0

    def twin(self) -> Twin:
        return Twin(self.preset or "tiny", self.sim_speed)


class PlacementFlags(OptionGroup, frozen=True, kw_only=True):
    """Where the load runs: this process, ``--workers`` processes, or Ray actors."""

    workers: Workers = None
    ray: Ray = None
    workers_per_node: WorkersPerNode = None

    def placement(self) -> Placement:
        return Placement(*load_placement(self.workers, self.ray, self.workers_per_node))


class LengthFlags(OptionGroup, frozen=True, kw_only=True):
    """How long each request's prompt and answer are (run, sweep, sim, tune)."""

    input_len: InputLen = "128"
    output_len: OutputLen = "128"
    range_ratio: RangeRatio = 0.0
    length_convention: LengthConvention = "plateau"

    def workload(self) -> WorkloadSpec:
        """The validated workload of fresh synthetic prompts of these lengths."""
        return workload_spec(self.input_len, self.output_len, self.range_ratio, None, 0, None,
                             self.length_convention, prompt_salt=prompt_salt(None))


class WorkloadFlags(LengthFlags, frozen=True, kw_only=True):
    """What each request asks: lengths, prompts, shared prefixes, sessions, a trace (run, sweep)."""

    prefix_groups: PrefixGroups = 0
    prefix_len: PrefixLen = 0
    sessions: Sessions = 0
    turns: Turns = "4"
    think_time: ThinkTime = "0"
    session_header: SessionHeader = "X-Session-ID"
    trace: Trace = None
    dataset: Dataset = None
    allow_reuse: AllowReuse = False
    prompt_salt: PromptSalt = None
    seed: Seed = 0
    tokenizer: Tokenizer = None

    def spec(self, *, closed_loop: bool = True, trace_requests: int | None = None,
             resume: Path | None = None) -> WorkloadSpec:
        """The validated workload (``resume``: the resumed run keeps its prompt salt)."""
        return workload_spec(self.input_len, self.output_len, self.range_ratio, self.dataset, self.seed,
                             self.tokenizer, self.length_convention, self.prefix_groups, self.prefix_len,
                             self.sessions, self.turns, self.think_time, self.session_header, trace=self.trace,
                             closed_loop=closed_loop, trace_requests=trace_requests, allow_reuse=self.allow_reuse,
                             prompt_salt=prompt_salt(self.prompt_salt, resume))


class OutputFlags(OptionGroup, frozen=True, kw_only=True):
    """Where results go and what is printed (run, sweep)."""

    out: Out = None
    overwrite: Overwrite = False
    quiet: Quiet = False
    as_json: Json = False

    @property
    def live(self) -> bool:
        """Whether the live view shows (not with --quiet, nor when stdout is the JSON summary)."""
        return not self.quiet and not self.as_json


NO_TARGET, EMBEDDED, ANYWHERE, DEFAULT_WORKLOAD, NO_OUTPUT, DEFAULT_LENGTHS = (
    TargetFlags(), TwinFlags(), PlacementFlags(), WorkloadFlags(), OutputFlags(), LengthFlags())
