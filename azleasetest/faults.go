package azleasetest

import (
	"context"
	"net/http"
	"time"
)

// Op names a Blob service operation, as a [FaultFunc] sees it.
type Op string

// The operations the emulator implements.
const (
	OpCreateContainer        Op = "CreateContainer"
	OpGetContainerProperties Op = "GetContainerProperties"
	OpDeleteContainer        Op = "DeleteContainer"
	OpListBlobs              Op = "ListBlobs" // a container's blobs: a read, not a lease operation
	OpPutBlob                Op = "PutBlob"
	OpGetProperties          Op = "GetBlobProperties"
	OpGetBlob                Op = "GetBlob"
	OpGetMetadata            Op = "GetBlobMetadata"
	OpSetMetadata            Op = "SetBlobMetadata"
	OpDeleteBlob             Op = "DeleteBlob"
	OpAppendBlock            Op = "AppendBlock" // appendblob.go
	OpAcquireLease           Op = "AcquireLease"
	OpRenewLease             Op = "RenewLease"
	OpChangeLease            Op = "ChangeLease"
	OpReleaseLease           Op = "ReleaseLease"
	OpBreakLease             Op = "BreakLease"
	OpLeaseInvalid           Op = "LeaseInvalidAction" // a Lease Blob request with an unknown action
	OpUnknown                Op = "Unknown"            // anything the emulator does not implement
)

// IsLease reports whether op is one of the five Lease Blob actions.
func (op Op) IsLease() bool {
	switch op {
	case OpAcquireLease, OpRenewLease, OpChangeLease, OpReleaseLease, OpBreakLease:
		return true
	}
	return false
}

// Request describes an incoming request to the fault hook.
type Request struct {
	// Op is the operation requested.
	Op Op
	// Client is the name given to [Server.Client] (or the label given to
	// [Server.Transport] or [Server.ContainerClient]); "" over the network.
	Client string
	// Container and Blob name the resource; Blob is "" for a container.
	Container string
	Blob      string
	// Header holds the request's headers, names canonicalised. Do not
	// modify it.
	Header http.Header
}

// Action is what the server does with a request after its [Fault.Delay].
type Action int

const (
	// Pass handles the request normally.
	Pass Action = iota
	// Fail answers Fault.Status and Fault.Code without applying the request.
	Fail
	// Drop breaks the connection without applying the request: the client
	// sees a transport error, and nothing changed.
	Drop
	// Hang never answers and does not apply the request; the client waits
	// until its own deadline.
	Hang
	// ApplyThenDrop applies the request (if the server would: a refused
	// request changes nothing), then breaks the connection, so the client
	// sees a transport error and cannot know whether it took effect.
	ApplyThenDrop
	// ApplyThenHang applies the request as ApplyThenDrop does, then never
	// answers.
	ApplyThenHang
	// ApplyLate never answers, and applies the request only after the
	// client has given up waiting for it (its deadline passed or it was
	// cancelled), Fault.LateBy later: a request that sat in a queue on the
	// way and reached the service after its sender had moved on. The late
	// application's answer goes nowhere. A request still waiting when the
	// server is closed is dropped.
	ApplyLate
)

// Fault is the misbehaviour chosen for one request. The zero Fault handles it
// normally.
type Fault struct {
	// Delay holds the request this long before acting on it (local time; a
	// client that gives up first sees its own deadline). Zero: no delay.
	Delay time.Duration
	// Action is what happens after the delay.
	Action Action
	// DelayResponse holds the response this long after the request was
	// applied (local time). A client that gives up first never sees it,
	// although the request took effect. Zero: no delay.
	DelayResponse time.Duration
	// Status and Code are answered when Action is Fail. Zero values mean
	// 503 ServerBusy.
	Status int
	Code   string
	// LateBy is, for ApplyLate, how long after the client gave up the
	// request is applied (local time). Zero: as soon as it gave up.
	LateBy time.Duration
}

// FaultFunc chooses a fault for each request. It runs on the request's
// goroutine, outside the server's lock, and must be safe for concurrent use.
type FaultFunc func(Request) Fault

// SetFaults installs f as the fault hook, the general form of fault
// injection: f chooses the fault for every request that the named faults
// ([Server.Partition], [Server.Outage], [Server.FailRequests],
// [Server.ApplyLate], [Server.LoseResponses]) leave alone; a
// [Server.Slow] delay adds to its Delay. nil removes the hook.
func (s *Server) SetFaults(f FaultFunc) {
	if !s.usable() {
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.faults = f
}

// injectFault applies the pre-processing part of the fault chosen for req. It
// returns false when the request must not be handled (failed, dropped or hung).
func (s *Server) injectFault(w http.ResponseWriter, r *http.Request, req *request) bool {
	s.mu.Lock()
	f := s.faults
	fault, decided := s.rules.choose(req.Request)
	s.mu.Unlock()
	if !decided && f != nil {
		delay := fault.Delay
		fault = f(req.Request)
		fault.Delay += delay
	}
	if fault == (Fault{}) {
		return true
	}
	req.fault = fault
	s.wait(r.Context(), req.fault.Delay)
	switch req.fault.Action {
	case Fail:
		status, code := req.fault.Status, req.fault.Code
		if status == 0 {
			status = http.StatusServiceUnavailable
		}
		if code == "" {
			code = "ServerBusy"
		}
		res := s.fail(status, code, "")
		res.header.Set("x-ms-request-id", "00000000-0000-4000-8000-fa0000000000")
		res.write(w, r)
		return false
	case Drop:
		panic(http.ErrAbortHandler)
	case Hang:
		s.hang(r.Context())
		panic(http.ErrAbortHandler)
	}
	return true
}

// wait holds a request for d, and aborts the connection if the client gives
// up first.
func (s *Server) wait(ctx context.Context, d time.Duration) {
	if d <= 0 {
		return
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
	case <-ctx.Done():
		panic(http.ErrAbortHandler)
	case <-s.closed:
	}
}

// applyLate waits until the client gives up on req, then, in a goroutine the
// server owns (Close waits for it), applies req lateBy later and discards the
// answer.
func (s *Server) applyLate(clientCtx context.Context, req *request, body []byte, lateBy time.Duration) {
	select {
	case <-clientCtx.Done():
	case <-s.closed:
		return
	}
	s.mu.Lock() // Close closes s.closed under s.mu: no Add after its Wait began
	select {
	case <-s.closed:
		s.mu.Unlock()
		return
	default:
	}
	s.late.Add(1)
	s.mu.Unlock()
	go func() {
		defer s.late.Done()
		if lateBy > 0 {
			t := time.NewTimer(lateBy)
			defer t.Stop()
			select {
			case <-t.C:
			case <-s.closed:
				return
			}
		}
		select {
		case <-s.closed:
			return
		default:
		}
		s.handle(req, body)
	}()
}
