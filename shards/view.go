package shards

// What one listing of the group says: the live members with their weights
// and the IDs they accept shards under, and each shard's lease state, owner
// and pending hand-off. Written by replicas under their leases, read by
// everyone with one List Blobs request.

import (
	"maps"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/azlease/azlease"
)

// Metadata a group writes (user metadata: names are C# identifiers that do
// not start with "azlease"; Azure returns them in lower case).
const (
	// On a membership blob.
	metaWeight = "shardweight" // the member's weight; a membership without it is not counted yet
	metaJoined = "shardjoined" // when the member joined, Unix ms by its clock (for display)
	metaIn     = "shardin"     // lease IDs it accepts shards under: "name=id,name=id", names escaped
	metaCount  = "shardcount"  // how many shards the member's group has
	metaSum    = "shardsum"    // the digest of its shard list (listSum)
	metaZone   = "shardzone"   // its zone (Options.Zone), or absent
	metaLoads  = "shardloads"  // the smoothed loads of shards it owns: key (loadKey) and code (encodeLoad), the heaviest first
	// the rest of its loads, those that did not fit: "count:code" of their mean
	metaLoadRest = "shardloadrest"
	// On a shard blob, written by its owner before it hands the shard on.
	metaTo    = "shardto"    // the member the shard is handed to (escaped)
	metaEpoch = "shardepoch" // the epoch of the term that handed it: the marker counts only while it is the latest
	metaLoad  = "shardload"  // the shard's smoothed load as it was handed on (encodeLoad), for the receiver to start from
	// why it was handed on (join, load, hot, zone, list); without
	// metaTo, why the term of metaEpoch began ("added": taken again
	// after a removal), written by its holder
	metaWhy  = "shardwhy"
	metaGone = "shardgone" // its blob was cleared after the shard was removed
	// until when (Unix ms) it stays where it is: its work did not return
	// within DrainTimeout when it was to be handed on
	metaPinned = "shardpinned"
)

// memberInfo is a live member as listed.
type memberInfo struct {
	name   string
	weight int
	joined time.Time
	accept map[string]string  // shard → lease ID it accepts the shard under
	count  int                // how many shards its static list has; 0 when it does not say (an older version) or has none
	sum    string             // the digest of its static list, with count
	says   bool               // it publishes count and sum
	zone   string             // Options.Zone
	loads  map[string]float64 // loadKey → smoothed load, of the shards it owns and reports
	restN  int                // how many of its reporting shards are not in loads
	restMu float64            // their mean load
}

// shardInfo is a shard as listed.
type shardInfo struct {
	name      string
	state     string // Azure's lease state; "" when the blob does not exist yet
	leased    bool   // leased or breaking
	holder    string // the holder of the latest term
	epoch     uint64
	since     time.Time // the latest term's start, by its holder's clock
	pendingTo string    // handed to this member, which has not taken it yet
	handed    bool      // the latest term handed it on (its lease may have expired since)
	// carried is the load the hand-off marker carries, while it speaks
	// of the latest term (handed on, not taken yet) or of the one before
	// it, taken by the marker's receiver (which may not publish it yet).
	carried    float64
	hasCarried bool
	// handedIn is true when the latest term began by a hand-on: its
	// holder is the receiver the marker of the term before names.
	handedIn bool
	why      string // the marker's reason
	// moved is why the latest term began, or why the shard is being
	// handed on now, as ShardStatus.Moved says it (see movedText).
	moved  string
	gone   bool      // cleared after the shard was removed (see RemoveShards)
	pinned time.Time // it stays where it is until then (see Group.pin)
	// lastLoad is the load the blob last carried (a hand-off's marker, or
	// a pin), whatever term wrote it: a free shard's best guess.
	lastLoad float64
	hasLast  bool
	// st is the shard's blob as listed, for an acquisition that follows
	// (Lease.HoldAfter); zero when it does not exist.
	st azlease.Status
	// key is loadKey(name), computed once per listing rather than at
	// each decision on it (a digest per shard was a fifth of a decision's
	// time at 256 shards); "" in a view not parsed: computed when needed.
	key string
}

