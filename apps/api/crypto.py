"""Secrets the panel must read back (webhook signing secrets), encrypted at rest; no Django.

A stored value is `enc1:` followed by a Fernet token (AES-128-CBC with HMAC-SHA256, from
the `cryptography` package). The Fernet key is derived with HKDF-SHA256 from a key
string: settings.FIELD_ENCRYPTION_KEY, or, when that is unset, SECRET_KEY (see
`apps.api.models.field_cipher`). Several key strings make a rotation: the first encrypts,
every one decrypts (MultiFernet); `manage.py rotate_field_key` re-encrypts every stored
value with the first, after which the old ones can be dropped.
"""

from __future__ import annotations

import base64
import functools
from collections.abc import Sequence

from cryptography.fernet import Fernet, InvalidToken, MultiFernet
from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.kdf.hkdf import HKDF

PREFIX = "enc1:"
_SALT = b"sparkpanel field encryption"
_INFO = b"fernet v1"


class UndecryptableError(ValueError):
    """No configured key opens this value (the key changed without a rotation)."""


def derive_key(key_material: str) -> bytes:
    """A Fernet key (urlsafe base64 of 32 bytes) from any key string."""
    if not key_material:
        raise ValueError("an empty encryption key")
    raw = HKDF(algorithm=hashes.SHA256(), length=32, salt=_SALT, info=_INFO).derive(
        key_material.encode()
    )
    return base64.urlsafe_b64encode(raw)


class FieldCipher:
    def __init__(self, keys: Sequence[str]):
        keys = [k for k in keys if k]
        if not keys:
            raise ValueError("no encryption key configured")
        self._fernet = MultiFernet([Fernet(derive_key(k)) for k in keys])

    @staticmethod
    def is_encrypted(value: str) -> bool:
        return value.startswith(PREFIX)

    def encrypt(self, clear: str) -> str:
        return PREFIX + self._fernet.encrypt(clear.encode()).decode("ascii")

    def decrypt(self, stored: str) -> str:
        if not self.is_encrypted(stored):
            raise UndecryptableError("not an encrypted value")
        try:
            return self._fernet.decrypt(stored[len(PREFIX) :].encode("ascii")).decode()
        except (InvalidToken, UnicodeError, ValueError):
            raise UndecryptableError("no configured key decrypts this value") from None

    def rotate(self, stored: str) -> str:
        """The value encrypted with the first key (clear values are encrypted)."""
        if not self.is_encrypted(stored):
            return self.encrypt(stored)
        try:
            token = self._fernet.rotate(stored[len(PREFIX) :].encode("ascii"))
        except (InvalidToken, ValueError):
            raise UndecryptableError("no configured key decrypts this value") from None
        return PREFIX + token.decode("ascii")


@functools.lru_cache(maxsize=4)
def cipher_for(keys: tuple[str, ...]) -> FieldCipher:
    return FieldCipher(keys)


def recrypt_column(cursor, table: str, column: str, transform) -> int:
    """Apply `transform(stored) -> stored` to every non-empty value of a column, by primary
    key `id`, through a DB-API cursor with `%s` parameters (Django's). Returns how many rows
    changed. `table` and `column` must come quoted from the caller (schema names, never
    user input)."""
    cursor.execute(f"SELECT id, {column} FROM {table}")  # noqa: S608 - quoted schema names
    changed = 0
    for pk, stored in cursor.fetchall():
        if not stored:
            continue
        new = transform(stored)
        if new != stored:
            cursor.execute(f"UPDATE {table} SET {column} = %s WHERE id = %s", [new, pk])  # noqa: S608
            changed += 1
    return changed
