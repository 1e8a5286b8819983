"""``kraft-replay features check``: the what-if checker on the replayed ``tiny`` cluster (metadata.version
3.7-IV4 = level 19 at the log end; it was 3.9-IV0 = 21 from 00:06:00 to 00:06:40): exit 0 accepted,
1 refused, 2 malformed spec / unknown cluster; ``--json``; ``--as-of`` a time; ``--rule kip1155``."""

from __future__ import annotations

import json

import pytest

from kraft_replay.serve.cli import main

C = "tInYcLuStEr0000000000A"


def _check(lake, capsys, *args: str) -> tuple[int, str, str]:
    code = main(["--profile", "test", "features", "check", "--lake", lake.root, "--cluster-id", C, *args])
    out = capsys.readouterr()
    return code, out.out, out.err


def test_accepted_refused_and_the_loss_report(spark, replayed_tiny, capsys) -> None:
    # at 00:06:30 the image holds 3.9-IV0 (21); 21 -> 18 UNSAFE: no level in (18, 21] changed metadata and
    # 18 is above 3.7-IV0, so both rules accept it (--rule kip1155 sets the exit code)
    code, out, _ = _check(replayed_tiny, capsys, "--as-of", "2025-03-01T00:06:30Z", "--rule", "kip1155",
                          "metadata.version=18:UNSAFE_DOWNGRADE")
    assert code == 0 and "metadata.version 3.9-IV0, level 21" in out and "kafka (today's controller): ACCEPTED" in out
    assert "kip1155 (seed 001, proposed): ACCEPTED <- exit code" in out and "loss report: nothing would be lost" in out
    assert "metadata.version 21 -> 18 (UNSAFE_DOWNGRADE): ok" in out
    # 19 -> 14: refused today (levels 15 and 17 changed metadata) and by KIP-1155 (below 3.7-IV0); the
    # three controller registrations could not be written at 14
    code, out, _ = _check(replayed_tiny, capsys, "--json", "metadata.version=14:UNSAFE_DOWNGRADE")
    res = json.loads(out)
    assert code == 1 and res["kafka"]["outcome"] == "REJECTED" and res["metadata_version_level"] == 19
    assert res["kafka"]["error_message"].endswith("Invalid metadata.version 14. Unsafe metadata downgrade is not "
                                                  "supported in this version.")
    assert res["kip1155"]["outcome"] == "REJECTED" and "below 3.7-IV0" in res["kip1155"]["error_message"]
    assert [(x["domain"], x["entity"]) for x in res["losses"]] == [
        ("controllers", '{"controller_id":%d}' % c) for c in (3000, 3001, 3002)]
    # a level no node supports: every blocking node listed
    code, out, _ = _check(replayed_tiny, capsys, "--json", "metadata.version=4.0-IV0")
    blocking = json.loads(out)["updates"][0]["blocking_nodes"]
    assert code == 1 and [(b["node_type"], b["max_supported"]) for b in blocking] == [("broker", 21)] * 5 + [
        ("controller", 21)] * 3


@pytest.mark.parametrize("args, message", [
    (["metadata.version"], "spec 'metadata.version': expected feature=level"),
    (["metadata.version=3.8-IV9"], "'3.8-IV9' is not a metadata.version"),
    (["group.version=one"], "level 'one' is not a number"),
    (["metadata.version=20:DOWN"], "upgrade type 'DOWN' is not one of"),
    (["group.version=1", "group.version=0"], "feature 'group.version' is given twice"),
    (["--cluster-id", "nOsUcH", "group.version=1"], "cluster 'nOsUcH' has not been replayed"),
    (["--as-of", "yesterday", "group.version=1"], "--as-of 'yesterday' is neither an offset nor an ISO-8601 time"),
    (["--lake", "/nonexistent/lake", "group.version=1"], "no lake at /nonexistent/lake"),
])
def test_bad_input_is_one_line_exit_2(spark, replayed_tiny, capsys, args, message) -> None:
    code, _, err = _check(replayed_tiny, capsys, *args)
    assert code == 2 and message in err and err.count("\n") == 1, err


def test_output_into_a_reader_that_stopped_ends_quietly(replayed_tiny) -> None:
    """``features check ... | head -1``: the reader is gone before the report is printed: exit 141 (as
    SIGPIPE would end it), no traceback."""
    import subprocess
    import sys

    p = subprocess.Popen([sys.executable, "-m", "kraft_replay.serve.cli", "--profile", "test", "features", "check",
                          "--lake", replayed_tiny.root, "--cluster-id", C, "group.version=1"],
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    p.stdout.close()  # long before the child has anything to print
    err = p.stderr.read().decode()
    assert p.wait(timeout=120) == 141 and "Traceback" not in err, err
