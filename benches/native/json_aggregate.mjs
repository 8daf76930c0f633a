// The JavaScript json-aggregate example run natively by Node.js, for the
// runtime comparison in docs/BENCHMARKS.md: the same app.js, copied beside a
// stand-in kcl.js that only has what the example uses, fed the records of a
// replay input file in batches like `kcl-host replay`.
//
//     node benches/native/json_aggregate.mjs /tmp/big.jsonl 500
import { copyFileSync, mkdtempSync, readFileSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { fileURLToPath } from "node:url";

const [path, batchSize] = [process.argv[2], Number(process.argv[3])];
const dir = mkdtempSync(join(tmpdir(), "kcl-native-"));
copyFileSync(fileURLToPath(new URL("../../examples/js/json-aggregate/app.js", import.meta.url)), join(dir, "app.js"));
writeFileSync(
  join(dir, "kcl.js"),
  `export class RecordProcessor {}
export class CheckpointError extends Error {}
export class Retryable extends Error {}
export const log = { warn() {}, info() {} };
export const exportProcessor = (cls) => cls;
`,
);
const app = await import(join(dir, "app.js"));

const encoder = new TextEncoder();
const decoder = new TextDecoder();
const records = readFileSync(path, "utf8")
  .split("\n")
  .filter(Boolean)
  .map((line) => {
    const data = encoder.encode(JSON.parse(line).data);
    return { data, json: () => JSON.parse(decoder.decode(data)) };
  });
const Processor = app.recordProcessor;
const processor = new Processor();
processor.initialize({ shardId: "shardId-000000000000" });
const checkpointer = { checkpoint() {} };
const started = performance.now();
for (let i = 0; i < records.length; i += batchSize) {
  processor.processRecords(records.slice(i, i + batchSize), checkpointer);
}
const took = performance.now() - started;
console.log(`Node.js ${process.version}: ${records.length} records in ${took.toFixed(1)} ms (${Math.round(records.length / (took / 1000))} records/s)`);
