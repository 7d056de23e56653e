// queue.go: the waiting queue of a fair lock (issue 25) as the command
// shows it: in 'azlease status' (who waits, in which order, since when), in
// 'azlease watch' (a line when a waiter joins, leaves, is served, is passed
// over or comes back), and in 'azlease ui' (the queue of a lock's item).
// Waiters never carry the lease ID they announced: the library does not
// return it.

package main

import (
	"context"
	"fmt"
	"io"
	"slices"
	"strings"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/storage/azblob/container"

	"github.com/azlease/azlease"
)

// waiterJSON is one waiter of a lock's queue in 'status --json'.
type waiterJSON struct {
	// Position is its place in the queue, 1 first (ticket order; a waiter
	// passed over keeps its place).
	Position int        `json:"position"`
	Identity string     `json:"identity"`
	Since    *time.Time `json:"since,omitempty"` // when it began to wait, by its clock
	// FirstInLine: the lock goes to it next (the first waiter not passed
	// over).
	FirstInLine bool `json:"first_in_line"`
	// Missed: its turn came and it did not take the lock (it was not
	// looking: paused, cut off, gone, or far back after a quiet time); it
	// keeps its place and is passed over until it looks again.
	Missed bool `json:"missed"`
}

// queueJSON turns InspectQueue's waiters into status lines.
func queueJSON(ws []azlease.Waiter) []waiterJSON {
	out := make([]waiterJSON, 0, len(ws))
	first := true
	for i, w := range ws {
		j := waiterJSON{Position: i + 1, Identity: w.Holder, Since: timePtr(w.Since), Missed: w.Missed}
		if first && !w.Missed {
			j.FirstInLine, first = true, false
		}
		out = append(out, j)
	}
	return out
}

// readQueue reads the queue of the lock or semaphore name for status: one
// List Blobs request.
func readQueue(ctx context.Context, cc *container.Client, name string) ([]waiterJSON, error) {
	ws, err := azlease.InspectQueue(ctx, cc, name)
	if err != nil {
		return nil, err
	}
	return queueJSON(ws), nil
}

// printQueue writes the queue under status's other lines. Its count of
// waiters leaves out those passed over (missed), as the lock does: a
// TryLock or 'lock --no-wait' takes a free lock when only they are left,
// and a waiter killed in the queue stays missed until a later holder
// evicts it.
func printQueue(tw io.Writer, q []waiterJSON) {
	if len(q) == 0 {
		return
	}
	missed := 0
	for _, w := range q {
		if w.Missed {
			missed++
		}
	}
	if missed > 0 {
		fmt.Fprintf(tw, "queue\t%d waiting, %d missed\n", len(q)-missed, missed)
	} else {
		fmt.Fprintf(tw, "queue\t%d waiting\n", len(q))
	}
	for _, w := range q {
		since := ""
		if w.Since != nil {
			since = fmt.Sprintf("since %s (%s ago, by its clock)", w.Since.Format(time.RFC3339), time.Since(*w.Since).Round(time.Second))
		}
		mark := ""
		switch {
		case w.FirstInLine:
			mark = "  first in line"
		case w.Missed:
			mark = "  missed (passed over until it looks again)"
		}
		fmt.Fprintf(tw, "\t%d  %s  %s%s\n", w.Position, w.Identity, since, mark)
	}
}

// queueEvent is a watch line about the queue.
type queueEvent struct {
	Time time.Time `json:"time"`
	Name string    `json:"name"`
	// Queue is what happened: waiting (in the queue when the watch
	// began), joined, left (gave up, or was removed; told about 3 s after
	// its entry went, as a taker's term can be recorded after its entry
	// goes), served (it took the lock since the last poll), missed (passed over: its turn came and it did not take
	// the lock), back (a waiter passed over looked again and has its place
	// back).
	Queue    string     `json:"queue"`
	Waiter   string     `json:"waiter"`
	Position int        `json:"position,omitempty"` // its place in the queue, 1 first, when it happened (none once out of it)
	Since    *time.Time `json:"since,omitempty"`
}

// The queue events.
const (
	queueWaiting = "waiting"
	queueJoined  = "joined"
	queueLeft    = "left"
	queueServed  = "served"
	queueMissed  = "missed"
	queueBack    = "back"
)

// String is the event as one line of text, as watch's other lines.
func (e queueEvent) String() string {
	var b strings.Builder
	fmt.Fprintf(&b, "%s %s queue %s waiter=%s", e.Time.Format(watchTime), e.Name, e.Queue, quoteIfNeeded(e.Waiter))
	if e.Position > 0 {
		fmt.Fprintf(&b, " position=%d", e.Position)
	}
	if e.Since != nil {
		b.WriteString(" since=" + e.Since.Format(watchTime))
	}
	return b.String()
}

// queueTracker follows a lock's queue from poll to poll.
type queueTracker struct {
	name    string
	started bool
	last    map[uint64]azlease.Waiter
	gone    map[uint64]goneWaiter // out of the queue, neither served nor left yet
}

// goneWaiter is a waiter the queue no longer shows and no term read so
// far names: it may have taken the lock with its term not yet recorded.
type goneWaiter struct {
	w  azlease.Waiter
	at time.Time // the poll that first missed it
}

// settleGone is how long a waiter out of the queue, and in no term read,
// may still turn out to have been served. A taker removes its entry beside
// the write that records its term, so the removal can be seen first; that
// write is answered or given up within the taker's AttemptTimeout (3 s by
// default). After this long (so at a later poll) it has left.
const settleGone = 3 * time.Second

