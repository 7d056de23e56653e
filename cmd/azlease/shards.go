package main

// azlease shards: spread the K shards of a group over every instance that
// runs the same command, running one CMD per shard this instance owns,
// under the same stop rules as azlease lead; and the group's assignment as
// 'azlease status NAME --shards' shows it.

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"sync"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/azlease/azlease"
	"github.com/azlease/azlease/shards"
)

func newShardsCmd(g *globals) *cobra.Command {
	var (
		count, weight, maxMoves int
	)
	c := &cobra.Command{
		Use:   "shards NAME --count K -- CMD [ARGS...]",
		Short: "Spread K shards over every instance running this; run CMD once per shard this instance owns",
		Long: `Join the shard group NAME with every other 'azlease shards NAME': the K shards
(0 to K-1) are spread over the instances, each shard owned by at most one
instance at a time, and spread again when instances come and go. For each shard
this instance owns, CMD runs with AZLEASE_SHARD (the shard's number),
AZLEASE_EPOCH (its fencing epoch: it grows from owner to owner of the shard),
AZLEASE_NAME and AZLEASE_IDENTITY.

Shares are floor or ceil of K × weight / total weight; a shard stays where it
is unless its owner has more than its share, so a joining instance takes only
the minimum. To move a shard, its owner stops its CMD (SIGTERM, SIGKILL after
--kill-after), waits for it to exit, and hands the shard's lease to the new
owner, which starts its own CMD: never two CMDs for one shard at once. Every
instance lists the group every --poll-interval (2s): one request per poll.

Each CMD runs under the stop rules of 'azlease lead' (see 'azlease lead --help'):
if no renewal has moved the shard lease's validity deadline on, its process
group gets SIGTERM at the deadline minus --kill-after minus 1 s and SIGKILL 1 s
before it, from a guardian process that acts even while azlease is paused, and
at once if azlease dies. A CMD that exits while its shard is still owned is
started again after a pause (1 s, doubling up to a minute while it keeps
exiting at once).

A shard's trouble stays with that shard: when its lease is lost, or moves while
its CMD starts, or its renewals stall until the stop point (CMD is stopped at
the deadline minus --kill-after minus 1 s), only that shard's CMD stops; CMD is
started again in that shard's term only once a renewal has moved its deadline
on (never in a term past its stop point), or by the shard's next owner.

SIGINT, SIGTERM and SIGHUP stop every CMD (SIGKILL --kill-after later), release
the shards so that the others take them at their next poll, and end azlease
with 128+N.

Exit statuses: azlease shards runs until a signal stops it; a CMD that exits,
and a shard lost or moved, never end it.
  128+N    stopped by signal N (after stopping every CMD and releasing the shards)
  64       usage: bad flags or arguments, no or invalid connection settings
  69       storage unreachable, or failing for too long, at the start
  70       internal: a guardian process died (every CMD is stopped)
  77       storage refused: authentication, or a role or SAS that may not lease and
           write blobs (the line names what was refused)
  126/127  CMD could not be run / was not found (every CMD is stopped)`,
		Example: `  # Four consumers of a 32-partition queue, one process per partition; run the
  # same line on every host or pod:
  azlease shards orders --count 32 -- ./consume --partition "$AZLEASE_SHARD" --epoch "$AZLEASE_EPOCH"

  # Who owns what:
  azlease status orders --shards`,
		Args: dashArgs("group name"),
		RunE: func(c *cobra.Command, args []string) error {
			if err := g.checkRunFlags(); err != nil {
				return err
			}
			switch {
			case count < 1 || count > shards.MaxShards:
				return exitf(exitUsage, "invalid --count %d: from 1 to %d", count, shards.MaxShards)
			case weight < 1 || weight > shards.MaxWeight:
				return exitf(exitUsage, "invalid --weight %d: from 1 to %d", weight, shards.MaxWeight)
			case maxMoves < 0:
				return exitf(exitUsage, "invalid --max-moves %d: must not be negative (0: no limit)", maxMoves)
			}
			return g.shards(c, args[0], args[1:], count, weight, maxMoves)
		},
	}
	f := c.Flags()
	f.IntVar(&count, "count", 0, "the number of shards, K (every instance must give the same)")
	f.IntVar(&weight, "weight", 1, "this instance's share relative to the others' (2: twice the shards)")
	f.IntVar(&maxMoves, "max-moves", 0, "hand at most this many shards to others per poll (0: no limit)")
	_ = c.MarkFlagRequired("count")
	return c
}