// The reasons a shard changes hands, as codes (the metrics' and the logs'
// azlease.shards.reason / reason): the hand-on's (join, load, hot, zone,
// list), or how a shard was taken free.
const (
	whyNew     = "new"     // its blob did not exist: the shard's first owner
	whyAdded   = "added"   // added again after it was removed (its blob was cleared)
	whyStop    = "stop"    // its owner released it (stopped, or dropped it from its list)
	whyExpired = "expired" // its owner's lease expired (a crash, a pause, a partition)
	whyBroken  = "broken"  // its lease was broken (an operator)
	whyEnded   = "ended"   // its owner's term ended without a record of how
	whyRemoved = "removed" // removed from the group's set (RemoveShards)
)

// takenWhy is the reason code of an acquisition of the shard as info
// lists it.
func takenWhy(info shardInfo) string {
	switch {
	case info.pendingTo != "" && info.why != "":
		return info.why
	case info.pendingTo != "":
		return "handed over"
	case !info.st.Exists:
		return whyNew
	case info.gone:
		return whyAdded
	}
	switch info.state {
	case "expired":
		return whyExpired
	case "broken":
		return whyBroken
	case "available":
		return whyStop
	}
	return whyEnded
}

// movedText says, for people, why the latest term of the shard began, or
// why it is being handed on now: a hand-on's reason (join, load, hot,
// zone, list), "new shard", "added again", "taken after a's stop", "taken
// after a's lease expired", "taken after a's lease was broken", "taken
// after a's term ended", or "removed" for the cleared blob of a removed
// shard. own is the reason the term's holder wrote for its own term, if
// any. The previous holder's name comes from the blob's recorded terms.
func movedText(st azlease.Status, s shardInfo, own string) string {
	switch {
	case s.gone:
		return "removed"
	case s.handed || s.handedIn:
		return s.why
	case own == whyAdded:
		return "added again"
	case own != "":
		return own
	}
	prev := "its previous owner"
	if h := st.History; len(h) >= 2 && h[0].Epoch == st.Epoch && h[1].Holder != "" {
		prev = h[1].Holder
	}
	switch st.Began {
	case azlease.ChangeFree:
		return "new shard"
	case azlease.ChangeReleased:
		return "taken after " + prev + "'s stop"
	case azlease.ChangeExpired:
		return "taken after " + prev + "'s lease expired"
	case azlease.ChangeBroken:
		return "taken after " + prev + "'s lease was broken"
	case azlease.ChangeUnobserved:
		return "taken after " + prev + "'s term ended"
	}
	if st.Began.HandOver() {
		return "handed on by " + prev
	}
	return ""
}

// owner is who the plan counts as owning the shard: the member it was
// handed to while the hand-off is pending, the holder while leased, else
// nobody.
func (s shardInfo) owner() string {
	switch {
	case s.pendingTo != "":
		return s.pendingTo
	case s.leased:
		return s.holder
	}
	return ""
}

// free reports whether the shard can be acquired: not leased.
func (s shardInfo) free() bool { return !s.leased }

// view is one listing of a group.
type view struct {
	members map[string]memberInfo
	shards  map[string]shardInfo
	// suspects are live members under which a shard's lease expired
	// without being handed on: a member that may have crashed, whose
	// membership has not expired yet. For display only: the plan counts
	// them as members until their membership expires (see input).
	suspects map[string]bool
	// registry is true when the registry blob exists; version is its
	// version, beacon its version and touch (see registry.go).
	registry bool
	version  uint64
	beacon   string
	// lists are the static lists published, by digest.
	lists map[string]bool
}

