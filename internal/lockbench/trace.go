package main

// -trace: every request of the azlease contenders (when sent, how long it
// took, what it was, its status) and the scenarios' events, on standard
// error, to see where a hand-off's time goes.

import (
	"fmt"
	"net/http"
	"os"
	"strings"
	"sync"
	"time"
)

// tracing is when -trace began (zero: no trace).
var tracing time.Time

var traceMu sync.Mutex

// tracef writes an event, with the milliseconds since the trace began.
func tracef(format string, args ...any) {
	if tracing.IsZero() {
		return
	}
	traceMu.Lock()
	defer traceMu.Unlock()
	fmt.Fprintf(os.Stderr, "%10.1f ms  %s\n", float64(time.Since(tracing).Microseconds())/1000, fmt.Sprintf(format, args...))
}

// traceRequest writes a request sent at sent by the waiter whose transport
// is who, and its answer (nil: none).
func traceRequest(who any, sent time.Time, req *http.Request, resp *http.Response) {
	if tracing.IsZero() {
		return
	}
	status := "no answer"
	if resp != nil {
		status = fmt.Sprint(resp.StatusCode)
	}
	traceMu.Lock()
	defer traceMu.Unlock()
	fmt.Fprintf(os.Stderr, "%10.1f ms  %p %6.1f ms %s %s?%s %s %s\n", float64(sent.Sub(tracing).Microseconds())/1000, who,
		float64(time.Since(sent).Microseconds())/1000, req.Method, req.URL.Path, req.URL.RawQuery,
		leaseAction(req.Header), status)
}

// leaseAction is a request's x-ms-lease-action header, whose name azblob
// does not write in canonical form.
func leaseAction(h http.Header) string {
	for k, v := range h {
		if strings.EqualFold(k, "x-ms-lease-action") && len(v) > 0 {
			return v[0]
		}
	}
	return ""
}