func (g *globals) shards(c *cobra.Command, name string, argv []string, count, weight, maxMoves int) error {
	what := "shards " + name
	ctx, r := newRouter(context.Background())
	r.cancelAlways = true // a signal stops the group too, not only the commands
	defer r.close()
	cc, err := g.client(ctx, c)
	if err != nil {
		return err
	}
	grp, err := shards.New(cc, name, shards.Numbered(count), &shards.Options{
		Identity: g.identity, Weight: weight, LeaseDuration: g.leaseDuration, PollInterval: g.pollInterval,
		MaxMovesPerPoll: maxMoves, Logger: g.log,
		// A shard's CMD is stopped within --kill-after of its context
		// ending, and never after the kill point: past that the shard's
		// lease is left to expire rather than handed over.
		DrainTimeout: g.killAfter + killMargin + 2*time.Second,
	})
	if err != nil {
		return g.optionFailure(what, err)
	}
	if _, err := g.preflight(ctx, cc, what, name+"/members/"+g.identity); err != nil {
		if ie := r.interrupted(what); ie != nil {
			return ie
		}
		return err
	}
	var (
		mu    sync.Mutex
		fatal *exitError // a CMD that could not be run, or a guardian that died
	)
	work := func(wctx context.Context, s *shards.Shard) error {
		log := g.log.With(slog.String("group", name), slog.String("replica", g.identity), slog.String("shard", s.Name))
		sg := *g // the shard's own logger for the supervision's lines
		sg.log = log
		if !sg.startable(wctx, s.Term) {
			return nil // the term ended before a renewal moved its stop point on
		}
		env := append(leaseEnv(name, g.identity, s.Term.Epoch()), "AZLEASE_SHARD="+s.Name)
		res := sg.runUnder(r, wctx, s.Term, env, argv, 0)
		switch {
		case res.err != nil && stopsReplica(res.err.code):
			mu.Lock()
			if fatal == nil {
				fatal = res.err
			}
			mu.Unlock()
			r.stopSession(res.err) // stop the group: no shard can run CMD
			return res.err
		case res.err != nil:
			// The guardian did not start CMD: the shard's context ended
			// as it started (a move, a loss), or the term's stop point
			// passed meanwhile. That shard's run only.
			if wctx.Err() != nil {
				return nil
			}
			return fmt.Errorf("the command did not start: %s", res.err.msg)
		case res.signalled != nil:
			return nil // the group stops
		case res.lost != nil:
			if wctx.Err() != nil {
				return nil // the shard's term ended, or it moves: the group goes on
			}
			// The guardian stopped CMD at the stop point (no renewal in
			// time) although the term is still valid: the next run waits
			// for a renewal to move the deadline on, or for the term to end.
			// The lease is not lost (yet): say so, not res.lost's words.
			return errors.New("the command was stopped at its stop point: no renewal reached the guardian in time, and the shard's lease is still held until its validity deadline")
		}
		if wctx.Err() != nil {
			return nil
		}
		log.Warn("azlease: a shard's command exited while the shard is owned", slog.Int("status", res.code))
		return fmt.Errorf("the command exited with status %d", res.code)
	}
	err = grp.Run(ctx, work)
	mu.Lock()
	defer mu.Unlock()
	switch {
	case fatal != nil:
		return fatal
	case r.stopped() != nil:
		s := r.stopped()
		return exitf(signalStatus(s), "%s: stopped by %s; every shard was released or left to expire", what, signalName(s))
	case err != nil:
		return classify(what, err)
	}
	return nil
}

// stopsReplica reports whether a guardian's refusal to run CMD stops the
// whole replica: CMD cannot be run (126) or found (127), or the
// supervision failed (70). Any other refusal (the term ended, or passed its
// stop point, as CMD started) is that shard's alone.
func stopsReplica(code int) bool {
	return code == exitNoExec || code == exitNotFound || code == exitInternal
}

// startable waits until CMD may start under term: its stop point (the
// validity deadline minus --kill-after minus killMargin, when the guardian
// stops CMD if no renewal moved the deadline on) is still ahead. It
// returns false when ctx ends first. A term whose renewals stalled past
// its stop point starts no CMD until one succeeds (the guardian would
// refuse to start it, and starting it would only have it stopped at once).
func (g *globals) startable(ctx context.Context, term *azlease.Term) bool {
	st := g.stopTiming()
	for {
		if ctx.Err() != nil {
			return false
		}
		if time.Until(term.ValidUntil()) > st.killAfter+st.margin {
			return true
		}
		if !sleepCtx(ctx, deadlineEvery) {
			return false
		}
	}
}

// shardStatus prints the assignment of a group, for 'status NAME --shards'.
func (g *globals) shardStatus(ctx context.Context, c *cobra.Command, r *router, name string, count int, asJSON bool) error {
	what := "status " + name
	cc, err := g.client(ctx, c)
	if err != nil {
		return err
	}
	var list []string
	if count > 0 {
		list = shards.Numbered(count)
	}
	a, err := shards.Inspect(ctx, cc, name, list)
	if err != nil {
		if ie := r.interrupted(what); ie != nil {
			return ie
		}
		return classify(what, err)
	}
	if asJSON {
		enc := json.NewEncoder(g.stdout)
		enc.SetIndent("", "  ")
		return enc.Encode(shardsJSON(name, containerOf(cc), a))
	}
	printShards(g.stdout, name, containerOf(cc), a)
	return nil
}

