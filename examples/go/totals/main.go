// Totals sums purchases per user and writes each user's running total to a
// DynamoDB table through the output `totals` (kcl-host run --output
// totals=dynamodb:TABLE; the table's key is `user`), then checkpoints. The
// host writes the items before the checkpoint, so a checkpoint never runs
// ahead of the totals it covers.
//
// Records are JSON events like {"user": "ana", "kind": "purchase",
// "amount": 12.5}, put with the user as partition key (so one shard sees
// all of a user's events). Totals count from where the shard's processor
// started (the item's "since" says from which checkpoint): after a restart
// they count again from the last checkpoint.
package main

import (
	"encoding/json"

	"kclhost.dev/kcl"
)

type event struct {
	User   *string  `json:"user"`
	Kind   *string  `json:"kind"`
	Amount *float64 `json:"amount"`
}

type total struct {
	User      string  `json:"user"`
	Total     float64 `json:"total"`
	Purchases int     `json:"purchases"`
	Since     string  `json:"since"`
}

type totals struct {
	target string
	since  string
	users  map[string]*total
}

func (t *totals) Initialize(shard kcl.ShardInfo) error {
	t.target = "totals"
	if name, ok := kcl.Var("totals_output"); ok {
		t.target = name
	}
	t.since = shard.StartingCheckpoint
	t.users = map[string]*total{}
	return nil
}

func (t *totals) ProcessRecords(batch kcl.Batch, cp *kcl.Checkpointer) error {
	changed := map[string]bool{}
	for _, record := range batch.Records {
		var e event
		if err := json.Unmarshal(record.Data, &e); err != nil || e.User == nil || e.Kind == nil || e.Amount == nil || *e.Kind != "purchase" {
			continue
		}
		u, ok := t.users[*e.User]
		if !ok {
			u = &total{User: *e.User, Since: t.since}
			t.users[*e.User] = u
		}
		u.Total += *e.Amount
		u.Purchases++
		changed[*e.User] = true
	}
	var out kcl.Outputs
	for user := range changed {
		item, err := json.Marshal(t.users[user])
		if err != nil {
			return err
		}
		out.Add(user, item)
	}
	if out.Len() > 0 {
		if err := out.Send(t.target); err != nil {
			return err // a declaration or item the table cannot take: fatal
		}
	}
	if err := cp.Checkpoint(); err != nil {
		return kcl.Retryable(err) // the items could not be written yet
	}
	return nil
}

func (t *totals) Shutdown(kcl.ShutdownReason, *kcl.Checkpointer) error { return nil }

func init() {
	kcl.Register(func() kcl.RecordProcessor { return &totals{} })
}

func main() {}
