"""The one redactor: headers, URLs, free text and command lines."""

from __future__ import annotations

import pytest

from plateau_bench.redaction import REDACTED, is_secret_header, redact, redact_command, redact_url


@pytest.mark.parametrize(("command", "shown"), [
    ("vllm serve m --api-key sk-123 --port {port}", "vllm serve m --api-key *** --port {port}"),
    ("HF_TOKEN=hf_abc vllm serve m --max-num-batched-tokens 8192",
     "HF_TOKEN=*** vllm serve m --max-num-batched-tokens 8192"),
    ("llama-server --password=hunter22 --tokenizer /m/tok", "llama-server --password=*** --tokenizer /m/tok"),
    ("AWS_SECRET_ACCESS_KEY='a b' TOKENIZERS_PARALLELISM=false x",
     "AWS_SECRET_ACCESS_KEY=*** TOKENIZERS_PARALLELISM=false x"),
    ("srv --hf-token \"t k\" --db_passwd pw --key-file /k", "srv --hf-token *** --db_passwd *** --key-file /k"),
    ("srv --upstream http://user:pw@h:1/v1 --flag", "srv --upstream http://***@h:1/v1 --flag"),
    ("srv --api-key --port 1", "srv --api-key --port 1"),   # no value: the next option is not taken for one
])
def test_a_command_line_shows_no_credential(command: str, shown: str) -> None:
    assert redact_command(command) == shown


def test_secret_headers_by_name_or_as_named() -> None:
    assert is_secret_header("X-Api-Key") and is_secret_header("Proxy-Authorization")
    assert is_secret_header("X-Custom", ["x-custom"]) and not is_secret_header("X-Request-Id")


def test_urls_and_free_text() -> None:
    assert redact_url("http://u:p@h:8000/v1?api_key=k&x=1") == f"http://{REDACTED}@h:8000/v1?api_key={REDACTED}&x=1"
    assert redact("401 for sk-secret at https://a:b@h/x", ("sk-secret",)) == "401 for *** at https://***@h/x"
