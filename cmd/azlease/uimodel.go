// uimodel.go: what 'azlease ui' shows, as data. One listing of the container
// (or prefix) becomes items: a leader, a mutex, a semaphore slot, a once-key,
// a shard group (its memberships and shards together), a lock whose kind is
// not recorded, or another blob. The same structures are the JSON of /api/...
// and what the page draws. Pure: no request, no clock but the read instant
// passed in.
//
// Adding information: a new kind of blob gets a case in blobKind and, if it
// belongs to another item (as memberships and shards belong to their group),
// a case in buildUIModel that attaches it; a new kind of fact about an item
// gets a field in uiItem (omitempty) and a renderer in ui/app.js. A fair
// lock's queue (its waiters' entries and tickets blob, queue.go) is
// attached to its lock's item as uiItem.Queue, rendered by the page's
// "Queue" section; leader candidates have their place already:
// uiItem.Candidates (see candidatesOf below), rendered by "Candidates".

package main

import (
	"cmp"
	"errors"
	"net/url"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/azlease/azlease"
	"github.com/azlease/azlease/shards"
)

// Kinds of items and blobs, as the JSON and the page's URLs name them.
const (
	kindLeader     = "leader"         // an Elector's lock blob ('azlease lead')
	kindMutex      = "mutex"          // a Mutex's ('azlease lock')
	kindSlot       = "semaphore-slot" // NAME/slot-I of a Semaphore ('azlease lock -n N')
	kindOnce       = "once-key"       // a DoOnce marker ('azlease once')
	kindGroup      = "shard-group"    // the blobs of a shards.Group ('azlease shards'): an item, not a blob
	kindMembership = "membership"     // GROUP/members/ID: a blob of a shard group
	kindShard      = "shard"          // GROUP/shards/NAME: a blob of a shard group
	kindLock       = "lock"           // a lease whose holder kind is not recorded (older azlease, a bare Lease)
	kindOther      = "other"          // a blob with no azlease record

	kindQueueEntry   = "queue-entry"   // NAME/queue/TICKET: a waiter of a fair lock (queue.go); part of its lock's item
	kindQueueCounter = "queue-counter" // NAME/queue/tickets-<generation>: the blob that gives a fair lock's queue its tickets; part of its lock's item
)

// kindLabels are the kinds as the page writes them.
var kindLabels = map[string]string{
	kindLeader: "leader", kindMutex: "mutex", kindSlot: "semaphore slot", kindOnce: "once-key",
	kindGroup: "shard group", kindMembership: "membership", kindShard: "shard", kindLock: "lock",
	kindOther: "other blob", kindQueueEntry: "queue entry", kindQueueCounter: "queue ticket counter",
}

// The states a blob shows: Azure's lease state, "available" shown as free.
const (
	stateLeased   = "leased"
	stateFree     = "free"
	stateExpired  = "expired"
	stateBroken   = "broken"
	stateBreaking = "breaking"
)

// uiEnvelope is what every /api/... answer starts with: where the data comes
// from, when it was read, what the read cost, and whether storage answered.
// When it did not, the answer carries no items: the page shows the failure,
// never the data of an older read.
type uiEnvelope struct {
	Account   string `json:"account"` // the Blob service host; never a key or SAS
	Container string `json:"container"`
	Prefix    string `json:"prefix"`
	// ReadAt is when the listing this answer comes from was sent; TookMS
	// how long it took.
	ReadAt *time.Time `json:"read_at,omitempty"`
	TookMS int64      `json:"took_ms"`
	// Requests is how many List Blobs requests the listing made: one per
	// 5,000 blobs (at least one), and Blobs how many blobs it listed.
	Requests int `json:"requests"`
	Blobs    int `json:"blobs"`
	// RefreshSeconds is --refresh: the page reads again this often, and a
	// listing younger than this is shared by every reader.
	RefreshSeconds float64   `json:"refresh_seconds"`
	Storage        uiStorage `json:"storage"`
}

// uiStorage says whether the latest listing succeeded.
type uiStorage struct {
	OK bool `json:"ok"`
	// Problem is "unreachable" (no answer, or failing: retried) or
	// "refused" (an authentication or permission error) when OK is false.
	Problem string `json:"problem,omitempty"`
	Error   string `json:"error,omitempty"`
	// FailingSince is when the first listing of the current run of
	// failures was sent; LastSuccess when the latest successful one was.
	FailingSince *time.Time `json:"failing_since,omitempty"`
	LastSuccess  *time.Time `json:"last_success,omitempty"`
}

// uiOverview is /api/overview: every item, without the per-item detail
// (blobs, terms, grid), which /api/items/KIND/NAME gives.
type uiOverview struct {
	uiEnvelope
	Items []uiItem `json:"items"`
}

