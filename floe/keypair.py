"""RSA key pairs as Snowflake uses them: public-key fingerprints, key files and signed JWTs.

Snowflake identifies a user's key by ``SHA256:`` plus the base64 SHA-256 of the DER-encoded
SubjectPublicKeyInfo, and ``RSA_PUBLIC_KEY`` holds that DER in base64 without the PEM armour.
The signing half mirrors what the ``snowflake-ingest`` SDK does, so `floe sql` and the SDK send
the same kind of token.
"""

from __future__ import annotations

import base64
import contextlib
import hashlib
import os
import secrets
import time
from collections.abc import Callable
from pathlib import Path

import jwt
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import rsa

from floe.errors import TerminalError


class InvalidKey(TerminalError):
    """A key is malformed, of the wrong kind, or missing."""


def _public_der(key: rsa.RSAPublicKey) -> bytes:
    return key.public_bytes(serialization.Encoding.DER, serialization.PublicFormat.SubjectPublicKeyInfo)


def load_public_key(text: str) -> rsa.RSAPublicKey:
    """An RSA public key from Snowflake's RSA_PUBLIC_KEY form (base64 DER) or from PEM."""
    body = text.strip()
    try:
        if body.startswith("-----BEGIN"):
            key = serialization.load_pem_public_key(body.encode())
        else:
            der = base64.b64decode("".join(body.split()), validate=True)
            key = serialization.load_der_public_key(der)
    except (ValueError, TypeError) as exc:
        raise InvalidKey(
            "the RSA public key is not valid: give the base64 body of a PEM public key "
            "(the lines between BEGIN PUBLIC KEY and END PUBLIC KEY)"
        ) from exc
    if not isinstance(key, rsa.RSAPublicKey):
        raise InvalidKey("the public key must be an RSA key")
    if key.key_size < 2048:
        raise InvalidKey(f"the RSA public key has {key.key_size} bits; at least 2048 are required")
    return key


def public_key_body(key: rsa.RSAPublicKey) -> str:
    """The base64 DER form Snowflake stores in RSA_PUBLIC_KEY."""
    return base64.b64encode(_public_der(key)).decode()


def fingerprint(key: rsa.RSAPublicKey) -> str:
    """``SHA256:<base64 of the SHA-256 of the DER public key>``, as in the JWT's issuer."""
    return "SHA256:" + base64.b64encode(hashlib.sha256(_public_der(key)).digest()).decode()


def new_private_key() -> rsa.RSAPrivateKey:
    """A fresh 2048-bit RSA key."""
    return rsa.generate_private_key(public_exponent=65537, key_size=2048)


def private_key_pem(key: rsa.RSAPrivateKey) -> str:
    """Unencrypted PKCS#8 PEM, the form the SDK's ``private_key`` argument takes."""
    return key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
    ).decode()


def load_private_key(pem: str) -> rsa.RSAPrivateKey:
    """An RSA private key from unencrypted PEM."""
    try:
        key = serialization.load_pem_private_key(pem.encode(), password=None)
    except (ValueError, TypeError) as exc:
        raise InvalidKey("the private key is not an unencrypted PEM key") from exc
    if not isinstance(key, rsa.RSAPrivateKey):
        raise InvalidKey("the private key must be an RSA key")
    return key


def create_private_file(path: str | Path, make: Callable[[], bytes]) -> bytes:
    """The content of ``path``; when the file does not exist, create it (mode 0600) from ``make()``.

    The content is written and fsynced under a temporary name opened with O_EXCL and mode 0600, so
    it is never readable by others, not even for a moment, whatever the umask. ``link()`` then puts
    it in place and fails if the file appeared meanwhile: two processes starting at once agree on
    the first file written, and nobody ever reads a half-written one.
    """
    file = Path(path)
    if not file.exists():
        file.parent.mkdir(parents=True, exist_ok=True)
        tmp = file.with_name(f".{file.name}.{secrets.token_hex(8)}.tmp")
        fd = os.open(tmp, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o600)
        try:
            with os.fdopen(fd, "wb") as out:
                out.write(make())
                out.flush()
                os.fsync(out.fileno())
            with contextlib.suppress(FileExistsError):
                os.link(tmp, file)
        finally:
            tmp.unlink(missing_ok=True)
    return file.read_bytes()


def ensure_key_file(path: str | Path) -> rsa.RSAPrivateKey:
    """The private key in ``path``, created (mode 0600, see :func:`create_private_file`) if missing."""
    pem = create_private_file(path, lambda: private_key_pem(new_private_key()).encode())
    return load_private_key(pem.decode())


def sign_token(account: str, user: str, key: rsa.RSAPrivateKey, lifetime_s: int = 3540) -> str:
    """A key-pair JWT for ``account.user``, with the claims the snowflake-ingest SDK sends."""
    qualified = f"{account.upper()}.{user.upper()}"
    now = int(time.time())
    claims = {
        "iss": f"{qualified}.{fingerprint(key.public_key())}",
        "sub": qualified,
        "iat": now,
        "exp": now + lifetime_s,
    }
    return jwt.encode(claims, key, algorithm="RS256")
