// Package kclhttp sends a processor's HTTP requests through the host, over
// wasi:http, with Go's own net/http client:
//
//	client := kclhttp.Client()
//	resp, err := client.Get("https://users.example.com/users/ana")
//
// A component has no sockets, so net/http's default transport cannot
// connect; this package's Transport hands each request to the host, which
// sends it only to the destinations the operator allowed with `kcl-host run
// --allow-outbound`. Any other is refused: the request fails with an
// *Error whose Code is "HTTP-request-denied" (the host's log says which
// --allow-outbound would allow it).
//
// A request blocks the processor until the whole answer is read (a
// processor handles one batch at a time): Response.Body is already in
// memory. A processor that never imports this package imports no wasi:http.
package kclhttp

import (
	"bytes"
	"fmt"
	"io"
	"net/http"

	witTypes "go.bytecodealliance.org/pkg/wit/types"
	handler "kclhost.dev/kcl/internal/wit/imports/wasi_http_outgoing_handler"
	types "kclhost.dev/kcl/internal/wit/imports/wasi_http_types"
	streams "kclhost.dev/kcl/internal/wit/imports/wasi_io_streams"
)

// WASI streams take at most this much per blocking write.
const writeChunk = 4096
const readChunk = 64 << 10

// Client is an *http.Client whose requests go through the host.
func Client() *http.Client {
	return &http.Client{Transport: Transport{}}
}

// Transport is an http.RoundTripper over wasi:http/outgoing-handler.
type Transport struct{}

// Error is a request that got no answer: refused by the host, or failed on the way.
type Error struct {
	URL string
	// What failed, as wasi:http names it ("HTTP-request-denied", "connection-refused", ...).
	Code string
}

func (e *Error) Error() string { return e.URL + ": " + e.Code }

// RoundTrip sends req through the host and reads the whole answer.
func (Transport) RoundTrip(req *http.Request) (*http.Response, error) {
	url := req.URL.String()
	var body []byte
	if req.Body != nil {
		read, err := io.ReadAll(req.Body)
		req.Body.Close()
		if err != nil {
			return nil, fmt.Errorf("reading the body of %s: %w", url, err)
		}
		body = read
	}
	outgoing, err := request(req)
	if err != nil {
		return nil, err
	}
	outgoingBody := outgoing.Body().Ok()
	sent := handler.Handle(outgoing, witTypes.None[*types.RequestOptions]())
	if sent.IsErr() {
		outgoingBody.Drop()
		return nil, &Error{url, code(sent.Err())}
	}
	future := sent.Ok()
	defer future.Drop()
	if err := write(outgoingBody, body); err != nil {
		return nil, fmt.Errorf("sending the body of %s: %w", url, err)
	}
	ready := future.Subscribe()
	ready.Block()
	ready.Drop()
	// Ready now: Some(Ok(the request's result)), taken once.
	answered := future.Get().Some().Ok()
	if answered.IsErr() {
		return nil, &Error{url, code(answered.Err())}
	}
	response := answered.Ok()
	defer response.Drop()
	status := int(response.Status())
	header := http.Header{}
	fields := response.Headers()
	for _, entry := range fields.Entries() {
		header.Add(entry.F0, string(entry.F1))
	}
	fields.Drop()
	data, err := readAll(response)
	if err != nil {
		return nil, &Error{url, err.Error()}
	}
	return &http.Response{
		Status:        fmt.Sprintf("%d %s", status, http.StatusText(status)),
		StatusCode:    status,
		Proto:         "HTTP/1.1",
		ProtoMajor:    1,
		ProtoMinor:    1,
		Header:        header,
		Body:          io.NopCloser(bytes.NewReader(data)),
		ContentLength: int64(len(data)),
		Request:       req,
	}, nil
}

// request is req as a wasi:http outgoing request, its headers included.
func request(req *http.Request) (*types.OutgoingRequest, error) {
	if req.URL.Scheme != "http" && req.URL.Scheme != "https" || req.URL.Host == "" {
		return nil, fmt.Errorf("%s is not an http:// or https:// URL", req.URL)
	}
	headers := types.MakeFields()
	for name, values := range req.Header {
		for _, value := range values {
			if appended := headers.Append(name, []byte(value)); appended.IsErr() {
				headers.Drop()
				return nil, fmt.Errorf("the header %q cannot be sent (%s)", name, headerError(appended.Err()))
			}
		}
	}
	outgoing := types.MakeOutgoingRequest(headers)
	scheme := types.MakeSchemeHttp()
	if req.URL.Scheme == "https" {
		scheme = types.MakeSchemeHttps()
	}
	if outgoing.SetMethod(method(req.Method)).IsErr() {
		outgoing.Drop()
		return nil, fmt.Errorf("%q is not an HTTP method", req.Method)
	}
	outgoing.SetScheme(witTypes.Some(scheme))
	outgoing.SetAuthority(witTypes.Some(req.URL.Host))
	outgoing.SetPathWithQuery(witTypes.Some(req.URL.RequestURI()))
	return outgoing, nil
}

