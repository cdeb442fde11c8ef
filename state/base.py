"""The base of every perfloop model: strict, documented fields."""

import re
from datetime import UTC, datetime

from pydantic import BaseModel, ConfigDict

SECRET_NAME = re.compile(r"(KEY|TOKEN|SECRET|PASSWORD|PASSPHRASE|CREDENTIAL|AUTH)", re.I)
"""Environment variable names that hold secrets (target files refuse them written out;
tools.secrets masks their values). Here, not in state.config.target, so that the masking does not load
every config model: `perfloop analyze` imports it and starts faster without them."""


class Model(BaseModel):
    """A pydantic model that rejects unknown fields (typos in configs fail loudly).

    A field renamed since sessions were first recorded keeps its old name as its alias
    (`Field(alias="old")`): it is read by either name and written by the old one, so every
    recording, export and checkpoint reads as before, and is written as before."""

    model_config = ConfigDict(
        extra="forbid", validate_by_name=True, validate_by_alias=True, serialize_by_alias=True
    )


def utcnow() -> datetime:
    """Timezone-aware now, for records."""
    return datetime.now(UTC)
