package main

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strings"

	"github.com/Azure/azure-sdk-for-go/sdk/storage/azblob/bloberror"

	"github.com/azlease/azlease"
)

// Exit statuses of azlease's own outcomes. A command run under a lease
// passes its own status through (128+N when signal N killed it), so these
// follow the BSD sysexits convention (64 and up), which few programs use,
// and azlease's own outcomes beyond it. The package documentation and
// README list them.
const (
	exitOK          = 0
	exitUsage       = 64  // EX_USAGE: bad flags or arguments, no or invalid connection settings
	exitUnavailable = 69  // EX_UNAVAILABLE: storage unreachable, or failing transiently for too long
	exitInternal    = 70  // EX_SOFTWARE: azlease's guardian process died, or another internal failure
	exitNotAcquired = 75  // EX_TEMPFAIL: not acquired in time (--no-wait, --timeout), or busy (reset-once)
	exitRefused     = 77  // EX_NOPERM: storage refused: authentication, permission, or another permanent error
	exitLost        = 79  // the lease was lost while the command ran; the command was stopped
	exitOnceFailed  = 80  // a once key has used up its attempts (the recorded error is printed)
	exitUnrecorded  = 81  // once: the command succeeded, but its completion is not known to be recorded
	exitNoExec      = 126 // the command was found but could not be run
	exitNotFound    = 127 // the command was not found
	exitSignalBase  = 128 // 128+N: azlease was stopped by signal N before the command ran, or the command was killed by it
)

// exitError is an outcome with its exit status and the one line to print.
// An empty msg prints nothing (the command's own status passes through).
type exitError struct {
	code int
	msg  string
}

func (e *exitError) Error() string { return e.msg }

// exitf returns an exitError with a formatted message.
func exitf(code int, format string, args ...any) *exitError {
	return &exitError{code: code, msg: fmt.Sprintf(format, args...)}
}

// quiet is an exit status with nothing to print.
func quiet(code int) *exitError { return &exitError{code: code} }

// classify maps an error from the library to an exit status and a message.
// what says what was being done ("lock nightly-report").
func classify(what string, err error) *exitError {
	var ee *exitError
	var of *azlease.OnceFailedError
	switch {
	case err == nil:
		return nil
	case errors.As(err, &ee):
		return ee
	case errors.As(err, &of):
		return exitf(exitOnceFailed, "%s: %s", what, line(err))
	case errors.Is(err, azlease.ErrInvalidOptions):
		return exitf(exitUsage, "%s: %s", what, line(err))
	case errors.Is(err, azlease.ErrLeaseLost):
		return exitf(exitLost, "%s: %s", what, line(err))
	case hostNotFound(err) != "":
		return exitf(exitUnavailable, "%s: cannot reach storage: no such host %s (check the account name or endpoint): %s", what, hostNotFound(err), line(err))
	case errors.Is(err, azlease.ErrPermanent):
		return exitf(exitRefused, "%s: storage refused the request: %s%s", what, line(err), hint(err))
	case errors.Is(err, azlease.ErrLeaseHeld):
		return exitf(exitNotAcquired, "%s: %s", what, line(err))
	case errors.Is(err, azlease.ErrTransient), errors.Is(err, context.DeadlineExceeded):
		return exitf(exitUnavailable, "%s: storage unavailable: %s", what, line(err))
	}
	return exitf(exitInternal, "%s: %s", what, line(err))
}

// hostNotFound is the host name a DNS lookup did not find, or "".
func hostNotFound(err error) string {
	var dns *net.DNSError
	if errors.As(err, &dns) && dns.IsNotFound {
		return dns.Name
	}
	return ""
}

// hint says what to check for the refusals users meet most.
func hint(err error) string {
	switch {
	case bloberror.HasCode(err, bloberror.AuthenticationFailed, bloberror.NoAuthenticationInformation):
		return "; check the account name and key (or the SAS)"
	case bloberror.HasCode(err, bloberror.AuthorizationPermissionMismatch):
		return "; the identity needs a role that can read and write blobs, such as Storage Blob Data Contributor"
	case bloberror.HasCode(err, bloberror.AuthorizationFailure):
		return "; check the account key, the SAS's permissions, or the account's network rules"
	}
	return ""
}

// line makes an error's text one line, without a repeated "azlease:" prefix.
func line(err error) string {
	s := err.Error()
	s = strings.ReplaceAll(s, "azlease: ", "")
	s = strings.Join(strings.Fields(strings.ReplaceAll(s, "\n", "; ")), " ")
	return s
}
