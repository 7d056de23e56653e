package gocronlock

// The Elector: gocron's distributed Elector, answered by an azlease.Elector.

import (
	"context"
	"errors"

	"github.com/go-co-op/gocron/v2"

	"github.com/azlease/azlease"
)

// ErrNotLeader is what [Elector.IsLeader] returns on a replica that does not
// lead: gocron skips the job there.
var ErrNotLeader = errors.New("gocronlock: this replica does not lead")

// Elector is a gocron.Elector backed by an [azlease.Elector]: the replica
// that leads runs every job, the others none (gocron asks IsLeader each time
// a job fires). It says "leader" only while the azlease Elector certainly
// leads ([azlease.Elector.IsLeader]: valid by the lease's deadline), so two
// replicas never both start a job at one instant. A job that started while
// leading goes on after leadership ends, since gocron gives it no context
// that ends then: pass the term's fencing token ([azlease.Elector.Term]) to
// what it writes, or check the term's context. The zero Elector, and one
// made from a nil azlease.Elector, never lead.
//
// Start the azlease Elector yourself, with a task that holds leadership
// until its context ends (see the package example), and stop it after the
// scheduler.
type Elector struct {
	e *azlease.Elector
}

var _ gocron.Elector = (*Elector)(nil)

// NewElector returns a gocron.Elector that answers from e.
func NewElector(e *azlease.Elector) *Elector { return &Elector{e: e} }

// IsLeader returns nil while this replica leads, and an error wrapping
// [ErrNotLeader] otherwise. It makes no request.
func (el *Elector) IsLeader(context.Context) error {
	if el == nil || !el.e.IsLeader() {
		return ErrNotLeader
	}
	return nil
}

// Lead is an [azlease.Task] that holds leadership until its context ends:
// the task of an azlease Elector that only says who leads (the jobs run in
// gocron, not in the task).
func Lead(ctx context.Context, _ *azlease.Term) error {
	<-ctx.Done()
	return nil
}
