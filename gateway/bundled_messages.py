"""kafka-python message classes for the APIs its bundled schemas lack (schemas in `gateway/kafka_schemas`):
the delegation-token APIs (38-41) and KIP-848's ConsumerGroupHeartbeat (68) and ConsumerGroupDescribe (69).

Created at import (kafka-python builds each class from the JSON file of the same name); the codec's
registry finds them among ApiMessage's subclasses. `MESSAGES` keeps them alive.
"""

from __future__ import annotations

import types
import warnings
from typing import Any

import gateway.kafka_schemas as _schemas

_APIS = (
    *(f"{verb}DelegationToken" for verb in ("Create", "Renew", "Expire", "Describe")),
    "ConsumerGroupHeartbeat",
    "ConsumerGroupDescribe",
)
_NAMES = tuple(f"{api}{kind}" for api in _APIS for kind in ("Request", "Response"))

with warnings.catch_warnings():
    warnings.simplefilter("ignore", DeprecationWarning)
    from kafka.protocol.api_message import ApiMessage

    MESSAGES: dict[str, Any] = {
        name: types.new_class(name, (ApiMessage,), {"load_json": _schemas}) for name in _NAMES
    }