// uiItemAnswer is /api/items/KIND/NAME.
type uiItemAnswer struct {
	uiEnvelope
	Item *uiItem `json:"item,omitempty"`
}

// uiBlobsAnswer is /api/blobs: every lock blob, flat, with its kind and
// the item it belongs to.
type uiBlobsAnswer struct {
	uiEnvelope
	BlobList []uiBlob `json:"blobs_list"`
}

// uiItem is one thing an operator asks about: a lock blob, or a shard
// group's blobs together.
type uiItem struct {
	Kind      string `json:"kind"`
	KindLabel string `json:"kind_label"`
	Name      string `json:"name"` // the blob's name; a group's name; a once-key's key
	Path      string `json:"path"` // its page; "/api" + Path is its JSON
	// Blob is the lock blob's name where Name is not (a once-key's:
	// "once/" + key).
	Blob string `json:"blob,omitempty"`
	// The latest term of the lock blob (for a group: empty).
	State       string     `json:"state,omitempty"`
	Holder      string     `json:"holder,omitempty"`
	Epoch       uint64     `json:"epoch,omitempty"`
	Since       *time.Time `json:"since,omitempty"`        // by the holder's clock
	LastRelease string     `json:"last_release,omitempty"` // "clean", "not clean"; "" while held or never held
	Error       string     `json:"error,omitempty"`        // a record azlease cannot read
	Summary     string     `json:"summary"`                // one line for the overview

	Slot  *uiSlot  `json:"slot,omitempty"`
	Once  *uiOnce  `json:"once,omitempty"`
	Group *uiGroup `json:"group,omitempty"`

	// Queue is the waiters of a mutex (or of the semaphore a slot belongs
	// to), first in line first (queue.go attaches them); Candidates the
	// contenders of a leader election (candidatesOf). Always present, empty
	// when there are none.
	Queue      []uiWaiter    `json:"queue"`
	Candidates []uiCandidate `json:"candidates"`

	// Detail, in /api/items/... only.
	Terms []uiTerm `json:"terms,omitempty"` // the lock blob's recorded terms, oldest first: a leader's timeline
	// Gaps are the times between its terms when nobody held the lock (or
	// may not have: Uncertain), oldest first: the timeline's "no holder"
	// lane.
	Gaps  []uiGap  `json:"gaps,omitempty"`
	Blobs []uiBlob `json:"blobs,omitempty"` // every blob of the item
}

// uiSlot places a semaphore slot.
type uiSlot struct {
	Semaphore string `json:"semaphore"`
	Index     int    `json:"index"`
}

// uiWaiter is one waiter of a lock's queue.
type uiWaiter struct {
	Position int        `json:"position"` // its place, 1 first (a waiter passed over keeps its place)
	Identity string     `json:"identity"`
	Since    *time.Time `json:"since,omitempty"` // waiting since, by its clock
	// State is "first in line" (the lock goes to it next), "missed" (its
	// turn came and it did not take the lock: passed over until it looks
	// again), or "".
	State string `json:"state,omitempty"`
}

// uiCandidate is one contender of a leader election (see candidatesOf).
type uiCandidate struct {
	Identity string            `json:"identity"`
	Priority int               `json:"priority"`
	Labels   map[string]string `json:"labels,omitempty"`
	Ready    bool              `json:"ready"`
	Since    *time.Time        `json:"since,omitempty"`
	Stopping bool              `json:"stopping,omitempty"`
	// Gone: its instance stopped writing its candidacy (crashed, hangs,
	// cut off); Ready is then false. Refreshed: when it last wrote it.
	Gone      bool       `json:"gone,omitempty"`
	Refreshed *time.Time `json:"refreshed,omitempty"`
	// Standby: the leader keeps it ready to take over. Designated: the
	// leader is handing over to it (at most one candidate); Acknowledged:
	// and it acknowledged, polling fast to take over.
	Standby      bool `json:"standby,omitempty"`
	Designated   bool `json:"designated,omitempty"`
	Acknowledged bool `json:"acknowledged,omitempty"`
}

// uiBlob is one lock blob as listed.
type uiBlob struct {
	Name        string     `json:"name"`
	Kind        string     `json:"kind"`
	KindLabel   string     `json:"kind_label"`
	Item        string     `json:"item"`  // the path of the item it belongs to
	State       string     `json:"state"` // leased, free, expired, broken, breaking
	AzureState  string     `json:"azure_state"`
	Role        string     `json:"role,omitempty"` // as recorded (Status.Role)
	Holder      string     `json:"holder,omitempty"`
	Epoch       uint64     `json:"epoch,omitempty"`
	Since       *time.Time `json:"since,omitempty"`
	LastRelease string     `json:"last_release,omitempty"`
	Error       string     `json:"error,omitempty"`
	History     []uiTerm   `json:"history"` // newest first, as recorded
}

