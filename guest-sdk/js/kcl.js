// Write kcl-host record processors in JavaScript.
//
// A processor serves one Kinesis shard at a time. kcl-host owns the shard's
// lifecycle — leases, fetching, retries, and the SHARD_END checkpoint once a
// closed shard is done — so a processor only handles records and says how far
// it got:
//
//     import * as kcl from "./kcl.js";
//
//     class Counter extends kcl.RecordProcessor {
//       initialize(shard) { this.seen = 0; }
//       processRecords(batch, checkpointer) {
//         this.seen += batch.length;
//         checkpointer.checkpoint();
//       }
//     }
//
//     export const recordProcessor = kcl.exportProcessor(Counter);
//
// `recordProcessor` is the name the component exports (componentize-js looks
// it up). Build with `scripts/build-js.sh`, which puts this file beside app.js.
//
// Errors: an exception from a method is fatal (the host drops the instance and
// starts a fresh one from the last checkpoint, after a backoff; the stack is in
// the log) unless it is `Retryable` (the host delivers the same batch again) or
// `FailedAt` (the records before the failed one are done; the batch comes again
// from it). `console.log` and `kcl.log` both reach the host's log, tagged with
// the shard. A method may be `async` (to `await fetch(...)`, say): the host's
// call returns when its promise settles.

import * as checkpointer from "kcl:processor/checkpointer@0.4.0";
import { log as hostLog } from "kcl:processor/log@0.4.0";
import { send as hostSend } from "kcl:processor/output@0.4.0";
import * as hostState from "kcl:processor/state@0.4.0";
import { get as configGet } from "wasi:config/store@0.2.0-rc.1";

const AGGREGATED = 1;
const EXPLICIT_HASH_KEY = 2;
const utf8 = new TextEncoder();
const fromUtf8 = new TextDecoder();

/** One Kinesis record, as the producer wrote it: a view into its batch's
 * columns, each field read when it is first used (a processor that reads
 * only `json()` pays for nothing else). */
export class Record {
  constructor(batch, index) {
    this._batch = batch;
    /** The record's index in its batch. */
    this.index = index;
  }

  /** @type {Uint8Array} The payload (a view of the batch's buffer). */
  get data() {
    const c = this._batch._c;
    const i = this.index;
    return c.data.subarray(i ? c.dataEnds[i - 1] : 0, c.dataEnds[i]);
  }

  get partitionKey() {
    return this._batch._keys(this.index);
  }

  get sequenceNumber() {
    return this._batch._sequenceNumbers(this.index);
  }

  /** Set (a bigint) for a user record de-aggregated from a KPL record. */
  get subSequenceNumber() {
    const c = this._batch._c;
    return c.flags[this.index] & AGGREGATED ? c.subSequenceNumbers[this.index] : undefined;
  }

  /** When Kinesis accepted the record, in milliseconds since the Unix epoch. */
  get approximateArrivalMs() {
    return Number(this._batch._c.arrivalTimestampsMs[this.index]);
  }

  /** `undefined` when the producer set none. */
  get explicitHashKey() {
    return this._batch._c.flags[this.index] & EXPLICIT_HASH_KEY ? this._batch._hashKeys(this.index) : undefined;
  }

  /** The data as UTF-8 text. */
  text() {
    return this._batch._text(this.index);
  }

  /** The data parsed as JSON (throws a SyntaxError when it is not JSON). */
  json() {
    return JSON.parse(this.text());
  }

  /** The change this record carries when it was read from a DynamoDB stream
   * (`--stream <DynamoDB stream ARN>` or `--dynamodb-table T`), the item's
   * attributes as plain values (see `plain`); throws a `NotAChange` otherwise. */
  change() {
    let event;
    try {
      event = this.json();
    } catch (e) {
      throw new NotAChange(`its data is not JSON: ${e.message}`);
    }
    const stream = event?.dynamodb;
    if (typeof stream !== "object" || !["INSERT", "MODIFY", "REMOVE"].includes(event.eventName)) {
      throw new NotAChange("no `dynamodb` object and eventName INSERT, MODIFY or REMOVE");
    }
    const image = (name) => (stream[name] === undefined ? undefined : plainItem(stream[name]));
    return {
      eventName: event.eventName,
      keys: image("Keys") ?? {},
      newImage: image("NewImage"),
      oldImage: image("OldImage"),
      sequenceNumber: stream.SequenceNumber ?? this.sequenceNumber,
      approximateCreationMs: Math.round(Number(stream.ApproximateCreationDateTime ?? 0) * 1000),
      sizeBytes: Number(stream.SizeBytes ?? 0),
    };
  }
}

