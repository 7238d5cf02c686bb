"""benchmarks.settings_ab: two real servers with different settings, measured round by round."""

from __future__ import annotations

import argparse
import asyncio
from pathlib import Path

import pytest

from benchmarks.http_bench import Server
from benchmarks.settings_ab import measure, variant


def test_variants_parse_and_a_bad_one_names_the_form() -> None:
    assert variant("MT_JOIN_DELAY_MS=0,MT_MAX_BATCH_SIZE=8") == {"MT_JOIN_DELAY_MS": "0", "MT_MAX_BATCH_SIZE": "8"}
    assert variant("MT_GC_THRESHOLDS=[700,10,10],MT_GC_FREEZE=false") == {
        "MT_GC_THRESHOLDS": "[700,10,10]",
        "MT_GC_FREEZE": "false",
    }
    assert variant("-") == {}
    with pytest.raises(argparse.ArgumentTypeError, match="MT_NAME=value"):
        variant("JOIN_DELAY=0")


def test_each_server_gets_its_settings_and_every_figure_a_round(bundle_dir: Path) -> None:
    bundle = bundle_dir / "en-zh"
    servers = {"no delay": Server(bundle, env={"MT_JOIN_DELAY_MS": "0"}), "defaults": Server(bundle)}
    try:
        results = asyncio.run(measure(servers, bundle, rounds=2, seconds=1.2))
    finally:
        for server in servers.values():
            server.stop()
    for figures in results.values():
        assert set(figures) == {
            "rps_32", "rps_16_beam4", "two_clients_p50_ms", "two_clients_p99_ms", "short_p99_under_32_ms",
            "short_p50_beside_16_long_ms", "short_p99_beside_16_long_ms", "rps_16_long", "peak_rss_mb",
        }  # fmt: skip
        rss = figures.pop("peak_rss_mb")
        assert rss["median"] > 0  # the server's own, read at the end
        assert all(len(f["rounds"]) == 2 and f["median"] > 0 for f in figures.values())
