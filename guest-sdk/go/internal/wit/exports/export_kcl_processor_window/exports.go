// Package export_kcl_processor_window is where the generated export glue
// (package wit_exports) calls the processor's window close. Close forwards
// to Handler, which package kcl sets; this breaks what would otherwise be
// an import cycle.
package export_kcl_processor_window

import (
	witTypes "go.bytecodealliance.org/pkg/wit/types"
	"kclhost.dev/kcl/internal/wit/imports/kcl_processor_types"
	"kclhost.dev/kcl/internal/wit/imports/kcl_processor_window"
)

// Outcome is what the export returns.
type Outcome = witTypes.Result[witTypes.Unit, kcl_processor_types.ProcessorError]

// Handler implements the window export.
var Handler interface {
	Close(window kcl_processor_window.WindowBounds, keys []string) Outcome
}

func Close(window kcl_processor_window.WindowBounds, keys []string) Outcome {
	return Handler.Close(window, keys)
}