/** A record that is not a DynamoDB stream record (`record.change()`). */
export class NotAChange extends Error {
  constructor(message) {
    super(`not a DynamoDB stream record: ${message}`);
    this.name = "NotAChange";
  }
}

// A DynamoDB number: a number when it is one exactly, a BigInt when it is a
// whole number past 2^53, else the nearest float.
function dynamoNumber(text) {
  if (/^-?\d+$/.test(text)) {
    const n = Number(text);
    return Number.isSafeInteger(n) ? n : BigInt(text);
  }
  return Number(text);
}

const fromBase64 = (text) => Uint8Array.from(atob(text), (c) => c.charCodeAt(0));

function plainItem(attributes) {
  return Object.fromEntries(Object.entries(attributes).map(([name, value]) => [name, plain(value)]));
}

/** One attribute in DynamoDB JSON as a plain value: `{"N": "12"}` → 12,
 * `{"SS": ["a"]}` → a Set, `{"M": {...}}` → an object, binary → Uint8Array. */
export function plain(attribute) {
  const [[kind, value]] = Object.entries(attribute);
  switch (kind) {
    case "S":
    case "BOOL":
      return value;
    case "N":
      return dynamoNumber(value);
    case "B":
      return fromBase64(value);
    case "SS":
      return new Set(value);
    case "NS":
      return new Set(value.map(dynamoNumber));
    case "BS":
      return new Set(value.map(fromBase64));
    case "L":
      return value.map(plain);
    case "M":
      return plainItem(value);
    case "NULL":
      return null;
    default:
      throw new NotAChange(`unknown attribute type ${kind}`);
  }
}

// The host cuts its string columns at UTF-8 byte offsets; JavaScript strings
// count UTF-16 units, so a column with any non-ASCII text is cut as bytes.
function stringColumn(text, ends) {
  const span = (i) => [i ? ends[i - 1] : 0, ends[i]];
  if (/^[\x00-\x7f]*$/.test(text)) {
    return (i) => text.slice(...span(i));
  }
  const bytes = utf8.encode(text);
  return (i) => fromUtf8.decode(bytes.subarray(...span(i)));
}

/** Records in shard order, read from the host's columns as they are used. */
export class Batch {
  constructor(columns) {
    this._c = columns;
    this._keys = stringColumn(columns.partitionKeys, columns.partitionKeyEnds);
    this._sequenceNumbers = stringColumn(columns.sequenceNumbers, columns.sequenceNumberEnds);
    this._hashKeys = stringColumn(columns.explicitHashKeys, columns.explicitHashKeyEnds);
    // The whole batch's data as text, decoded once on the first text(): when
    // each byte is one character (ASCII), record i's text is a slice of it.
    this._allText = undefined;
    /** How far this batch is behind the tip of the shard (0 when caught up). */
    this.millisBehindLatest = Number(columns.millisBehindLatest);
  }

  get length() {
    return this._c.dataEnds.length;
  }

  _text(i) {
    const c = this._c;
    const start = i ? c.dataEnds[i - 1] : 0;
    if (this._allText === undefined) {
      const all = fromUtf8.decode(c.data);
      this._allText = all.length === c.data.length ? all : null;
    }
    if (this._allText !== null) return this._allText.slice(start, c.dataEnds[i]);
    return fromUtf8.decode(c.data.subarray(start, c.dataEnds[i]));
  }

  /** Record `i` (negative counts from the end), or `undefined` past either end. */
  at(i) {
    if (i < 0) i += this.length;
    if (!(i >= 0 && i < this.length)) return undefined;
    return new Record(this, i);
  }

  *[Symbol.iterator]() {
    const n = this.length;
    for (let i = 0; i < n; i++) yield new Record(this, i);
  }
}