// uiTerm is one recorded term of a lock blob: how it began and ended
// (terms.go's words), and when.
type uiTerm struct {
	Holder string     `json:"holder"`
	Epoch  uint64     `json:"epoch"`
	Start  *time.Time `json:"start,omitempty"`
	// End is when it ended: the instant its holder stopped its work when
	// EndExact (a release or a hand-over it recorded); otherwise no later
	// than End (the next term's start, or when the next holder found the
	// lease free). Empty for the latest term while held, and when it ended
	// before the read at a time nobody recorded.
	End      *time.Time `json:"end,omitempty"`
	EndExact bool       `json:"end_exact"`
	// SureUntil, for an end nobody saw (an expiry, a break, one not
	// observed), is until when the holder certainly still held the lease
	// and renewed it: it may have stopped (crashed, hung, cut off)
	// anywhere between SureUntil and End. The page hatches that part.
	SureUntil *time.Time `json:"sure_until,omitempty"`
	// Ended says how and when it ended: "held now", or a sentence.
	Ended string `json:"ended"`
	// Began and EndedBy are the TermChange names (absent when not
	// recorded); BeganText says how it began in words.
	Began     string `json:"began,omitempty"`
	BeganText string `json:"began_text"`
	EndedBy   string `json:"ended_by,omitempty"`
	// Lasted is how long it lasted, as far as known: "3 s", "between 40 s
	// and 55 s", "55 s or less"; "" for the latest term when it lasts (or
	// ended when is not known): the page counts up to the read.
	Lasted string `json:"lasted,omitempty"`
}

// uiGap is a time when the lock had no holder: from a term's end to the
// next term's start (To empty: until the read, nobody holds it).
// Uncertain: the holder may have stopped anywhere from From on (see
// uiTerm.SureUntil); the lock certainly had no holder from the end's upper
// bound on.
type uiGap struct {
	From      *time.Time `json:"from,omitempty"`
	To        *time.Time `json:"to,omitempty"`
	Uncertain bool       `json:"uncertain"`
	Text      string     `json:"text"`
}

// uiOnce is a once-key's marker.
type uiOnce struct {
	Key         string     `json:"key"`
	State       string     `json:"state"` // pending, running, done, failed; "corrupt"
	Holder      string     `json:"holder,omitempty"`
	Attempts    int        `json:"attempts"`
	MaxAttempts int        `json:"max_attempts,omitempty"`
	Epoch       uint64     `json:"epoch,omitempty"`
	Time        *time.Time `json:"time,omitempty"`
	LastError   string     `json:"last_error,omitempty"` // the recorded tail of the last failure
	Running     bool       `json:"running"`
}

// uiGroup is a shard group: its members, its shards as a grid, the plan's
// view, and the moves its shards' recorded terms show.
type uiGroup struct {
	Balanced bool `json:"balanced"`
	// PlanKnown is false when the listing cannot tell what the replicas
	// plan (no member publishes its shard list); Note says why.
	PlanKnown   bool   `json:"plan_known"`
	Note        string `json:"note,omitempty"`
	Misplaced   int    `json:"misplaced"`
	MemberCount int    `json:"member_count"`
	ShardCount  int    `json:"shard_count"` // the shards that exist: one no replica has taken yet does not
	Owned       int    `json:"owned"`
	// ByLoad is true when the replicas balance by load; Level is the load
	// per unit of capacity they balance to; Hot the shards to split.
	ByLoad bool     `json:"by_load,omitempty"`
	Level  float64  `json:"level,omitempty"`
	Hot    []string `json:"hot,omitempty"`
	// In /api/items/... only.
	Members []uiMember `json:"members,omitempty"`
	Shards  []uiShard  `json:"shards,omitempty"`
	Moves   []uiMove   `json:"moves,omitempty"` // newest first
}

type uiMember struct {
	Name    string     `json:"name"`
	Colour  int        `json:"colour"` // its index: the page's palette, and its label in the grid
	Weight  int        `json:"weight"`
	Owns    int        `json:"owns"`
	Share   int        `json:"share"` // what the plan gives it
	Joined  *time.Time `json:"joined,omitempty"`
	Suspect bool       `json:"suspect,omitempty"` // a shard's lease expired under it: it may have crashed
	Load    float64    `json:"load,omitempty"`    // its shards' loads
}

