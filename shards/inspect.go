package shards

// Reading a group's assignment from outside (an operator, 'azlease status
// --shards'): who is a member, who owns which shard since when, and where
// the replicas' plan puts each shard, from one listing. The plan needs the
// group's whole shard list in its order; the members publish its length
// and digest, so that Inspect can say which list they run, and say so
// plainly when it cannot know.

import (
	"cmp"
	"context"
	"fmt"
	"slices"
	"strconv"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/storage/azblob/container"

	"github.com/azlease/azlease"
)

// Assignment is a group as one listing shows it, for operators and
// dashboards ('azlease status --shards', 'azlease ui'): who is a member,
// who owns which shard since when, the loads, and where the replicas' plan
// puts each shard.
//
// Guaranteed: owners and epochs are Azure's lease states at the listing;
// the plan is the one the replicas compute from that listing, when
// PlanKnown. Not guaranteed: that it is still so a moment later (the group
// may have moved on), nor clocks: times are the writers' own.
//
// Cost: one List Blobs request per 5,000 blobs (Inspect), plus reads of
// the registry and the static lists once the set changed at run time;
// read access only. AssignmentOf makes no request.
//
// Watch for: PlanKnown false (Note says why): Planned, Share and
// Misplaced are then zero, not "nothing to do".
type Assignment struct {
	// Members are the live replicas, by name.
	Members []MemberStatus
	// Shards are the group's shards. When the shard list is known (the
	// one given to Inspect, or the members' when they run Numbered names)
	// they are all there, in the group's order, those that no replica has
	// taken yet included (State ""); otherwise only the shards that exist,
	// by name (numbers in numeric order).
	Shards []ShardStatus
	// Count is how many shards the live members run, as they publish it
	// with their membership; 0 when none does, or they disagree.
	Count int
	// PlanKnown reports whether ShardStatus.Planned, MemberStatus.Share
	// and Misplaced are what the replicas plan: Inspect knows the list
	// they run. When it is false, those are zero, and Note says why.
	PlanKnown bool
	// Note says what the listing cannot tell, or where the list given to
	// Inspect differs from the members' (then the members' is used when
	// it is known); "" when there is nothing to say.
	Note string
	// Misplaced counts the shards that are not held by the member the
	// plan puts them with (free ones, and ones still being handed over,
	// included): 0 when the group is balanced and PlanKnown.
	Misplaced int
	// ByLoad reports whether the replicas balance by load (some shard of
	// the group reports one) rather than by count.
	ByLoad bool
	// Level is the load per unit of capacity (weight) the members are
	// balanced to: the group's load over its capacity, once the hot
	// shards' members are set aside.
	Level float64
	// Hot lists the shards whose load alone exceeds a member's share,
	// heaviest first: each gets a member to itself, and should be split.
	Hot []string
	// Waiting counts the shards the plan will move once their cooldown
	// (a minute after they changed hands) has passed: 0 when the group is
	// settled.
	Waiting int
	// Added and Removed are the shards the group's registry adds and
	// removes at run time (AddShards, RemoveShards), when Inspect read
	// it (AssignmentOf does not).
	Added, Removed []string
}

// Balanced reports whether the plan is known and every shard is where it
// puts it.
func (a Assignment) Balanced() bool { return a.PlanKnown && a.Misplaced == 0 }

// MemberStatus is a live replica of the group (its membership lease held
// at the listing), as its membership's metadata describes it. A replica
// that crashed stays listed until its membership expires (within a lease
// duration); Suspect flags it sooner.
type MemberStatus struct {
	// Name is the replica's Options.Identity.
	Name string
	// Weight is its capacity (Options.Weight), 1 to MaxWeight.
	Weight int
	// Joined is when it joined, by its own clock; for display.
	Joined time.Time
	// Owns counts the shards it owns; Share is how many the plan gives it
	// (0 when the plan is not known).
	Owns, Share int
	// Count is how many shards it runs, as it publishes it; 0 when it
	// does not say (a replica of an older version).
	Count int
	// Suspect is true when a shard's lease expired under it without
	// being handed on: it may have crashed. It keeps its share until its
	// membership expires (within a lease duration of its last renewal).
	Suspect bool
	// Load is the sum of the loads of the shards it owns (a shard whose
	// load is not reported counts as the mean); Load/Weight is what the
	// balancer compares with the group's Level.
	Load float64
}

