"""HTTP basic authentication for the dashboard: users and password hashes from a file.

Rules:

* The dashboard listens on loopback (127.0.0.1, ::1, localhost) without authentication. On any other
  address it serves only with ``--auth FILE`` (every request needs the credentials of a user of FILE,
  else 401 with a ``WWW-Authenticate: Basic`` challenge) or an explicit ``--no-auth``
  (:func:`check_exposure`): the pages show the lake's tables to whoever reaches the port.
* FILE holds one user a line, ``name:scrypt:<n>:<r>:<p>:<salt hex>:<hash hex>`` (``#`` comments and
  blank lines ignored): the password hashed with the standard library's ``hashlib.scrypt``. Make a
  line with ``python -m kraft_replay.serve.auth NAME`` (asks for the password; an empty one is
  refused). A malformed line — fields, hex, scrypt parameters ``hashlib.scrypt`` would refuse (``n``
  a power of 2 above 1, ``r`` and ``p`` at least 1, within its 256 MiB memory bound), a hash that is
  not 32 bytes, a name given twice — or a file that is not UTF-8 text is a one-line error naming the
  file (and the line) before the server starts.
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
_MAXMEM = 256 * 1024 * 1024


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
    return hashlib.scrypt(password.encode("utf-8"), salt=salt, n=n, r=r, p=p, maxmem=_MAXMEM, dklen=32)


def _usable(n: int, r: int, p: int) -> bool:
    """Whether ``hashlib.scrypt`` takes these parameters (n a power of 2 above 1, r and p at least 1,
    the memory they need, about 128·n·r + 128·r·p bytes, within :data:`_MAXMEM`)."""
    return n > 1 and n & (n - 1) == 0 and r >= 1 and p >= 1 and 128 * r * (n + p + 1) < _MAXMEM


def hash_line(name: str, password: str) -> str:
    """A line of an ``--auth`` file for ``name`` with ``password``."""
    if not name or ":" in name:
        raise AuthError(f"user name {name!r} must be non-empty and hold no ':'")
    if not password:
        raise AuthError(f"an empty password for {name}: give one")
    salt = os.urandom(16)
    return f"{name}:scrypt:{_N}:{_R}:{_P}:{salt.hex()}:{_scrypt(password, salt, _N, _R, _P).hex()}"


def load_users(path: str) -> dict[str, tuple[int, int, int, bytes, bytes]]:
    """The users of an ``--auth`` file: name -> (n, r, p, salt, hash)."""
    try:
        text = Path(path).read_text(encoding="utf-8")
    except OSError as exc:
        raise AuthError(f"cannot read --auth file {path}: {exc.strerror or exc}") from None
    except UnicodeDecodeError:
        raise AuthError(f"--auth file {path} is not UTF-8 text: give a file of name:scrypt:... lines "
                        "(`python -m kraft_replay.serve.auth NAME` makes one)") from None
    users = {}
    for i, line in enumerate(text.splitlines(), 1):
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        parts = line.split(":")
        try:
            name, kind, n, r, p, salt, digest = parts
            user = (int(n), int(r), int(p), bytes.fromhex(salt), bytes.fromhex(digest))
            if kind != "scrypt" or not name or not user[3] or len(user[4]) != 32:
                raise ValueError
        except ValueError:
            raise AuthError(f"--auth file {path} line {i}: expected name:scrypt:<n>:<r>:<p>:<salt hex>:<hash hex> "
                            "(`python -m kraft_replay.serve.auth NAME` makes one)") from None
        if not _usable(*user[:3]):
            raise AuthError(f"--auth file {path} line {i}: scrypt n={user[0]} r={user[1]} p={user[2]} cannot be used (n a "
                            "power of 2 above 1, r and p at least 1, 128*r*(n+p+1) bytes under 256 MiB); make the line "
                            "again with `python -m kraft_replay.serve.auth NAME`")
        if name in users:
            raise AuthError(f"--auth file {path} line {i}: user {name} is given twice; keep one line per user")
        users[name] = user
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


def main(argv: list[str]) -> int:
    """``python -m kraft_replay.serve.auth NAME``: a line of an ``--auth`` file on stdout (the password
    asked for on a terminal, else the first line of stdin); 2 with one line on stderr when refused."""
    import getpass

    if len(argv) != 1:
        print("usage: python -m kraft_replay.serve.auth NAME  (prints a line of an --auth file)", file=sys.stderr)
        return 2
    pw = getpass.getpass(f"password for {argv[0]}: ") if sys.stdin.isatty() else sys.stdin.readline().rstrip("\n")
    try:
        print(hash_line(argv[0], pw))
    except AuthError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
