// watch.go: 'azlease watch NAME', one line per leadership change of a lock
// blob until interrupted, from polls of its status (azlease.Inspect), and
// the pure comparison of two polls that decides which lines to print. The
// lock's queue has lines of its own (queue.go: queueTracker).

package main

import (
	"context"
	"encoding/json"
	"fmt"
	"os/signal"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/storage/azblob/container"
	"github.com/spf13/cobra"

	"github.com/azlease/azlease"
)

const (
	// defaultWatchInterval is watch's --poll-interval default: two requests
	// a poll for one lock (its blob and its queue), 3,600 an hour.
	defaultWatchInterval = 2 * time.Second
	// minWatchInterval and maxWatchInterval bound watch's --poll-interval.
	minWatchInterval = 100 * time.Millisecond
	maxWatchInterval = time.Hour
)

func newWatchCmd(g *globals) *cobra.Command {
	var (
		asJSON     bool
		slots      int
		every      time.Duration
		candidates bool
	)
	c := &cobra.Command{
		Use:   "watch NAME",
		Short: "Print a line for each change of who holds, leads or waits, until interrupted",
		Long: `Print the state of the lock blob NAME, then a line for each change: a new
holder or term, a release, an expiry, a break, how each term began and ended,
and the queue's waiters joining, leaving, being served; until SIGINT, SIGTERM
or SIGHUP (exit 0). It costs two requests a poll for a lock (3,600 an hour at
the default), needs only read access, and takes no lease. Line formats, JSON
fields: docs/command.md#watch.`,
		Example: `  azlease watch scheduler
  azlease watch --json scheduler | jq -r 'select(.state == "leased") | .holder'
  azlease watch --poll-interval 10s -n 3 exports`,
		Args: oneArg("lock name"),
		RunE: func(c *cobra.Command, args []string) error {
			if slots < 1 || slots > azlease.MaxSlots {
				return exitf(exitUsage, "invalid -n %d: from 1 to %d", slots, azlease.MaxSlots)
			}
			if every < minWatchInterval || every > maxWatchInterval {
				return exitf(exitUsage, "invalid --poll-interval %v: from %v to %v", every, minWatchInterval, maxWatchInterval)
			}
			if candidates && slots > 1 {
				return exitf(exitUsage, "--candidates watches an election: not with -n")
			}
			return g.watch(c, args[0], slots, every, asJSON, candidates)
		},
	}
	f := c.Flags()
	f.BoolVar(&asJSON, "json", false, "print one JSON object per line")
	f.IntVarP(&slots, "slots", "n", 1, "watch the N slots of a lock used with -n N")
	// Shadows the shared flag, whose default depends on the command.
	f.DurationVar(&every, "poll-interval", defaultWatchInterval, "how often to read the lock's status, 100ms to 1h")
	f.BoolVar(&candidates, "candidates", false, "also follow an election's candidates and yields (a request more)")
	return c
}

// watchEvent is one line of watch's output.
type watchEvent struct {
	Time     time.Time  `json:"time"`
	Name     string     `json:"name"`
	State    string     `json:"state"`
	Holder   string     `json:"holder,omitempty"`
	Epoch    uint64     `json:"epoch"`
	Since    *time.Time `json:"since,omitempty"`
	Released bool       `json:"released"`
	// How the term began and, when it has, ended (terms.go).
	termEndJSON
	// A candidate or yield line (watch --candidates; candidates.go).
	Candidate *candidateJSON `json:"candidate,omitempty"`
	Yield     *yieldJSON     `json:"yield,omitempty"`
}

// The states a watch line shows.
const (
	watchLeased   = "leased"
	watchBreaking = "breaking"
	watchFree     = "free"
	watchExpired  = "expired"
	watchBroken   = "broken"
	watchUnseen   = "unseen" // began and ended between two polls (not the queue's "missed")
	// watchEnded: a term last printed as held has ended, as the next
	// term's record says: how and when.
	watchEnded = "ended"
)

// watchState names the state of a status: Azure's lease state, with
// "available" (and a lock never used) shown as free.
func watchState(st azlease.Status) string {
	switch {
	case !st.Exists:
		return watchFree
	case st.State == "breaking":
		return watchBreaking
	case st.Leased:
		return watchLeased
	case st.State == "expired":
		return watchExpired
	case st.State == "broken":
		return watchBroken
	}
	return watchFree
}

// watchTracker follows one lock blob from poll to poll and decides what
// to print.
type watchTracker struct {
	name      string
	last      *azlease.Status // what the lines printed so far describe; nil before the first
	pending   *azlease.Status // a lease whose term was not recorded yet, seen unchanged since pendingAt
	pendingAt time.Time
}

