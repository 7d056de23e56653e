package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/storage/azblob/bloberror"
	"github.com/Azure/azure-sdk-for-go/sdk/storage/azblob/container"
	"github.com/spf13/cobra"

	"github.com/azlease/azlease"
	"github.com/azlease/azlease/shards"
)

func newStatusCmd(g *globals) *cobra.Command {
	var (
		asJSON      bool
		slots       int
		shardsFlag  bool
		shardsCount int
	)
	c := &cobra.Command{
		Use:   "status NAME",
		Short: "Show who holds a lock or leads, who waits, past terms, a once marker",
		Long: `Show the lock blob NAME: whether it is leased, by whom, its fencing epoch, since
when, how each term began and ended, and past terms; a once key's marker; an
election's candidates; who waits in the lock's queue, in order. It needs only
read access and takes no lease; a lock never used shows as not existing. More:
docs/command.md#status.`,
		Example: `  azlease status --json billing-sweeper | jq -r .holder
  azlease status -n 2 exports
  azlease status orders --shards             # who owns which shard of 'azlease shards orders'`,
		Args: oneArg("lock name"),
		RunE: func(c *cobra.Command, args []string) error {
			if slots < 1 || slots > azlease.MaxSlots {
				return exitf(exitUsage, "invalid -n %d: from 1 to %d", slots, azlease.MaxSlots)
			}
			if shardsCount < 0 || shardsCount > shards.MaxShards {
				return exitf(exitUsage, "invalid --count %d: from 1 to %d", shardsCount, shards.MaxShards)
			}
			if shardsFlag || shardsCount > 0 {
				ctx, r := newRouter(context.Background())
				defer r.close()
				return g.shardStatus(ctx, c, r, args[0], shardsCount, asJSON)
			}
			return g.status(c, args[0], slots, asJSON)
		},
	}
	c.Flags().BoolVar(&asJSON, "json", false, "print one JSON object")
	c.Flags().IntVarP(&slots, "slots", "n", 1, "show the N slots of a lock used with -n N")
	c.Flags().BoolVar(&shardsFlag, "shards", false, "NAME is a shard group: members, owners, and the plan")
	c.Flags().IntVar(&shardsCount, "count", 0, "with --shards: K (default: as its live members say)")
	return c
}

// statusJSON is what status --json prints.
type statusJSON struct {
	Name      string            `json:"name"`
	Container string            `json:"container"`
	Exists    bool              `json:"exists"`
	Leased    bool              `json:"leased"`
	State     string            `json:"state,omitempty"`
	Holder    string            `json:"holder,omitempty"`
	Epoch     uint64            `json:"epoch"`
	Acquired  *time.Time        `json:"acquired,omitempty"`
	Released  bool              `json:"released"`
	History   []historyJSON     `json:"history"`
	Metadata  map[string]string `json:"metadata,omitempty"`
	Slots     []statusJSON      `json:"slots,omitempty"`
	Once      *onceJSON         `json:"once,omitempty"`
	// ShardGroup is set when NAME has no lock blob but is the group of
	// 'azlease shards NAME': its members' blobs exist.
	ShardGroup *shardGroupJSON `json:"shard_group,omitempty"`
	// An election's candidates (candidates.go).
	Designated []string        `json:"designated,omitempty"`
	Candidates []candidateJSON `json:"candidates,omitempty"`
	Yield      *yieldJSON      `json:"yield,omitempty"`
	// Queue is the fair lock's waiters, first in line first (queue.go);
	// absent when nobody waits.
	Queue []waiterJSON `json:"queue,omitempty"`
	// How the latest term began and, when it has, ended (terms.go).
	termEndJSON

	latest  azlease.HistoryEntry   // for the text: the latest term
	history []azlease.HistoryEntry // and the history
}

// shardGroupJSON is what status says of a shard group's name without
// --shards.
type shardGroupJSON struct {
	Members int    `json:"members"` // live ones
	See     string `json:"see"`
}

type historyJSON struct {
	Holder   string     `json:"holder"`
	Epoch    uint64     `json:"epoch"`
	Acquired *time.Time `json:"acquired,omitempty"`
	termEndJSON
}

type onceJSON struct {
	Key       string     `json:"key"`
	State     string     `json:"state"`
	Holder    string     `json:"holder,omitempty"`
	Attempts  int        `json:"attempts"`
	Epoch     uint64     `json:"epoch"`
	Time      *time.Time `json:"time,omitempty"`
	LastError string     `json:"last_error,omitempty"`
	Running   bool       `json:"running"`
}

