"""`perfloop host setup`, the pure parts: pip's platform tags and the download command."""

from __future__ import annotations

from pathlib import Path, PurePosixPath

import pytest

from tools.errors import ConfigError
from tools.hosts.setup import env_dir, pip_download_argv, platform_tags, requirements


def test_platform_tags_cover_every_manylinux_up_to_the_hosts_glibc() -> None:
    tags = platform_tags("aarch64", ["glibc", "2.19"])
    assert tags == [
        "manylinux_2_17_aarch64",
        "manylinux_2_18_aarch64",
        "manylinux_2_19_aarch64",
        "manylinux2014_aarch64",
    ]
    with pytest.raises(ConfigError, match="no glibc"):
        platform_tags("x86_64", ["", ""])


def test_download_is_binary_only_for_that_python_and_pinned_to_ours() -> None:
    argv = pip_download_argv(Path("/w"), "3.12", ["manylinux_2_17_x86_64"])
    assert argv[1:4] == ["-m", "pip", "download"] and "--only-binary=:all:" in argv
    assert argv[argv.index("--python-version") + 1] == "3.12" and argv[argv.index("--abi") + 1] == "cp312"
    assert argv[argv.index("--platform") + 1] == "manylinux_2_17_x86_64"
    pins = requirements()
    assert argv[-len(pins) :] == pins and len(pins) == 4 and all("==" in p for p in pins)
    assert env_dir(PurePosixPath("/home/u"), "3.12") == PurePosixPath("/home/u/.cache/perfloop/env-cp312")