// write sends body (if any) and ends the request's body.
func write(outgoing *types.OutgoingBody, body []byte) error {
	if len(body) > 0 {
		stream := outgoing.Write().Ok()
		for start := 0; start < len(body); start += writeChunk {
			end := min(start+writeChunk, len(body))
			if written := stream.BlockingWriteAndFlush(body[start:end]); written.IsErr() {
				stream.Drop()
				outgoing.Drop()
				return streamError(written.Err())
			}
		}
		stream.Drop()
	}
	if finished := types.OutgoingBodyFinish(outgoing, witTypes.None[*types.Fields]()); finished.IsErr() {
		return &Error{"", code(finished.Err())}
	}
	return nil
}

// readAll reads the answer's whole body.
func readAll(response *types.IncomingResponse) ([]byte, error) {
	incoming := response.Consume().Ok()
	stream := incoming.Stream().Ok()
	var data []byte
	for {
		read := stream.BlockingRead(readChunk)
		if read.IsErr() {
			stream.Drop()
			types.IncomingBodyFinish(incoming).Drop()
			if read.Err().Tag() == streams.StreamError_Closed {
				return data, nil
			}
			return nil, streamError(read.Err())
		}
		data = append(data, read.Ok()...)
	}
}

func streamError(e streams.StreamError) error {
	if e.Tag() == streams.StreamError_Closed {
		return fmt.Errorf("the stream was closed")
	}
	failure := e.LastOperationFailed()
	defer failure.Drop()
	if detail := types.HttpErrorCode(failure); detail.IsSome() {
		return fmt.Errorf("%s", code(detail.Some()))
	}
	return fmt.Errorf("%s", failure.ToDebugString())
}

func method(name string) types.Method {
	switch name {
	case "", http.MethodGet:
		return types.MakeMethodGet()
	case http.MethodHead:
		return types.MakeMethodHead()
	case http.MethodPost:
		return types.MakeMethodPost()
	case http.MethodPut:
		return types.MakeMethodPut()
	case http.MethodDelete:
		return types.MakeMethodDelete()
	case http.MethodOptions:
		return types.MakeMethodOptions()
	case http.MethodPatch:
		return types.MakeMethodPatch()
	default:
		return types.MakeMethodOther(name)
	}
}

// The names of wasi:http's error-code cases, by tag.
var codes = [...]string{
	"DNS-timeout", "DNS-error", "destination-not-found", "destination-unavailable", "destination-IP-prohibited",
	"destination-IP-unroutable", "connection-refused", "connection-terminated", "connection-timeout",
	"connection-read-timeout", "connection-write-timeout", "connection-limit-reached", "TLS-protocol-error",
	"TLS-certificate-error", "TLS-alert-received", "HTTP-request-denied", "HTTP-request-length-required",
	"HTTP-request-body-size", "HTTP-request-method-invalid", "HTTP-request-URI-invalid", "HTTP-request-URI-too-long",
	"HTTP-request-header-section-size", "HTTP-request-header-size", "HTTP-request-trailer-section-size",
	"HTTP-request-trailer-size", "HTTP-response-incomplete", "HTTP-response-header-section-size",
	"HTTP-response-header-size", "HTTP-response-body-size", "HTTP-response-trailer-section-size",
	"HTTP-response-trailer-size", "HTTP-response-transfer-coding", "HTTP-response-content-coding",
	"HTTP-response-timeout", "HTTP-upgrade-failed", "HTTP-protocol-error", "loop-detected", "configuration-error",
	"internal-error",
}

// code names e as wasi:http does, with the internal error's detail.
func code(e types.ErrorCode) string {
	name := fmt.Sprintf("error code %d", e.Tag())
	if int(e.Tag()) < len(codes) {
		name = codes[e.Tag()]
	}
	if e.Tag() == types.ErrorCode_InternalError {
		if detail := e.InternalError(); detail.IsSome() {
			return name + " (" + detail.Some() + ")"
		}
	}
	return name
}

func headerError(e types.HeaderError) string {
	switch e.Tag() {
	case types.HeaderError_InvalidSyntax:
		return "invalid syntax"
	case types.HeaderError_Forbidden:
		return "forbidden"
	default:
		return "immutable"
	}
}