type uiShard struct {
	Name      string     `json:"name"`
	State     string     `json:"state"`
	Owner     string     `json:"owner,omitempty"`
	Epoch     uint64     `json:"epoch,omitempty"`
	Since     *time.Time `json:"since,omitempty"`
	HandingTo string     `json:"handing_to,omitempty"`
	Planned   string     `json:"planned,omitempty"`
	Misplaced bool       `json:"misplaced"` // not where the plan puts it (free ones included)
	// Outside is true for a shard blob that is not in the members' shard
	// list: no replica plans it.
	Outside bool `json:"outside,omitempty"`
	// Load is its smoothed load (Reported false: nobody reports it, it
	// counts as the mean); Moved why its latest term began (ShardStatus.Moved).
	Load     float64 `json:"load,omitempty"`
	Reported bool    `json:"load_reported,omitempty"`
	Moved    string  `json:"moved,omitempty"`
}

// uiMove is a shard that changed owner: a recorded term whose holder is not
// the previous term's. From is "" for a shard's first recorded term.
type uiMove struct {
	Shard string     `json:"shard"`
	From  string     `json:"from,omitempty"`
	To    string     `json:"to"`
	Epoch uint64     `json:"epoch"`
	At    *time.Time `json:"at,omitempty"`
	Why   string     `json:"why,omitempty"` // the hand-off's reason, known for a shard's latest move
}

// maxMoves bounds the moves a group's page lists.
const maxMoves = 100

// uiModel is one listing made into items.
type uiModel struct {
	items  []uiItem
	byPath map[string]int
	blobs  []uiBlob
}

// slotName matches a semaphore slot's blob: NAME/slot-I.
var slotName = regexp.MustCompile(`^(.+)/slot-(0|[1-9][0-9]{0,3})$`)

// groupPart splits a shard group's blob name into its group and part
// ("members" or "shards"), or returns ok false. The last "/members/" or
// "/shards/" decides, so that group names may hold slashes.
func groupPart(name string) (group, part, rest string, ok bool) {
	for _, p := range []string{"members", "shards"} {
		sep := "/" + p + "/"
		if i := strings.LastIndex(name, sep); i > 0 && i+len(sep) < len(name) {
			if j := strings.LastIndex(name, "/members/"); p == "shards" && j > i {
				continue
			}
			if j := strings.LastIndex(name, "/shards/"); p == "members" && j > i {
				continue
			}
			return name[:i], p, name[i+len(sep):], true
		}
	}
	return "", "", "", false
}

// shardListName matches a static list a shard group publishes:
// GROUP/lists/DIGEST (16 hex digits).
var shardListName = regexp.MustCompile(`^.+/lists/[0-9a-f]{16}$`)

// shardSetGroup reports whether st is a shard group's registry
// (GROUP/shardset) or one of its published static lists, bookkeeping that
// is never leased, and returns the group.
func shardSetGroup(st azlease.Status) (string, bool) {
	if st.Epoch > 0 || st.Leased {
		return "", false
	}
	if _, registry := st.Metadata["shardsetversion"]; registry && strings.HasSuffix(st.Name, "/shardset") {
		return strings.TrimSuffix(st.Name, "/shardset"), true
	}
	if shardListName.MatchString(st.Name) {
		return st.Name[:strings.LastIndex(st.Name, "/lists/")], true
	}
	return "", false
}

// blobKind names what a blob is, from its name, its recorded role and its
// marker. A shard group's blobs are leases ("lease") or not recorded yet;
// a blob named like one but leased by a Mutex or Elector is that instead.
func blobKind(st azlease.Status) string {
	_, hasMarker, markerErr := st.OnceMarker()
	bare := st.Role == "lease" || st.Role == ""
	if _, part, _, ok := groupPart(st.Name); ok && bare && !hasMarker {
		if part == "members" {
			return kindMembership
		}
		return kindShard
	}
	switch {
	case hasMarker || markerErr != nil || st.Role == "once":
		return kindOnce
	case slotName.MatchString(st.Name) && (st.Role == "mutex" || st.Role == ""):
		return kindSlot
	case st.Role == "elector":
		return kindLeader
	case st.Role == "mutex":
		return kindMutex
	case st.Role != "" || st.Epoch > 0 || st.Err != nil:
		return kindLock
	}
	return kindOther
}

// blobState is the state a blob shows.
func blobState(st azlease.Status) string {
	switch st.State {
	case "leased":
		return stateLeased
	case "breaking":
		return stateBreaking
	case "expired":
		return stateExpired
	case "broken":
		return stateBroken
	}
	return stateFree
}

// lastRelease says how the latest term ended, when it has: "clean" when its
// holder released it (after stopping its work), "not clean" when its lease
// expired or was broken (the holder may have crashed); "" while held or
// never held.
func lastRelease(st azlease.Status) string {
	switch {
	case st.Leased || st.Epoch == 0 || st.Err != nil:
		return ""
	case st.Released:
		return "clean"
	}
	return "not clean"
}

// itemPath is an item's page: /items/KIND/NAME, the name escaped segment by
// segment so that its slashes stay readable.
func itemPath(kind, name string) string {
	segs := strings.Split(name, "/")
	for i, s := range segs {
		segs[i] = url.PathEscape(s)
	}
	return "/items/" + kind + "/" + strings.Join(segs, "/")
}