/** Why a processor is being shut down. */
export const ShutdownReason = Object.freeze({
  /** Every record was delivered; the host writes SHARD_END once shutdown returns. */
  SHARD_END: "shard-end",
  /** Another worker holds the lease; checkpoints are refused. */
  LEASE_LOST: "lease-lost",
  /** The worker is stopping or swapping the processor: the last chance to checkpoint. */
  REQUESTED: "requested",
});

/** Transient: the host delivers the same batch again after a backoff. */
export class Retryable extends Error {
  constructor(message) {
    super(message);
    this.name = "Retryable";
  }
}

/** The batch failed at `record` (a Record or an index): the records before it
 * are done (the host checkpoints them) and the batch comes again from it. */
export class FailedAt extends Error {
  constructor(record, reason) {
    super(reason);
    this.name = "FailedAt";
    this.index = typeof record === "number" ? record : record.index;
  }
}

/** The host refused a checkpoint; nothing was recorded. `kind` is
 * "lease-lost", "invalid-sequence-number" or "unavailable" (the lease table
 * could not be written: try again later). */
export class CheckpointError extends Error {
  constructor(kind, message) {
    super(`checkpoint refused (${kind})${message ? ": " + message : ""}`);
    this.name = "CheckpointError";
    this.kind = kind;
  }
}

/** The host took none of the records: an unknown target, or a record that does not fit it. */
export class SendError extends Error {
  constructor(message) {
    super(message);
    this.name = "SendError";
  }
}

// An imported function's `err` comes as a thrown ComponentError whose
// `payload` holds the WIT value.
function checkpointed(call) {
  try {
    call();
  } catch (e) {
    const error = e && e.payload;
    if (!error) throw e;
    if (error.tag === "lease-lost") throw new CheckpointError("lease-lost", "this worker no longer holds the shard's lease");
    throw new CheckpointError(error.tag, error.val);
  }
}

/** Records how far the shard has been processed. */
export class Checkpointer {
  /** At `record` (of the batch being processed, or one delivered earlier), or
   * at the last record delivered so far (in `shutdown`: of the last batch that returned). */
  checkpoint(record) {
    if (record === undefined) {
      checkpointed(() => checkpointer.checkpoint());
    } else {
      checkpointed(() => checkpointer.checkpointAt(record.sequenceNumber, record.subSequenceNumber));
    }
  }

  /** At a sequence number (a string; and a sub-sequence number, a BigInt,
   * inside a KPL aggregate) delivered to this instance, as Java KCL's
   * `checkpoint(sequenceNumber, subSequenceNumber)`. */
  checkpointAt(sequenceNumber, subSequenceNumber) {
    checkpointed(() => checkpointer.checkpointAt(sequenceNumber, subSequenceNumber));
  }

  /** At record `index` of the batch being processed: nothing to parse on the host's side. */
  checkpointAtIndex(index) {
    checkpointed(() => checkpointer.checkpointAtIndex(index));
  }
}

/** Handles one shard, from `initialize` to `shutdown`. Extend it and export
 * the subclass with `export const recordProcessor = kcl.exportProcessor(MyClass)`. */
export class RecordProcessor {
  /** Called once before any records, with a ShardInfo. */
  initialize(shard) {}

  /** Called with each batch, in order. */
  processRecords(batch, checkpointer) {
    throw new Error("a processor implements processRecords");
  }

  /** Called once at the end; checkpoint here when `reason` is REQUESTED. */
  shutdown(reason, checkpointer) {}

  /** With `kcl-host run --window`: `window` ({startMs, endMs, shardEnded})
   * closed for this shard, with the state keys its records changed. Read
   * their state, send results to an output, delete what the next window
   * should not see; the host writes the outputs and commits the state
   * changes like a checkpoint. */
  closeWindow(window, keys) {
    throw new Error(`window [${window.startMs}, ${window.endMs}) closed, but this processor does not implement RecordProcessor.closeWindow`);
  }
}

/** Queues records `{partitionKey, data, explicitHashKey?}` (data: a string or
 * a Uint8Array) for the output `target` (declared with `kcl-host run --output
 * NAME=URI`). They are written before any checkpoint that covers the record
 * being processed. */
