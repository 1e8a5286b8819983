"""HTTP basic authentication for the dashboard: users and password hashes from a file.

Rules:

* The dashboard listens on loopback (127.0.0.1, ::1, localhost) without authentication. On any other
  address it serves only with ``--auth FILE`` (every request needs the credentials of a user of FILE,
  else 401 with a ``WWW-Authenticate: Basic`` challenge) or an explicit ``--no-auth``
  (:func:`check_exposure`): the pages show the lake's tables to whoever reaches the port.
* FILE holds one user a line, ``name:scrypt:<n>:<r>:<p>:<salt hex>:<hash hex>`` (``#`` comments and
  blank lines ignored): the password hashed with the standard library's ``hashlib.scrypt``. Make a
  line with ``python -m kraft_replay.serve.auth NAME`` (asks for the password). A malformed line is a
  one-line error naming the file and the line.
* Passwords are compared by hash in constant time (``hmac.compare_digest``); a verified
  ``(user, password)`` pair is remembered in memory so repeated polls do not pay scrypt again.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import ipaddress
import os
import sys
from pathlib import Path

__all__ = ["AuthError", "BasicAuth", "check_exposure", "hash_line", "is_loopback", "load_users"]

_N, _R, _P = 2**14, 8, 1


class AuthError(ValueError):
    """A bad ``--auth`` file or a refused exposure (one line)."""


def is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


def check_exposure(host: str, auth_file: str | None, no_auth: bool) -> None:
    """A non-loopback ``host`` needs ``--auth FILE`` or ``--no-auth`` (:class:`AuthError` otherwise)."""
    if auth_file and no_auth:
        raise AuthError("--auth and --no-auth exclude each other")
    if not is_loopback(host) and not auth_file and not no_auth:
        raise AuthError(f"--host {host} exposes the lake's tables beyond this machine: pass --auth FILE (users and "
                        "password hashes, `python -m kraft_replay.serve.auth NAME` makes a line) or --no-auth")


def _scrypt(password: str, salt: bytes, n: int, r: int, p: int) -> bytes:
    return hashlib.scrypt(password.encode("utf-8"), salt=salt, n=n, r=r, p=p, maxmem=256 * 1024 * 1024, dklen=32)


def hash_line(name: str, password: str) -> str:
    """A line of an ``--auth`` file for ``name`` with ``password``."""
    if not name or ":" in name:
        raise AuthError(f"user name {name!r} must be non-empty and hold no ':'")
    salt = os.urandom(16)
    return f"{name}:scrypt:{_N}:{_R}:{_P}:{salt.hex()}:{_scrypt(password, salt, _N, _R, _P).hex()}"


def load_users(path: str) -> dict[str, tuple[int, int, int, bytes, bytes]]:
    """The users of an ``--auth`` file: name -> (n, r, p, salt, hash)."""
    try:
        text = Path(path).read_text(encoding="utf-8")
    except OSError as exc:
        raise AuthError(f"cannot read --auth file {path}: {exc.strerror or exc}") from None
    users = {}
    for i, line in enumerate(text.splitlines(), 1):
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        parts = line.split(":")
        try:
            name, kind, n, r, p, salt, digest = parts
            if kind != "scrypt" or not name:
                raise ValueError
            users[name] = (int(n), int(r), int(p), bytes.fromhex(salt), bytes.fromhex(digest))
        except ValueError:
            raise AuthError(f"--auth file {path} line {i}: expected name:scrypt:<n>:<r>:<p>:<salt hex>:<hash hex> "
                            "(`python -m kraft_replay.serve.auth NAME` makes one)") from None
    if not users:
        raise AuthError(f"--auth file {path} holds no user; add a line made by `python -m kraft_replay.serve.auth NAME`")
    return users


class BasicAuth:
    """Checks an ``Authorization: Basic`` header against the users of an ``--auth`` file."""

    def __init__(self, users: dict[str, tuple[int, int, int, bytes, bytes]]) -> None:
        self.users = users
        self._ok: set[bytes] = set()

    def allows(self, header: str | None) -> bool:
        if not header or not header.startswith("Basic "):
            return False
        try:
            name, _, password = base64.b64decode(header[6:].strip(), validate=True).decode("utf-8").partition(":")
        except (ValueError, UnicodeDecodeError):
            return False
        memo = hashlib.sha256(f"{name}\0{password}".encode()).digest()
        if memo in self._ok:
            return True
        user = self.users.get(name)
        if user is None:
            return False
        n, r, p, salt, digest = user
        if hmac.compare_digest(_scrypt(password, salt, n, r, p), digest):
            self._ok.add(memo)
            return True
        return False

    def install(self, server) -> None:  # noqa: ANN001 - a Flask app
        """Every request of ``server`` needs a user's credentials (401 otherwise)."""
        from flask import Response, request

        @server.before_request
        def _check():  # noqa: ANN202
            if not self.allows(request.headers.get("Authorization")):
                return Response("authentication required\n", 401, {"WWW-Authenticate": 'Basic realm="kraft-replay"'})
            return None


if __name__ == "__main__":  # python -m kraft_replay.serve.auth NAME: a line for an --auth file
    import getpass

    if len(sys.argv) != 2:
        sys.exit("usage: python -m kraft_replay.serve.auth NAME  (prints a line of an --auth file)")
    pw = getpass.getpass(f"password for {sys.argv[1]}: ") if sys.stdin.isatty() else sys.stdin.readline().rstrip("\n")
    print(hash_line(sys.argv[1], pw))
