"""The base of every perfloop model: strict, documented fields."""

import re
from datetime import UTC, datetime

from pydantic import BaseModel, ConfigDict

SECRET_NAME = re.compile(r"(KEY|TOKEN|SECRET|PASSWORD|PASSPHRASE|CREDENTIAL|AUTH)", re.I)
"""Environment variable names that hold secrets (target files refuse them written out;
tools.secrets masks their values). Here, not in state.target, so that the masking does not load
every config model: `perfloop analyze` imports it and starts faster without them."""


class Model(BaseModel):
    """A pydantic model that rejects unknown fields (typos in configs fail loudly)."""

    model_config = ConfigDict(extra="forbid")


def utcnow() -> datetime:
    """Timezone-aware now, for records."""
    return datetime.now(UTC)
