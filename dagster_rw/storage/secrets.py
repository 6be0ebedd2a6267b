"""Secrets: values a connector needs (a password) that must never be stored or shown in clear.

A secret is encrypted with Fernet (AES-128-CBC with an HMAC-SHA256, from the `cryptography`
package) under a key taken from the environment variable DAGSTER_RW_SECRET_KEY; the catalog holds
only the token. The variable may hold several keys separated by commas: the first encrypts, any
decrypts (to rotate a key, put the new one first).

In a connector's options (as the catalog stores them) a secret appears as one of:

    secret:<name>       `option = secret <name>`: the secret CREATE SECRET stored under that name
    encrypted:<token>   a literal written for a secret-like option (password, token, ...), encrypted
    env:<VARIABLE>      read from the environment of the process that delivers

and is resolved only where it is used (a sink's delivery).
"""
from __future__ import annotations

import os

from ..errors import OperationalError, ProgrammingError

KEY_VARIABLE = "DAGSTER_RW_SECRET_KEY"
REFERENCE = "secret:"
SEALED = "encrypted:"
ENV = "env:"
PREFIXES = (REFERENCE, SEALED)
SECRET_WORDS = ("password", "secret", "token", "credential")
REDACTED = "***"
HOW_TO_SET_KEY = (f"set the environment variable {KEY_VARIABLE} to a key made with "
                  "`python -c 'from cryptography.fernet import Fernet; print(Fernet.generate_key().decode())'`")


def is_secret_option(option: str) -> bool:
    """Whether an option's value is a secret by its name (password, sasl.password, token, ...)."""
    return any(w in option.lower() for w in SECRET_WORDS)


def key_is_set() -> bool:
    return bool(os.environ.get(KEY_VARIABLE, "").strip())


def _fernet(error=ProgrammingError):
    from cryptography.fernet import Fernet, MultiFernet

    text = os.environ.get(KEY_VARIABLE, "").strip()
    if not text:
        raise error(f"no secret key: {HOW_TO_SET_KEY}")
    keys = []
    for i, part in enumerate(p.strip() for p in text.split(",") if p.strip()):
        try:
            keys.append(Fernet(part.encode()))
        except (ValueError, TypeError):
            raise error(f"{KEY_VARIABLE} holds no valid key (key {i + 1} is not 32 url-safe base64-encoded "
                        f"bytes): {HOW_TO_SET_KEY}") from None
    return MultiFernet(keys)


def encrypt(value: str) -> str:
    """`value` encrypted under the first key of DAGSTER_RW_SECRET_KEY (ProgrammingError without one)."""
    return _fernet().encrypt(value.encode("utf-8")).decode("ascii")


def decrypt(token: str, what: str, error=OperationalError) -> str:
    """The clear value of a token `encrypt` made; `what` names the secret in errors (never its value)."""
    from cryptography.fernet import InvalidToken

    try:
        return _fernet(error).decrypt(token.encode("ascii")).decode("utf-8")
    except InvalidToken:
        raise error(f"{what} cannot be decrypted with the key in {KEY_VARIABLE} (it was encrypted under "
                    "another key: put that key in the variable too, separated by a comma)") from None


def seal_options(options: dict[str, str], references: set[str], secrets: dict[str, dict], what: str) -> dict:
    """A connector's options as the catalog may store them: `references` (options written
    `key = secret name`) become `secret:name` (the secret must exist), literal values of secret-like
    options are encrypted (refused without a key), `env:NAME` stays. `what` names the object."""
    out = {}
    for key, value in options.items():
        if key in references:
            if value not in secrets:
                raise ProgrammingError(f'{what}: secret "{value}" does not exist (option {key})')
            out[key] = REFERENCE + value
        elif value.startswith(PREFIXES):
            raise ProgrammingError(f"{what}: option {key}: a value cannot start with "
                                   f"{' or '.join(repr(p) for p in PREFIXES)} (write `{key} = secret <name>` "
                                   "to use a secret)")
        elif is_secret_option(key) and value and not value.startswith(ENV):
            if not key_is_set():
                raise ProgrammingError(
                    f"{what}: option {key} holds a secret written in clear, which the catalog would keep: "
                    f"create it with CREATE SECRET name WITH (backend = 'meta') AS '...' and write "
                    f"`{key} = secret name`, or write '{ENV}VARIABLE' to read it from the environment, "
                    f"or {HOW_TO_SET_KEY} to store it encrypted")
            out[key] = SEALED + encrypt(value)
        else:
            out[key] = value
    return out


def unseal(value: str, option: str, secrets: dict[str, dict], error=OperationalError) -> str:
    """The clear value of a stored option (secret:name and encrypted:token decrypted; any other
    value as stored, env:NAME included: the caller reads the environment)."""
    if value.startswith(REFERENCE):
        name = value[len(REFERENCE):]
        entry = secrets.get(name)
        if entry is None:
            raise error(f'secret "{name}" (option {option}) does not exist')
        return decrypt(entry["value"], f'secret "{name}"', error)
    if value.startswith(SEALED):
        return decrypt(value[len(SEALED):], f"the value of option {option}", error)
    return value


def references(options: dict[str, str]) -> set[str]:
    """The names of the secrets stored options refer to."""
    return {v[len(REFERENCE):] for v in options.values() if isinstance(v, str) and v.startswith(REFERENCE)}


def entry(name: str, value: str) -> dict:
    """What the catalog keeps of a secret: its name, backend and encrypted value."""
    return {"name": name, "backend": "meta", "value": encrypt(value)}
