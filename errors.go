package azlease

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"net/http"
	"strings"
	"unicode/utf8"

	"github.com/Azure/azure-sdk-for-go/sdk/azcore"
	"github.com/Azure/azure-sdk-for-go/sdk/storage/azblob/bloberror"
)

// Sentinel errors. Match them with [errors.Is]; every error azlease returns
// for a remote operation is an [*Error] that wraps exactly one of
// ErrLeaseHeld, ErrLeaseLost (or one of its refinements), ErrPermanent or
// ErrTransient.
var (
	// ErrLeaseHeld means another holder has the lease. For Acquire and
	// TryLock this is a normal outcome, not a failure.
	ErrLeaseHeld = errors.New("azlease: lease held by another holder")

	// ErrLeaseLost means a lease this process held is gone: Azure rejected
	// its lease ID, the lease was broken, or its validity deadline passed
	// before a renewal succeeded. Stop acting on it at once.
	ErrLeaseLost = errors.New("azlease: lease lost")

	// ErrLeaseBroken refines ErrLeaseLost: an operator or another process
	// broke the lease (Break Lease).
	ErrLeaseBroken = fmt.Errorf("%w: broken", ErrLeaseLost)

	// ErrDeadlinePassed refines ErrLeaseLost: the local validity deadline
	// passed before a renewal succeeded (an outage, a hanging request, or a
	// paused process). The lease may still exist on Azure, but this process
	// can no longer be certain it holds it.
	ErrDeadlinePassed = fmt.Errorf("%w: validity deadline passed before a renewal succeeded", ErrLeaseLost)

	// ErrPaused refines ErrDeadlinePassed: the renewal loop woke up after the
	// validity deadline, so the process was paused or starved (a GC pause, a
	// frozen VM). Only a fresh acquisition restores trust.
	ErrPaused = fmt.Errorf("%w (process paused or starved)", ErrDeadlinePassed)

	// ErrNotHeld means an operation that needs a held lease was called
	// without one.
	ErrNotHeld = errors.New("azlease: lease not held")

	// ErrAlreadyHeld means Acquire was called on a Lease that still holds a
	// valid lease; Renew or Release it first.
	ErrAlreadyHeld = errors.New("azlease: lease already held by this Lease")

	// ErrPermanent means the request failed for a reason retrying will not
	// fix: Azure refused it for authentication or authorization (401, 403:
	// a wrong key, an expired SAS, a missing role), a missing container or
	// blob with creation turned off (404), or an invalid request (400); or
	// the endpoint's host name does not exist, or its TLS certificate does
	// not verify. The [*Error] keeps the Azure error code and request ID.
	ErrPermanent = errors.New("azlease: permanent failure")

	// ErrEndpointNotFound refines ErrPermanent: the storage endpoint's host
	// name does not resolve (DNS "no such host"): a misspelt account name or
	// URL, or a private endpoint whose DNS zone this machine cannot see.
	// Storage was never reached, so nothing refused the request; retrying
	// will not help until the name or the DNS is fixed.
	ErrEndpointNotFound = fmt.Errorf("%w: the storage endpoint's host name does not resolve", ErrPermanent)

	// ErrTransient means the request failed in a way that may pass: a
	// timeout, a lost connection, throttling (503 ServerBusy) or a server
	// error (5xx). azlease retries these within the time it has; this error
	// means that time ran out.
	ErrTransient = errors.New("azlease: transient failure")

	// ErrUnreachable refines ErrTransient: a caller waited while every
	// request to storage failed (no answer, a transport error, or a 408,
	// 429 or 5xx answer) for longer than its bound
	// ([MutexOptions.UnreachableTimeout], [DoOnceOptions.UnreachableTimeout]),
	// so it stopped waiting although its context had not ended. The error's
	// text names the container URL (without any SAS token), how long and
	// how many requests failed, and the last failure, which it wraps (an
	// [*Error]).
	ErrUnreachable = fmt.Errorf("%w: storage unreachable", ErrTransient)

	// ErrInvalidOptions is wrapped by every [*OptionError].
	ErrInvalidOptions = errors.New("azlease: invalid options")

	// ErrStopped is the cause of a term's context when its holder stops it
	// on purpose (Elector.Stop, Mutex Unlock).
	ErrStopped = errors.New("azlease: stopped")

	// ErrStalled refines ErrStopped: an Elector with StepDownOnStall ended
	// its own term because the leader's work sent no heartbeat within
	// HeartbeatTimeout.
	ErrStalled = fmt.Errorf("%w: the leader's work sent no heartbeat within HeartbeatTimeout; stepping down", ErrStopped)

	// ErrMaxHoldExceeded refines ErrLeaseLost: a Lock was held longer than
	// MutexOptions.MaxHold, so it was taken away: its context ended and its
	// lease is no longer renewed.
	ErrMaxHoldExceeded = fmt.Errorf("%w: held longer than MaxHold", ErrLeaseLost)

	// ErrNotInitialized means a method was called on a zero or nil [Lease],
	// [Mutex], [Semaphore] or [Elector]: they must be created with
	// [NewLease], [NewMutex], [NewSemaphore] and [NewElector]. The error
	// names the constructor.
	ErrNotInitialized = errors.New("azlease: not created with its constructor")
)

