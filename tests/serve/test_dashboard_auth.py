"""The dashboard beyond loopback: ``--auth FILE`` (HTTP basic auth, scrypt hashes) or ``--no-auth``;
refused otherwise with one line, exit 2. No server process: Flask's test client."""

from __future__ import annotations

import base64

import pytest

from kraft_replay.serve.auth import AuthError, BasicAuth, check_exposure, hash_line, is_loopback, load_users


def _basic(user: str, password: str) -> dict[str, str]:
    return {"Authorization": "Basic " + base64.b64encode(f"{user}:{password}".encode()).decode()}


@pytest.fixture(scope="module")
def auth_file(tmp_path_factory):
    path = tmp_path_factory.mktemp("auth") / "users.txt"
    path.write_text("# dashboard users\n" + hash_line("alice", "correct horse") + "\n")
    return path


def test_loopback_hosts():
    assert is_loopback("127.0.0.1") and is_loopback("::1") and is_loopback("localhost") and is_loopback("127.1.2.3")
    assert not is_loopback("0.0.0.0") and not is_loopback("10.0.0.5") and not is_loopback("dashboard.example")


@pytest.mark.parametrize("host", ["0.0.0.0", "::", "192.168.1.10"])
def test_the_cli_refuses_a_public_host_without_auth_in_one_line(host, capsys, tmp_path):
    from kraft_replay.serve.cli import main

    assert main(["dashboard", "--lake", str(tmp_path), "--host", host, "--port", "8050"]) == 2
    err = capsys.readouterr().err.strip()
    assert "\n" not in err and err.startswith(f"kraft-replay dashboard: error: --host {host} exposes the lake")
    assert "--auth FILE" in err and "--no-auth" in err


def test_exposure_rules(auth_file):
    check_exposure("127.0.0.1", None, False)
    check_exposure("0.0.0.0", str(auth_file), False)
    check_exposure("0.0.0.0", None, True)
    with pytest.raises(AuthError):
        check_exposure("0.0.0.0", str(auth_file), True)


def test_a_malformed_auth_file_is_one_line(tmp_path):
    bad = tmp_path / "users.txt"
    bad.write_text("alice:plaintext-password\n")
    with pytest.raises(AuthError, match=r"line 1: expected name:scrypt:"):
        load_users(str(bad))


def test_requests_need_a_users_credentials(auth_file, tmp_path):
    from kraft_replay.serve.dashboard import create_app

    app = create_app(str(tmp_path), refresh_ms=1000)
    BasicAuth(load_users(str(auth_file))).install(app.server)
    client = app.server.test_client()
    for headers in ({}, _basic("alice", "wrong"), _basic("bob", "correct horse"), {"Authorization": "Basic !!"}):
        r = client.get("/", headers=headers)
        assert r.status_code == 401 and r.headers["WWW-Authenticate"].startswith("Basic")
    assert client.get("/_dash-layout").status_code == 401
    ok = client.get("/", headers=_basic("alice", "correct horse"))
    assert ok.status_code == 200 and b"<html" in ok.data.lower()