// ShardStatus is one shard of the group at the listing: its lease's state
// and owner, its term, the hand-off under way if any, where the plan puts
// it and its load. A shard never taken has State "" and no owner.
type ShardStatus struct {
	// Name is the shard's name, as in the static lists or AddShards.
	Name string
	// State is Azure's lease state of the shard's blob; "" when the blob
	// does not exist (no replica has taken the shard yet).
	State string
	// Owner is the replica that owns it ("" when free); Epoch and Since
	// are its term's fencing epoch and start (by the owner's clock).
	Owner string
	Epoch uint64
	Since time.Time
	// HandingTo is the replica it is being handed to, when a hand-off is
	// under way.
	HandingTo string
	// Planned is where the plan puts it ("" when no member is live, or
	// the plan is not known).
	Planned string
	// Load is its smoothed load as its owner publishes it (or as its
	// hand-off carries it); when LoadReported is false, nobody reports it
	// and it counts as the mean of the shards that do.
	Load         float64
	LoadReported bool
	// Moved says why its latest term began, or why it is being handed on
	// now: a hand-on's reason (join, load, hot, zone, list); "new shard"
	// (its first owner); "added again" (after a removal); "taken after
	// a's stop" (a released it: it stopped, or left the shard), "taken
	// after a's lease expired" (a crashed, paused or was cut off), "taken
	// after a's lease was broken", "taken after a's term ended" (how was
	// not recorded). "" for a shard never taken, or whose blob was
	// written by an older version.
	Moved string
}

// Inspect reads the assignment of the group named group in the container cc
// points at: one List Blobs request per 5,000 blobs. It needs only read
// access. shards, when not nil, is the group's shard list in its order;
// nil takes the list from the members, which publish its length and
// digest: it is known when they agree and run Numbered names (as 'azlease
// shards' does). A list given that differs from the one the members run is
// reported in Note, and the members' is used when it is known. When the
// list cannot be known, Inspect says why in Note and plans nothing.
func Inspect(ctx context.Context, cc *container.Client, group string, shards []string) (Assignment, error) {
	if cc == nil {
		return Assignment{}, optionErr("container", "nil *container.Client")
	}
	if group == "" {
		return Assignment{}, optionErr("group", "empty")
	}
	listed, err := azlease.InspectPrefix(ctx, cc, leaseNames{group: group}.prefix())
	if err != nil {
		return Assignment{}, err
	}
	v := parseView(leaseNames{group: group}, listed)
	if !v.changedAtRunTime() {
		return AssignmentOf(group, listed, shards), nil
	}
	// The set changed at run time, or the members run different lists:
	// read the registry and their lists, as a replica does.
	n := leaseNames{group: group}
	reg, _, _, err := readRegistry(ctx, cc, n)
	if err != nil {
		return Assignment{}, err
	}
	known := map[string][]string{}
	if shards != nil {
		known[listSum(shards)] = shards
	}
	for _, m := range v.members {
		if m.count > 0 && known[m.sum] == nil && v.lists[m.sum] {
			l, err := readList(ctx, cc, n, m.sum)
			if err != nil {
				return Assignment{}, err
			}
			known[m.sum] = l
		}
	}
	set := groupSet(v, reg, known, "", "")
	note := ""
	if set.unknown > 0 {
		note = fmt.Sprintf("%d live members run a shard list that is not published (an older version, or not yet): their shards are not shown", set.unknown)
	}
	out := assignmentOf(v, set, set.unknown == 0, note)
	out.Added, out.Removed = reg.added, sortedRemoved(reg)
	return out, nil
}

// changedAtRunTime reports whether the registry has changed the set, or
// the members publish different lists: the set is then not the members'
// one list.
func (v view) changedAtRunTime() bool {
	if v.version > 0 {
		return true
	}
	sums := map[string]bool{}
	for _, m := range v.members {
		if m.count > 0 {
			sums[m.sum] = true
		}
	}
	return len(sums) > 1
}

// sortedRemoved is the registry's removed names in natural order.
func sortedRemoved(r registry) []string {
	var out []string
	for s := range r.removed {
		out = append(out, s)
	}
	slices.SortFunc(out, naturalCompare)
	return out
}

// AssignmentOf is what [Inspect] answers, from a listing the caller made:
// listed holds the statuses of the group's blobs as [azlease.InspectPrefix]
// reads them (a listing of the group's prefix, group + "/", or of any
// prefix of it, such as a whole container: blobs that are not the group's
// are ignored). It makes no request, so a page that shows many groups
// (azlease ui) reads them all with one listing. shards is as for Inspect.
// An empty group has nothing.
func AssignmentOf(group string, listed []azlease.Status, shards []string) Assignment {
	if group == "" {
		return Assignment{}
	}
	names := leaseNames{group: group}
	v := parseView(names, listed)
	list, known, note := v.shardList(shards)
	if v.version > 0 {
		known = false
		note = "the group's shard set changed at run time (AddShards, RemoveShards): Inspect reads it"
	}
	if list == nil {
		for s := range v.shards {
			list = append(list, s)
		}
		slices.SortFunc(list, naturalCompare)
	}
	return assignmentOf(v, shardSet{names: list}, known, note)
}

