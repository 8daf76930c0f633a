// Per-user purchase totals per window, exactly once: run it with
// `kcl-host run --window 60s --output totals=dynamodb:TABLE` and each
// minute's totals are written to the table as the minute closes, one item
// per user and minute. The same logic, and the same items byte for byte, as
// examples/rust/window-totals.
//
// Records are JSON like {"user": "u1", "cents": 1250}, put with the user as
// partition key. Each record adds its cents to the user's state; when the
// window closes, the host hands over the users whose state changed in it:
// their totals are sent to the `totals` target and their state is deleted
// for the next window.
package main

import (
	"encoding/json"
	"sort"
	"strconv"

	"kclhost.dev/kcl"
)

type purchase struct {
	Cents *int64 `json:"cents"`
}

// item is one (user, window) total; its fields in sorted order, as the Rust
// example's serde_json map writes them.
type item struct {
	Cents         int64  `json:"cents"`
	ShardEnded    bool   `json:"shard_ended"`
	User          string `json:"user"`
	WindowEndMs   uint64 `json:"window_end_ms"`
	WindowStartMs uint64 `json:"window_start_ms"`
}

type windowTotals struct{}

func (w *windowTotals) Initialize(shard kcl.ShardInfo) error {
	kcl.Infof("initialize %s at %s", shard.ShardID, shard.StartingCheckpoint)
	return nil
}

func (w *windowTotals) ProcessRecords(batch kcl.Batch, cp *kcl.Checkpointer) error {
	added := map[string]int64{}
	for _, record := range batch.Records {
		var p purchase
		if err := json.Unmarshal(record.Data, &p); err != nil || p.Cents == nil {
			kcl.Warnf("record %s is not a purchase; skipped", record.SequenceNumber)
			continue
		}
		added[record.PartitionKey] += *p.Cents
	}
	users := make([]string, 0, len(added))
	for user := range added {
		users = append(users, user)
	}
	sort.Strings(users)
	totals, err := kcl.StateGetManyInt(users)
	if err != nil {
		return err
	}
	for i, user := range users {
		if err := kcl.StateSetInt(user, totals[i]+added[user]); err != nil {
			return err
		}
	}
	if err := cp.Checkpoint(); err != nil {
		return kcl.Retryable(err)
	}
	return nil
}

func (w *windowTotals) CloseWindow(window kcl.Window, keys []string) error {
	values, err := kcl.StateGetMany(keys)
	if err != nil {
		return err
	}
	var totals kcl.Outputs
	for i, user := range keys {
		if values[i] == nil {
			continue
		}
		cents, err := strconv.ParseInt(string(values[i]), 10, 64)
		if err != nil {
			return err
		}
		data, err := json.Marshal(item{Cents: cents, ShardEnded: window.ShardEnded, User: user, WindowEndMs: window.EndMs, WindowStartMs: window.StartMs})
		if err != nil {
			return err
		}
		totals.Add(user, data)
		if err := kcl.StateDelete(user); err != nil {
			return err
		}
	}
	if totals.Len() > 0 {
		if err := totals.Send("totals"); err != nil {
			return err
		}
	}
	kcl.Infof("window %d..%d: %d totals", window.StartMs, window.EndMs, totals.Len())
	return nil
}

func (w *windowTotals) Shutdown(reason kcl.ShutdownReason, cp *kcl.Checkpointer) error { return nil }

func init() {
	kcl.Register(func() kcl.RecordProcessor { return &windowTotals{} })
}

func main() {}
