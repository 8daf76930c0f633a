// Package kcl writes kcl-host record processors in Go.
//
// A processor serves one Kinesis shard at a time. kcl-host owns the shard's
// lifecycle — leases, fetching, retries, and the SHARD_END checkpoint once a
// closed shard is done — so a processor only handles records and says how
// far it got.
//
// Implement RecordProcessor and register a constructor in init:
//
//	type counter struct{ seen int }
//
//	func (c *counter) Initialize(shard kcl.ShardInfo) error { return nil }
//
//	func (c *counter) ProcessRecords(batch kcl.Batch, cp *kcl.Checkpointer) error {
//		c.seen += len(batch.Records)
//		if err := cp.Checkpoint(); err != nil {
//			return kcl.Retryable(err)
//		}
//		return nil
//	}
//
//	func (c *counter) Shutdown(reason kcl.ShutdownReason, cp *kcl.Checkpointer) error { return nil }
//
//	func init() { kcl.Register(func() kcl.RecordProcessor { return &counter{} }) }
//
//	func main() {}
//
// Build it into a component with scripts/build-go.sh (mainline Go 1.27,
// GOOS=wasip1 c-shared, wasm-tools and the WASI reactor adapter). TinyGo is
// not tested.
package kcl

import (
	"errors"
	"fmt"
	"runtime"
	"runtime/debug"
	"runtime/metrics"
	"time"

	witTypes "go.bytecodealliance.org/pkg/wit/types"
	export "kclhost.dev/kcl/internal/wit/exports/export_kcl_processor_record_processor"
	windowExport "kclhost.dev/kcl/internal/wit/exports/export_kcl_processor_window"
	_ "kclhost.dev/kcl/internal/wit/exports/wit_exports" // the component's exports
	"kclhost.dev/kcl/internal/wit/imports/kcl_processor_checkpointer"
	"kclhost.dev/kcl/internal/wit/imports/kcl_processor_log"
	wit "kclhost.dev/kcl/internal/wit/imports/kcl_processor_types"
)

// Record is one Kinesis record. Data and the strings are views into the
// batch's buffers: copy what must outlive the ProcessRecords call.
type Record struct {
	// Data is the payload as the producer wrote it.
	Data           []byte
	PartitionKey   string
	SequenceNumber string
	// SubSequenceNumber is set for a user record de-aggregated from a KPL record.
	SubSequenceNumber *uint64
	// ApproximateArrival is when Kinesis accepted the record.
	ApproximateArrival time.Time
	// ExplicitHashKey is empty when the producer set none.
	ExplicitHashKey string
}

// Batch is records in shard order.
type Batch struct {
	Records []Record
	// MillisBehindLatest is how far this batch is behind the tip of the shard.
	MillisBehindLatest uint64
}

// ShardInfo is the shard a processor serves and where delivery starts.
type ShardInfo struct {
	StreamName string
	ShardID    string
	// StartingCheckpoint is the last checkpointed sequence number, or
	// TRIM_HORIZON, LATEST or AT_TIMESTAMP for a shard never checkpointed.
	StartingCheckpoint        string
	StartingSubSequenceNumber *uint64
}

// ShutdownReason says why a processor is being shut down.
type ShutdownReason uint8

const (
	// ShardEnd: every record was delivered; the host writes SHARD_END once
	// Shutdown returns nil. There is no need to checkpoint.
	ShardEnd ShutdownReason = iota
	// LeaseLost: another worker holds the lease; checkpoints are refused.
	LeaseLost
	// Requested: the worker is stopping; the last chance to checkpoint.
	Requested
)

func (r ShutdownReason) String() string {
	switch r {
	case ShardEnd:
		return "ShardEnd"
	case LeaseLost:
		return "LeaseLost"
	case Requested:
		return "Requested"
	}
	return fmt.Sprintf("ShutdownReason(%d)", uint8(r))
}

// RecordProcessor handles one shard, from Initialize to Shutdown.
//
// An error returned from a method is fatal (the host restarts the shard
// from its last checkpoint, after a backoff) unless wrapped with Retryable
// (the host delivers the same batch again) or FailedAt (the records before
// the failed one are done; the batch comes again from it).
type RecordProcessor interface {
	Initialize(shard ShardInfo) error
	ProcessRecords(batch Batch, checkpointer *Checkpointer) error
	Shutdown(reason ShutdownReason, checkpointer *Checkpointer) error
}

type retryable struct{ err error }

func (r retryable) Error() string { return r.err.Error() }
func (r retryable) Unwrap() error { return r.err }