func uiTime(t time.Time) *time.Time { return timePtr(t) }

// terms are a blob's recorded terms, oldest first, with how each began
// and ended, and the gaps between them when the lock had no holder.
func terms(st azlease.Status) ([]uiTerm, []uiGap) {
	hist := slices.Clone(st.History)
	if len(hist) == 0 && st.Epoch > 0 {
		hist = []azlease.HistoryEntry{latestTerm(st)}
	}
	for i := range hist {
		if hist[i].Epoch == st.Epoch {
			hist[i] = latestTerm(st)
		}
	}
	stamp := func(t time.Time) string { return t.UTC().Format("15:04:05.000") }
	out := make([]uiTerm, 0, len(hist))
	var gaps []uiGap
	for i := len(hist) - 1; i >= 0; i-- {
		h := hist[i]
		t := uiTerm{Holder: h.Holder, Epoch: h.Epoch, Start: uiTime(h.Acquired), BeganText: beganText(h.Began), Ended: endedText(h, stamp)}
		if h.Began != azlease.ChangeUnknown {
			t.Began = h.Began.String()
		}
		if h.EndedBy != azlease.ChangeUnknown {
			t.EndedBy = h.EndedBy.String()
		}
		var next *azlease.HistoryEntry
		if i > 0 {
			next = &hist[i-1]
		}
		unseen := h.EndedBy == azlease.ChangeExpired || h.EndedBy == azlease.ChangeBroken || h.EndedBy == azlease.ChangeUnobserved
		switch {
		case h.EndedBy.Planned() && !h.Ended.IsZero():
			t.End, t.EndExact = uiTime(h.Ended), true
		case next != nil:
			end := next.Acquired
			if !h.Ended.IsZero() && h.Ended.Before(end) {
				end = h.Ended
			}
			t.End = uiTime(end)
		case !unseen && h.Epoch == st.Epoch && st.Leased:
			t.Ended = "held now"
		}
		if t.Ended == "" {
			switch {
			case h.Epoch != st.Epoch && next == nil:
				t.Ended = "ended; a later term is not recorded"
			case next != nil:
				t.Ended = "ended by the next term's start (how is not recorded)"
			default:
				t.Ended = "ended (how is not recorded)"
			}
		}
		if unseen {
			sure := h.Acquired
			if s := h.SeenHeld; !s.IsZero() {
				if h.EndedBy == azlease.ChangeExpired {
					s = s.Add(-h.LeaseDuration) // renewed after it: the lease lasted LeaseDuration since
				}
				if s.After(sure) && (t.End == nil || s.Before(*t.End)) {
					sure = s
				}
			}
			t.SureUntil = uiTime(sure)
		}
		switch {
		case t.Start == nil || t.End == nil:
		case t.EndExact:
			t.Lasted = humanDuration(t.End.Sub(*t.Start))
		case t.SureUntil != nil && t.SureUntil.After(*t.Start):
			t.Lasted = "between " + humanDuration(t.SureUntil.Sub(*t.Start)) + " and " + humanDuration(t.End.Sub(*t.Start))
		default:
			t.Lasted = humanDuration(t.End.Sub(*t.Start)) + " or less"
		}
		// The time without a holder after this term: certain from its end
		// (or its upper bound), possible from SureUntil.
		var to *time.Time
		if next != nil {
			to = uiTime(next.Acquired)
		}
		if next != nil || !st.Leased {
			from, uncertain := t.End, false
			if t.SureUntil != nil {
				from, uncertain = t.SureUntil, true
			}
			if from != nil && (to == nil || from.Before(*to)) {
				g := uiGap{From: from, To: to, Uncertain: uncertain}
				switch {
				case to == nil && uncertain:
					g.Text = "perhaps no working holder since " + stamp(*from) + ": " + t.Ended
				case to == nil:
					g.Text = "no holder since " + stamp(*from)
				case uncertain:
					g.Text = "perhaps no working holder for up to " + humanDuration(to.Sub(*from)) + " (" + h.EndedBy.String() + ")"
				default:
					g.Text = "no holder for " + humanDuration(to.Sub(*from))
					if h.EndedBy != azlease.ChangeUnknown {
						g.Text += " (" + h.EndedBy.String() + ")"
					}
				}
				gaps = append(gaps, g)
			}
		}
		out = append(out, t)
	}
	return out, gaps
}

