"""A pyarrow filesystem whose bytes go through an obstore store: data files with the store's own credentials.

pyarrow's native filesystems are the data-file path on object stores (:mod:`maintd.storage.objectstore`), but
pyarrow's ``GcsFileSystem`` only knows Google's default credentials (and access tokens): a service account
given as the storage option ``google_service_account`` (or ``google_service_account_key``) would reach the
log, which obstore writes, and not the data files. For such a table the data files stream through this
filesystem instead: ranged reads (:func:`obstore.open_reader`) and buffered writes (:func:`obstore.open_writer`:
one PUT for a small file, a multipart upload for a large one) of the same store configuration as the log, so
both see the same endpoint and credentials. The price is Python in the byte path.

Paths are ``bucket/key`` as :meth:`~maintd.storage.base.Storage.full_path` spells them; the store is rooted at
the bucket.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import obstore
import obstore.exceptions as obx
import pyarrow as pa
import pyarrow.fs as pafs


class ObjectStoreHandler(pafs.FileSystemHandler):  # type: ignore[misc]
    """A :class:`pyarrow.fs.FileSystemHandler` on an obstore store rooted at ``bucket``.

    ``rebuild`` (a function and its arguments) makes the same handler again in another process: a pickled
    filesystem carries it instead of the store.
    """

    def __init__(self, store: Any, bucket: str, rebuild: tuple[Callable[..., Any], tuple[Any, ...]]) -> None:
        self.store = store
        self.bucket = bucket
        self.rebuild = rebuild

    def __reduce__(self) -> tuple[Any, ...]:
        return self.rebuild

    def _key(self, path: str) -> str:
        bucket, _, key = path.strip("/").partition("/")
        if bucket != self.bucket or not key:
            raise FileNotFoundError(f"{path}: not an object of bucket {self.bucket}")
        return key

    def _call(self, path: str, fn: Callable[[], Any]) -> Any:
        try:
            return fn()
        except FileNotFoundError:
            raise FileNotFoundError(f"{path} not found") from None
        except (obx.BaseError, RuntimeError) as exc:
            raise OSError(f"{path}: {str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__}"
                          ) from None

    # -- what pyarrow asks --------------------------------------------------------------------------
    def get_type_name(self) -> str:
        return "maintd-objectstore"

    def equals(self, other: Any) -> bool:
        return isinstance(other, ObjectStoreHandler) and other.store is self.store

    def normalize_path(self, path: str) -> str:
        return path

    def get_file_info(self, paths: list[str]) -> list[pafs.FileInfo]:
        out = []
        for path in paths:
            try:
                key = self._key(path)
                meta = self._call(path, lambda: obstore.head(self.store, key))  # noqa: B023
                out.append(pafs.FileInfo(path, pafs.FileType.File, size=int(meta["size"]),
                                         mtime=meta["last_modified"]))
            except FileNotFoundError:
                below = self._listing(path, recursive=False)
                out.append(pafs.FileInfo(path, pafs.FileType.Directory if below else pafs.FileType.NotFound))
        return out

    def _listing(self, path: str, *, recursive: bool) -> list[pafs.FileInfo]:
        base = path.strip("/")
        bucket, _, key = base.partition("/")
        if bucket != self.bucket:
            return []
        prefix = f"{key}/" if key else None
        if recursive:
            metas = [m for chunk in self._call(path, lambda: list(obstore.list(self.store, prefix))) for m in chunk]
            dirs: list[str] = []
        else:
            res = self._call(path, lambda: obstore.list_with_delimiter(self.store, prefix))
            metas, dirs = res["objects"], res["common_prefixes"]
        return ([pafs.FileInfo(f"{self.bucket}/{d.rstrip('/')}", pafs.FileType.Directory) for d in dirs]
                + [pafs.FileInfo(f"{self.bucket}/{m['path']}", pafs.FileType.File, size=int(m["size"]),
                                 mtime=m["last_modified"]) for m in metas])

    def get_file_info_selector(self, selector: pafs.FileSelector) -> list[pafs.FileInfo]:
        found = self._listing(selector.base_dir, recursive=selector.recursive)
        if not found and not selector.allow_not_found:
            raise FileNotFoundError(f"{selector.base_dir} not found")
        return found

    def create_dir(self, path: str, recursive: bool) -> None:
        return None  # object stores have no directories

    def delete_dir(self, path: str) -> None:
        self.delete_dir_contents(path, missing_dir_ok=True)

    def delete_dir_contents(self, path: str, missing_dir_ok: bool = False) -> None:
        for info in self._listing(path, recursive=True):
            self.delete_file(info.path)

    def delete_root_dir_contents(self) -> None:
        raise PermissionError("maintd never empties a bucket")

    def delete_file(self, path: str) -> None:
        self._call(path, lambda: obstore.delete(self.store, self._key(path)))

    def move(self, src: str, dest: str) -> None:
        self._call(src, lambda: obstore.rename(self.store, self._key(src), self._key(dest)))

    def copy_file(self, src: str, dest: str) -> None:
        self._call(src, lambda: obstore.copy(self.store, self._key(src), self._key(dest)))

    def open_input_stream(self, path: str) -> pa.NativeFile:
        return self.open_input_file(path)

    def open_input_file(self, path: str) -> pa.NativeFile:
        reader = self._call(path, lambda: obstore.open_reader(self.store, self._key(path)))
        return pa.PythonFile(_Reader(reader, path), mode="r")

    def open_output_stream(self, path: str, metadata: Any = None) -> pa.NativeFile:
        writer = self._call(path, lambda: obstore.open_writer(self.store, self._key(path)))
        return pa.PythonFile(_Writer(writer, path), mode="w")

    def open_append_stream(self, path: str, metadata: Any = None) -> pa.NativeFile:
        raise NotImplementedError("object stores cannot append to an object")


class _Reader:
    """obstore's ranged reader as the file object :class:`pyarrow.PythonFile` expects (errors as ``OSError``)."""

    def __init__(self, inner: Any, path: str) -> None:
        self.inner, self.path, self.closed = inner, path, False

    def readable(self) -> bool:
        return True

    def seekable(self) -> bool:
        return True

    def read(self, size: int = -1) -> bytes:
        return bytes(_os_errors(self.path, lambda: self.inner.read(size) if size is not None and size >= 0
                                else self.inner.read()))

    def seek(self, offset: int, whence: int = 0) -> int:
        return int(_os_errors(self.path, lambda: self.inner.seek(offset, whence)))

    def tell(self) -> int:
        return int(self.inner.tell())

    def size(self) -> int:
        return int(self.inner.size)

    def close(self) -> None:
        if not self.closed:
            self.closed = True
            self.inner.close()


