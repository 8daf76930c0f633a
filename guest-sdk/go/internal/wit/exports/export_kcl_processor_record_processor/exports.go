// Package export_kcl_processor_record_processor is where the generated
// export glue (package wit_exports) calls the processor. The functions
// forward to Handler, which package kcl sets; this breaks what would
// otherwise be an import cycle.
package export_kcl_processor_record_processor

import (
	witTypes "go.bytecodealliance.org/pkg/wit/types"
	"kclhost.dev/kcl/internal/wit/imports/kcl_processor_types"
)

// Outcome is what each export returns.
type Outcome = witTypes.Result[witTypes.Unit, kcl_processor_types.ProcessorError]

// Handler implements the record-processor export.
var Handler interface {
	Initialize(shard kcl_processor_types.ShardInfo) Outcome
	ProcessRecords(batch kcl_processor_types.Batch) Outcome
	Shutdown(reason kcl_processor_types.ShutdownReason) Outcome
}

func Initialize(shard kcl_processor_types.ShardInfo) Outcome { return Handler.Initialize(shard) }

func ProcessRecords(batch kcl_processor_types.Batch) Outcome { return Handler.ProcessRecords(batch) }

func Shutdown(reason kcl_processor_types.ShutdownReason) Outcome { return Handler.Shutdown(reason) }