// unrecordedGrace is how long a lease whose term is not recorded must stay
// so before watch prints it: a new holder records its term right after
// taking the lease, in one write whose first attempt may take up to 3 s.
const unrecordedGrace = attemptTimeout

// observe returns the lines to print for the status cur, polled at now:
// none if nothing a line shows changed; else the terms that began after the
// last printed one and before cur's (from cur's history, oldest first, as
// unseen), then cur.
//
// A holder takes the lease first and then records its term (holder, epoch)
// under it, so a poll between the two sees the lease held with the previous
// term's record. Such a status (leased, with no term recorded, with a term
// recorded as released, or with the term last seen not leased) is printed
// only when polls have seen it unchanged for unrecordedGrace: that is then
// not a new holder about to record its term, but, say, a holder that
// renewed its expired lease.
func (w *watchTracker) observe(now time.Time, cur azlease.Status) []watchEvent {
	prev := w.last
	if prev != nil && sameLine(*prev, cur) {
		w.pending = nil
		return nil
	}
	unrecorded := cur.Leased && (cur.Epoch == 0 || cur.Released || (prev != nil && !prev.Leased && prev.Epoch == cur.Epoch))
	if unrecorded && (w.pending == nil || !sameLine(*w.pending, cur)) {
		w.pending, w.pendingAt = &cur, now
		return nil
	}
	if unrecorded && now.Sub(w.pendingAt) < unrecordedGrace {
		return nil
	}
	w.pending = nil
	w.last = &cur
	ev := watchEvent{
		Time: now.UTC().Round(0), Name: w.name, State: watchState(cur), Holder: cur.Holder, Epoch: cur.Epoch,
		Since: timePtr(cur.Acquired), Released: cur.Released,
	}
	if cur.Epoch > 0 {
		ev.termEndJSON = termEnd(latestTerm(cur))
		ev.SeenHeld, ev.LeaseSeconds = nil, 0 // the page and status show these
	}
	var out []watchEvent
	term := func(state string, h azlease.HistoryEntry) watchEvent {
		e := watchEvent{Time: ev.Time, Name: w.name, State: state, Holder: h.Holder, Epoch: h.Epoch, Since: timePtr(h.Acquired), termEndJSON: termEnd(h)}
		e.SeenHeld, e.LeaseSeconds = nil, 0
		return e
	}
	if prev != nil && prev.Leased && cur.Epoch > prev.Epoch {
		// The term last printed as held ended: how, from its record.
		for _, h := range cur.History {
			if h.Epoch == prev.Epoch && h.EndedBy != azlease.ChangeUnknown {
				out = append(out, term(watchEnded, h))
			}
		}
	}
	if prev != nil && cur.Epoch > prev.Epoch+1 {
		for _, h := range slices.Backward(cur.History) { // the history is newest first
			if h.Epoch > prev.Epoch && h.Epoch < cur.Epoch {
				out = append(out, term(watchUnseen, h))
			}
		}
	}
	return append(out, ev)
}

// sameLine reports whether a and b print the same line (but for the time).
func sameLine(a, b azlease.Status) bool {
	return watchState(a) == watchState(b) && a.Holder == b.Holder && a.Epoch == b.Epoch && a.Released == b.Released &&
		a.Acquired.Equal(b.Acquired)
}

// watchTime is how watch lines show times: UTC, to the millisecond.
const watchTime = "2006-01-02T15:04:05.000Z07:00"

// String is the event as one line of text.
func (e watchEvent) String() string {
	var b strings.Builder
	fmt.Fprintf(&b, "%s %s %s", e.Time.Format(watchTime), e.Name, e.State)
	if e.Candidate != nil || e.Yield != nil {
		return b.String() + candidateEventText(e)
	}
	if e.Holder != "" {
		b.WriteString(" holder=" + quoteIfNeeded(e.Holder))
	}
	fmt.Fprintf(&b, " epoch=%d", e.Epoch)
	if e.Since != nil {
		b.WriteString(" since=" + e.Since.Format(watchTime))
	}
	if e.Began != "" && e.State != watchEnded {
		b.WriteString(" began=" + e.Began)
	}
	if e.EndedBy != "" {
		b.WriteString(" ended=" + e.EndedBy)
		switch {
		case e.Ended != nil:
			b.WriteString(" ended_at=" + e.Ended.Format(watchTime))
		case e.EndedAtOrBefore != nil:
			b.WriteString(" ended_at_or_before=" + e.EndedAtOrBefore.Format(watchTime))
		}
	}
	return b.String()
}

// quoteIfNeeded quotes an identity that would not read as one field.
func quoteIfNeeded(s string) string {
	if strings.ContainsAny(s, " \t\"=") {
		return strconv.Quote(s)
	}
	return s
}