// assignmentJSON is what 'status --shards --json' prints.
type assignmentJSON struct {
	Group     string       `json:"group"`
	Container string       `json:"container"`
	Count     int          `json:"count,omitempty"` // as the members publish it
	PlanKnown bool         `json:"plan_known"`
	Note      string       `json:"note,omitempty"`
	Balanced  bool         `json:"balanced"`
	Misplaced int          `json:"misplaced"`
	Members   []memberJSON `json:"members"`
	Shards    []shardJSON  `json:"shards"`
}

type memberJSON struct {
	Name    string     `json:"name"`
	Weight  int        `json:"weight"`
	Owns    int        `json:"owns"`
	Share   int        `json:"share"`
	Count   int        `json:"count,omitempty"`
	Joined  *time.Time `json:"joined,omitempty"`
	Suspect bool       `json:"suspect,omitempty"`
}

type shardJSON struct {
	Name      string     `json:"name"`
	State     string     `json:"state,omitempty"`
	Owner     string     `json:"owner,omitempty"`
	Epoch     uint64     `json:"epoch,omitempty"`
	Since     *time.Time `json:"since,omitempty"`
	HandingTo string     `json:"handing_to,omitempty"`
	Planned   string     `json:"planned,omitempty"`
}

func shardsJSON(name, containerName string, a shards.Assignment) assignmentJSON {
	out := assignmentJSON{Group: name, Container: containerName, Count: a.Count, PlanKnown: a.PlanKnown, Note: a.Note,
		Balanced: a.Balanced(), Misplaced: a.Misplaced, Members: []memberJSON{}, Shards: []shardJSON{}}
	for _, m := range a.Members {
		out.Members = append(out.Members, memberJSON{Name: m.Name, Weight: m.Weight, Owns: m.Owns, Share: m.Share, Count: m.Count,
			Joined: timePtr(m.Joined), Suspect: m.Suspect})
	}
	for _, s := range a.Shards {
		out.Shards = append(out.Shards, shardJSON{Name: s.Name, State: s.State, Owner: s.Owner, Epoch: s.Epoch,
			Since: timePtr(s.Since), HandingTo: s.HandingTo, Planned: s.Planned})
	}
	return out
}

func printShards(w io.Writer, name, containerName string, a shards.Assignment) {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	defer tw.Flush()
	count, state := fmt.Sprintf("%d shards", len(a.Shards)), "balanced"
	switch {
	case !a.PlanKnown:
		count, state = fmt.Sprintf("%d shards taken so far", len(a.Shards)), "plan not known"
	case a.Misplaced > 0:
		state = fmt.Sprintf("%d shards not where the plan puts them", a.Misplaced)
	}
	fmt.Fprintf(tw, "group\t%s (container %s): %d members, %s, %s\n", name, containerName, len(a.Members), count, state)
	if a.Note != "" {
		fmt.Fprintf(tw, "note\t%s\n", a.Note)
	}
	fmt.Fprintln(tw, "\nmember\tweight\towns\tshare\tjoined\t")
	for _, m := range a.Members {
		note, share := "", "?"
		if m.Suspect {
			note = "  (a shard's lease expired under it: probably crashed)"
		}
		if a.PlanKnown {
			share = fmt.Sprint(m.Share)
		}
		fmt.Fprintf(tw, "%s\t%d\t%d\t%s\t%s\t%s\n", m.Name, m.Weight, m.Owns, share, stamp(m.Joined), note)
	}
	fmt.Fprintln(tw, "\nshard\towner\tepoch\tsince\tstate\tplanned\t")
	for _, s := range a.Shards {
		owner := s.Owner
		switch {
		case s.HandingTo != "":
			owner += " → " + s.HandingTo
		case owner == "":
			owner = "-"
		}
		epoch := "-"
		if s.Epoch > 0 {
			epoch = fmt.Sprint(s.Epoch)
		}
		st := s.State
		if st == "" {
			st = "never taken"
		}
		planned := s.Planned
		switch {
		case !a.PlanKnown:
			planned = "?"
		case planned == "":
			planned = "-"
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t\n", s.Name, owner, epoch, stamp(s.Since), st, planned)
	}
}

// stamp is an RFC 3339 time, or "-".
func stamp(t time.Time) string {
	if t.IsZero() {
		return "-"
	}
	return t.UTC().Format(time.RFC3339)
}
