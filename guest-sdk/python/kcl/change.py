"""DynamoDB stream records: when kcl-host reads a table's stream (``--stream
<DynamoDB stream ARN>`` or ``--dynamodb-table T``), each record's data is the
change in the JSON that Lambda's DynamoDB events carry. ``record.change()``
reads it, with the item's attributes as plain values::

    change = record.change()
    if change.event_name == "MODIFY":
        delta = change.new_image["amount"] - change.old_image["amount"]

Numbers are ``int`` when whole and ``decimal.Decimal`` otherwise (as boto3
gives them), binary is ``bytes``, string and number sets are ``set``\\ s.
"""

from __future__ import annotations

import base64
import json
from dataclasses import dataclass
from decimal import Decimal
from typing import Any, Dict, Optional


class NotAChange(ValueError):
    """The record is not a DynamoDB stream record."""


@dataclass(frozen=True)
class Change:
    """One change of one item."""

    #: ``"INSERT"``, ``"MODIFY"`` or ``"REMOVE"``.
    event_name: str
    #: The item's primary key attributes.
    keys: Dict[str, Any]
    #: The item after the change (not on REMOVE, nor on KEYS_ONLY / OLD_IMAGE streams).
    new_image: Optional[Dict[str, Any]]
    #: The item before the change (not on INSERT, nor on KEYS_ONLY / NEW_IMAGE streams).
    old_image: Optional[Dict[str, Any]]
    sequence_number: str
    #: When DynamoDB made the change, in milliseconds since the Unix epoch.
    approximate_creation_ms: int
    size_bytes: int


def _number(text: str):
    value = Decimal(text)
    return int(value) if value == value.to_integral_value() else value


def plain(attribute: Dict[str, Any]) -> Any:
    """``{"N": "12"}`` → ``12``, ``{"SS": ["a"]}`` → ``{"a"}``, ``{"M": {...}}`` → ``{...}``."""
    ((kind, value),) = attribute.items()
    if kind == "S" or kind == "BOOL":
        return value
    if kind == "N":
        return _number(value)
    if kind == "B":
        return base64.b64decode(value)
    if kind == "SS":
        return set(value)
    if kind == "NS":
        return {_number(v) for v in value}
    if kind == "BS":
        return {base64.b64decode(v) for v in value}
    if kind == "L":
        return [plain(v) for v in value]
    if kind == "M":
        return _item(value)
    if kind == "NULL":
        return None
    raise NotAChange(f"unknown attribute type {kind!r}")


def _item(attributes: Optional[Dict[str, Any]]) -> Optional[Dict[str, Any]]:
    return None if attributes is None else {name: plain(value) for name, value in attributes.items()}


def change_of(data: bytes, sequence_number: str = "") -> Change:
    """The change a DynamoDB stream record's ``data`` carries."""
    try:
        event = json.loads(data)
        stream = event["dynamodb"]
        name = event["eventName"]
    except (ValueError, KeyError, TypeError) as e:
        raise NotAChange(f"not a DynamoDB stream record: {e!r}") from None
    if name not in ("INSERT", "MODIFY", "REMOVE"):
        raise NotAChange(f"not a DynamoDB stream record: eventName {name!r}")
    return Change(
        event_name=name,
        keys=_item(stream.get("Keys")) or {},
        new_image=_item(stream.get("NewImage")),
        old_image=_item(stream.get("OldImage")),
        sequence_number=stream.get("SequenceNumber", sequence_number),
        approximate_creation_ms=round(float(stream.get("ApproximateCreationDateTime", 0)) * 1000),
        size_bytes=int(stream.get("SizeBytes", 0)),
    )
