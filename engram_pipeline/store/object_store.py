"""Object storage must honour a conditional PUT, or Lance loses commits: checked once per endpoint, at open.

Lance commits a table version by writing its manifest with a put-if-absent (``If-None-Match: *`` on S3): of two
writers of version N the first wins and the other rebases onto it. A store that ignores the condition accepts
both writes, and the later one silently replaces the earlier commit (an S3 fake that did this lost 30% of
acknowledged updates in a race here). :func:`check_conditional_put` asks the endpoint the same question before
the store touches it: it writes a probe object under the store's prefix twice with put-if-absent, through the
same object_store configuration keys LanceDB takes (``ENGRAM_STORAGE_OPTIONS``), expects the second write to be
refused (HTTP 412), and deletes the probe. Nothing else is written either way.

There is no switch to skip it: every process that opens the store writes (an access log entry on a read
included), so every one of them could lose a commit, and the check costs three requests once per process.

>>> check_conditional_put("memory://", {})  # not object storage: nothing to check
>>> needs_check("s3://bucket/store"), needs_check("/tmp/store"), needs_check("s3+ddb://bucket/store")
(True, False, False)
"""

from __future__ import annotations

import contextlib
import json
import threading
import uuid
from datetime import timedelta
from typing import Any, cast

import obstore
from obstore.exceptions import AlreadyExistsError, BaseError, UnknownConfigurationKeyError
from obstore.store import from_url

from engram_pipeline.store.errors import StoreError

# Schemes whose commits rely on the store's put-if-absent (``s3+ddb://`` commits through DynamoDB instead).
CONDITIONAL_PUT_SCHEMES = frozenset({"s3", "s3a", "gs", "az", "abfs", "abfss"})
# object_store's HTTP client options: LanceDB takes them among the storage options, obstore separately.
CLIENT_OPTION_KEYS = frozenset(
    {
        "allow_http",
        "allow_invalid_certificates",
        "connect_timeout",
        "default_content_type",
        "http1_only",
        "http2_keep_alive_interval",
        "http2_keep_alive_timeout",
        "http2_keep_alive_while_idle",
        "http2_only",
        "pool_idle_timeout",
        "pool_max_idle_per_host",
        "proxy_url",
        "proxy_ca_certificate",
        "proxy_excludes",
        "randomize_addresses",
        "timeout",
        "user_agent",
    }
)
# LanceDB's own storage options (retries, download tuning): they do not change where or how objects are written.
LANCE_ONLY_KEYS = frozenset({"client_max_retries", "client_retry_timeout", "download_retry_count", "use_opendal"})
PROBE_PREFIX = "_engram_probe"

_checked: set[str] = set()  # endpoints (scheme, bucket and options) that passed, in this process
_lock = threading.Lock()


class ConditionalPutIgnored(StoreError):
    """The object store accepted a second put-if-absent of one key: Lance commits on it would be lost."""

    def __init__(self, uri: str) -> None:
        self.uri = uri
        super().__init__(
            f"{uri}: the object store accepted a second conditional PUT (If-None-Match: *) of the same key, so "
            "concurrent Lance commits would silently overwrite each other. Use a store that honours conditional "
            "writes (AWS S3, Ceph RGW, MinIO, GCS, Azure Blob), or `s3+ddb://` with a DynamoDB commit table"
        )


class ObjectStoreCheckFailed(StoreError):
    """The conditional-PUT check could not run (bad options, no access, endpoint down): nothing was opened."""

    def __init__(self, uri: str, reason: str) -> None:
        self.uri = uri
        super().__init__(
            f"{uri}: could not check that the object store honours conditional writes ({reason}); check "
            "ENGRAM_DB_URI, ENGRAM_STORAGE_OPTIONS and that the credentials may write under the store's prefix"
        )


def needs_check(uri: str) -> bool:
    return "://" in uri and uri.split("://", 1)[0].lower() in CONDITIONAL_PUT_SCHEMES


def check_conditional_put(uri: str, storage_options: dict[str, str]) -> None:
    """Refuse (:class:`ConditionalPutIgnored`) an object store that lets a second put-if-absent of a key succeed.

    A no-op for local paths and ``memory://``; probed once per endpoint, bucket and options in a process.
    """
    if not needs_check(uri):
        return
    key = _endpoint_key(uri, storage_options)
    with _lock:
        if key in _checked:
            return
        _probe(uri, storage_options)
        _checked.add(key)


def _endpoint_key(uri: str, storage_options: dict[str, str]) -> str:
    scheme, rest = uri.split("://", 1)
    return json.dumps([scheme.lower(), rest.split("/", 1)[0], sorted(storage_options.items())])


def _probe(uri: str, storage_options: dict[str, str]) -> None:
    store = _client(uri, storage_options)
    path = f"{PROBE_PREFIX}/conditional-put-{uuid.uuid4().hex}"
    try:
        obstore.put(store, path, b"first", mode="create")
        try:
            obstore.put(store, path, b"second", mode="create")
        except AlreadyExistsError:
            return  # refused: the store honours it
        raise ConditionalPutIgnored(uri)
    except BaseError as exc:
        raise ObjectStoreCheckFailed(uri, _first_line(exc)) from None
    finally:
        _delete_quietly(store, path)


def _client(uri: str, storage_options: dict[str, str]) -> Any:
    config = {k: v for k, v in storage_options.items() if k not in CLIENT_OPTION_KEYS | LANCE_ONLY_KEYS}
    client = {k: v for k, v in storage_options.items() if k in CLIENT_OPTION_KEYS}
    client.setdefault("connect_timeout", "5s")
    client.setdefault("timeout", "30s")
    retry: Any = {"max_retries": 2, "retry_timeout": timedelta(seconds=30)}
    try:
        # obstore types the options per store class; these are the same keys as LanceDB's, checked by obstore
        return from_url(uri.rstrip("/"), config=cast(Any, config), client_options=cast(Any, client), retry_config=retry)
    except (UnknownConfigurationKeyError, BaseError, ValueError) as exc:
        raise ObjectStoreCheckFailed(uri, _first_line(exc)) from None


def _delete_quietly(store: Any, path: str) -> None:
    # the probe is under its own prefix: a leftover is harmless and never read
    with contextlib.suppress(BaseError):
        obstore.delete(store, path)


def _first_line(exc: BaseException) -> str:
    return str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
