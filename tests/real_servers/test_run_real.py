"""``plateau run`` against both real servers: exact output lengths, token counts from usage, both
endpoints, and the one-line error for a model the server does not serve."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

import pytest

from plateau_bench.store import load_requests

from support import real_servers
from support.real_servers import ServerHandle

if TYPE_CHECKING:
    from conftest import PlateauCli

pytestmark = pytest.mark.real_server

SERVERS = ["vllm_server", "llamacpp_server"]
INPUT_LEN = 32
OUTPUT_LEN = 64
CONCURRENCY = 2
NUM_REQUESTS = 6


@pytest.mark.parametrize("endpoint", ["completions", "chat"])
@pytest.mark.parametrize("server_name", SERVERS)
def test_outputs_are_exact_and_counted_from_usage(
    server_name: str, endpoint: str, request: pytest.FixtureRequest, tmp_path: Path, plateau_cli: PlateauCli
) -> None:
    server: ServerHandle = request.getfixturevalue(server_name)
    out = tmp_path / "run"
    summary = plateau_cli.saved(
        out, "run", *plateau_cli.target(server), "--endpoint", endpoint,
        "--concurrency", str(CONCURRENCY), "--num-requests", str(NUM_REQUESTS),
        "--input-len", str(INPUT_LEN), "--output-len", str(OUTPUT_LEN),
    )  # fmt: skip
    level = summary["levels"][0]
    assert (level["completed"], level["failed"]) == (NUM_REQUESTS, 0), (level["errors"], server.log_tail())
    assert level["token_source"] == "usage"
    assert level["output_tokens"] == NUM_REQUESTS * OUTPUT_LEN
    assert summary["target"]["engine"] == server.kind

    records = [record for records in load_requests(out).values() for record in records]
    assert len(records) == NUM_REQUESTS
    for record in records:
        assert record.error is None, record.error_detail
        assert record.output_tokens == OUTPUT_LEN
        assert record.token_source == "usage"
        # The per-chunk counts are spread over the chunks so they add up to the usage count, also
        # where the server merged several tokens into one chunk.
        assert record.chunk_tokens is not None and sum(record.chunk_tokens) == OUTPUT_LEN
        assert record.chunk_ns is not None and len(record.chunk_ns) == len(record.chunk_tokens)
    if server.tokenizer_dir is not None and endpoint == "completions":
        # With the server's own tokenizer the prompts are exact: the server counts the same.
        assert {record.prompt_tokens for record in records} == {INPUT_LEN}
    if server.kind == "llamacpp" and endpoint == "completions":
        # Through llama.cpp's /tokenize too (a word is several tokens of its vocabulary), plus its BOS.
        bos = real_servers.llamacpp_bos_tokens(server.url)
        assert {record.prompt_tokens for record in records} == {INPUT_LEN + bos}


@pytest.mark.parametrize("server_name", SERVERS)
def test_unknown_model_is_one_line_naming_the_served_models(
    server_name: str, request: pytest.FixtureRequest, plateau_cli: PlateauCli
) -> None:
    server: ServerHandle = request.getfixturevalue(server_name)
    code, output = plateau_cli.invoke(
        "run", "--url", server.url, "--model", "nope", "--concurrency", "1", "--output-len", "8", "--quiet"
    )
    assert code == 2, output
    lines = output.strip().splitlines()
    assert len(lines) == 1, output
    assert lines[0].startswith("plateau: error:")
    assert "'nope'" in lines[0]
    assert server.model in lines[0].split("serves:")[-1]