// humanDuration is a duration for the page: milliseconds under a second,
// seconds under 90 s, then minutes and hours.
func humanDuration(d time.Duration) string {
	switch {
	case d < 0:
		return "0 s"
	case d < time.Second:
		return strconv.FormatInt(d.Milliseconds(), 10) + " ms"
	case d < 90*time.Second:
		return strconv.FormatFloat(d.Seconds(), 'f', 1, 64) + " s"
	case d < 90*time.Minute:
		return strconv.FormatFloat(d.Minutes(), 'f', 1, 64) + " min"
	}
	return strconv.FormatFloat(d.Hours(), 'f', 1, 64) + " h"
}

func toUIBlob(st azlease.Status, kind, item string) uiBlob {
	b := uiBlob{
		Name: st.Name, Kind: kind, KindLabel: kindLabels[kind], Item: item, State: blobState(st), AzureState: st.State,
		Role: st.Role, Holder: st.Holder, Epoch: st.Epoch, Since: uiTime(st.Acquired), LastRelease: lastRelease(st),
		History: []uiTerm{},
	}
	if st.Err != nil {
		b.Error = line(st.Err)
	}
	t, _ := terms(st)
	for i := len(t) - 1; i >= 0; i-- {
		b.History = append(b.History, t[i])
	}
	return b
}

// buildUIModel makes the items of one listing. listed is in name order.
func buildUIModel(listed []azlease.Status) *uiModel {
	m := &uiModel{byPath: map[string]int{}}
	groups := map[string][]azlease.Status{} // a group's blobs
	var groupOrder []string
	var queues queueBlobs // fair locks' queues, attached to their locks' items below
	add := func(it uiItem) {
		m.byPath[it.Path] = len(m.items)
		m.items = append(m.items, it)
	}
	cands := candidatesByElection(listed)
	for _, st := range listed {
		if isSuccessionBlob(st) {
			continue // an election's candidate or yield request: part of its item
		}
		if queues.add(st) {
			continue // a fair lock's queue blob: part of its lock's item
		}
		kind := blobKind(st)
		if g, ok := shardSetGroup(st); ok {
			// A shard group's registry or published list: a blob of the
			// group's item, never leased.
			if _, seen := groups[g]; !seen {
				groupOrder = append(groupOrder, g)
			}
			groups[g] = append(groups[g], st)
			continue
		}
		if kind == kindMembership || kind == kindShard {
			g, _, _, _ := groupPart(st.Name)
			if _, seen := groups[g]; !seen {
				groupOrder = append(groupOrder, g)
			}
			groups[g] = append(groups[g], st)
			continue
		}
		it := lockItem(st, kind)
		it.Candidates = candidatesOf(st, cands[st.Name])
		add(it)
	}
	for _, g := range groupOrder {
		add(groupItem(g, groups[g]))
	}
	for _, st := range queues.attach(m) {
		add(lockItem(st, kindOther))
	}
	// Items in name order, groups among the locks.
	slices.SortStableFunc(m.items, func(a, b uiItem) int { return strings.Compare(a.Name, b.Name) })
	for i, it := range m.items {
		m.byPath[it.Path] = i
		m.blobs = append(m.blobs, it.Blobs...)
	}
	slices.SortStableFunc(m.blobs, func(a, b uiBlob) int { return strings.Compare(a.Name, b.Name) })
	return m
}

// lockItem is the item of one lock blob.
func lockItem(st azlease.Status, kind string) uiItem {
	name, blob := st.Name, ""
	if kind == kindOnce {
		// A once-key is named by its key, as 'azlease once KEY' names it.
		if key, ok := strings.CutPrefix(st.Name, "once/"); ok && key != "" {
			name, blob = key, st.Name
		}
	}
	it := uiItem{
		Kind: kind, KindLabel: kindLabels[kind], Name: name, Path: itemPath(kind, name), Blob: blob,
		State: blobState(st), Holder: st.Holder, Epoch: st.Epoch, Since: uiTime(st.Acquired), LastRelease: lastRelease(st),
		Queue: []uiWaiter{}, Candidates: candidatesOf(st, nil),
	}
	it.Terms, it.Gaps = terms(st)
	if st.Err != nil {
		it.Error = line(st.Err)
	}
	it.Blobs = []uiBlob{toUIBlob(st, kind, it.Path)}
	if sm := slotName.FindStringSubmatch(st.Name); kind == kindSlot && sm != nil {
		i, _ := strconv.Atoi(sm[2])
		it.Slot = &uiSlot{Semaphore: sm[1], Index: i}
	}
	if kind == kindOnce {
		it.Once = onceOf(st)
	}
	it.Summary = lockSummary(it)
	return it
}

