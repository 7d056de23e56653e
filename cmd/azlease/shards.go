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
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"strings"
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
		zone                    string
	)
	c := &cobra.Command{
		Use:   "shards NAME --count K -- CMD [ARGS...]",
		Short: "Spread K shards over every instance running this; run CMD once per shard this instance owns",
		Long: `Join the shard group NAME with every other 'azlease shards NAME': the shards 0
to K-1, and those 'azlease shards-add' adds, are spread over the instances, by
load once CMD reports one, each owned by at most one instance at a time. For each
shard this instance owns, CMD runs with AZLEASE_SHARD, AZLEASE_EPOCH (it grows
from owner to owner), AZLEASE_NAME, AZLEASE_IDENTITY and AZLEASE_LOAD_FILE (write
the shard's load there: a rate, any unit). A shard moves only once its CMD has
exited; CMD is killed before its lease can pass on, as for lead. Loads, moves,
crash timing, cost, exit statuses: docs/command.md#shards.`,
		Example: `  azlease shards orders --count 32 -- ./consume --partition "$AZLEASE_SHARD"
  azlease shards orders --count 32 -- sh -c 'work "$AZLEASE_SHARD" > "$AZLEASE_LOAD_FILE"'
  azlease status orders --shards    # owners, loads, hot shards`,
		Args: dashArgs("group name"),
		RunE: func(c *cobra.Command, args []string) error {
			// The shared --lease-duration variable holds the library's
			// 15 s default (every command registers it); shards' own
			// default is 60 s, so only a value given on its line counts.
			lease := shards.DefaultLeaseDuration
			if c.Flags().Changed("lease-duration") {
				lease = g.leaseDuration
			}
			if err := checkStopTiming(lease, g.killAfter); err != nil {
				return err
			}
			switch {
			case count < 0 || count > shards.MaxShards:
				return exitf(exitUsage, "invalid --count %d: from 0 (only shards added with shards-add) to %d", count, shards.MaxShards)
			case weight < 1 || weight > shards.MaxWeight:
				return exitf(exitUsage, "invalid --weight %d: from 1 to %d", weight, shards.MaxWeight)
			case maxMoves < 0:
				return exitf(exitUsage, "invalid --max-moves %d: must not be negative (0: no limit)", maxMoves)
			}
			return g.shards(c, args[0], args[1:], count, weight, maxMoves, zone, lease)
		},
	}
	f := c.Flags()
	f.IntVar(&count, "count", 0, "K: the shards 0 to K-1, at most 4096 (may differ in a deploy)")
	f.IntVar(&weight, "weight", 1, "this instance's capacity, 1 to 1000; 2: twice the load")
	f.StringVar(&zone, "zone", "", "failure domain: each zone keeps its capacity's share of load")
	f.IntVar(&maxMoves, "max-moves", 0, "hand at most this many shards on per poll (0: no limit)")
	_ = c.MarkFlagRequired("count")
	return c
}

