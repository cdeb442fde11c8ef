"""`perfloop demo --server-args` sets the target's tp_size from the server's --tp-size."""

import pytest

from agent.cli.commands.loop import _tp_size
from tools.errors import ConfigError


def test_tp_size_is_read_from_the_server_flags() -> None:
    assert _tp_size(["bash", "launch.sh", "--port", "{port}"]) == 1
    assert _tp_size(["--preset", "glm5", "--tp-size", "2"]) == 2
    assert _tp_size(["--tp-size=4", "--disable-cuda-graph"]) == 4


@pytest.mark.parametrize("argv", [["--tp-size"], ["--tp-size", "two"], ["--tp-size=0"]])
def test_a_bad_tp_size_is_one_line(argv: list[str]) -> None:
    with pytest.raises(ConfigError, match=r"^--server-args: --tp-size needs a whole number >= 1, got '.*'$"):
        _tp_size(argv)