// Error describes a failed remote operation. It wraps one of the sentinel
// errors (see [ErrLeaseHeld]) and the underlying error, which is usually an
// [*azcore.ResponseError]; both are reachable with [errors.Is] and
// [errors.As].
type Error struct {
	// Op is the operation: "acquire", "renew", "release", "break", "handoff",
	// "create", "read", "write" or "list" ([InspectPrefix]).
	Op string
	// Container and Blob name the lock blob; for "list", Blob is the
	// prefix listed (or, in [Status.Err], the blob whose record is bad).
	Container, Blob string
	// Code is Azure's x-ms-error-code, or "" when no response arrived.
	Code string
	// StatusCode is the HTTP status, or 0 when no response arrived.
	StatusCode int
	// RequestID is Azure's x-ms-request-id, for support requests.
	RequestID string
	// Err is the underlying error.
	Err error

	kind error
}

func (e *Error) Error() string {
	if e == nil {
		return "<nil>"
	}
	where := e.Container + "/" + e.Blob
	kind := "azlease: error" // an Error azlease did not make
	if e.kind != nil {
		kind = e.kind.Error()
	}
	if e.Code != "" {
		return fmt.Sprintf("%s (%s %s: %d %s, request %s)", kind, e.Op, where, e.StatusCode, e.Code, e.RequestID)
	}
	cause := "no cause given"
	if e.Err != nil {
		// Transport errors quote the request URL, which may carry a SAS token.
		cause = redactSAS(e.Err.Error())
	}
	return fmt.Sprintf("%s (%s %s: %s)", kind, e.Op, where, cause)
}

// redactSAS hides the signature of any SAS token in s.
func redactSAS(s string) string {
	var b strings.Builder
	for {
		i := strings.Index(s, "sig=")
		if i < 0 {
			b.WriteString(s)
			return b.String()
		}
		b.WriteString(s[:i+len("sig=")])
		b.WriteString("REDACTED")
		s = s[i+len("sig="):]
		if j := strings.IndexAny(s, "&\" \t\n"); j >= 0 {
			s = s[j:]
		} else {
			s = ""
		}
	}
}

// Unwrap returns the sentinel error and the underlying error (those that
// are set: none for a zero or nil *Error).
func (e *Error) Unwrap() []error {
	if e == nil {
		return nil
	}
	var errs []error
	for _, err := range []error{e.kind, e.Err} {
		if err != nil {
			errs = append(errs, err)
		}
	}
	return errs
}

// PanicError is what a leader [Task] that panicked returns, as the Elector
// sees it: the Elector recovers the panic in the goroutine it runs the task
// in, so that it does not crash the process, and treats it as the task
// returning a *PanicError (see [Task]).
type PanicError struct {
	// Value is what the task passed to panic.
	Value any
	// Stack is the panicking goroutine's stack trace.
	Stack []byte
}