func timePtr(t time.Time) *time.Time {
	if t.IsZero() {
		return nil
	}
	u := t.UTC().Round(0)
	return &u
}

func toJSON(name, containerName string, st azlease.Status) statusJSON {
	out := statusJSON{
		Name: name, Container: containerName, Exists: st.Exists, Leased: st.Leased, State: st.State,
		Holder: st.Holder, Epoch: st.Epoch, Acquired: timePtr(st.Acquired), Released: st.Released,
		History: []historyJSON{}, Metadata: st.Metadata, history: st.History,
	}
	if st.Epoch > 0 {
		out.latest = latestTerm(st)
		out.termEndJSON = termEnd(out.latest)
	}
	for _, h := range st.History {
		out.History = append(out.History, historyJSON{Holder: h.Holder, Epoch: h.Epoch, Acquired: timePtr(h.Acquired), termEndJSON: termEnd(h)})
	}
	return out
}

func (g *globals) status(c *cobra.Command, name string, slots int, asJSON bool) error {
	what := "status " + name
	ctx, r := newRouter(context.Background())
	defer r.close()
	cc, err := g.client(ctx, c)
	if err != nil {
		return err
	}
	containerName := containerOf(cc)
	read := func(blob string) (azlease.Status, error) {
		st, err := azlease.Inspect(ctx, cc, blob)
		if err != nil {
			if ie := r.interrupted(what); ie != nil {
				return st, ie
			}
			return st, classify(what, err)
		}
		return st, nil
	}
	st, err := read(name)
	if err != nil {
		return err
	}
	out := toJSON(name, containerName, st)
	if slots == 1 {
		// An election's candidates: one List Blobs request.
		if err := readCandidates(ctx, cc, name, st, &out); err != nil {
			if ie := r.interrupted(what); ie != nil {
				return ie
			}
			return classify(what, err)
		}
	}
	if slots > 1 {
		// Every slot with one List Blobs request (a request per 5,000
		// blobs named NAME/slot-…); a slot not listed does not exist yet.
		listed, err := azlease.InspectPrefix(ctx, cc, strings.TrimSuffix(azlease.SlotName(name, 0), "0"))
		if err != nil {
			if ie := r.interrupted(what); ie != nil {
				return ie
			}
			return classify(what, err)
		}
		byName := make(map[string]azlease.Status, len(listed))
		for _, st := range listed {
			byName[st.Name] = st
		}
		for i := range slots {
			slot := azlease.SlotName(name, i)
			st, ok := byName[slot]
			switch {
			case !ok:
				st = azlease.Status{Name: slot}
			case st.Err != nil:
				return classify(what, st.Err) // as Inspect refuses a malformed record
			}
			out.Slots = append(out.Slots, toJSON(slot, containerName, st))
		}
	}
	// The queue of a fair lock or semaphore: one List Blobs request.
	if out.Queue, err = readQueue(ctx, cc, name); err != nil {
		if ie := r.interrupted(what); ie != nil {
			return ie
		}
		return classify(what, err)
	}
	// The DoOnce marker of key name lives on its own blob, "once/" + name;
	// "status once/KEY" names that blob and shows its marker too.
	key := strings.TrimPrefix(name, "once/")
	if m, err := azlease.InspectOnce(ctx, cc, key, nil); err == nil {
		if m.State != azlease.OncePending || m.Attempts > 0 || m.LastError != "" || m.Locked {
			out.Once = &onceJSON{
				Key: key, State: string(m.State), Holder: m.Holder, Attempts: m.Attempts, Epoch: m.Epoch,
				Time: timePtr(m.Time), LastError: m.LastError, Running: m.Locked,
			}
		}
	} else if ie := r.interrupted(what); ie != nil {
		return ie
	}
	if !st.Exists && slots == 1 && out.Once == nil && len(name+"/members/") <= 1024 {
		// Perhaps the group of 'azlease shards NAME': its members' blobs
		// live under NAME/members/ (a request per 5,000 of them).
		members, err := azlease.InspectPrefix(ctx, cc, name+"/members/")
		if err != nil {
			if ie := r.interrupted(what); ie != nil {
				return ie
			}
			return classify(what, err)
		}
		if len(members) > 0 {
			live := 0
			for _, m := range members {
				if m.Leased {
					live++
				}
			}
			out.ShardGroup = &shardGroupJSON{Members: live, See: "azlease status " + name + " --shards"}
		}
	}
	if asJSON {
		enc := json.NewEncoder(g.stdout)
		enc.SetIndent("", "  ")
		if err := enc.Encode(out); err != nil {
			return exitf(exitInternal, "%s: %v", what, err)
		}
		return nil
	}
	printStatus(g.stdout, out)
	return nil
}

