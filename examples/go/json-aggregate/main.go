// JSON aggregate parses JSON events, keeps purchases, sums their amounts per
// user, and checkpoints after each batch. Records that are not such events
// are counted as rejected. The same logic as examples/rust/json-aggregate.
//
// The events are decoded by code easyjson generated (purchase/event_easyjson.go,
// `go generate ./...` after changing purchase.Event): encoding/json decodes by
// reflection, which Go's wasm port runs several times slower (docs/BENCHMARKS.md).
package main

import (
	"sort"

	"github.com/mailru/easyjson"

	"kclhost.dev/examples/json-aggregate/purchase"
	"kclhost.dev/kcl"
)

type aggregate struct {
	shardID   string
	perUser   map[string]float64
	purchases int
	rejected  int
}

func (a *aggregate) add(data []byte) {
	var e purchase.Event
	if err := easyjson.Unmarshal(data, &e); err != nil || e.User == nil || e.Kind == nil || e.Amount == nil {
		a.rejected++
		return
	}
	if *e.Kind == "purchase" {
		a.purchases++
		a.perUser[*e.User] += *e.Amount
	}
}

func (a *aggregate) Initialize(shard kcl.ShardInfo) error {
	a.shardID = shard.ShardID
	a.perUser = map[string]float64{}
	return nil
}

func (a *aggregate) ProcessRecords(batch kcl.Batch, cp *kcl.Checkpointer) error {
	before := a.rejected
	for _, record := range batch.Records {
		a.add(record.Data)
	}
	if a.rejected > before {
		kcl.Warnf("%d records in this batch were not purchase events", a.rejected-before)
	}
	if err := cp.Checkpoint(); err != nil {
		return kcl.Retryable(err)
	}
	return nil
}

func (a *aggregate) Shutdown(reason kcl.ShutdownReason, _ *kcl.Checkpointer) error {
	kcl.Infof("%s %s: %d purchases, %d rejected, %d users", a.shardID, reason, a.purchases, a.rejected, len(a.perUser))
	users := make([]string, 0, len(a.perUser))
	for user := range a.perUser {
		users = append(users, user)
	}
	sort.Strings(users)
	for _, user := range users {
		kcl.Infof("total %s %.2f", user, a.perUser[user])
	}
	return nil
}

func init() {
	kcl.Register(func() kcl.RecordProcessor { return &aggregate{} })
}

func main() {}
