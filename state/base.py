"""The base of every perfloop model: strict, documented fields."""

from datetime import UTC, datetime

from pydantic import BaseModel, ConfigDict


class Model(BaseModel):
    """A pydantic model that rejects unknown fields (typos in configs fail loudly)."""

    model_config = ConfigDict(extra="forbid")


def utcnow() -> datetime:
    """Timezone-aware now, for records."""
    return datetime.now(UTC)
