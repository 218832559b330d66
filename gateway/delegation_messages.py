"""kafka-python message classes for the delegation-token APIs (schemas in `gateway/kafka_schemas`)."""

from __future__ import annotations

import warnings
from typing import Any

import gateway.kafka_schemas as _schemas

with warnings.catch_warnings():
    warnings.simplefilter("ignore", DeprecationWarning)
    from kafka.protocol.api_message import ApiMessage

    class CreateDelegationTokenRequest(ApiMessage, load_json=_schemas):  # type: ignore[misc, call-arg]
        pass

    class CreateDelegationTokenResponse(ApiMessage, load_json=_schemas):  # type: ignore[misc, call-arg]
        pass

    class RenewDelegationTokenRequest(ApiMessage, load_json=_schemas):  # type: ignore[misc, call-arg]
        pass

    class RenewDelegationTokenResponse(ApiMessage, load_json=_schemas):  # type: ignore[misc, call-arg]
        pass

    class ExpireDelegationTokenRequest(ApiMessage, load_json=_schemas):  # type: ignore[misc, call-arg]
        pass

    class ExpireDelegationTokenResponse(ApiMessage, load_json=_schemas):  # type: ignore[misc, call-arg]
        pass

    class DescribeDelegationTokenRequest(ApiMessage, load_json=_schemas):  # type: ignore[misc, call-arg]
        pass

    class DescribeDelegationTokenResponse(ApiMessage, load_json=_schemas):  # type: ignore[misc, call-arg]
        pass


MESSAGES: dict[str, Any] = {c.__name__: c for c in (
    CreateDelegationTokenRequest, CreateDelegationTokenResponse, RenewDelegationTokenRequest,
    RenewDelegationTokenResponse, ExpireDelegationTokenRequest, ExpireDelegationTokenResponse,
    DescribeDelegationTokenRequest, DescribeDelegationTokenResponse)}