func (g *globals) shards(c *cobra.Command, name string, argv []string, count, weight, maxMoves int, zone string, lease time.Duration) error {
	what := "shards " + name
	ctx, r := newRouter(context.Background())
	r.cancelAlways = true // a signal stops the group too, not only the commands
	defer r.close()
	cc, err := g.client(ctx, c)
	if err != nil {
		return err
	}
	grp, err := shards.New(cc, name, shards.Numbered(count), &shards.Options{
		Identity: g.identity, Weight: weight, LeaseDuration: lease, PollInterval: g.pollInterval,
		MaxMovesPerPoll: maxMoves, Zone: zone, Logger: g.log,
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
	loads, err := os.MkdirTemp("", "azlease-shards-")
	if err != nil {
		return exitf(exitInternal, "%s: a directory for the load files: %v", what, err)
	}
	defer os.RemoveAll(loads)
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
		loadFile := filepath.Join(loads, "load-"+url.PathEscape(s.Name))
		env := append(leaseEnv(name, g.identity, s.Term.Epoch()), "AZLEASE_SHARD="+s.Name, "AZLEASE_LOAD_FILE="+loadFile)
		stopLoads := watchLoad(wctx, s, loadFile)
		res := sg.runUnder(r, wctx, s.Term, env, argv, 0)
		stopLoads()
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

// watchLoad reads the load a shard's CMD writes into path every second,
// and reports it (Shard.SetLoad), until ctx ends or the returned function
// is called (which waits for it). A file missing or not holding a number
// (being written) is skipped.
func watchLoad(ctx context.Context, s *shards.Shard, path string) func() {
	ctx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() {
		defer close(done)
		t := time.NewTicker(time.Second)
		defer t.Stop()
		for {
			if b, err := os.ReadFile(path); err == nil {
				if v, err := strconv.ParseFloat(strings.TrimSpace(string(b)), 64); err == nil {
					s.SetLoad(v)
				}
			}
			select {
			case <-ctx.Done():
				return
			case <-t.C:
			}
		}
	}()
	return func() {
		cancel()
		<-done
		_ = os.Remove(path)
	}
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
	ByLoad    bool         `json:"by_load"`
	Level     float64      `json:"level,omitempty"` // load per unit of capacity the members are balanced to
	Hot       []string     `json:"hot,omitempty"`   // shards whose load alone exceeds a member's share: split them
	Added     []string     `json:"added,omitempty"`
	Removed   []string     `json:"removed,omitempty"`
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
	Load    float64    `json:"load"`
}

type shardJSON struct {
	Name      string     `json:"name"`
	State     string     `json:"state,omitempty"`
	Owner     string     `json:"owner,omitempty"`
	Epoch     uint64     `json:"epoch,omitempty"`
	Since     *time.Time `json:"since,omitempty"`
	HandingTo string     `json:"handing_to,omitempty"`
	Planned   string     `json:"planned,omitempty"`
	Load      float64    `json:"load"`
	Reported  bool       `json:"load_reported"`
	Moved     string     `json:"moved,omitempty"` // why its term began (ShardStatus.Moved), or why it is being handed on
}

func shardsJSON(name, containerName string, a shards.Assignment) assignmentJSON {
	out := assignmentJSON{Group: name, Container: containerName, Count: a.Count, PlanKnown: a.PlanKnown, Note: a.Note,
		Balanced: a.Balanced(), Misplaced: a.Misplaced, ByLoad: a.ByLoad, Level: a.Level, Hot: a.Hot, Added: a.Added, Removed: a.Removed,
		Members: []memberJSON{}, Shards: []shardJSON{}}
	for _, m := range a.Members {
		out.Members = append(out.Members, memberJSON{Name: m.Name, Weight: m.Weight, Owns: m.Owns, Share: m.Share, Count: m.Count,
			Joined: timePtr(m.Joined), Suspect: m.Suspect, Load: m.Load})
	}
	for _, s := range a.Shards {
		out.Shards = append(out.Shards, shardJSON{Name: s.Name, State: s.State, Owner: s.Owner, Epoch: s.Epoch,
			Since: timePtr(s.Since), HandingTo: s.HandingTo, Planned: s.Planned, Load: s.Load, Reported: s.LoadReported, Moved: s.Moved})
	}
	return out
}

func printShards(w io.Writer, name, containerName string, a shards.Assignment) {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	defer tw.Flush()
	count, state := counted(len(a.Shards), "shard"), "balanced"
	switch {
	case !a.PlanKnown:
		count, state = counted(len(a.Shards), "shard")+" taken so far", "plan not known"
	case a.Misplaced > 0:
		state = counted(a.Misplaced, "shard") + " not where the plan puts them"
	}
	fmt.Fprintf(tw, "group\t%s (container %s): %s, %s, %s\n", name, containerName, members(len(a.Members), ""), count, state)
	if a.ByLoad {
		fmt.Fprintf(tw, "load\tbalanced by load: %s per unit of capacity (weight); a member moves shards away above 1.10 times that\n", loadText(a.Level))
	}
	for _, h := range a.Hot {
		fmt.Fprintf(tw, "hot\tshard %s alone exceeds a replica's share: split it\n", h)
	}
	if len(a.Added) > 0 || len(a.Removed) > 0 {
		fmt.Fprintf(tw, "changed\t%d added at run time, %d removed\n", len(a.Added), len(a.Removed))
	}
	if a.Note != "" {
		fmt.Fprintf(tw, "note\t%s\n", a.Note)
	}
	fmt.Fprintln(tw, "\nmember\tweight\towns\tshare\tload\tload/weight\tjoined\t")
	for _, m := range a.Members {
		note, share := "", "?"
		if m.Suspect {
			note = "  (a shard's lease expired under it: probably crashed)"
		}
		if a.PlanKnown {
			share = fmt.Sprint(m.Share)
		}
		perCap := "-"
		if a.ByLoad && a.Level > 0 {
			perCap = fmt.Sprintf("%.2f × level", m.Load/float64(m.Weight)/a.Level)
		}
		fmt.Fprintf(tw, "%s\t%d\t%d\t%s\t%s\t%s\t%s\t%s\n", m.Name, m.Weight, m.Owns, share, loadText(m.Load), perCap, stamp(m.Joined), note)
	}
	fmt.Fprintln(tw, "\nshard\towner\tepoch\tsince\tstate\tplanned\tload\tmoved\t")
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
		load := loadText(s.Load)
		if !s.LoadReported {
			load = "(mean)"
		}
		moved := s.Moved
		if moved == "" {
			moved = "-"
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t\n", s.Name, owner, epoch, stamp(s.Since), st, planned, load, moved)
	}
}

// members is "1 member" or "n members", with an adjective ("live") when
// one is given.
func members(n int, adjective string) string {
	if adjective != "" {
		adjective += " "
	}
	return counted(n, adjective+"member")
}

// counted is n and noun, plural unless n is 1: "1 shard", "3 shards".
func counted(n int, noun string) string {
	if n == 1 {
		return "1 " + noun
	}
	return fmt.Sprintf("%d %ss", n, noun)
}

// loadText is a load with three significant digits.
func loadText(v float64) string { return strconv.FormatFloat(v, 'g', 3, 64) }

// stamp is an RFC 3339 time, or "-".
func stamp(t time.Time) string {
	if t.IsZero() {
		return "-"
	}
	return t.UTC().Format(time.RFC3339)
}

// newShardsChangeCmd is 'azlease shards-add' (add true) or 'shards-remove':
// a change of a running group's shard set. Spelled with a hyphen so that
// it cannot be taken for 'azlease shards NAME' with a group named "add".
func newShardsChangeCmd(g *globals, add bool) *cobra.Command {
	verb, use, short, long := "add", "shards-add NAME SHARD...", "Add shards to a running shard group", `Add the shards SHARD... to the group NAME of 'azlease shards NAME' while its
instances run: within a poll interval (2s) the least loaded instance takes each
and runs CMD for it with AZLEASE_SHARD set to its name. A shard added runs on any
instance, whatever --count each runs; a shard removed before is added again, its
fencing epochs going on from where they were. Shard names: printable UTF-8
without '/' or '\', not ending with '.'.

It writes the group's registry blob (NAME/shardset), conditional on what it
read, again if another change came first; it needs write access.`
	example := `  azlease shards-add orders tenant-42 tenant-43
  azlease status orders --shards`
	if !add {
		verb, use, short, long = "remove", "shards-remove NAME SHARD...", "Remove shards from a running shard group", `Remove the shards SHARD... from the group NAME of 'azlease shards NAME' while
its instances run: within a poll interval (2s) the owner of each stops its CMD
(SIGTERM, SIGKILL after --kill-after), clears the shard's blob (its content and
the group's metadata) and releases it; no instance takes it again, whatever
--count it runs, until 'azlease shards-add' adds it again.

It writes the group's registry blob (NAME/shardset), conditional on what it
read, again if another change came first; it needs write access.`
		example = `  azlease shards-remove orders tenant-42
  azlease shards-remove orders 31    # one of the --count shards`
	}
	return &cobra.Command{
		Use: use, Short: short, Long: long, Example: example,
		Args: func(c *cobra.Command, args []string) error {
			if len(args) < 2 {
				return exitf(exitUsage, "usage: %s (see '%s --help')", c.UseLine(), c.CommandPath())
			}
			return nil
		},
		RunE: func(c *cobra.Command, args []string) error {
			what := "shards-" + verb + " " + args[0]
			ctx, r := newRouter(context.Background())
			defer r.close()
			cc, err := g.client(ctx, c)
			if err != nil {
				return err
			}
			cctx, cancel := context.WithTimeout(ctx, 30*time.Second)
			defer cancel()
			change := shards.AddShards
			if !add {
				change = shards.RemoveShards
			}
			if err := change(cctx, cc, args[0], args[1:]...); err != nil {
				if ie := r.interrupted(what); ie != nil {
					return ie
				}
				if oe := (*azlease.OptionError)(nil); errors.As(err, &oe) {
					return exitf(exitUsage, "%s: %s", what, oe.Reason)
				}
				return classify(what, err)
			}
			past := map[bool]string{true: "added", false: "removed"}[add]
			noun := "shards"
			if len(args) == 2 {
				noun = "shard"
			}
			fmt.Fprintf(g.stdout, "%s %d %s %s group %s: its instances act within a poll interval\n", past, len(args)-1, noun,
				map[bool]string{true: "to", false: "from"}[add], args[0])
			return nil
		},
	}
}