export function send(target, records) {
  const parts = [];
  const dataEnds = [];
  const keys = [];
  const keyEnds = [];
  const hashKeys = [];
  const hashKeyEnds = [];
  let dataLength = 0;
  let keyLength = 0;
  let hashKeyLength = 0;
  for (const record of records) {
    const data = typeof record.data === "string" ? utf8.encode(record.data) : record.data;
    parts.push(data);
    dataLength += data.length;
    dataEnds.push(dataLength);
    keys.push(record.partitionKey);
    keyLength += utf8.encode(record.partitionKey).length;
    keyEnds.push(keyLength);
    const hashKey = record.explicitHashKey ?? "";
    hashKeys.push(hashKey);
    hashKeyLength += hashKey.length; // decimal digits: one byte each
    hashKeyEnds.push(hashKeyLength);
  }
  const data = new Uint8Array(dataLength);
  let at = 0;
  for (const part of parts) {
    data.set(part, at);
    at += part.length;
  }
  try {
    hostSend(target, {
      data,
      dataEnds,
      partitionKeys: keys.join(""),
      partitionKeyEnds: keyEnds,
      explicitHashKeys: hashKeys.join(""),
      explicitHashKeyEnds: hashKeyEnds,
    });
  } catch (e) {
    if (e && e.payload) throw new SendError(e.payload.val);
    throw e;
  }
}

/** A state call did nothing. `kind` is "not-this-shard" (the key's MD5 hash
 * is outside the shard's hash-key range: use the record's partition key),
 * "too-large" (a key, value or the changes since the last checkpoint:
 * checkpoint more often) or "unavailable" (try again later); the typed
 * readers add "not-an-integer" and "not-json" for a value they cannot read. */
export class StateError extends Error {
  constructor(kind, message) {
    super(`state: ${message}`);
    this.name = "StateError";
    this.kind = kind;
  }
}

function stated(call) {
  try {
    return call();
  } catch (e) {
    const error = e && e.payload;
    if (!error) throw e;
    throw new StateError(error.tag, error.val);
  }
}

const quoted = (value) => JSON.stringify(fromUtf8.decode(value.subarray(0, 40)));

function asInt(key, value, fallback) {
  if (value === undefined) return fallback;
  const text = fromUtf8.decode(value);
  if (!/^-?[0-9]+$/.test(text)) throw new StateError("not-an-integer", `the value of ${JSON.stringify(key)} is ${quoted(value)}, not a decimal integer`);
  return BigInt(text);
}

function asJson(key, value, fallback) {
  if (value === undefined) return fallback;
  try {
    return JSON.parse(fromUtf8.decode(value));
  } catch {
    throw new StateError("not-json", `the value of ${JSON.stringify(key)} is ${quoted(value)}, not JSON`);
  }
}

/** Values kept per key across batches, restarts, handoffs, swaps and
 * reshards, committed in the same write as the next checkpoint: after any
 * crash the state is exactly the effect of the records up to the last
 * checkpoint. A key belongs to the shard its records go to: use a record's
 * partition key. Integers are `BigInt`s kept as decimal text (exact past
 * 2^53), JSON as UTF-8 text, as the Rust, Go and Python SDKs keep them. */
export const state = Object.freeze({
  /** `key`'s value (a Uint8Array), or `undefined` when it has none. */
  get: (key) => stated(() => hostState.get(key)),
  /** The values of `keys`, in order: one crossing, one read for the keys not cached. */
  getMany: (keys) => stated(() => hostState.getMany([...keys])),
  /** Sets `key` to `value` (a string or a Uint8Array). */
  set: (key, value) => stated(() => hostState.set(key, typeof value === "string" ? utf8.encode(value) : value)),
  /** Removes `key`'s value. */
  delete: (key) => stated(() => hostState.delete(key)),
  /** `key`'s value as a BigInt, `fallback` (0n) when it has none. */
  getInt: (key, fallback = 0n) => asInt(key, state.get(key), fallback),
  /** The values of `keys` as BigInts, in order, in one read. */
  getManyInt: (keys, fallback = 0n) => state.getMany(keys).map((value, i) => asInt(keys[i], value, fallback)),
  /** Sets `key` to the integer `value` (a BigInt, or a Number that is a safe integer). */
  setInt(key, value) {
    if (typeof value === "number" && !Number.isSafeInteger(value)) throw new RangeError(`state.setInt(${JSON.stringify(key)}): ${value} is not a safe integer; pass a BigInt`);
    state.set(key, BigInt(value).toString());
  },
  /** `key`'s value parsed as JSON, `fallback` when it has none. */
  getJson: (key, fallback = undefined) => asJson(key, state.get(key), fallback),
  /** The values of `keys` parsed as JSON, in order, in one read. */
  getManyJson: (keys, fallback = undefined) => state.getMany(keys).map((value, i) => asJson(keys[i], value, fallback)),
  /** Sets `key` to `value` as JSON. */
  setJson: (key, value) => state.set(key, JSON.stringify(value)),
});

