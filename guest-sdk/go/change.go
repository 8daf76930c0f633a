package kcl

import (
	"encoding/json"
	"fmt"
	"math"
	"strconv"
)

// Change is one change of one item of a DynamoDB table: what a record
// carries when kcl-host reads a table's stream (`--stream <DynamoDB stream
// ARN>` or `--dynamodb-table T`). Attributes are plain values: a number is
// an int64 when whole and in range, else a float64; a string set is a
// []string, a number set a []any of numbers, binary a []byte, a map a
// map[string]any, a list a []any, NULL nil.
type Change struct {
	// EventName is "INSERT", "MODIFY" or "REMOVE".
	EventName string
	// Keys are the item's primary key attributes.
	Keys map[string]any
	// NewImage is the item after the change (nil on REMOVE, and on
	// KEYS_ONLY and OLD_IMAGE streams).
	NewImage map[string]any
	// OldImage is the item before the change (nil on INSERT, and on
	// KEYS_ONLY and NEW_IMAGE streams).
	OldImage map[string]any
	SequenceNumber string
	// ApproximateCreationMs is when DynamoDB made the change, in
	// milliseconds since the Unix epoch.
	ApproximateCreationMs int64
	SizeBytes             int64
}

// streamRecord is the record's data as kcl-host writes it (Lambda's shape).
type streamRecord struct {
	EventName string `json:"eventName"`
	DynamoDB  *struct {
		ApproximateCreationDateTime float64                    `json:"ApproximateCreationDateTime"`
		Keys                        map[string]json.RawMessage `json:"Keys"`
		NewImage                    map[string]json.RawMessage `json:"NewImage"`
		OldImage                    map[string]json.RawMessage `json:"OldImage"`
		SequenceNumber              string                     `json:"SequenceNumber"`
		SizeBytes                   int64                      `json:"SizeBytes"`
	} `json:"dynamodb"`
}

// Change reads the change the record carries; an error when it is not a
// DynamoDB stream record.
func (r *Record) Change() (*Change, error) {
	var event streamRecord
	if err := json.Unmarshal(r.Data, &event); err != nil {
		return nil, fmt.Errorf("not a DynamoDB stream record: %w", err)
	}
	if event.DynamoDB == nil || (event.EventName != "INSERT" && event.EventName != "MODIFY" && event.EventName != "REMOVE") {
		return nil, fmt.Errorf("not a DynamoDB stream record: no `dynamodb` object and eventName INSERT, MODIFY or REMOVE")
	}
	d := event.DynamoDB
	change := &Change{
		EventName:             event.EventName,
		SequenceNumber:        d.SequenceNumber,
		ApproximateCreationMs: int64(math.Round(d.ApproximateCreationDateTime * 1000)),
		SizeBytes:             d.SizeBytes,
	}
	var err error
	if change.Keys, err = plainItem(d.Keys); err != nil {
		return nil, err
	}
	if change.NewImage, err = plainItem(d.NewImage); err != nil {
		return nil, err
	}
	if change.OldImage, err = plainItem(d.OldImage); err != nil {
		return nil, err
	}
	if change.SequenceNumber == "" {
		change.SequenceNumber = r.SequenceNumber
	}
	return change, nil
}

func plainItem(attributes map[string]json.RawMessage) (map[string]any, error) {
	if attributes == nil {
		return nil, nil
	}
	item := make(map[string]any, len(attributes))
	for name, raw := range attributes {
		value, err := Plain(raw)
		if err != nil {
			return nil, fmt.Errorf("attribute %q: %w", name, err)
		}
		item[name] = value
	}
	return item, nil
}

// Plain turns one attribute in DynamoDB JSON ({"N": "12"}) into a plain value (12).
func Plain(attribute json.RawMessage) (any, error) {
	var typed map[string]json.RawMessage
	if err := json.Unmarshal(attribute, &typed); err != nil || len(typed) != 1 {
		return nil, fmt.Errorf("not a DynamoDB attribute: %s", attribute)
	}
	for kind, value := range typed {
		switch kind {
		case "S", "BOOL":
			var v any
			err := json.Unmarshal(value, &v)
			return v, err
		case "SS":
			var set []string
			err := json.Unmarshal(value, &set)
			return set, err
		case "N":
			var text string
			if err := json.Unmarshal(value, &text); err != nil {
				return nil, err
			}
			return number(text)
		case "B":
			var b []byte // encoding/json reads base64 into []byte
			err := json.Unmarshal(value, &b)
			return b, err
		case "NS", "BS", "L":
			var items []json.RawMessage
			if err := json.Unmarshal(value, &items); err != nil {
				return nil, err
			}
			list := make([]any, len(items))
			for i, item := range items {
				var err error
				switch kind {
				case "NS":
					var text string
					if err = json.Unmarshal(item, &text); err == nil {
						list[i], err = number(text)
					}
				case "BS":
					var b []byte
					err = json.Unmarshal(item, &b)
					list[i] = b
				default:
					list[i], err = Plain(item)
				}
				if err != nil {
					return nil, err
				}
			}
			return list, nil
		case "M":
			var m map[string]json.RawMessage
			if err := json.Unmarshal(value, &m); err != nil {
				return nil, err
			}
			return plainItem(m)
		case "NULL":
			return nil, nil
		default:
			return nil, fmt.Errorf("unknown attribute type %q", kind)
		}
	}
	panic("unreachable: one entry")
}

func number(text string) (any, error) {
	if n, err := strconv.ParseInt(text, 10, 64); err == nil {
		return n, nil
	}
	return strconv.ParseFloat(text, 64)
}
