// {name}: a kcl-host record processor. It reads each record as JSON,
// sends every event on to the output "events" (declare where it goes:
// --output events=kinesis:STREAM, =dynamodb:TABLE, =https://..., =stdout),
// and checkpoints after every batch. kcl-host writes the outputs before the
// checkpoint, so a restart resumes after the last batch whose events were
// all written.
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
	var events kcl.Outputs
	for _, record := range batch.Records {
		p.records++
		var event any
		if err := json.Unmarshal(record.Data, &event); err != nil {
			// One bad record must not stop the shard: count it and go on.
			p.notJSON++
			kcl.Warnf("record %s is not JSON: %v", record.SequenceNumber, err)
			continue
		}
		line, _ := json.Marshal(event)
		events.Add(record.PartitionKey, line)
	}
	// An output that is not declared, or that the target cannot take, is a
	// setup error: fail the shard and say so.
	if err := events.Send("events"); err != nil {
		return err
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
