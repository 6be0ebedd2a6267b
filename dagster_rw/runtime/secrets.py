"""CREATE SECRET and DROP SECRET: a secret is part of the catalog (its value encrypted, see
storage.secrets), committed like any other definition."""
from __future__ import annotations

import os

from ..errors import IntegrityError, OperationalError, ProgrammingError
from ..storage import catalog as catalogs
from ..storage import secrets
from ..storage.catalog import Catalog


def _commit(wh, current: Catalog, entries: dict, what: str) -> None:
    catalogs.commit(wh.store, Catalog(version=current.version, objects=current.objects,
                                      functions=current.functions, secrets=entries), what)
    wh.sync()


def create_secret(wh, statement) -> bool:
    s = statement
    current = wh.catalog(reload=True)
    known = current.secrets or {}
    if s.name in known:
        if s.if_not_exists:
            return False
        raise ProgrammingError(f'secret "{s.name}" already exists')
    if not secrets.key_is_set():
        raise ProgrammingError(f"CREATE SECRET {s.name}: the value would be stored encrypted, and there is no "
                               f"key: {secrets.HOW_TO_SET_KEY}")
    _commit(wh, current, {**known, s.name: secrets.entry(s.name, s.value)}, f"CREATE SECRET {s.name}")
    return True


def drop_secret(wh, name: str, if_exists: bool) -> bool:
    current = wh.catalog(reload=True)
    known = current.secrets or {}
    if name not in known:
        if if_exists:
            return False
        raise ProgrammingError(f'secret "{name}" does not exist')
    users = [o.name for o in current.objects.values() if name in secrets.references(o.options or {})]
    if users:
        raise IntegrityError(f'cannot drop secret "{name}": other objects depend on it ({", ".join(users)})')
    _commit(wh, current, {k: v for k, v in known.items() if k != name}, f"DROP SECRET {name}")
    return True


def secret_names(wh) -> list[str]:
    return sorted(wh.catalog().secrets or {})


def clear_value(wh, value: str | None, option: str, what: str) -> str | None:
    """The clear value of a connector option as the catalog keeps it (a secret reference or an
    encrypted literal decrypted; `env:NAME` read from this process's environment), for use here
    and now, never to be stored; `what` names the object in errors (which never hold the value)."""
    if not value:
        return None
    value = secrets.unseal(value, option, wh.catalog().secrets or {})
    if value.startswith(secrets.ENV):
        name = value[len(secrets.ENV):]
        if name not in os.environ:
            raise OperationalError(f"{what}: option {option} names the environment variable {name}, which is not set")
        return os.environ[name]
    return value