// Retryable marks err as transient: the host delivers the same batch again.
func Retryable(err error) error { return retryable{err} }

type failedAt struct {
	index int
	err   error
}

func (f failedAt) Error() string { return f.err.Error() }
func (f failedAt) Unwrap() error { return f.err }

// FailedAt reports that the batch failed at record index (of batch.Records):
// the records before it are done (the host checkpoints them) and the batch
// comes again from that record. Under the operator's failure policy, that
// record alone may then be retried and given up on.
func FailedAt(index int, err error) error { return failedAt{index, err} }

// Register sets the constructor of the processor; call it once, from init.
// A processor run with `kcl-host run --window` also implements WindowCloser.
func Register(newProcessor func() RecordProcessor) {
	h := &handler{newProcessor: newProcessor}
	export.Handler = h
	windowExport.Handler = h
}

func init() {
	// The garbage collector must not run inside the host's calls into the
	// component's allocator (wasmtime traps with "cannot leave component
	// instance"): it is off, and collect runs it at the end of a call.
	debug.SetGCPercent(-1)
}

// collectAbove is how much heap may build up before collect runs the
// collector; collecting after every call would cost more than the calls.
const collectAbove = 32 << 20

var heapSample = []metrics.Sample{{Name: "/memory/classes/heap/objects:bytes"}}

// collect runs the garbage collector once the heap has grown past collectAbove.
func collect() {
	metrics.Read(heapSample)
	if heapSample[0].Value.Uint64() > collectAbove {
		runtime.GC()
	}
}

type handler struct {
	newProcessor func() RecordProcessor
	processor    RecordProcessor
}

var checkpointer = &Checkpointer{}

func outcome(err error) export.Outcome {
	if err == nil {
		return witTypes.Ok[witTypes.Unit, wit.ProcessorError](witTypes.Unit{})
	}
	var r retryable
	if errors.As(err, &r) {
		return witTypes.Err[witTypes.Unit](wit.MakeProcessorErrorRetryable(err.Error()))
	}
	var f failedAt
	if errors.As(err, &f) {
		failure := wit.RecordFailure{Index: uint32(f.index), Reason: f.err.Error()}
		return witTypes.Err[witTypes.Unit](wit.MakeProcessorErrorFailedAt(failure))
	}
	return witTypes.Err[witTypes.Unit](wit.MakeProcessorErrorFatal(err.Error()))
}

func optional(o witTypes.Option[uint64]) *uint64 {
	if o.IsNone() {
		return nil
	}
	v := o.Some()
	return &v
}

func (h *handler) Initialize(shard wit.ShardInfo) export.Outcome {
	defer collect()
	processor := h.newProcessor()
	err := processor.Initialize(ShardInfo{
		StreamName:                shard.StreamName,
		ShardID:                   shard.ShardId,
		StartingCheckpoint:        shard.StartingCheckpoint,
		StartingSubSequenceNumber: optional(shard.StartingSubSequenceNumber),
	})
	if err == nil {
		h.processor = processor
	}
	return outcome(err)
}

// The bits of a batch's flags column (the WIT's record-flags).
const (
	flagAggregated      = 1
	flagExplicitHashKey = 2
)

// span is [ends[i-1], ends[i]).
func span(ends []uint32, i int) (int, int) {
	start := 0
	if i > 0 {
		start = int(ends[i-1])
	}
	return start, int(ends[i])
}

// records turns the host's columns into Records that share their buffers:
// one allocation per batch, none per record.
func records(b wit.Batch) []Record {
	out := make([]Record, len(b.DataEnds))
	subs := make([]uint64, len(out)) // backing for the SubSequenceNumber pointers
	for i := range out {
		ds, de := span(b.DataEnds, i)
		ks, ke := span(b.PartitionKeyEnds, i)
		ss, se := span(b.SequenceNumberEnds, i)
		r := Record{
			Data:               b.Data[ds:de:de],
			PartitionKey:       b.PartitionKeys[ks:ke],
			SequenceNumber:     b.SequenceNumbers[ss:se],
			ApproximateArrival: time.UnixMilli(int64(b.ArrivalTimestampsMs[i])),
		}
		if b.Flags[i]&flagAggregated != 0 {
			subs[i] = b.SubSequenceNumbers[i]
			r.SubSequenceNumber = &subs[i]
		}
		if b.Flags[i]&flagExplicitHashKey != 0 {
			hs, he := span(b.ExplicitHashKeyEnds, i)
			r.ExplicitHashKey = b.ExplicitHashKeys[hs:he]
		}
		out[i] = r
	}
	return out
}

