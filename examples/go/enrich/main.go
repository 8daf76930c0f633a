// Enrich and forward: each JSON event with a `user` is looked up in an HTTP
// API (`GET {api_url}/users/{user}`, the variable `api_url`), its answer
// added as `profile`, and the enriched event forwarded to the output
// `enriched` with the user as partition key; then the batch is checkpointed.
// The same logic as examples/rust/enrich, examples/python/enrich and
// examples/js/enrich, with Go's net/http client over the host
// (kclhost.dev/kcl/kclhttp):
//
//	kcl-host run go-enrich.wasm --stream orders --application orders-enrich \
//	  --var api_url=https://users.example.com --allow-outbound https://users.example.com \
//	  --output enriched=kinesis:orders-enriched
//
// Records that are not JSON objects with a `user` are skipped with a
// warning. A failed lookup (the API down, or not allowed) fails the batch
// as retryable: it comes again after a backoff, and nothing is forwarded or
// checkpointed past it meanwhile.
package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"

	"kclhost.dev/kcl"
	"kclhost.dev/kcl/kclhttp"
)

type enrich struct {
	apiURL string
	client *http.Client
}

func (e *enrich) Initialize(kcl.ShardInfo) error {
	apiURL, ok := kcl.Var("api_url")
	if !ok {
		return errors.New("set the API's address with --var api_url=URL")
	}
	e.apiURL = strings.TrimRight(apiURL, "/")
	e.client = kclhttp.Client()
	return nil
}

// profile is the user's profile from the API.
func (e *enrich) profile(user string) (json.RawMessage, error) {
	url := fmt.Sprintf("%s/users/%s", e.apiURL, user)
	resp, err := e.client.Get(url)
	var failed *kclhttp.Error // the host refused it, or it failed on the way: it names the URL
	if errors.As(err, &failed) {
		return nil, fmt.Errorf("looking up %w", failed)
	}
	if err != nil {
		return nil, fmt.Errorf("looking up %s: %w", url, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("looking up %s: status %d", url, resp.StatusCode)
	}
	body, err := io.ReadAll(resp.Body)
	if err == nil && !json.Valid(body) {
		err = errors.New("not JSON")
	}
	if err != nil {
		return nil, fmt.Errorf("%s answered something that is not JSON: %w", url, err)
	}
	return body, nil
}

func (e *enrich) ProcessRecords(batch kcl.Batch, cp *kcl.Checkpointer) error {
	var out kcl.Outputs
	for _, record := range batch.Records {
		var event map[string]json.RawMessage
		var user string
		if json.Unmarshal(record.Data, &event) != nil || json.Unmarshal(event["user"], &user) != nil {
			kcl.Warnf("skipping record %s: not a JSON event with a user", record.SequenceNumber)
			continue
		}
		profile, err := e.profile(user)
		if err != nil {
			return kcl.Retryable(err)
		}
		event["profile"] = profile
		enriched, err := json.Marshal(event)
		if err != nil {
			return err
		}
		out.Add(user, enriched)
	}
	if out.Len() > 0 {
		if err := out.Send("enriched"); err != nil {
			return err
		}
	}
	if err := cp.Checkpoint(); err != nil {
		return kcl.Retryable(err)
	}
	return nil
}

func (e *enrich) Shutdown(kcl.ShutdownReason, *kcl.Checkpointer) error { return nil }

func init() {
	kcl.Register(func() kcl.RecordProcessor { return &enrich{} })
}

func main() {}
