package kcl

import (
	"encoding/json"
	"fmt"
	"strconv"

	"kclhost.dev/kcl/internal/wit/imports/kcl_processor_state"
)

// StateError says why a state call did nothing.
type StateError struct {
	// NotThisShard is set when the key's MD5 hash is outside the shard's
	// hash-key range: a key's state lives with the shard its records go
	// to, so use the record's partition key.
	NotThisShard bool
	// Unavailable is set when the state could not be read now; try again later.
	Unavailable bool
	// Message says what is wrong (too large, which range, what failed).
	Message string
}

func (e *StateError) Error() string { return "state: " + e.Message }

func stateError(e kcl_processor_state.StateError) *StateError {
	switch e.Tag() {
	case kcl_processor_state.StateError_NotThisShard:
		return &StateError{NotThisShard: true, Message: e.NotThisShard()}
	case kcl_processor_state.StateError_Unavailable:
		return &StateError{Unavailable: true, Message: e.Unavailable()}
	default:
		return &StateError{Message: e.TooLarge()}
	}
}

// StateGet returns key's value, and whether it has one. State is kept per
// key across batches, restarts, handoffs, swaps and reshards, and
// committed with the checkpoint: after a crash it is exactly the effect of
// the records up to the last checkpoint.
func StateGet(key string) ([]byte, bool, error) {
	result := kcl_processor_state.Get(key)
	if result.IsErr() {
		return nil, false, stateError(result.Err())
	}
	value := result.Ok()
	if value.IsNone() {
		return nil, false, nil
	}
	return value.Some(), true, nil
}

// StateSet sets key to value, committed with the next checkpoint.
func StateSet(key string, value []byte) error {
	if result := kcl_processor_state.Set(key, value); result.IsErr() {
		return stateError(result.Err())
	}
	return nil
}

// StateDelete removes key's value, committed with the next checkpoint.
func StateDelete(key string) error {
	if result := kcl_processor_state.Delete(key); result.IsErr() {
		return stateError(result.Err())
	}
	return nil
}

// StateGetMany returns the values of keys, in order (nil for a key with
// none): one crossing into the host, and one read for the keys it has not cached.
func StateGetMany(keys []string) ([][]byte, error) {
	result := kcl_processor_state.GetMany(keys)
	if result.IsErr() {
		return nil, stateError(result.Err())
	}
	values := make([][]byte, len(keys))
	for i, value := range result.Ok() {
		if value.IsSome() {
			values[i] = value.Some()
		}
	}
	return values, nil
}

func parseInt(key string, value []byte) (int64, error) {
	if value == nil {
		return 0, nil
	}
	n, err := strconv.ParseInt(string(value), 10, 64)
	if err != nil {
		return 0, fmt.Errorf("state: the value of %q is %q, not a decimal integer", key, value)
	}
	return n, nil
}

// StateGetInt returns key's value as an integer (kept as decimal text),
// 0 when it has none.
func StateGetInt(key string) (int64, error) {
	value, _, err := StateGet(key)
	if err != nil {
		return 0, err
	}
	return parseInt(key, value)
}

// StateGetManyInt returns the values of keys as integers, in order (0 for
// a key with none), in one read.
func StateGetManyInt(keys []string) ([]int64, error) {
	values, err := StateGetMany(keys)
	if err != nil {
		return nil, err
	}
	numbers := make([]int64, len(keys))
	for i, value := range values {
		if numbers[i], err = parseInt(keys[i], value); err != nil {
			return nil, err
		}
	}
	return numbers, nil
}

// StateGetJSON reads key's value as JSON into v; false when it has none (v untouched).
func StateGetJSON(key string, v any) (bool, error) {
	value, ok, err := StateGet(key)
	if err != nil || !ok {
		return false, err
	}
	if err := json.Unmarshal(value, v); err != nil {
		return false, fmt.Errorf("state: the value of %q is not JSON of that shape: %w", key, err)
	}
	return true, nil
}

// StateSetJSON sets key to v as JSON.
func StateSetJSON(key string, v any) error {
	value, err := json.Marshal(v)
	if err != nil {
		return fmt.Errorf("state: %q: %w", key, err)
	}
	return StateSet(key, value)
}

// StateSetInt sets key to the integer value, as decimal text.
func StateSetInt(key string, value int64) error {
	return StateSet(key, []byte(strconv.FormatInt(value, 10)))
}