func (h *handler) ProcessRecords(batch wit.Batch) export.Outcome {
	defer collect()
	if h.processor == nil {
		return outcome(errors.New("process-records was called before initialize"))
	}
	return outcome(h.processor.ProcessRecords(Batch{Records: records(batch), MillisBehindLatest: batch.MillisBehindLatest}, checkpointer))
}

func (h *handler) Shutdown(reason wit.ShutdownReason) export.Outcome {
	defer collect()
	if h.processor == nil {
		return outcome(errors.New("shutdown was called before initialize"))
	}
	err := h.processor.Shutdown(ShutdownReason(reason), checkpointer)
	h.processor = nil
	return outcome(err)
}

// CheckpointError is why the host refused a checkpoint. Nothing was recorded.
type CheckpointError struct {
	Kind    CheckpointErrorKind
	Message string
}

// CheckpointErrorKind tells refusals apart.
type CheckpointErrorKind uint8

const (
	// CheckpointLeaseLost: this worker no longer holds the shard's lease.
	CheckpointLeaseLost CheckpointErrorKind = iota
	// CheckpointInvalidSequenceNumber: not delivered yet, or before the last checkpoint.
	CheckpointInvalidSequenceNumber
	// CheckpointUnavailable: the lease table could not be written; try again later.
	CheckpointUnavailable
)

func (e *CheckpointError) Error() string {
	switch e.Kind {
	case CheckpointLeaseLost:
		return "the lease on this shard was lost"
	case CheckpointInvalidSequenceNumber:
		return "invalid checkpoint: " + e.Message
	default:
		return "checkpoint store unavailable: " + e.Message
	}
}

// Checkpointer records how far the shard has been processed.
type Checkpointer struct{}

func checkpointResult(result witTypes.Result[witTypes.Unit, wit.CheckpointError]) error {
	if result.IsOk() {
		return nil
	}
	e := result.Err()
	switch e.Tag() {
	case wit.CheckpointError_LeaseLost:
		return &CheckpointError{Kind: CheckpointLeaseLost}
	case wit.CheckpointError_InvalidSequenceNumber:
		return &CheckpointError{Kind: CheckpointInvalidSequenceNumber, Message: e.InvalidSequenceNumber()}
	default:
		return &CheckpointError{Kind: CheckpointUnavailable, Message: e.Unavailable()}
	}
}

// Checkpoint records the last record delivered so far (in Shutdown: the
// last record of the last batch that returned nil).
func (*Checkpointer) Checkpoint() error {
	return checkpointResult(kcl_processor_checkpointer.Checkpoint())
}

// CheckpointAtIndex records record i of the batch being processed: the
// cheapest form, nothing to parse on the host side.
func (*Checkpointer) CheckpointAtIndex(i int) error {
	return checkpointResult(kcl_processor_checkpointer.CheckpointAtIndex(uint32(i)))
}

// CheckpointAt records record, which must already have been delivered.
func (c *Checkpointer) CheckpointAt(record Record) error {
	return c.CheckpointAtSequence(record.SequenceNumber, record.SubSequenceNumber)
}

// CheckpointAtSequence records a sequence number already delivered on this shard.
func (*Checkpointer) CheckpointAtSequence(sequenceNumber string, subSequenceNumber *uint64) error {
	sub := witTypes.None[uint64]()
	if subSequenceNumber != nil {
		sub = witTypes.Some(*subSequenceNumber)
	}
	return checkpointResult(kcl_processor_checkpointer.CheckpointAt(sequenceNumber, sub))
}

// Level is a log level.
type Level = kcl_processor_log.Level

// Log levels.
const (
	LevelTrace Level = kcl_processor_log.Level_Trace
	LevelDebug Level = kcl_processor_log.Level_Debug
	LevelInfo  Level = kcl_processor_log.Level_Info
	LevelWarn  Level = kcl_processor_log.Level_Warn
	LevelError Level = kcl_processor_log.Level_Error
)

// Logf sends one line to the host log, tagged with the shard. (Anything
// printed to stdout or stderr reaches the host log too.)
func Logf(level Level, format string, args ...any) {
	kcl_processor_log.Log(level, fmt.Sprintf(format, args...))
}

// Infof logs at info level.
func Infof(format string, args ...any) { Logf(LevelInfo, format, args...) }

// Warnf logs at warn level.
func Warnf(format string, args ...any) { Logf(LevelWarn, format, args...) }

// Errorf logs at error level.
func Errorf(format string, args ...any) { Logf(LevelError, format, args...) }