// onceOf reads a once-key's marker. The key is the blob's name without the
// default prefix "once/" (DoOnceOptions.Prefix may be another).
func onceOf(st azlease.Status) *uiOnce {
	o := &uiOnce{Key: strings.TrimPrefix(st.Name, "once/"), Running: st.Leased}
	mk, _, err := st.OnceMarker()
	switch {
	case errors.Is(err, azlease.ErrOnceCorrupt):
		o.State, o.LastError = "corrupt", line(err)
	case err != nil:
		o.State, o.LastError = "unreadable", line(err)
	default:
		o.State, o.Holder, o.Attempts, o.MaxAttempts, o.Epoch = string(mk.State), mk.Holder, mk.Attempts, mk.MaxAttempts, mk.Epoch
		o.Time, o.LastError, o.Running = uiTime(mk.Time), mk.LastError, mk.Locked
	}
	return o
}

func lockSummary(it uiItem) string {
	var b strings.Builder
	switch {
	case it.Error != "":
		b.WriteString("record unreadable")
	case it.Epoch == 0 && it.State == stateFree:
		b.WriteString("never held")
	case it.State == stateLeased || it.State == stateBreaking:
		b.WriteString("held by " + it.Holder + ", epoch " + strconv.FormatUint(it.Epoch, 10))
		if n := len(it.Terms); n > 0 && it.Terms[n-1].Began != "" {
			b.WriteString(", began: " + it.Terms[n-1].Began)
		}
	default:
		b.WriteString(it.State + "; last held by " + it.Holder + ", epoch " + strconv.FormatUint(it.Epoch, 10))
		switch it.LastRelease {
		case "clean":
			b.WriteString(", released cleanly")
		case "not clean":
			b.WriteString(", not released cleanly")
		}
	}
	if o := it.Once; o != nil {
		b.WriteString("; once: " + o.State)
		if o.Attempts > 0 {
			b.WriteString(", " + strconv.Itoa(o.Attempts) + " attempt")
			if o.Attempts > 1 {
				b.WriteString("s")
			}
		}
	}
	return b.String()
}

// groupItem is a shard group's item, from its blobs.
func groupItem(group string, blobs []azlease.Status) uiItem {
	it := uiItem{Kind: kindGroup, KindLabel: kindLabels[kindGroup], Name: group, Path: itemPath(kindGroup, group),
		Queue: []uiWaiter{}, Candidates: []uiCandidate{}}
	a := shards.AssignmentOf(group, blobs, nil)
	g := &uiGroup{PlanKnown: a.PlanKnown, Note: a.Note, Members: []uiMember{}, Shards: []uiShard{}, Moves: []uiMove{},
		ByLoad: a.ByLoad, Level: a.Level, Hot: a.Hot}
	why := map[string]string{} // shard → why its latest term began (ShardStatus.Moved)
	live := map[string]bool{}
	for i, mb := range a.Members {
		live[mb.Name] = true
		g.Members = append(g.Members, uiMember{Name: mb.Name, Colour: i, Weight: mb.Weight, Owns: mb.Owns, Share: mb.Share,
			Joined: uiTime(mb.Joined), Suspect: mb.Suspect, Load: mb.Load})
	}
	for _, s := range a.Shards {
		owner := s.Owner
		if s.HandingTo != "" {
			owner = s.HandingTo // the plan counts a pending hand-off as its receiver's
		}
		st := s.State
		if st == "" {
			st = "available"
		}
		g.Shards = append(g.Shards, uiShard{Name: s.Name, State: blobState(azlease.Status{State: st}), Owner: s.Owner, Epoch: s.Epoch,
			Since: uiTime(s.Since), HandingTo: s.HandingTo, Planned: s.Planned, Misplaced: a.PlanKnown && (owner != s.Planned || !live[owner]),
			Load: s.Load, Reported: s.LoadReported, Moved: s.Moved})
		if s.Moved != "" && s.HandingTo == "" {
			why[s.Name] = s.Moved
		}
	}
	shardsPrefix := group + "/shards/"
	// A shard blob outside the members' list (a replica that ran with
	// another list, or a shard since dropped from it) is shown too, marked
	// misplaced: no replica plans it.
	inList := map[string]bool{}
	for _, s := range a.Shards {
		inList[s.Name] = true
	}
	for _, st := range blobs {
		name, ok := strings.CutPrefix(st.Name, shardsPrefix)
		if !ok || inList[name] || name == "" {
			continue
		}
		sh := uiShard{Name: name, State: blobState(st), Epoch: st.Epoch, Misplaced: true, Outside: true}
		if st.Leased {
			sh.Owner = st.Holder
		}
		if st.Metadata["shardgone"] != "" { // package shards' mark: cleared after RemoveShards
			sh.Moved = "removed"
			why[name] = "removed"
		}
		g.Shards = append(g.Shards, sh)
	}
	for _, s := range g.Shards {
		if s.Misplaced {
			g.Misplaced++
		}
	}
	g.Balanced = a.PlanKnown && g.Misplaced == 0
	slices.SortStableFunc(g.Shards, func(a, b uiShard) int { return shardOrder(a.Name, b.Name) })
	for _, st := range blobs {
		kind := kindShard
		if strings.HasPrefix(st.Name, group+"/members/") {
			kind = kindMembership
		}
		if _, ok := shardSetGroup(st); ok {
			kind = kindOther
		}
		it.Blobs = append(it.Blobs, toUIBlob(st, kind, it.Path))
		if kind != kindShard {
			continue
		}
		h := st.History
		for i, e := range h {
			from := ""
			if i+1 < len(h) {
				from = h[i+1].Holder
			}
			if i+1 == len(h) || from != e.Holder {
				mv := uiMove{Shard: strings.TrimPrefix(st.Name, shardsPrefix), From: from, To: e.Holder, Epoch: e.Epoch, At: uiTime(e.Acquired)}
				if i == 0 {
					mv.Why = why[mv.Shard] // ShardStatus.Moved: every change of owner says why
				}
				g.Moves = append(g.Moves, mv)
			}
		}
	}
	slices.SortStableFunc(g.Moves, func(a, b uiMove) int {
		at, bt := time.Time{}, time.Time{}
		if a.At != nil {
			at = *a.At
		}
		if b.At != nil {
			bt = *b.At
		}
		if c := bt.Compare(at); c != 0 {
			return c
		}
		return shardOrder(a.Shard, b.Shard)
	})
	if len(g.Moves) > maxMoves {
		g.Moves = g.Moves[:maxMoves]
	}
	it.Group = g
	g.MemberCount, g.ShardCount = len(g.Members), len(g.Shards)
	for _, s := range g.Shards {
		if s.Owner != "" {
			g.Owned++
		}
	}
	it.Summary = strconv.Itoa(g.MemberCount) + " members, " + strconv.Itoa(g.ShardCount) + " shards (" + strconv.Itoa(g.Owned) + " owned), "
	switch {
	case !g.PlanKnown:
		it.Summary += "plan not known"
		if g.Note != "" {
			it.Summary += ": " + g.Note
		}
	case g.Balanced:
		it.Summary += "balanced"
	default:
		it.Summary += strconv.Itoa(g.Misplaced) + " not where the plan puts them"
	}
	return it
}

