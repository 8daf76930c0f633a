package kcl

import (
	"fmt"

	export "kclhost.dev/kcl/internal/wit/exports/export_kcl_processor_record_processor"
	"kclhost.dev/kcl/internal/wit/imports/kcl_processor_window"
)

// Window is a window of arrival times (`kcl-host run --window`), in
// milliseconds since the Unix epoch: StartMs is in it, EndMs the first
// after it. ShardEnded is set when it closed early because the shard ended
// (a split or a merge: the children go on with the rest of the window).
type Window struct {
	StartMs    uint64
	EndMs      uint64
	ShardEnded bool
}

// WindowCloser is what a processor run with `kcl-host run --window`
// implements besides RecordProcessor. CloseWindow is called when window
// closes for the shard, with the state keys its records changed: read
// their state, send results to an output, delete what the next window
// should not see; the host writes the outputs and commits the state changes
// like a checkpoint. Errors are treated as in ProcessRecords.
type WindowCloser interface {
	CloseWindow(window Window, keys []string) error
}

func (h *handler) Close(bounds kcl_processor_window.WindowBounds, keys []string) export.Outcome {
	defer collect()
	if h.processor == nil {
		return outcome(fmt.Errorf("close was called before initialize"))
	}
	closer, ok := h.processor.(WindowCloser)
	if !ok {
		return outcome(fmt.Errorf("window [%d, %d) closed, but this processor does not implement kcl.WindowCloser (CloseWindow)", bounds.StartMs, bounds.EndMs))
	}
	return outcome(closer.CloseWindow(Window{StartMs: bounds.StartMs, EndMs: bounds.EndMs, ShardEnded: bounds.ShardEnded}, keys))
}
