"""Published measurements as test data (tests/data/published, bench/published_tables.py) and
bench/published.py's calibration path: every table is fit (provenance, settings, positive finite figures),
and a one-point calibration reproduces its own calibration row."""

from __future__ import annotations

import math

import msgspec
import pytest

from support.loading import script

tables_mod = script("bench/published_tables.py")
published = script("bench/published.py")

TABLES = {t.name: t for t in tables_mod.load_tables()}
NIM = "nim-1.8.0-llama-3.3-70b-2xh100-fp8-5000-500"
TRT_8B_H100 = "trtllm-llama-3.1-8b-h100-fp8"


def test_at_least_five_tables_each_fit_with_its_provenance() -> None:
    assert len(TABLES) >= 5
    for table in TABLES.values():
        assert table.problems() == [], table.name
        p = table.provenance
        assert p.url.startswith("https://") and p.where and p.opened
        if p.repo is not None:
            assert p.commit is not None and p.commit in p.url and p.path is not None and p.path in p.url
        for row in table.rows:
            assert row.where and row.measured()
            assert all(math.isfinite(v) and v > 0 for v in row.measured().values())
    # distinct sources and deployments, not one table cut five ways
    assert len({(t.settings.model, t.settings.gpu, t.settings.tp, t.settings.dtype, t.settings.engine)
                for t in TABLES.values()}) >= 5
    assert len({t.provenance.url for t in TABLES.values()}) >= 3


def test_the_check_catches_a_bad_row_and_a_missing_provenance() -> None:
    table = TABLES[TRT_8B_H100]
    bad = msgspec.structs.replace(table.rows[0], output_throughput=float("nan"))
    assert any("not positive and finite" in p for p in
               msgspec.structs.replace(table, rows=[bad, *table.rows[1:]]).problems())
    empty = msgspec.structs.replace(table.rows[0], output_throughput=None)
    assert any("no measured figure" in p for p in msgspec.structs.replace(table, rows=[empty]).problems())
    unsourced = msgspec.structs.replace(table.provenance, url="", commit="abc")
    found = msgspec.structs.replace(table, provenance=unsourced).problems()
    assert any("https URL" in p for p in found) and any("40-hex commit" in p for p in found)
    with pytest.raises(msgspec.ValidationError):   # a misspelt load kind is refused on load
        msgspec.json.decode(msgspec.json.encode(table).replace(b'"max_throughput"', b'"max-throughput"'),
                            type=tables_mod.Table)


def test_tables_the_twin_cannot_model_say_why() -> None:
    reasons = {name: published.why_not(t) for name, t in TABLES.items()}
    assert reasons[TRT_8B_H100] is None and reasons[NIM] is None
    sglang = [name for name in reasons if name.startswith("sglang-")]
    assert sglang and all(reasons[name] for name in sglang)


def test_calibrating_on_a_tpot_row_reproduces_that_row() -> None:
    """--efficiency-from semantics on the NIM sweep's concurrency-1 row: the calibrated twin's TPOT and
    throughput on that row come back within a few per cent of the measurement (the rest may not)."""
    res = published.run_table(TABLES[NIM])
    default = published.measured_efficiency()
    # one figure, one resource: concurrency 1 binds on memory; compute and the interconnect keep their defaults
    assert 0 < res.calibration.efficiency.memory <= 1 and res.calibration.overhead_s is not None
    assert (res.calibration.efficiency.compute, res.calibration.efficiency.interconnect) == \
        (default.compute, default.interconnect)
    row = res.rows[TABLES[NIM].calibration_row]
    assert abs(row.error("tpot_ms", "after")) < 0.03
    assert abs(row.error("output_throughput", "after")) < 0.05
    assert len(res.rows) == len(TABLES[NIM].rows)
    assert all(r.after.get("output_throughput", 0) > 0 and r.before.get("output_throughput", 0) > 0 for r in res.rows)


@pytest.mark.slow   # ~30 bursts in virtual time: a few seconds on two cores
def test_calibrating_on_a_throughput_row_reproduces_that_row() -> None:
    """The throughput-only path (bisection on the binding resource's efficiency) on the TensorRT-LLM 8B/H100
    table cut to two rows and fewer requests per burst: the calibration row's throughput comes back within 1 %."""
    table = TABLES[TRT_8B_H100]
    rows = [msgspec.structs.replace(r, num_requests=2000) for r in table.rows[:2]]
    res = published.run_table(msgspec.structs.replace(table, rows=rows))
    default = published.measured_efficiency()
    # 128/128 at trtllm-bench's batch of 4,096 binds on compute: that efficiency is read, the memory's kept
    assert 0 < res.calibration.efficiency.compute < 1 and res.calibration.efficiency.memory == default.memory
    assert abs(res.rows[0].error("output_throughput", "after")) < 0.01
    text = "\n".join(published.render(res))
    assert "median / worst: default" in text and "row 128/128 *" in text


