package kcl

import (
	"kclhost.dev/kcl/internal/wit/imports/kcl_processor_output"
)

// OutputError says why records were not taken; none of them was.
type OutputError struct {
	// UnknownTarget is set when no target of that name was declared.
	UnknownTarget bool
	// Message names the declared targets, or the record that does not fit and why.
	Message string
}

func (e *OutputError) Error() string { return e.Message }

// Outputs gathers records to send together to a target the operator
// declared (kcl-host run --output NAME=URI). What a processor sends while
// handling a record is written before any checkpoint that covers it, so a
// checkpoint never runs ahead of its outputs.
type Outputs struct {
	records kcl_processor_output.Records
}

// Add gathers one record, placed by its partition key.
func (o *Outputs) Add(partitionKey string, data []byte) *Outputs {
	return o.AddWithHashKey(partitionKey, "", data)
}

// AddWithHashKey gathers one record, placed by explicitHashKey unless it is empty.
func (o *Outputs) AddWithHashKey(partitionKey, explicitHashKey string, data []byte) *Outputs {
	r := &o.records
	r.Data = append(r.Data, data...)
	r.DataEnds = append(r.DataEnds, uint32(len(r.Data)))
	r.PartitionKeys += partitionKey
	r.PartitionKeyEnds = append(r.PartitionKeyEnds, uint32(len(r.PartitionKeys)))
	r.ExplicitHashKeys += explicitHashKey
	r.ExplicitHashKeyEnds = append(r.ExplicitHashKeyEnds, uint32(len(r.ExplicitHashKeys)))
	return o
}

// Len is how many records are gathered.
func (o *Outputs) Len() int { return len(o.records.DataEnds) }

// Send sends every gathered record to target, in order, and starts over.
func (o *Outputs) Send(target string) error {
	records := o.records
	o.records = kcl_processor_output.Records{}
	result := kcl_processor_output.Send(target, records)
	if result.IsOk() {
		return nil
	}
	e := result.Err()
	if e.Tag() == kcl_processor_output.SendError_UnknownTarget {
		return &OutputError{UnknownTarget: true, Message: e.UnknownTarget()}
	}
	return &OutputError{Message: e.Invalid()}
}

// Send sends one record to target.
func Send(target, partitionKey string, data []byte) error {
	var o Outputs
	return o.Add(partitionKey, data).Send(target)
}
