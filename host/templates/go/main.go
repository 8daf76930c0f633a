// {name}: a kcl-host record processor. It reads each record as JSON, logs
// it, and checkpoints after every batch, so a restart resumes after the
// last batch it finished.
package main

import (
	"encoding/json"

	"kclhost.dev/kcl"
)

type processor struct {
	shard   string
	records int
	notJSON int
}

func (p *processor) Initialize(shard kcl.ShardInfo) error {
	p.shard = shard.ShardID
	kcl.Infof("starting %s at %s", shard.ShardID, shard.StartingCheckpoint)
	return nil
}

func (p *processor) ProcessRecords(batch kcl.Batch, cp *kcl.Checkpointer) error {
	for _, record := range batch.Records {
		p.records++
		var event any
		if err := json.Unmarshal(record.Data, &event); err != nil {
			// One bad record must not stop the shard: count it and go on.
			p.notJSON++
			kcl.Warnf("record %s is not JSON: %v", record.SequenceNumber, err)
			continue
		}
		kcl.Infof("%s %v", record.PartitionKey, event)
	}
	// A refused checkpoint is worth retrying, not worth failing the shard.
	if err := cp.Checkpoint(); err != nil {
		return kcl.Retryable(err)
	}
	return nil
}

func (p *processor) Shutdown(reason kcl.ShutdownReason, cp *kcl.Checkpointer) error {
	// At ShardEnd kcl-host writes SHARD_END itself once this returns nil.
	kcl.Infof("%s: %d records, %d not JSON; %s", p.shard, p.records, p.notJSON, reason)
	return nil
}

func init() { kcl.Register(func() kcl.RecordProcessor { return &processor{} }) }

func main() {}