// shardOrder orders shard names as people count them: numbers by value
// ("2" before "10", as shards.Numbered names them), then other names by
// their bytes.
func shardOrder(a, b string) int {
	x, errA := strconv.ParseUint(a, 10, 64)
	y, errB := strconv.ParseUint(b, 10, 64)
	switch {
	case errA == nil && errB == nil:
		return cmp.Compare(x, y)
	case errA == nil:
		return -1
	case errB == nil:
		return 1
	}
	return strings.Compare(a, b)
}

// candidatesOf is the contenders of the leader election on st, from its
// candidate blobs (NAME/candidates/…, listed with it), best first as a
// stopping leader ranks them; the JSON field "candidates" and the page's
// "Candidates" section (renderCandidates in ui/app.js) show them. Never an
// announced lease ID.
func candidatesOf(st azlease.Status, cs []azlease.Candidate) []uiCandidate {
	out := []uiCandidate{}
	for _, c := range candidatesJSON(cs, st) {
		out = append(out, uiCandidate{
			Identity: c.Identity, Priority: c.Priority, Labels: c.Labels, Ready: c.Ready, Since: c.Since, Stopping: c.Stopping,
			Gone: c.Gone, Refreshed: c.Refreshed, Standby: c.Standby, Designated: c.Designated, Acknowledged: c.Acknowledged,
		})
	}
	return out
}

// candidatesByElection collects the candidates a listing holds, by the name
// of their election's lock blob, best first.
func candidatesByElection(listed []azlease.Status) map[string][]azlease.Candidate {
	out := map[string][]azlease.Candidate{}
	for _, st := range listed {
		if c, election, ok := st.Candidate(); ok {
			out[election] = append(out[election], c)
		}
	}
	for _, cs := range out {
		azlease.SortCandidates(cs)
	}
	return out
}

// isSuccessionBlob reports whether st is an election's candidate or yield
// request (one a leader created empty included) rather than a lock blob.
func isSuccessionBlob(st azlease.Status) bool {
	if _, _, ok := st.Candidate(); ok {
		return true
	}
	if _, _, ok := st.YieldRequest(); ok {
		return true
	}
	i := strings.LastIndex(st.Name, "/candidates/~yield")
	return i > 0 && i+len("/candidates/~yield") == len(st.Name)
}

// light is the item without its detail, for the overview.
func (it uiItem) light() uiItem {
	it.Terms, it.Gaps, it.Blobs = nil, nil, nil
	if it.Group != nil {
		g := *it.Group
		g.Members, g.Shards, g.Moves = nil, nil, nil
		it.Group = &g
	}
	return it
}
