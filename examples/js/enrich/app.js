// Enrich and forward: each JSON event with a `user` is looked up in an HTTP
// API (`GET {api_url}/users/{user}`, the variable `api_url`), its answer
// added as `profile`, and the enriched event forwarded to the output
// `enriched` with the user as partition key; then the batch is checkpointed.
// The same logic as examples/rust/enrich.
//
//   kcl-host run js-enrich.wasm --stream orders --application orders-enrich \
//     --var api_url=https://users.example.com --allow-outbound https://users.example.com \
//     --output enriched=kinesis:orders-enriched
//
// Records that are not JSON objects with a `user` are skipped with a warning.
// A failed lookup (the API down, or not allowed) fails the batch as
// retryable: it comes again after a backoff, and nothing is forwarded or
// checkpointed past it meanwhile.
import * as kcl from "./kcl.js";

class Enrich extends kcl.RecordProcessor {
  initialize() {
    const apiUrl = kcl.variable("api_url");
    if (apiUrl === undefined) throw new Error("set the API's address with --var api_url=URL");
    this.apiUrl = apiUrl.replace(/\/+$/, "");
  }

  /** The user's profile from the API. */
  async profile(user) {
    const url = `${this.apiUrl}/users/${user}`;
    let response;
    try {
      response = await fetch(url);
    } catch (e) {
      throw new kcl.Retryable(`looking up ${url}: ${e.message}`);
    }
    if (response.status !== 200) throw new kcl.Retryable(`looking up ${url}: status ${response.status}`);
    try {
      return await response.json();
    } catch (e) {
      throw new kcl.Retryable(`${url} answered something that is not JSON: ${e.message}`);
    }
  }

  async processRecords(batch, checkpointer) {
    const enriched = [];
    for (const record of batch) {
      let event;
      try {
        event = record.json();
      } catch {
        event = undefined;
      }
      if (event === null || typeof event !== "object" || typeof event.user !== "string") {
        kcl.log.warn(`skipping record ${record.sequenceNumber}: not a JSON event with a user`);
        continue;
      }
      event.profile = await this.profile(event.user);
      enriched.push({ partitionKey: event.user, data: JSON.stringify(event) });
    }
    kcl.send("enriched", enriched);
    try {
      checkpointer.checkpoint();
    } catch (e) {
      throw e instanceof kcl.CheckpointError ? new kcl.Retryable(e.message) : e;
    }
  }
}

export const recordProcessor = kcl.exportProcessor(Enrich);