// observe returns the lines for the queue ws, polled at now; holders are
// who held the lock (its slots) since the last poll, or hold it now: a
// waiter that left the queue was served if its identity is one of them at
// this poll or a later one within settleGone, else it left.
func (q *queueTracker) observe(now time.Time, ws []azlease.Waiter, holders []string) []queueEvent {
	now = now.UTC().Round(0)
	cur := make(map[uint64]azlease.Waiter, len(ws))
	var out []queueEvent
	ev := func(kind string, w azlease.Waiter, pos int) {
		out = append(out, queueEvent{Time: now, Name: q.name, Queue: kind, Waiter: w.Holder, Position: pos, Since: timePtr(w.Since)})
	}
	if q.gone == nil {
		q.gone = map[uint64]goneWaiter{}
	}
	// Those missed at an earlier poll first: they went before the rest.
	var earlier, gone []goneWaiter
	for _, g := range q.gone {
		earlier = append(earlier, g)
	}
	for t, w := range q.last {
		if !slices.ContainsFunc(ws, func(x azlease.Waiter) bool { return x.Ticket == t }) {
			gone = append(gone, goneWaiter{w: w, at: now})
		}
	}
	byTicket := func(a, b goneWaiter) int { return cmpTicket(a.w.Ticket, b.w.Ticket) }
	slices.SortFunc(earlier, byTicket)
	slices.SortFunc(gone, byTicket)
	for _, g := range append(earlier, gone...) {
		switch {
		case slices.Contains(holders, g.w.Holder):
			ev(queueServed, g.w, 0)
		case now.Sub(g.at) >= settleGone:
			ev(queueLeft, g.w, 0)
		default:
			q.gone[g.w.Ticket] = g
			continue
		}
		delete(q.gone, g.w.Ticket)
	}
	for i, w := range ws {
		cur[w.Ticket] = w
		prev, seen := q.last[w.Ticket]
		switch {
		case !q.started:
			ev(queueWaiting, w, i+1)
			if w.Missed {
				ev(queueMissed, w, i+1)
			}
		case !seen:
			ev(queueJoined, w, i+1)
		case w.Missed && !prev.Missed:
			ev(queueMissed, w, i+1)
		case !w.Missed && prev.Missed:
			ev(queueBack, w, i+1)
		}
	}
	q.started, q.last = true, cur
	return out
}

func cmpTicket(a, b uint64) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

// uiQueue is the queue of a lock's item in 'azlease ui', from the listed
// entries of the lock's queue (Status.QueueEntry), first in line first.
func uiQueue(entries []azlease.Waiter) []uiWaiter {
	ws := slices.Clone(entries)
	slices.SortFunc(ws, func(a, b azlease.Waiter) int { return cmpTicket(a.Ticket, b.Ticket) })
	out := make([]uiWaiter, 0, len(ws))
	for _, j := range queueJSON(ws) {
		w := uiWaiter{Position: j.Position, Identity: j.Identity, Since: j.Since}
		switch {
		case j.FirstInLine:
			w.State = "first in line"
		case j.Missed:
			w.State = "missed"
		}
		out = append(out, w)
	}
	return out
}

// queueBlobs are the listed blobs of fair lock queues, by lock name: the
// entries (waiters) and the tickets blobs.
type queueBlobs struct {
	order   []string // lock names, in the order first seen
	blobs   map[string][]azlease.Status
	waiters map[string][]azlease.Waiter
}

// add keeps st if it is a queue's blob, and reports whether it was.
func (q *queueBlobs) add(st azlease.Status) bool {
	lock, w, isEntry := st.QueueEntry()
	if !isEntry {
		var isCounter bool
		if lock, isCounter = st.QueueCounter(); !isCounter {
			return false
		}
	}
	if q.blobs == nil {
		q.blobs, q.waiters = map[string][]azlease.Status{}, map[string][]azlease.Waiter{}
	}
	if _, seen := q.blobs[lock]; !seen {
		q.order = append(q.order, lock)
	}
	q.blobs[lock] = append(q.blobs[lock], st)
	if isEntry {
		q.waiters[lock] = append(q.waiters[lock], w)
	}
	return true
}

// attach gives each queue to its lock's items: the mutex (or lock) item
// named as the lock, or every slot item of the semaphore of that name; the
// queue's blobs join the item's blobs. It returns the blobs of queues whose
// lock has no item (its lock blob is gone): they are shown as other blobs.
func (q *queueBlobs) attach(m *uiModel) (orphans []azlease.Status) {
	for _, lock := range q.order {
		var owners []int
		for i, it := range m.items {
			switch {
			case (it.Kind == kindMutex || it.Kind == kindLock) && it.Name == lock:
				owners = append(owners, i)
			case it.Kind == kindSlot && it.Slot != nil && it.Slot.Semaphore == lock:
				owners = append(owners, i)
			}
		}
		if len(owners) == 0 {
			orphans = append(orphans, q.blobs[lock]...)
			continue
		}
		queue := uiQueue(q.waiters[lock])
		for _, i := range owners {
			it := &m.items[i]
			it.Queue = queue
			for _, st := range q.blobs[lock] {
				it.Blobs = append(it.Blobs, queueUIBlob(st, it.Path))
			}
		}
	}
	return orphans
}

// queueUIBlob is a queue's blob in an item's blob list: an entry shows its
// waiter (identity, since), the counter nothing more.
func queueUIBlob(st azlease.Status, item string) uiBlob {
	b := uiBlob{Name: st.Name, Kind: kindQueueCounter, KindLabel: kindLabels[kindQueueCounter], Item: item, State: stateFree,
		AzureState: st.State, History: []uiTerm{}}
	if _, w, ok := st.QueueEntry(); ok {
		b.Kind, b.KindLabel, b.Holder, b.Since = kindQueueEntry, kindLabels[kindQueueEntry], w.Holder, uiTime(w.Since)
	}
	return b
}
