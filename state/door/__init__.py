"""Values that cross the door (tools/door) without a domain of their own: tools' inputs and
outputs (`calls`) and what the session store keeps of each call (`records`, what replay answers
from).

Imports `state.base`, `state.config`, `state.engines`, `state.measurement` and `state.sessions`
(ids). Imported by tools/ and agent/ only (nothing in `state` imports it)."""