/** The operator's variable `key` (`kcl-host run --var KEY=VALUE`), or `undefined`. */
export function variable(key) {
  try {
    return configGet(key);
  } catch (e) {
    throw new Error(`reading variable ${JSON.stringify(key)} failed: ${JSON.stringify(e && e.payload)}`);
  }
}

const words = (args) => args.map((a) => (typeof a === "string" ? a : a instanceof Error ? a.stack || String(a) : JSON.stringify(a))).join(" ");

/** Lines for the host's log, tagged with the shard. */
export const log = Object.freeze({
  trace: (...args) => hostLog("trace", words(args)),
  debug: (...args) => hostLog("debug", words(args)),
  info: (...args) => hostLog("info", words(args)),
  warn: (...args) => hostLog("warn", words(args)),
  error: (...args) => hostLog("error", words(args)),
});

// The processor-error the host expects for an exception; the export's
// bindings turn a thrown `{payload}` into the call's `err`.
function processorError(e) {
  if (e instanceof Retryable) return { payload: { tag: "retryable", val: e.message } };
  if (e instanceof FailedAt) return { payload: { tag: "failed-at", val: { index: e.index, reason: e.message } } };
  hostLog("error", e instanceof Error ? `${e.name}: ${e.message}\n${e.stack}`.trimEnd() : `uncaught ${words([e])}`);
  return { payload: { tag: "fatal", val: e instanceof Error ? `${e.name}: ${e.message}` : words([e]) } };
}

// Runs `call`, turning its exception (or its promise's rejection) into the
// processor-error the host expects.
function outcome(call) {
  let result;
  try {
    result = call();
  } catch (e) {
    throw processorError(e);
  }
  if (result && typeof result.then === "function") {
    return result.then(
      () => undefined,
      (e) => {
        throw processorError(e);
      },
    );
  }
  return undefined;
}

/** The component's export for `ProcessorClass`: assign it to the app module's
 * exported `recordProcessor`. */
// The shard's processor: one per component instance (one instance serves one shard).
let processor;
const view = new Checkpointer();
const started = (call) => {
  if (!processor) throw { payload: { tag: "fatal", val: `${call} was called before initialize` } };
  return processor;
};

export function exportProcessor(ProcessorClass) {
  return {
    initialize(shard) {
      const instance = new ProcessorClass();
      const info = Object.freeze({
        streamName: shard.streamName,
        shardId: shard.shardId,
        startingCheckpoint: shard.startingCheckpoint,
        startingSubSequenceNumber: shard.startingSubSequenceNumber,
      });
      const done = outcome(() => instance.initialize(info));
      processor = instance;
      return done;
    },
    processRecords(columns) {
      const current = started("process-records");
      return outcome(() => current.processRecords(new Batch(columns), view));
    },
    shutdown(reason) {
      const current = started("shutdown");
      processor = undefined;
      return outcome(() => current.shutdown(reason, view));
    },
  };
}

/** The component's `window` export (component.js names it): calls the
 * shard's processor's `closeWindow` with the window's bounds (milliseconds
 * as Numbers) and the keys its records changed. */
export const windowExport = Object.freeze({
  close(bounds, keys) {
    const current = started("close");
    const window = Object.freeze({ startMs: Number(bounds.startMs), endMs: Number(bounds.endMs), shardEnded: bounds.shardEnded });
    return outcome(() => current.closeWindow(window, [...keys]));
  },
});
