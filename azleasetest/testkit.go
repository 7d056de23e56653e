package azleasetest

import (
	"fmt"
	"testing"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/storage/azblob/container"
)

// Container is the name of the container that [Server.Client] returns
// clients for. [Server.CheckExclusive], [Server.History] and [Server.Break]
// name blobs in it.
const Container = "test"

// NewServer returns an empty in-process server for a test, and closes it
// when the test ends (tb.Cleanup). A nil opts means the defaults.
//
// Call it inside the testing/synctest bubble the test runs in, with the
// bubble's tb, so that the server's clock is the bubble's fake clock: a 15 s
// lease then expires as soon as every goroutine of the test is waiting, in
// microseconds of real time. The server starts no goroutine of its own
// (except to apply a request late, see [Server.ApplyLate], which Close waits
// for), so a bubble ends cleanly once the clients it served are stopped.
//
// Cleanup functions run last-registered first: stop what uses the server
// (Electors, Mutexes) in cleanups registered after NewServer, or before the
// test returns.
func NewServer(tb testing.TB, opts *Options) *Server {
	tb.Helper()
	s := New(opts)
	s.tb = tb
	tb.Cleanup(s.Close)
	return s
}

// Client returns an azblob client for [Container] that talks to the server
// in process, with no sockets. Its requests are attributed to name: each name
// stands for one machine, so faults can target it ([Server.Partition],
// [Server.LoseResponses] …) and [Grant.Holder] tells which machine a lease
// was granted to. Calling Client again with the same name returns a new
// client for the same machine.
//
// The container exists from the first call on (creating it again answers
// 409 ContainerAlreadyExists, as Azure does). The client signs its requests
// with the server's account key and keeps azblob's default retry policy, as
// a client built from a connection string does. A Server not created with
// New or NewServer returns nil (which azlease's constructors refuse with an
// error).
func (s *Server) Client(name string) *container.Client {
	if !s.usable() {
		return nil
	}
	s.ensureContainer(Container)
	cc, err := s.ContainerClient(Container, name)
	if err != nil { // only a malformed account name can get here
		if s.tb != nil {
			s.tb.Helper()
			s.tb.Fatalf("azleasetest: client %q: %v", name, err)
		}
		panic(fmt.Sprintf("azleasetest: client %q: %v", name, err))
	}
	return cc
}

// ensureContainer creates the named container directly in the server's
// state, without a request (so no fault applies), if it does not exist.
func (s *Server) ensureContainer(name string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if _, ok := s.containers[name]; ok {
		return
	}
	s.containers[name] = s.newContainer(s.clock.at(time.Now()))
}
