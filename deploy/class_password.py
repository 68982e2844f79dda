"""The class password of ``deploy/serve.py``: read from the teacher's file, kept by HAProxy only
as a SHA-512 crypt hash (``$6$salt$...``, what glibc's crypt(3) checks; HAProxy's ``userlist``
takes it), so the password itself is never written to the generated configuration, a command
line or a log.

The hash is computed here, standard library only: ``openssl passwd -6`` is not on every
teacher's machine (macOS's LibreSSL lacks ``-6``) and Python's ``crypt`` module is gone from
3.13. tests/test_serve_password.py checks it against ``openssl passwd -6`` with the same salt.
"""

from __future__ import annotations

import base64
import hashlib
import secrets
from pathlib import Path

USER = "class"  # the one user name: students type it with the password
ROUNDS = 5000  # crypt's default: the hash names no rounds, so every crypt(3) reads it alike
_ALPHABET = "./0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz"


class PasswordError(ValueError):
    """A password file that cannot be used; the message is one line for the teacher."""


def read_password(path: Path) -> str:
    """The password in ``path``: its first line, without its line ending (spaces are kept:
    they are part of what students type)."""
    try:
        data = path.read_bytes()
    except FileNotFoundError as error:
        raise PasswordError(f"--password-file {path}: no such file") from error
    except IsADirectoryError as error:
        raise PasswordError(f"--password-file {path}: a folder, not a file") from error
    except OSError as error:
        raise PasswordError(f"--password-file {path}: cannot read it ({error.strerror})") from error
    try:
        text = data.decode("utf-8-sig")
    except UnicodeDecodeError as error:
        raise PasswordError(f"--password-file {path}: not UTF-8 text") from error
    lines = text.splitlines()
    password = lines[0] if lines else ""
    if not password:
        raise PasswordError(f"--password-file {path}: its first line is empty")
    if len(password) < 4:
        raise PasswordError(f"--password-file {path}: a password of at least 4 characters")
    return password


def sha512_crypt(password: str, salt: str | None = None) -> str:
    """``password``'s SHA-512 crypt hash (``$6$SALT$HASH``), with ``salt`` (at most 16 characters
    of ``./0-9A-Za-z``; by default a random one)."""
    if salt is None:
        salt = "".join(secrets.choice(_ALPHABET) for _ in range(16))
    if len(salt) > 16 or any(c not in _ALPHABET for c in salt):
        raise ValueError("a salt is at most 16 characters of ./0-9A-Za-z")
    p, s = password.encode("utf-8"), salt.encode("ascii")

    b = hashlib.sha512(p + s + p).digest()
    a = hashlib.sha512(p + s)
    a.update(_repeated(b, len(p)))
    length = len(p)
    while length:
        a.update(b if length & 1 else p)
        length >>= 1
    digest = a.digest()

    p_bytes = _repeated(hashlib.sha512(p * len(p)).digest(), len(p))
    s_bytes = _repeated(hashlib.sha512(s * (16 + digest[0])).digest(), len(s))
    for round_ in range(ROUNDS):
        step = hashlib.sha512(p_bytes if round_ & 1 else digest)
        if round_ % 3:
            step.update(s_bytes)
        if round_ % 7:
            step.update(p_bytes)
        step.update(digest if round_ & 1 else p_bytes)
        digest = step.digest()
    return f"$6${salt}${_encoded(digest)}"


def _repeated(block: bytes, length: int) -> bytes:
    """``block`` repeated to ``length`` bytes."""
    return (block * (length // len(block) + 1))[:length]


def _encoded(digest: bytes) -> str:
    """crypt's base-64 of a 64-byte digest: its own alphabet, little-endian groups, the bytes in
    sha512-crypt's order."""
    out = []
    for first, second, third in _groups():
        value = (digest[first] << 16) | (digest[second] << 8) | digest[third]
        out.append(_chars(value, 4))
    out.append(_chars(digest[63], 2))
    return "".join(out)


def _groups() -> list[tuple[int, int, int]]:
    """The 21 byte triples of sha512-crypt's text: (0, 21, 42), (22, 43, 1), (44, 2, 23), ..."""
    groups = []
    for i in range(21):
        trio = (i, i + 21, i + 42)
        turn = i % 3  # each triple is rotated one further than the one before
        groups.append(trio[turn:] + trio[:turn])
    return groups


def _chars(value: int, count: int) -> str:
    chars = []
    for _ in range(count):
        chars.append(_ALPHABET[value & 0x3F])
        value >>= 6
    return "".join(chars)


def basic_authorization(password: str) -> str:
    """The ``Authorization`` header's value of the class user with ``password`` (for this
    launcher's own checks of its proxy)."""
    token = base64.b64encode(f"{USER}:{password}".encode()).decode("ascii")
    return f"Basic {token}"
