"""The environment variables partita reads, each through one function of partita.config."""

from __future__ import annotations

from pathlib import Path

import pytest

from partita import config
from partita.db import default_path
from partita.paths import cache_root


def test_the_records_file_and_the_cache_follow_their_variables(tmp_path: Path,
                                                               monkeypatch: pytest.MonkeyPatch
                                                               ) -> None:
    monkeypatch.setenv("PARTITA_DB", f"  {tmp_path}/r.sqlite ")
    assert config.records_file() == tmp_path / "r.sqlite" == default_path()
    monkeypatch.setenv("PARTITA_DB", " ")
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    assert config.records_file() is None
    assert default_path() == tmp_path / "partita" / "records.sqlite"
    monkeypatch.setenv("XDG_CACHE_HOME", "relative/cache")  # invalid: ignored
    assert config.xdg_cache_home() is None
    assert default_path() == Path.home() / ".cache" / "partita" / "records.sqlite"
    monkeypatch.setenv("PARTITA_CACHE", str(tmp_path / "c"))
    assert cache_root() == tmp_path / "c"
    monkeypatch.delenv("PARTITA_CACHE")
    assert cache_root() == Path.home() / ".cache" / "partita"


def test_engine_compiler_and_cuda_variables(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("PARTITA_NATIVE", raising=False)
    assert config.native_engine()
    monkeypatch.setenv("PARTITA_NATIVE", "0")
    assert not config.native_engine()
    monkeypatch.delenv("CC", raising=False)
    assert config.c_compiler() == "gcc"
    monkeypatch.setenv("CC", "clang")
    assert config.c_compiler() == "clang"
    monkeypatch.setenv("CUDA_HOME", "/opt/cuda")
    monkeypatch.delenv("CUDA_PATH", raising=False)
    assert config.cuda_roots() == ["/opt/cuda", ""]
    assert config.child_environment(OMP_DYNAMIC="false")["OMP_DYNAMIC"] == "false"


def test_the_host_name_of_a_worker(monkeypatch: pytest.MonkeyPatch) -> None:
    import socket
    monkeypatch.delenv("PARTITA_HOST", raising=False)
    assert config.host_name() == socket.gethostname()
    monkeypatch.setenv("PARTITA_HOST", " alpha ")
    assert config.host_name() == "alpha"
    monkeypatch.setenv("PARTITA_HOST", "")
    assert config.host_name() == socket.gethostname()
