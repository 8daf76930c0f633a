// Table-totals: change data capture, a DynamoDB table's changes summed into
// state, run with `kcl-host run go-table-totals.wasm --dynamodb-table
// orders`. The same logic as examples/rust/table-totals: total/<pk> is the
// sum of the `amount` of that partition key's items, item/<pk>/<sk> the
// amount last seen of each item; a change whose old image does not match
// what was last seen is logged and counted in gaps/<pk>. The state is
// committed with each checkpoint.
package main

import (
	"fmt"
	"strconv"

	"kclhost.dev/kcl"
)

type tableTotals struct{}

// value is a state value read once per batch; nil when the key has none.
type value = *int64

func amount(image map[string]any) int64 {
	n, _ := image["amount"].(int64)
	return n
}

func (*tableTotals) Initialize(shard kcl.ShardInfo) error {
	kcl.Infof("initialize %s of %s at %s", shard.ShardID, shard.StreamName, shard.StartingCheckpoint)
	return nil
}

func (*tableTotals) ProcessRecords(batch kcl.Batch, checkpointer *kcl.Checkpointer) error {
	values := map[string]value{} // what this batch changed, read once and written once
	order := []string{}
	read := func(key string) (value, error) {
		if v, ok := values[key]; ok {
			return v, nil
		}
		raw, found, err := kcl.StateGet(key)
		if err != nil {
			return nil, err
		}
		var v value
		if found {
			n, err := strconv.ParseInt(string(raw), 10, 64)
			if err != nil {
				return nil, fmt.Errorf("state %s: %w", key, err)
			}
			v = &n
		}
		values[key], order = v, append(order, key)
		return v, nil
	}
	set := func(key string, n *int64) {
		if _, ok := values[key]; !ok {
			order = append(order, key)
		}
		values[key] = n
	}
	for i := range batch.Records {
		change, err := batch.Records[i].Change()
		if err != nil {
			return kcl.FailedAt(i, err)
		}
		pk := fmt.Sprint(change.Keys["pk"])
		item := fmt.Sprintf("%s/%v", pk, change.Keys["sk"])
		fresh, old := amount(change.NewImage), amount(change.OldImage)
		seen, err := read("item/" + item)
		if err != nil {
			return err
		}
		var expectedOld value
		if change.EventName != "INSERT" {
			expectedOld = &old
		}
		if (seen == nil) != (expectedOld == nil) || (seen != nil && *seen != *expectedOld) {
			kcl.Warnf("%s of %s at %s: saw %v last, the change says %v", change.EventName, item, change.SequenceNumber, deref(seen), deref(expectedOld))
			gaps, err := read("gaps/" + pk)
			if err != nil {
				return err
			}
			n := int64(1)
			if gaps != nil {
				n += *gaps
			}
			set("gaps/"+pk, &n)
		}
		total, err := read("total/" + pk)
		if err != nil {
			return err
		}
		sum := int64(0)
		if total != nil {
			sum = *total
		}
		switch change.EventName {
		case "INSERT":
			sum += fresh
			set("item/"+item, &fresh)
		case "MODIFY":
			sum += fresh - old
			set("item/"+item, &fresh)
		default:
			sum -= old
			set("item/"+item, nil)
		}
		set("total/"+pk, &sum)
	}
	for _, key := range order {
		var err error
		if n := values[key]; n == nil {
			err = kcl.StateDelete(key)
		} else {
			err = kcl.StateSetInt(key, *n)
		}
		if err != nil {
			return err
		}
	}
	// Commits every change above with the checkpoint, in one write.
	if err := checkpointer.Checkpoint(); err != nil {
		return kcl.Retryable(err)
	}
	kcl.Infof("committed %d changes", len(batch.Records))
	return nil
}

func deref(v value) any {
	if v == nil {
		return nil
	}
	return *v
}

func (*tableTotals) Shutdown(kcl.ShutdownReason, *kcl.Checkpointer) error { return nil }

func init() {
	kcl.Register(func() kcl.RecordProcessor { return &tableTotals{} })
}

func main() {}