// withLoads is v with member's loads as next publishes them: what the
// others will list once its membership is written. ok is false when
// member is not listed.
func (v view) withLoads(member string, next *announcement) (w view, ok bool) {
	m, ok := v.members[member]
	if !ok {
		return v, false
	}
	m.loads = parseLoads(next.loads)
	m.restN, m.restMu, _ = parseRest(next.rest)
	w = v
	w.members = maps.Clone(v.members)
	w.members[member] = m
	return w, true
}

// parseView reads a listing of the group's blobs.
func parseView(names leaseNames, listed []azlease.Status) view {
	v := view{members: map[string]memberInfo{}, shards: map[string]shardInfo{}, suspects: map[string]bool{}, lists: map[string]bool{}}
	former := map[string]formerLoads{} // members no longer live (crashed, or left): the loads they last published
	for _, st := range listed {
		switch {
		case strings.HasPrefix(st.Name, names.membersPrefix()):
			id := strings.TrimPrefix(st.Name, names.membersPrefix())
			w, err := strconv.Atoi(st.Metadata[metaWeight])
			if !st.Leased && (st.Metadata[metaLoads] != "" || st.Metadata[metaLoadRest] != "") {
				f := formerLoads{loads: parseLoads(st.Metadata[metaLoads])}
				f.restN, f.restMu, _ = parseRest(st.Metadata[metaLoadRest])
				former[id] = f
			}
			if !st.Leased || err != nil || w < 1 || w > MaxWeight || st.Err != nil {
				continue // not a live member (yet)
			}
			m := memberInfo{name: id, weight: w, accept: parseAccept(st.Metadata[metaIn]), loads: parseLoads(st.Metadata[metaLoads])}
			m.restN, m.restMu, _ = parseRest(st.Metadata[metaLoadRest])
			if ms, err := strconv.ParseInt(st.Metadata[metaJoined], 10, 64); err == nil {
				m.joined = time.UnixMilli(ms).UTC()
			}
			if n, err := strconv.Atoi(st.Metadata[metaCount]); err == nil && n >= 0 && n <= MaxShards && len(st.Metadata[metaSum]) == sumLen {
				m.count, m.sum, m.says = n, st.Metadata[metaSum], true
			}
			m.zone = st.Metadata[metaZone]
			v.members[id] = m
		case st.Name == names.registry():
			v.registry = true
			v.beacon = st.Metadata[metaVersion] + "/" + st.Metadata[metaTouch]
			v.version, _ = strconv.ParseUint(st.Metadata[metaVersion], 10, 64)
		case strings.HasPrefix(st.Name, names.listsPrefix()):
			v.lists[strings.TrimPrefix(st.Name, names.listsPrefix())] = true
		case strings.HasPrefix(st.Name, names.shardsPrefix()):
			s := shardInfo{name: strings.TrimPrefix(st.Name, names.shardsPrefix()), state: st.State, leased: st.Leased,
				gone: st.Metadata[metaGone] != "", st: st}
			s.key = loadKey(s.name)
			if ms, err := strconv.ParseInt(st.Metadata[metaPinned], 10, 64); err == nil {
				s.pinned = time.UnixMilli(ms)
			}
			s.lastLoad, s.hasLast = decodeLoad(st.Metadata[metaLoad])
			if st.Err == nil {
				s.holder, s.epoch, s.since = st.Holder, st.Epoch, st.Acquired
				to, _ := url.QueryUnescape(st.Metadata[metaTo])
				e, err := strconv.ParseUint(st.Metadata[metaEpoch], 10, 64)
				s.handed = to != "" && err == nil && e == st.Epoch && e > 0
				if s.handed && st.Leased {
					s.pendingTo = to
				}
				s.handedIn = to != "" && err == nil && e > 0 && e+1 == st.Epoch && st.Holder == to
				s.why = st.Metadata[metaWhy]
				if l, ok := decodeLoad(st.Metadata[metaLoad]); ok && (s.handed || s.handedIn) {
					s.carried, s.hasCarried = l, true
				}
				own := ""
				if to == "" && err == nil && e == st.Epoch {
					own = s.why // the holder's own word on how its term began
				}
				s.moved = movedText(st, s, own)
			}
			v.shards[s.name] = s
		}
	}
	for _, s := range v.shards {
		if s.state == "expired" && !s.handed {
			if _, live := v.members[s.holder]; live {
				v.suspects[s.holder] = true
			}
		}
	}
	v.lastLoadsOfTheGone(former)
	return v
}