def _os_errors(path: str, fn: Callable[[], Any]) -> Any:
    try:
        return fn()
    except (obx.BaseError, RuntimeError) as exc:
        raise OSError(f"{path}: {str(exc).strip().splitlines()[0] if str(exc).strip() else exc!r}") from None


class _Writer:
    """obstore's writer as the file object :class:`pyarrow.PythonFile` expects (errors as ``OSError``)."""

    def __init__(self, inner: Any, path: str) -> None:
        self.inner, self.path, self.closed, self.written = inner, path, False, 0

    def writable(self) -> bool:
        return True

    def write(self, data: Any) -> int:
        n = self._call(lambda: self.inner.write(bytes(data)))
        self.written += len(data)
        return int(n) if n is not None else len(data)

    def tell(self) -> int:
        return self.written

    def flush(self) -> None:
        self._call(self.inner.flush)

    def close(self) -> None:
        if not self.closed:
            self.closed = True
            self._call(self.inner.close)

    def _call(self, fn: Callable[[], Any]) -> Any:
        return _os_errors(self.path, fn)


def object_store_filesystem(store: Any, bucket: str, rebuild: tuple[Callable[..., Any], tuple[Any, ...]]
                            ) -> pafs.PyFileSystem:
    """A pyarrow filesystem over ``store`` (rooted at ``bucket``)."""
    return pafs.PyFileSystem(ObjectStoreHandler(store, bucket, rebuild))


__all__ = ["ObjectStoreHandler", "object_store_filesystem"]