func printStatus(w io.Writer, s statusJSON) {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	defer tw.Flush()
	if sg := s.ShardGroup; sg != nil {
		fmt.Fprintf(tw, "shard group\t%s (container %s): the group of 'azlease shards %s', %s; no lock blob of that name\n", s.Name, s.Container, s.Name, members(sg.Members, "live"))
		fmt.Fprintf(tw, "see\t'%s' for its members and who owns which shard\n", sg.See)
		return
	}
	// The lock blob itself, unless it does not exist and what was asked
	// for lives elsewhere: a semaphore's slots, or a once key's marker.
	if s.Exists || (len(s.Slots) == 0 && s.Once == nil) {
		fmt.Fprintf(tw, "lock\t%s (container %s)\n", s.Name, s.Container)
		printTerm(tw, s, "")
		printCandidates(tw, s)
	} else {
		fmt.Fprintf(tw, "container\t%s\n", s.Container)
	}
	for _, sl := range s.Slots {
		fmt.Fprintf(tw, "slot\t%s\n", sl.Name)
		printTerm(tw, sl, "  ")
	}
	printQueue(tw, s.Queue)
	if o := s.Once; o != nil {
		fmt.Fprintf(tw, "once\t%s: %s", o.Key, o.State)
		if o.Holder != "" {
			fmt.Fprintf(tw, " by %s", o.Holder)
		}
		if o.Time != nil {
			fmt.Fprintf(tw, " at %s", o.Time.Format(time.RFC3339))
		}
		fmt.Fprintf(tw, " (attempt %d, epoch %d)", o.Attempts, o.Epoch)
		if o.Running {
			fmt.Fprint(tw, ", running now")
		}
		fmt.Fprintln(tw)
		if o.LastError != "" {
			fmt.Fprintf(tw, "last error\t%s\n", o.LastError)
		}
	}
}

func printTerm(tw io.Writer, s statusJSON, indent string) {
	if !s.Exists {
		fmt.Fprintf(tw, "%sstate\tnever used (no lock blob)\n", indent)
		return
	}
	held := "free"
	if s.Leased {
		held = "held"
	}
	fmt.Fprintf(tw, "%sstate\t%s (%s)\n", indent, held, s.State)
	if s.Epoch == 0 {
		return
	}
	fmt.Fprintf(tw, "%sholder\t%s\n", indent, s.Holder)
	fmt.Fprintf(tw, "%sepoch\t%d\n", indent, s.Epoch)
	if s.Acquired != nil {
		fmt.Fprintf(tw, "%sacquired\t%s (%s ago, by the holder's clock)\n", indent, s.Acquired.Format(time.RFC3339), time.Since(*s.Acquired).Round(time.Second))
	}
	fmt.Fprintf(tw, "%sbegan\t%s\n", indent, beganText(s.latest.Began))
	switch ended := endedText(s.latest, clock); {
	case ended != "" && s.Leased:
		fmt.Fprintf(tw, "%sended\t%s: the lease is being passed on\n", indent, ended)
	case ended != "":
		fmt.Fprintf(tw, "%sended\t%s\n", indent, ended)
	case !s.Leased:
		fmt.Fprintf(tw, "%sended\tnot held\n", indent)
	}
	for i, h := range s.history {
		label := ""
		if i == 0 {
			label = "history"
		}
		at := ""
		if !h.Acquired.IsZero() {
			at = h.Acquired.Format(time.RFC3339)
		}
		how := "began: " + h.Began.String()
		switch ended := endedText(h, clock); {
		case ended != "":
			how += "; ended: " + ended
		case h.Epoch == s.Epoch && s.Leased:
			how += "; held now"
		}
		fmt.Fprintf(tw, "%s%s\tepoch %d  %s  %s  %s\n", indent, label, h.Epoch, h.Holder, at, how)
	}
}

// containerOf is the container name a client points at.
func containerOf(cc *container.Client) string {
	u := cc.URL()
	if i := strings.IndexByte(u, '?'); i >= 0 {
		u = u[:i]
	}
	return u[strings.LastIndexByte(strings.TrimSuffix(u, "/"), '/')+1:]
}

