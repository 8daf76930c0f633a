"""Enrich and forward: each JSON event with a ``user`` is looked up in an
HTTP API (``GET {api_url}/users/{user}``, the variable ``api_url``), its
answer added as ``profile``, and the enriched event forwarded to the output
``enriched`` with the user as partition key; then the batch is
checkpointed. The same logic as examples/rust/enrich and examples/js/enrich.

    kcl-host run py-enrich.wasm --stream orders --application orders-enrich \\
      --var api_url=https://users.example.com --allow-outbound https://users.example.com \\
      --output enriched=kinesis:orders-enriched

Records that are not JSON objects with a ``user`` are skipped with a
warning. A failed lookup (the API down, or not allowed) fails the batch as
retryable: it comes again after a backoff, and nothing is forwarded or
checkpointed past it meanwhile."""

import json
import logging

import kcl
from kcl import http

log = logging.getLogger("enrich")


class Enrich(kcl.RecordProcessor):
    def initialize(self, shard):
        api_url = kcl.variable("api_url")
        if api_url is None:
            raise ValueError("set the API's address with --var api_url=URL")
        self.api_url = api_url.rstrip("/")

    def profile(self, user):
        """The user's profile from the API."""
        url = f"{self.api_url}/users/{user}"
        try:
            response = http.get(url)
        except http.HttpError as e:
            raise kcl.Retryable(f"looking up {e}") from e
        if response.status != 200:
            raise kcl.Retryable(f"looking up {url}: status {response.status}")
        try:
            return response.json()
        except ValueError as e:
            raise kcl.Retryable(f"{url} answered something that is not JSON: {e}") from e

    def process_records(self, batch, checkpointer):
        enriched = []
        for record in batch:
            try:
                event = json.loads(record.data)
            except ValueError:
                event = None
            if not isinstance(event, dict) or not isinstance(event.get("user"), str):
                log.warning("skipping record %s: not a JSON event with a user", record.sequence_number)
                continue
            event["profile"] = self.profile(event["user"])
            enriched.append((event["user"], json.dumps(event).encode()))
        kcl.send("enriched", enriched)
        try:
            checkpointer.checkpoint()
        except kcl.CheckpointError as e:
            raise kcl.Retryable(str(e)) from e


RecordProcessor = kcl.export(Enrich)