def test_trtllm_bench_sizes_the_batch_and_the_step_to_the_kv_cache() -> None:
    limits = script("bench/engine_limits.py")
    # 1,106,624 KV tokens at 128 + 2,048: 508.6 requests fit -> 512 (a multiple of 128), 540 tokens -> 2,048 floor
    assert limits.trtllm_bench_limits(1_106_624, 128, 2048) == (512, 2048)
    # 128 + 128: 4,322 fit, capped at 4,096; 8,192 tokens -> a multiple of 1,024
    assert limits.trtllm_bench_limits(1_106_624, 128, 128) == (4096, 8192)
    # a small cache: 10 requests -> the floor of 64; 5,000/500 -> 110 tokens -> 2,048
    assert limits.trtllm_bench_limits(55_000, 5000, 500) == (64, 2048)
    # 300 requests -> 384; 300 x (1 + 2048/128) = 5,100 tokens -> a multiple of 512
    assert limits.trtllm_bench_limits(300 * 2176, 2048, 128) == (384, 5120)
    assert limits.limits(None, 1e6, 128, 128) is None
    # TensorRT-LLM admits only what fits at full length (GUARANTEED_NO_EVICT); the twin's default does not
    assert limits.reserves_kv("trtllm-bench") and not limits.reserves_kv(None)
    with pytest.raises(ValueError, match="no scheduler rule named 'sglang'"):
        limits.limits("sglang", 1e6, 128, 128)


def test_a_table_run_by_trtllm_bench_gets_its_rule_and_its_labelled_kv_cache() -> None:
    table = TABLES[TRT_8B_H100]
    assert table.settings.kv_dtype is None and table.bench_assumptions is not None   # not stated: assumed, labelled
    assert table.kv_dtype_for_twin() == "fp8" and "kv_cache_quant_algo" in table.bench_assumptions.why
    row = next(r for r in table.rows if r.where == "row 128/2048")
    config = published.engine_for(table, row, published.measured_efficiency())
    expected = script("bench/engine_limits.py").trtllm_bench_limits(config.kv_tokens, 128, 2048)
    assert (config.max_num_seqs, config.max_num_batched_tokens) == expected and config.reserve_kv
    assert not published.engine_for(TABLES[NIM], TABLES[NIM].rows[0], published.measured_efficiency()).reserve_kv
    nim = TABLES[NIM]   # not stated either: an assumption, labelled, with its sources
    assert nim.settings.kv_dtype is None and nim.bench_assumptions is not None
    assert nim.kv_dtype_for_twin() == "fp8" and "Little's law" in nim.bench_assumptions.why
    bare = msgspec.structs.replace(nim, bench_assumptions=None)
    assert bare.kv_dtype_for_twin() == "bf16"   # nothing stated, nothing assumed: the roofline's default


def test_the_pooled_figure_is_every_table_s_other_rows_on_throughput_and_tpot() -> None:
    table = TABLES[NIM]
    rows = [published.RowResult(r, {"output_throughput": 100.0, "tpot_ms": 10.0, "ttft_ms": 1.0},
                                {"output_throughput": 100.0 * (1 + i / 10)},
                                {"output_throughput": 100.0 * (1 - i / 100), "tpot_ms": 10.0 * (1 + i / 20),
                                 "ttft_ms": 9.0})
            for i, r in enumerate(table.rows[:4])]
    res = published.TableResult(table, published.Calibrated(published.measured_efficiency(), None, ""), rows)
    # row 0 calibrated: rows 1-3 count, TTFT never does; after: tok/s 1, 2, 3 %, TPOT 5, 10, 15 %
    median, worst, n = published.pooled([res], "after")
    assert n == 6 and median == pytest.approx(0.04) and worst == pytest.approx(0.15)
    assert published.pooled([res], "before")[1:] == (pytest.approx(0.3), 3)
    assert "every modelled table (6 figures) | tok/s and TPOT | 20% / 30% | 4% / 15% |" in \
        "\n".join(published.markdown([res], []))


def test_one_figure_calibrates_the_resource_that_binds_it() -> None:
    from plateau_bench.roofline import Efficiency

    base = Efficiency(memory=0.8, compute=0.7, interconnect=0.5)

    def memory_bound(e: Efficiency) -> float:
        return 1000.0 * e.memory + 10.0 * e.compute

    assert published.binding_resource(memory_bound, base) == "memory"
    assert published.binding_resource(lambda e: 50.0 * e.memory + 900.0 * e.compute, base) == "compute"