// formerLoads is what a membership no longer live last published: its
// shards' loads by key, and the count and mean of the rest.
type formerLoads struct {
	loads  map[string]float64
	restN  int
	restMu float64
}

// lastLoadsOfTheGone sets the last known load of the shards whose holder
// is no longer a member (a crash, a partition: its membership expired with
// its loads published; or a clean leave, which leaves them on the released
// membership) to the load that holder last published (its entry, else the
// mean of the loads that did not fit its metadata, as for a live member):
// the shard while free, or taken free and not yet published by its taker.
// Every replica then places the shards of a lost member by their real
// loads, the same before and after their takers publish them, rather than
// by what their blobs last carried (a hand-off's, often old, or nothing:
// the mean), which changed the plan as the takers published and left some
// shard planned from one replica to another for polls.
func (v view) lastLoadsOfTheGone(former map[string]formerLoads) {
	if len(former) == 0 {
		return
	}
	for name, s := range v.shards {
		from := s.holder
		if _, live := v.members[from]; live && s.leased {
			from = "" // held by a live member: only a term taken free from one gone
			if h := s.st.History; !s.handedIn && len(h) >= 2 && h[0].Epoch == s.st.Epoch {
				if _, live := v.members[h[1].Holder]; !live {
					from = h[1].Holder
				}
			}
		}
		f, ok := former[from]
		if !ok || from == "" {
			continue
		}
		if l, ok := f.loads[loadKey(name)]; ok {
			s.lastLoad, s.hasLast = l, true
		} else if f.restN > 0 {
			s.lastLoad, s.hasLast = f.restMu, true
		} else {
			continue
		}
		v.shards[name] = s
	}
}

// input is the plan's input from a view: the live members, and the
// owners. self, when not empty, counts as a member with weight even if its
// membership is not listed yet.
//
// Suspects count as members: a member is live until its membership
// expires. Leaving a suspect out of the plan gained at most the time
// between its shards' expiry and its membership's (both are renewed every
// third of the lease duration), and struck live members as well: one whose
// work did not return within DrainTimeout, or whose lease a receiver did
// not take, handed all its shards away; and one that suspected itself
// planned nothing, so that a replica left alone never took the expired
// shard back.
func (v view) input(shards []string, self string, weight int) planInput {
	in := planInput{shards: shards, owner: make(map[string]string, len(shards))}
	for _, m := range v.members {
		in.members = append(in.members, member{name: m.name, weight: m.weight})
	}
	if _, listed := v.members[self]; self != "" && !listed {
		in.members = append(in.members, member{name: self, weight: weight})
	}
	for _, s := range shards {
		in.owner[s] = v.shards[s].owner()
	}
	return in
}

// held is a plan's input with the shards' holders as their owners, a hand-off
// under way notwithstanding: where the shards are now.
func (v view) held(shards []string, members []member) planInput {
	in := planInput{shards: shards, members: members, owner: make(map[string]string, len(shards))}
	for _, s := range shards {
		if info := v.shards[s]; info.leased {
			in.owner[s] = info.holder
		}
	}
	return in
}

// parseAccept reads the IDs a membership announces (Group.announce);
// malformed items are skipped.
func parseAccept(v string) map[string]string {
	out := map[string]string{}
	if v == "" {
		return out
	}
	for _, item := range strings.Split(v, ",") {
		k, id, ok := strings.Cut(item, "=")
		name, err := url.QueryUnescape(k)
		if ok && err == nil && name != "" && id != "" {
			out[name] = id
		}
	}
	return out
}
