"""benchmarks.settings_ab: two real servers with different settings or code, measured round by round."""

from __future__ import annotations

import argparse
import asyncio
import subprocess
from pathlib import Path

import pytest

from benchmarks.http_bench import Server
from benchmarks.settings_ab import Variant, code_trees, measure, server_env, variant

IN_GIT = subprocess.run(["git", "rev-parse", "HEAD"], capture_output=True, check=False).returncode == 0


def test_variants_parse_and_a_bad_one_names_the_form() -> None:
    two = "MT_JOIN_DELAY_MS=0,MT_MAX_BATCH_SIZE=8"
    assert variant(two) == Variant(two, {"MT_JOIN_DELAY_MS": "0", "MT_MAX_BATCH_SIZE": "8"})
    assert variant("MT_GC_THRESHOLDS=[700,10,10],MT_GC_FREEZE=false").env == {
        "MT_GC_THRESHOLDS": "[700,10,10]",
        "MT_GC_FREEZE": "false",
    }
    assert variant("-") == Variant("defaults")
    assert variant("@HEAD~1") == Variant("@HEAD~1", {}, "HEAD~1")
    assert variant("@v1.0,MT_JOIN_DELAY_MS=0") == Variant("@v1.0,MT_JOIN_DELAY_MS=0", {"MT_JOIN_DELAY_MS": "0"}, "v1.0")
    for bad in ("JOIN_DELAY=0", "@HEAD,JOIN_DELAY=0"):
        with pytest.raises(argparse.ArgumentTypeError, match="MT_NAME=value"):
            variant(bad)
    with pytest.raises(argparse.ArgumentTypeError, match="git revision"):
        variant("@")


@pytest.mark.skipif(not IN_GIT, reason="not a git checkout: no revision to run")
def test_each_server_gets_its_settings_or_code_and_every_figure_a_round(bundle_dir: Path) -> None:
    bundle = bundle_dir / "en-zh"
    code = variant("@HEAD,MT_JOIN_DELAY_MS=0")
    with code_trees({"HEAD"}) as trees:
        assert (trees["HEAD"] / "service" / "api" / "app.py").is_file()
        # the revision's kernels and operators are built beside its sources, as this checkout's are
        built = {p.name.split(".")[0] for p in (trees["HEAD"] / "service" / "engine").glob("_*.so")}
        assert built == {p.name.split(".")[0] for p in Path("service/engine").glob("_*.so")}
        # the second server's log lines go into a pipe another process drains (settings_ab --logs pipe)
        servers = {
            "no delay, HEAD": Server(bundle, env=server_env(code, trees)),
            "defaults": Server(bundle, log_pipe=True),
        }
        try:
            results = asyncio.run(measure(servers, bundle, rounds=2, seconds=1.2))
        finally:
            for server in servers.values():
                server.stop()
    assert not trees["HEAD"].exists()  # the worktree goes with the run
    reader = servers["defaults"].reader
    assert reader is not None and reader.returncode == 0  # it read to the end: the pipe closed with the server
    for figures in results.values():
        assert set(figures) == {
            "one_client_p50_ms", "rps_32", "rps_16_beam4", "two_clients_p50_ms", "two_clients_p99_ms",
            "short_p99_under_32_ms",
            "short_p50_beside_16_long_ms", "short_p99_beside_16_long_ms", "rps_16_long", "peak_rss_mb",
        }  # fmt: skip
        rss = figures.pop("peak_rss_mb")
        assert rss["median"] > 0  # the server's own, read at the end
        assert all(len(f["rounds"]) == 2 and f["median"] > 0 for f in figures.values())


@pytest.mark.skipif(not IN_GIT, reason="not a git checkout")
def test_a_revision_git_cannot_check_out_is_named_with_gits_reason() -> None:
    with (
        pytest.raises(SystemExit, match=r"@no-such-rev: git worktree add failed: .*no-such-rev"),
        code_trees({"no-such-rev"}),
    ):
        pass