func (e *PanicError) Error() string {
	if e == nil {
		return "<nil>"
	}
	return fmt.Sprintf("azlease: leader task panicked: %v", e.Value)
}

// Unwrap returns Value when it is an error, and nil otherwise.
func (e *PanicError) Unwrap() error {
	if e == nil {
		return nil
	}
	err, _ := e.Value.(error)
	return err
}

// OptionError reports an invalid option or argument. It names the field.
type OptionError struct {
	// Field is the option or argument, such as "LeaseOptions.LeaseDuration".
	Field string
	// Reason says what is wrong and what is allowed.
	Reason string
}

func (e *OptionError) Error() string {
	if e == nil {
		return "<nil>"
	}
	return "azlease: invalid " + e.Field + ": " + e.Reason
}

// Unwrap returns ErrInvalidOptions.
func (e *OptionError) Unwrap() error { return ErrInvalidOptions }

// optionErr builds an *OptionError. Every string argument is a value the
// caller gave, so %q quotes at most maxEcho bytes of it (see echo): a 10 kB
// identity must not come back whole in an error, and then in every log line.
func optionErr(field, format string, args ...any) error {
	echoed := make([]any, len(args))
	for i, a := range args {
		if s, ok := a.(string); ok {
			a = echo(s)
		}
		echoed[i] = a
	}
	return &OptionError{Field: field, Reason: fmt.Sprintf(format, echoed...)}
}

// maxEcho is the most of a bad value an *OptionError quotes, in bytes.
const maxEcho = 64

// echo is a value quoted in an error message. With %q a value longer than
// maxEcho is cut (at a character boundary) and its length given instead:
// "aaaa…"… (10240 bytes). Other verbs print it unchanged.
type echo string

func (e echo) Format(f fmt.State, verb rune) {
	s := string(e)
	if verb != 'q' || len(s) <= maxEcho {
		fmt.Fprintf(f, fmt.FormatString(f, verb), s)
		return
	}
	cut := maxEcho
	for cut > 0 && !utf8.RuneStart(s[cut]) {
		cut--
	}
	fmt.Fprintf(f, fmt.FormatString(f, verb)+"… (%d bytes)", s[:cut], len(s))
}

// class is how azlease reacts to the outcome of a remote request.
type class int

const (
	classOK        class = iota
	classHeld            // another holder has the lease
	classLost            // our lease ID is no longer the lease's
	classBroken          // our lease was broken
	classNotFound        // the container or blob is missing
	classExists          // create found it already there
	classConflict        // an If-Match condition failed: re-read and retry
	classTransient       // may pass: retry within the time left
	classPermanent       // will not pass
	classCanceled        // the caller's context ended
)

// classify maps an error from azblob to a class. Azure's error codes are
// matched with bloberror.HasCode only; the HTTP status decides only for codes
// this table does not know. caller is the caller's own context: when it has
// ended, nothing else about the error matters.
func classify(caller context.Context, err error) class {
	switch {
	case err == nil:
		return classOK
	case caller.Err() != nil:
		return classCanceled
	case bloberror.HasCode(err, bloberror.LeaseAlreadyPresent, bloberror.LeaseIsBreakingAndCannotBeAcquired):
		return classHeld
	case bloberror.HasCode(err, bloberror.LeaseIsBrokenAndCannotBeRenewed):
		return classBroken
	case bloberror.HasCode(err,
		bloberror.LeaseIDMismatchWithLeaseOperation, bloberror.LeaseNotPresentWithLeaseOperation,
		bloberror.LeaseIDMismatchWithBlobOperation, bloberror.LeaseNotPresentWithBlobOperation,
		bloberror.LeaseIDMissing, bloberror.LeaseLost, bloberror.LeaseIsBreakingAndCannotBeChanged):
		return classLost
	case bloberror.HasCode(err, bloberror.BlobNotFound, bloberror.ContainerNotFound):
		return classNotFound
	case bloberror.HasCode(err, bloberror.BlobAlreadyExists, bloberror.ContainerAlreadyExists):
		return classExists
	case bloberror.HasCode(err, bloberror.ConditionNotMet):
		return classConflict
	case bloberror.HasCode(err, bloberror.ServerBusy, bloberror.OperationTimedOut, bloberror.InternalError,
		bloberror.ContainerBeingDeleted):
		return classTransient
	}
	var re *azcore.ResponseError
	if !errors.As(err, &re) {
		if misconfigured(err) {
			return classPermanent
		}
		// No response: a timeout, a lost connection, a refused dial. The
		// request may or may not have reached Azure.
		return classTransient
	}
	switch {
	case re.StatusCode == http.StatusRequestTimeout, re.StatusCode == http.StatusTooManyRequests,
		re.StatusCode >= 500:
		return classTransient
	}
	return classPermanent
}