func (g *globals) watch(c *cobra.Command, name string, slots int, every time.Duration, asJSON, candidates bool) error {
	what := "watch " + name
	// A signal is how a watch ends: status 0, nothing printed.
	ctx, stop := signal.NotifyContext(context.Background(), forwarded...)
	defer stop()
	cc, err := g.client(ctx, c)
	if err != nil {
		if ctx.Err() != nil {
			return nil
		}
		return err
	}
	blobs := []string{name}
	if slots > 1 {
		blobs = blobs[:0]
		for i := range slots {
			blobs = append(blobs, azlease.SlotName(name, i))
		}
	}
	print := func(e fmt.Stringer) error {
		var err error
		if asJSON {
			err = json.NewEncoder(g.stdout).Encode(e)
		} else {
			_, err = fmt.Fprintln(g.stdout, e.String())
		}
		// A reader that went away (watch | head -1) ends azlease with
		// SIGPIPE before this; other write errors end the watch.
		if err != nil {
			return exitf(exitInternal, "%s: writing the output: %v", what, err)
		}
		return nil
	}
	tracks := make([]watchTracker, len(blobs))
	for i, b := range blobs {
		tracks[i].name = b
	}
	var cands *candidateTracker
	if candidates {
		cands = &candidateTracker{name: name}
	}
	queue := queueTracker{name: name}
	epochs := make([]uint64, len(blobs)) // each blob's epoch at the last poll
	var failingSince time.Time
	tick := time.NewTicker(every)
	defer tick.Stop()
	for first := true; ; first = false {
		began := time.Now()
		// The queue first, then the lock: a waiter served is then in the
		// terms read, or in those of a poll soon after (its entry's
		// removal and its term's record are sent together: queueTracker).
		waiters, err := azlease.InspectQueue(ctx, cc, name)
		var sts []azlease.Status
		if err == nil {
			sts, err = readAll(ctx, cc, blobs)
		}
		now := time.Now()
		switch {
		case ctx.Err() != nil:
			return nil
		case err != nil:
			ee := classify(what, err)
			if first || ee.code != exitUnavailable {
				return ee
			}
			if failingSince.IsZero() {
				failingSince = began
				g.log.Warn("watch: cannot read the lock's status; still trying at every poll", "name", name, "error", line(err))
			}
		case first && slots == 1 && !sts[0].Exists:
			// NAME may be the group of 'azlease shards NAME', which has no
			// lock blob of that name: say where its leases are, rather than
			// watch a lock that is never used.
			if members, err := azlease.InspectPrefix(ctx, cc, name+"/members/"); err == nil && len(members) > 0 {
				return exitf(exitUsage, "%s: %s is the group of 'azlease shards %s', with no lock blob of that name: "+
					"watch one of its shards (azlease watch %s/shards/SHARD), or see 'azlease status %s --shards'",
					what, name, name, name, name)
			}
			fallthrough
		default:
			if !failingSince.IsZero() {
				g.log.Warn("watch: reading the lock's status again", "name", name, "failed_for", now.Sub(failingSince).Round(time.Millisecond))
				failingSince = time.Time{}
			}
			var holders []string
			for i, st := range sts {
				for _, e := range tracks[i].observe(now, st) {
					if err := print(e); err != nil {
						return err
					}
				}
				holders = append(holders, termsSince(st, epochs[i])...)
				epochs[i] = max(epochs[i], st.Epoch)
			}
			for _, e := range queue.observe(now, waiters, holders) {
				if err := print(e); err != nil {
					return err
				}
			}
			if cands != nil {
				evs, err := cands.read(ctx, cc, sts[0], now)
				if err != nil && ctx.Err() == nil {
					g.log.Warn("watch: cannot list the candidates; trying again at the next poll", "name", name, "error", line(err))
				}
				for _, e := range evs {
					if err := print(e); err != nil {
						return err
					}
				}
			}
		}
		select {
		case <-ctx.Done():
			return nil
		case <-tick.C:
		}
	}
}

// termsSince is who held st's lock in the terms that began after epoch
// (from its history), and who holds it now: a waiter that left the queue
// meanwhile was served if it is one of them.
func termsSince(st azlease.Status, epoch uint64) []string {
	var out []string
	if st.Leased {
		out = append(out, st.Holder)
	}
	for _, h := range st.History {
		if h.Epoch > epoch {
			out = append(out, h.Holder)
		}
	}
	return out
}

// readAll reads the status of every blob, stopping at the first error.
func readAll(ctx context.Context, cc *container.Client, blobs []string) ([]azlease.Status, error) {
	out := make([]azlease.Status, len(blobs))
	for i, b := range blobs {
		st, err := azlease.Inspect(ctx, cc, b)
		if err != nil {
			return nil, err
		}
		out[i] = st
	}
	return out, nil
}