// assignmentOf is the assignment of v for set; known tells whether the
// plan is the replicas'.
func assignmentOf(v view, set shardSet, known bool, note string) Assignment {
	list := set.names
	out := Assignment{PlanKnown: known, Note: note}
	if c, ok := v.agreedCount(); ok {
		out.Count = c
	}
	in := v.input(list, "", 0)
	var (
		p = map[string]string{}
		d decision
	)
	d = v.decide(set, "", 0, "", time.Now(), DefaultCooldown)
	if known {
		p = d.owner
		out.ByLoad, out.Level, out.Hot = d.byLoad, d.level, d.hot
		out.Waiting = d.waiting()
		// The replicas plan as if a shard being handed over were its
		// successor's already (so as not to move it twice); what Inspect
		// reports is where the shards are: one still being handed over
		// is misplaced until its successor holds it.
		out.Misplaced = assess(v.held(list, in.members), p).misplaced
	}
	share := map[string]int{}
	for _, s := range list {
		if o := p[s]; o != "" {
			share[o]++
		}
	}
	owns := map[string]int{}
	for _, s := range list {
		info, ok := v.shards[s]
		if !ok {
			info = shardInfo{name: s}
		}
		st := ShardStatus{Name: s, State: info.state, Planned: p[s], HandingTo: info.pendingTo, Epoch: info.epoch, Since: info.since,
			Load: d.load[s], LoadReported: d.known[s]}
		st.Moved = info.moved
		if info.leased {
			st.Owner = info.holder
			owns[info.holder]++
		}
		out.Shards = append(out.Shards, st)
	}
	for _, m := range v.members {
		out.Members = append(out.Members, MemberStatus{
			Name: m.name, Weight: m.weight, Joined: m.joined, Owns: owns[m.name], Share: share[m.name],
			Count: m.count, Suspect: v.suspects[m.name], Load: d.members[m.name],
		})
	}
	slices.SortFunc(out.Members, func(a, b MemberStatus) int { return cmp.Compare(a.Name, b.Name) })
	return out
}

// agreedCount is the shard count every live member publishes, if they all
// publish the same list.
func (v view) agreedCount() (int, bool) {
	count, sum, n := 0, "", 0
	for _, m := range v.members {
		switch {
		case m.count == 0:
			return 0, false
		case n == 0:
			count, sum = m.count, m.sum
		case m.count != count || m.sum != sum:
			return 0, false
		}
		n++
	}
	return count, n > 0
}

// shardList decides the list to plan with: given (nil when none), checked
// against the members' published lists. It returns the list (nil: the
// shards that exist), whether the plan with it is what the replicas plan,
// and what to tell the reader.
func (v view) shardList(given []string) (list []string, known bool, note string) {
	if len(v.members) == 0 {
		if given == nil {
			return nil, false, "no live member: the shard list is not known (only the shards some replica has taken are shown)"
		}
		return given, true, ""
	}
	var silent, lists []string
	bySum := map[string]int{} // digest → count
	for _, m := range v.members {
		if m.count == 0 {
			silent = append(silent, m.name)
			continue
		}
		if _, ok := bySum[m.sum]; !ok {
			lists = append(lists, m.sum)
		}
		bySum[m.sum] = m.count
	}
	slices.Sort(silent)
	switch {
	case len(lists) > 1:
		var counts []string
		for _, s := range lists {
			counts = append(counts, strconv.Itoa(bySum[s]))
		}
		slices.SortFunc(counts, naturalCompare)
		return given, false, fmt.Sprintf("the live members run %d different shard lists (of %v shards): the plan is not known until they agree", len(lists), counts)
	case len(lists) == 0 && given == nil:
		return nil, false, "the live members do not say which shards they run (an older version): the plan is not known; give the shard list (--count)"
	case len(lists) == 0:
		return given, true, fmt.Sprintf("the live members do not say which shards they run (an older version): planned with the list given, %d shards", len(given))
	}
	sum, count := lists[0], bySum[lists[0]]
	numbered := sum == listSum(Numbered(count))
	theirs := Numbered(count)
	if !numbered {
		theirs = nil
	}
	var silentNote string
	if len(silent) > 0 {
		silentNote = fmt.Sprintf("; %d members do not say which shards they run (an older version)", len(silent))
		if len(silent) == 1 {
			silentNote = "; 1 member does not say which shards it runs (an older version)"
		}
	}
	switch {
	case given != nil && listSum(given) == sum:
		return given, true, trimNote(silentNote)
	case given != nil && numbered:
		return theirs, true, fmt.Sprintf("the live members run %d shards (0 to %d), not the %d given: planned with theirs%s", count, count-1, len(given), silentNote)
	case given != nil:
		return given, false, fmt.Sprintf("the live members run a list of %d shards other than the %d given: the plan is not known%s", count, len(given), silentNote)
	case numbered:
		return theirs, true, trimNote(silentNote)
	}
	return nil, false, fmt.Sprintf("the live members run %d shards not named 0 to %d: give their list to see the plan%s", count, count-1, silentNote)
}

// trimNote drops the "; " a note that starts a sentence does not need.
func trimNote(s string) string {
	if len(s) > 2 {
		return s[2:]
	}
	return s
}

// naturalCompare orders shard names with the numbers first, in numeric
// order, then the others by bytes.
func naturalCompare(a, b string) int {
	na, ea := strconv.ParseUint(a, 10, 64)
	nb, eb := strconv.ParseUint(b, 10, 64)
	switch {
	case ea == nil && eb == nil && na != nb:
		return cmp.Compare(na, nb)
	case ea == nil && eb != nil:
		return -1
	case ea != nil && eb == nil:
		return 1
	}
	return cmp.Compare(a, b)
}
