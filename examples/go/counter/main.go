// Counter counts records per shard, logs each one, and checkpoints every
// 100 records and once more when the worker stops. It never checkpoints at
// a shard's end: there kcl-host records SHARD_END on its own. The same
// logic as examples/rust/counter.
package main

import (
	"kclhost.dev/kcl"
)

const checkpointEvery = 100

type counter struct {
	shardID         string
	seen            int
	sinceCheckpoint int
}

func (c *counter) Initialize(shard kcl.ShardInfo) error {
	kcl.Infof("initialize %s from %s", shard.ShardID, shard.StartingCheckpoint)
	c.shardID = shard.ShardID
	return nil
}

func (c *counter) ProcessRecords(batch kcl.Batch, cp *kcl.Checkpointer) error {
	for _, record := range batch.Records {
		kcl.Infof("record %s %s %s", record.SequenceNumber, record.PartitionKey, record.Data)
		c.seen++
		c.sinceCheckpoint++
		if c.sinceCheckpoint >= checkpointEvery {
			if err := cp.CheckpointAt(record); err != nil {
				return kcl.Retryable(err)
			}
			c.sinceCheckpoint = 0
		}
	}
	return nil
}

func (c *counter) Shutdown(reason kcl.ShutdownReason, cp *kcl.Checkpointer) error {
	kcl.Infof("shutdown %s after %d records: %s", c.shardID, c.seen, reason)
	if reason == kcl.Requested {
		if err := cp.Checkpoint(); err != nil {
			return kcl.Retryable(err)
		}
	}
	return nil
}

func init() {
	kcl.Register(func() kcl.RecordProcessor { return &counter{} })
}

func main() {}