func newBreakCmd(g *globals) *cobra.Command {
	var period time.Duration
	c := &cobra.Command{
		Use:   "break NAME",
		Short: "Break the lease on a lock, whoever holds it (an operator's tool for a stuck holder)",
		Long: `Break the lease on the lock blob NAME, whoever holds it. The holder learns of it
at its next renewal (within a third of the lease duration) and stops its
command (lock exits 79, lead contends again). Another holder may take the lease
after --period or the time left on the lease, whichever is shorter: the default
waits until it would have expired anyway; --period 0 frees it now, and only
fencing with the epoch protects the gap. More: docs/command.md#break.`,
		Example: `  azlease break nightly-report             # others may take it when it would expire
  azlease break --period 0 nightly-report  # now (the old holder may overlap briefly)
  azlease break exports/slot-1             # one slot of 'azlease lock -n N exports'`,
		Args: oneArg("lock name"),
		RunE: func(c *cobra.Command, args []string) error {
			return g.breakLease(c, args[0], period)
		},
	}
	c.Flags().DurationVar(&period, "period", azlease.MaxDuration, "until another holder may take it, whole seconds, 0s to 60s")
	return c
}

func (g *globals) breakLease(c *cobra.Command, name string, period time.Duration) error {
	what := "break " + name
	ctx, r := newRouter(context.Background())
	defer r.close()
	cc, err := g.client(ctx, c)
	if err != nil {
		return err
	}
	l, err := azlease.NewLease(cc, name, &azlease.LeaseOptions{Identity: g.identity, NoCreate: true, Logger: g.log})
	if err != nil {
		return classify(what, err)
	}
	// Retries for as long as the other commands' first contact (6 s).
	bctx, cancel := context.WithTimeout(ctx, 2*attemptTimeout)
	defer cancel()
	left, err := l.Break(bctx, period)
	switch {
	case err != nil && bloberror.HasCode(err, bloberror.BlobNotFound, bloberror.ContainerNotFound):
		fmt.Fprintf(g.stdout, "%s does not exist: nothing to break\n", name)
		return nil
	case err != nil:
		if ie := r.interrupted(what); ie != nil {
			return ie
		}
		if bctx.Err() != nil && ctx.Err() == nil {
			return exitf(exitUnavailable, "%s: storage unavailable: no answer within %v: %s", what, 2*attemptTimeout, line(err))
		}
		return classify(what, err)
	case left == 0:
		fmt.Fprintf(g.stdout, "broke the lease on %s: it can be taken now\n", name)
	default:
		fmt.Fprintf(g.stdout, "broke the lease on %s: it can be taken in %v\n", name, left)
	}
	return nil
}

func newResetOnceCmd(g *globals) *cobra.Command {
	c := &cobra.Command{
		Use:   "reset-once KEY",
		Short: "Clear a once key, so that the next 'azlease once KEY' runs its command again",
		Long: `Clear the marker of 'azlease once KEY' (done or failed), so that the next
'azlease once KEY -- CMD' runs CMD again: an operator re-running a migration, or
retrying one that failed for good. While a runner holds the key it exits 75.`,
		Example: `  azlease status "migrate-$RELEASE"      # failed: see the recorded error
  azlease reset-once "migrate-$RELEASE"  # after fixing the cause
  azlease once "migrate-$RELEASE" -- ./migrate up`,
		Args: oneArg("key"),
		RunE: func(c *cobra.Command, args []string) error {
			return g.resetOnce(c, args[0])
		},
	}
	return c
}

func (g *globals) resetOnce(c *cobra.Command, key string) error {
	what := "reset-once " + key
	ctx, r := newRouter(context.Background())
	defer r.close()
	cc, err := g.client(ctx, c)
	if err != nil {
		return err
	}
	err = azlease.ResetOnce(ctx, cc, key, &azlease.DoOnceOptions{Identity: g.identity, LeaseDuration: g.leaseDuration, Logger: g.log})
	switch {
	case err == nil:
		fmt.Fprintf(g.stdout, "reset %s: the next 'azlease once %s' runs its command\n", key, key)
		return nil
	case errors.Is(err, azlease.ErrNothingToReset):
		fmt.Fprintf(g.stdout, "%s has no marker: nothing to reset (it was never run, or was reset already)\n", key)
		return nil
	case r.stopped() != nil:
		return r.interrupted(what)
	case isHeld(err):
		return exitf(exitNotAcquired, "%s: a runner holds it now; try again when it finishes", what)
	}
	return classify(what, err)
}

func isHeld(err error) bool { return errors.Is(err, azlease.ErrLeaseHeld) }
