"""Per-layer FP8 latent KV pool (MLA) and its slot allocator."""

import threading

import torch

KV_LORA_RANK = 512
QK_ROPE_HEAD_DIM = 64
KV_CACHE_DIM = KV_LORA_RANK + QK_ROPE_HEAD_DIM  # 576
KV_CACHE_DTYPE = torch.float8_e4m3fn


class PoolExhausted(Exception):
    """Not enough free KV slots for a request."""


class SlotAllocator:
    """Thread-safe free list of KV pool slot indices."""

    def __init__(self, pool_slots: int):
        self._free = list(range(pool_slots - 1, -1, -1))
        self._lock = threading.Lock()

    def alloc(self, n: int) -> list[int]:
        """Take n free slots (not necessarily contiguous) or raise PoolExhausted."""
        with self._lock:
            if n > len(self._free):
                raise PoolExhausted(f"KV pool exhausted: need {n} slots, {len(self._free)} free")
            taken = self._free[-n:]
            del self._free[-n:]
        return taken[::-1]

    def free(self, slots: list[int]) -> None:
        """Return slots to the pool."""
        with self._lock:
            self._free.extend(reversed(slots))

    def available(self) -> int:
        """Number of free slots."""
        with self._lock:
            return len(self._free)


class MLATokenToKVPool:
    """One `[pool_slots, 1, 576]` FP8 buffer per layer: 512 latent dims + 64 rope dims.

    Like SGLang, the bytes are stored as uint8 (index_put is not implemented for FP8 everywhere)
    and viewed as FP8 when read.
    """

    def __init__(self, pool_slots: int, layers: int, device: str, padding_slot: bool = False):
        self.pool_slots = pool_slots
        self.kv_buffer = [
            torch.zeros((pool_slots, 1, KV_CACHE_DIM), dtype=torch.uint8, device=device)
            for _ in range(layers)
        ]
        # The static decode step's padding rows write their KV here and padded kv indices point
        # here (masked out), like SGLang's reserved slot; it is never given to a request.
        self.padding_slot = pool_slots - 1 if padding_slot else None
        self.allocator = SlotAllocator(pool_slots - 1 if padding_slot else pool_slots)

    def get_key_buffer(self, layer_id: int) -> torch.Tensor:
        """The layer's whole FP8 pool (keys; values are its first 512 dims)."""
        return self.kv_buffer[layer_id].view(KV_CACHE_DTYPE)

    def set_kv_buffer(self, layer_id: int, loc: torch.Tensor, cache_k: torch.Tensor) -> None:
        """Store latent KV rows `cache_k` `[n, 576]` at slots `loc`, quantized to FP8."""
        self.kv_buffer[layer_id][loc] = cache_k.to(KV_CACHE_DTYPE).view(torch.uint8).unsqueeze(1)

    def nbytes(self) -> int:
        """Total pool size in bytes."""
        return sum(b.numel() for b in self.kv_buffer)
