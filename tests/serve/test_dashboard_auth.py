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


@pytest.mark.parametrize("content, says", [
    (b"\xff\xfe alice\n", "is not UTF-8 text"),
    (b"alice:scrypt:3:8:1:00ff:" + b"00" * 32, "scrypt n=3 r=8 p=1 cannot be used"),
    (b"alice:scrypt:1048576:8:1:00ff:" + b"00" * 32, "scrypt n=1048576 r=8 p=1 cannot be used"),   # past scrypt's memory bound
    (b"alice:scrypt:16384:8:1::" + b"00" * 32, "line 1: expected name:scrypt:"),                     # no salt
    (b"alice:scrypt:16384:8:1:00ff:00ff", "line 1: expected name:scrypt:"),                         # not a 32-byte hash
    (None, "line 4: user alice is given twice"),   # the fixture file (a comment, a user) twice
])
def test_an_auth_file_the_server_could_not_use_is_one_line_before_it_starts(content, says, auth_file, tmp_path, capsys):
    """Every ``--auth`` file the server could not check a password against is refused before it listens
    (a parameter ``hashlib.scrypt`` refuses would otherwise be a 500 at the first request)."""
    from kraft_replay.serve.cli import main

    path = tmp_path / "users.txt"
    path.write_bytes(auth_file.read_bytes() * 2 if content is None else content)
    assert main(["dashboard", "--lake", str(tmp_path), "--host", "0.0.0.0", "--auth", str(path)]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"kraft-replay dashboard: error: --auth file {path}") and says in err, err
    assert len(err.strip().splitlines()) == 1


@pytest.mark.parametrize("argv, stdin, says", [
    (["a:b"], "pw\n", "user name 'a:b' must be non-empty and hold no ':'"),
    (["bob"], "\n", "an empty password for bob"),
    ([], "", "usage: python -m kraft_replay.serve.auth NAME"),
])
def test_making_an_auth_line_refuses_in_one_line(argv, stdin, says, monkeypatch, capsys):
    import io

    from kraft_replay.serve.auth import main

    monkeypatch.setattr("sys.stdin", io.StringIO(stdin))
    assert main(argv) == 2
    out = capsys.readouterr()
    assert out.out == "" and says in out.err and len(out.err.strip().splitlines()) == 1
