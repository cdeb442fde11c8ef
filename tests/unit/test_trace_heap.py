"""tools.trace.read.heap: inside kept_heap() a freed buffer is reused without faulting its pages in
again; on the way out the free memory goes back to the system. Each case runs in a fresh Python
(the allocator's settings are process-wide). Needs glibc, as perfloop's Linux hosts have."""

import json
import subprocess
import sys

from tools.trace.read import heap

PROBE = """
import json, resource
from tools.trace.read import heap

def faults(): return resource.getrusage(resource.RUSAGE_SELF).ru_minflt
def rss_kb(): return int(open("/proc/self/statm").read().split()[1]) * 4

def churn(times=16, size=3 << 20):
    before = faults()
    for _ in range(times):
        buf = bytearray(size)  # zeroed: every page touched
        del buf
    return faults() - before

heap._set({heap.M_MMAP_THRESHOLD: 128 << 10})  # glibc's default, without its own adjustment
plain = churn()
with heap.kept_heap():
    kept = churn()
    pieces = [bytearray(1 << 20) for _ in range(160)]
    del pieces
    inside = rss_kb()
after = rss_kb()
print(json.dumps({"plain": plain, "kept": kept, "inside": inside, "after": after, "depth": heap._depth}))
"""


def probe() -> dict:
    out = subprocess.run([sys.executable, "-c", PROBE], capture_output=True, text=True, check=True)
    return json.loads(out.stdout)


def test_a_freed_buffer_is_reused_inside_and_the_memory_given_back_after() -> None:
    got = probe()
    pages = (3 << 20) // 4096
    assert got["plain"] >= 12 * pages, got  # each 3 MiB buffer mmapped and faulted in afresh
    assert got["kept"] <= 3 * pages, got  # faulted in once (or so), then reused from the heap
    assert got["inside"] - got["after"] >= 100 * 1024, got  # 160 MiB freed inside, trimmed on exit
    assert got["depth"] == 0


def test_nested_uses_set_and_restore_once(monkeypatch) -> None:
    calls: list[dict] = []
    monkeypatch.setattr(heap, "_set", calls.append)
    with heap.kept_heap():
        with heap.kept_heap():
            assert calls == [heap.KEPT]
        assert calls == [heap.KEPT]
    assert calls == [heap.KEPT, heap.AFTER]
