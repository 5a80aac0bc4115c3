"""Local filesystem storage: put-if-absent by an atomic hard link of a fully written file."""

from __future__ import annotations

import contextlib
import os
import uuid
from pathlib import Path

import pyarrow.fs as pafs

from maintd.storage.base import FileInfo, Storage


class LocalStorage(Storage):
    """A table in a local (or locally mounted, POSIX) directory."""

    lists_in_order = False

    def __init__(self, uri: str) -> None:
        path = uri[len("file://") :] if uri.startswith("file://") else uri
        self._root = Path(path).expanduser().absolute()
        self._fs = pafs.LocalFileSystem()

    @property
    def uri(self) -> str:
        return str(self._root)

    @property
    def root(self) -> Path:
        return self._root

    @property
    def filesystem(self) -> pafs.FileSystem:
        return self._fs

    def full_path(self, path: str) -> str:
        return str(self._root / path)

    def _write_temp(self, target: Path, data: bytes) -> Path:
        target.parent.mkdir(parents=True, exist_ok=True)
        tmp = target.parent / f".tmp-{uuid.uuid4().hex}"
        with open(tmp, "wb") as fh:
            fh.write(data)
            fh.flush()
            os.fsync(fh.fileno())
        return tmp

    def put_if_absent(self, path: str, data: bytes) -> bool:
        target = self._root / path
        tmp = self._write_temp(target, data)
        try:
            os.link(tmp, target)
            return True
        except FileExistsError:
            return False
        finally:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(tmp)

    def write_atomic(self, path: str, data: bytes) -> None:
        target = self._root / path
        tmp = self._write_temp(target, data)
        os.replace(tmp, target)

    def read(self, path: str) -> bytes:
        with open(self._root / path, "rb") as fh:
            return fh.read()

    def exists(self, path: str) -> bool:
        return (self._root / path).exists()

    def list_dir(self, path: str) -> list[FileInfo]:
        base = self._root / path
        out: list[FileInfo] = []
        try:
            entries = os.scandir(base)
        except FileNotFoundError:
            return out
        with entries:
            for e in entries:
                try:
                    if not e.is_file(follow_symlinks=False):
                        continue
                    st = e.stat(follow_symlinks=False)
                except FileNotFoundError:  # removed since the directory was read (a writer's temp file)
                    continue
                rel = f"{path.rstrip('/')}/{e.name}" if path else e.name
                out.append(FileInfo(rel, st.st_size, int(st.st_mtime * 1000)))
        return out

    def walk(self, path: str = "") -> list[FileInfo]:
        base = self._root / path
        out: list[FileInfo] = []
        for dirpath, _dirs, files in os.walk(base):
            for name in files:
                full = Path(dirpath) / name
                try:
                    st = full.stat()
                except FileNotFoundError:
                    continue
                out.append(FileInfo(full.relative_to(self._root).as_posix(), st.st_size, int(st.st_mtime * 1000)))
        return out

    def delete(self, path: str) -> bool:
        try:
            os.unlink(self._root / path)
            return True
        except FileNotFoundError:
            return False

    def makedirs(self, path: str) -> None:
        (self._root / path).mkdir(parents=True, exist_ok=True)
