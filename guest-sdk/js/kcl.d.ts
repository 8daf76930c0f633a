// Types of the kcl-host JavaScript SDK (kcl.js), for editors and for
// TypeScript processors compiled to JavaScript before `scripts/build-js.sh`.

/** One Kinesis record, as the producer wrote it. */
export class Record {
  readonly data: Uint8Array;
  readonly partitionKey: string;
  readonly sequenceNumber: string;
  /** Set for a user record de-aggregated from a KPL record. */
  readonly subSequenceNumber: bigint | undefined;
  /** When Kinesis accepted the record, in milliseconds since the Unix epoch. */
  readonly approximateArrivalMs: number;
  /** `undefined` when the producer set none. */
  readonly explicitHashKey: string | undefined;
  /** The record's index in its batch. */
  readonly index: number;
  /** The data as UTF-8 text. */
  text(): string;
  /** The data parsed as JSON (throws a SyntaxError when it is not JSON). */
  json(): unknown;
  /** The change a DynamoDB stream record carries; throws a `NotAChange` otherwise. */
  change(): Change;
}

/** One change of one item of a DynamoDB table, its attributes as plain values. */
export interface Change {
  eventName: "INSERT" | "MODIFY" | "REMOVE";
  /** The item's primary key attributes. */
  keys: { [attribute: string]: unknown };
  /** The item after the change (not on REMOVE, nor on KEYS_ONLY / OLD_IMAGE streams). */
  newImage?: { [attribute: string]: unknown };
  /** The item before the change (not on INSERT, nor on KEYS_ONLY / NEW_IMAGE streams). */
  oldImage?: { [attribute: string]: unknown };
  sequenceNumber: string;
  /** When DynamoDB made the change, in milliseconds since the Unix epoch. */
  approximateCreationMs: number;
  sizeBytes: number;
}

/** A record that is not a DynamoDB stream record. */
export class NotAChange extends Error {}

/** One attribute in DynamoDB JSON as a plain value: `{"N": "12"}` → 12 (a
 * bigint past 2^53), sets as `Set`s, maps as objects, binary as `Uint8Array`. */
export function plain(attribute: object): unknown;

/** Records in shard order. */
export class Batch implements Iterable<Record> {
  readonly length: number;
  /** How far this batch is behind the tip of the shard (0 when caught up). */
  readonly millisBehindLatest: number;
  /** Record `i` (negative counts from the end), or `undefined` past either end. */
  at(i: number): Record | undefined;
  [Symbol.iterator](): Iterator<Record>;
}

/** The shard a processor serves and where delivery starts. */
export interface ShardInfo {
  readonly streamName: string;
  readonly shardId: string;
  /** The last checkpointed sequence number, or TRIM_HORIZON, LATEST or AT_TIMESTAMP for a shard never checkpointed. */
  readonly startingCheckpoint: string;
  readonly startingSubSequenceNumber: bigint | undefined;
}

export type ShutdownReason = "shard-end" | "lease-lost" | "requested";
export const ShutdownReason: {
  /** Every record was delivered; the host writes SHARD_END once shutdown returns. */
  readonly SHARD_END: "shard-end";
  /** Another worker holds the lease; checkpoints are refused. */
  readonly LEASE_LOST: "lease-lost";
  /** The worker is stopping or swapping the processor: the last chance to checkpoint. */
  readonly REQUESTED: "requested";
};

/** Transient: the host delivers the same batch again after a backoff. */
export class Retryable extends Error {
  constructor(message: string);
}

/** The batch failed at `record`: the records before it are done and the batch comes again from it. */
export class FailedAt extends Error {
  constructor(record: Record | number, reason: string);
  readonly index: number;
}

/** The host refused a checkpoint; nothing was recorded. */
export class CheckpointError extends Error {
  readonly kind: "lease-lost" | "invalid-sequence-number" | "unavailable";
}

/** The host took none of the records: an unknown target, or a record that does not fit it. */
export class SendError extends Error {}

/** Records how far the shard has been processed. */
export class Checkpointer {
  /** At `record`, or at the last record delivered so far. Throws CheckpointError. */
  checkpoint(record?: Record): void;
  /** At a sequence number (and sub-sequence number inside a KPL aggregate) delivered to this instance. Throws CheckpointError. */
  checkpointAt(sequenceNumber: string, subSequenceNumber?: bigint): void;
  /** At record `index` of the batch being processed. Throws CheckpointError. */
  checkpointAtIndex(index: number): void;
}

/** A window of arrival times (`kcl-host run --window`), in milliseconds since the Unix epoch. */
export interface Window {
  /** The first millisecond in the window. */
  readonly startMs: number;
  /** The first millisecond after it. */
  readonly endMs: number;
  /** Closed early: the shard ended (a split or a merge); its children go on with the rest of the window. */
  readonly shardEnded: boolean;
}

/** A state call did nothing. */
export class StateError extends Error {
  readonly kind: "not-this-shard" | "too-large" | "unavailable" | "not-an-integer" | "not-json";
}

/** Values kept per key, committed in the same write as the next checkpoint. Integers are BigInts kept as decimal text. */
export const state: {
  get(key: string): Uint8Array | undefined;
  getMany(keys: readonly string[]): (Uint8Array | undefined)[];
  set(key: string, value: string | Uint8Array): void;
  delete(key: string): void;
  getInt(key: string, fallback?: bigint): bigint;
  getManyInt(keys: readonly string[], fallback?: bigint): bigint[];
  setInt(key: string, value: bigint | number): void;
  getJson<T = unknown>(key: string, fallback?: T): T;
  getManyJson<T = unknown>(keys: readonly string[], fallback?: T): T[];
  setJson(key: string, value: unknown): void;
};

/** Handles one shard, from `initialize` to `shutdown`. Methods may be async. */
export class RecordProcessor {
  initialize(shard: ShardInfo): void | Promise<void>;
  processRecords(batch: Batch, checkpointer: Checkpointer): void | Promise<void>;
  /** With `kcl-host run --window`: `window` closed, with the state keys its records changed. The default refuses. */
  closeWindow(window: Window, keys: string[]): void | Promise<void>;
  shutdown(reason: ShutdownReason, checkpointer: Checkpointer): void | Promise<void>;
}

/** A record for an output target. */
export interface OutputRecord {
  partitionKey: string;
  data: string | Uint8Array;
  explicitHashKey?: string;
}

/** Queues records for the output `target`; written before any checkpoint that covers the record being processed. Throws SendError. */
export function send(target: string, records: Iterable<OutputRecord>): void;

/** The operator's variable `key` (`kcl-host run --var KEY=VALUE`), or `undefined`. */
export function variable(key: string): string | undefined;

/** Lines for the host's log, tagged with the shard. */
export const log: {
  trace(...args: unknown[]): void;
  debug(...args: unknown[]): void;
  info(...args: unknown[]): void;
  warn(...args: unknown[]): void;
  error(...args: unknown[]): void;
};

/** The component's export for a processor class: `export const recordProcessor = exportProcessor(MyClass)`. */
export function exportProcessor(processor: new () => RecordProcessor): unknown;