// ambiguous reports whether a failed request may nevertheless have been
// applied by Azure: no response arrived, or a server or gateway failed
// after the request may have been forwarded. Only throttling (503
// ServerBusy) says for sure that nothing was done.
func ambiguous(err error) bool {
	var re *azcore.ResponseError
	if !errors.As(err, &re) {
		return !neverSent(err)
	}
	if bloberror.HasCode(err, bloberror.ServerBusy) {
		return false
	}
	return re.StatusCode >= 500 || re.StatusCode == http.StatusRequestTimeout
}

// neverSent reports whether err says the request never left this process:
// no connection could be opened (refused, unreachable, a name that does not
// resolve) or its TLS handshake failed. Such a request cannot be applied,
// now or later, so there is nothing to give back.
func neverSent(err error) bool {
	var op *net.OpError
	if errors.As(err, &op) && op.Op == "dial" {
		return true
	}
	var dns *net.DNSError
	var cert *tls.CertificateVerificationError
	var rec tls.RecordHeaderError
	return errors.As(err, &dns) || errors.As(err, &cert) || errors.As(err, &rec)
}

// misconfigured reports whether a request that got no response failed for a
// reason that retrying will not fix: the endpoint's host name does not exist
// or its certificate does not verify. Refused or unreachable connections
// are not: a service can come back.
func misconfigured(err error) bool {
	var cert *tls.CertificateVerificationError
	return hostNotFound(err) || errors.As(err, &cert)
}

// hostNotFound reports whether err says the endpoint's host name does not
// resolve: [ErrEndpointNotFound].
func hostNotFound(err error) bool {
	var dns *net.DNSError
	return errors.As(err, &dns) && dns.IsNotFound
}

// lastAttempt is the failure of the last attempt inside err: the *Error it
// wraps, when it wraps one. A try cut short by the caller's context already
// says "ctx ended; last attempt: …", which the waiting loops would
// otherwise repeat.
func lastAttempt(err error) error {
	var e *Error
	if errors.As(err, &e) {
		return e
	}
	return err
}

// asHeld turns the *Error of a lease lost right after it was acquired
// (broken or taken before its term could start) into "held elsewhere":
// for the caller, nobody's term was interrupted and it may wait and retry.
func asHeld(err error) error {
	var e *Error
	if !errors.As(err, &e) {
		return err
	}
	h := *e
	h.kind = ErrLeaseHeld
	return &h
}

// opError builds the *Error for a failed operation; kind is the sentinel.
func opError(op, containerName, blobName string, kind, err error) *Error {
	if kind == ErrPermanent && hostNotFound(err) {
		kind = ErrEndpointNotFound
	}
	e := &Error{Op: op, Container: containerName, Blob: blobName, Err: err, kind: kind}
	var re *azcore.ResponseError
	if errors.As(err, &re) {
		e.Code = re.ErrorCode
		e.StatusCode = re.StatusCode
		if re.RawResponse != nil {
			e.RequestID = re.RawResponse.Header.Get("x-ms-request-id")
		}
	}
	return e
}

// kindOf is the sentinel for a class.
func kindOf(c class) error {
	switch c {
	case classHeld:
		return ErrLeaseHeld
	case classLost:
		return ErrLeaseLost
	case classBroken:
		return ErrLeaseBroken
	case classTransient, classConflict:
		return ErrTransient
	default:
		return ErrPermanent
	}
}
