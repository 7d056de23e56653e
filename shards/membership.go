package shards

// The replica's membership: the lease on "GROUP/members/IDENTITY" that
// makes the others count it, and its metadata (its weight, when it joined,
// the shard list it runs, and the lease IDs it accepts shards under), kept
// within Azure's bound on a blob's metadata; joining and writing it off
// the poll loop; and withdrawing it when the replica leaves.

import (
	"cmp"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/storage/azblob/bloberror"

	"github.com/azlease/azlease"
)

// Azure refuses a blob's metadata (400 MetadataTooLarge) when its names and
// values take more than 8 KiB together. A membership's metadata holds
// azlease's own record of the lease's terms and the group's keys; the loads
// it publishes get at most loadBudget bytes (300 shards, the heaviest; the
// rest as their count and mean), and the lease IDs it announces get what is
// left, cut to fit: the weight is always written, so that the others count
// the replica.
const (
	metadataLimit = 8 << 10
	// recordReserve is the room kept for azlease's record on the blob:
	// the epoch, the holder, the start and the release mark (names 55
	// bytes, values at most 20 + 192 + 20 + 20: an identity is at most 64
	// bytes, escaped at most 192), and a history of 8 terms (the default,
	// which the group's Leases keep; the name 14 bytes, each entry at most
	// 20 + 1 + 20 + 1 + 192, with 7 separators): 2,200 bytes at most,
	// rounded up.
	recordReserve = 2304
	// fixedMetadataMax is what the group's own keys other than the IDs and
	// the loads take at most: the weight (up to 4 digits), when it joined
	// (Unix ms, up to 20 characters), the shard count (4 digits), the shard
	// list's digest, the rest of the loads (a count of up to 4 digits, a
	// colon and a code), the zone, and the names of the IDs' and the
	// loads' keys.
	fixedMetadataMax = len(metaWeight) + 4 + len(metaJoined) + 20 + len(metaCount) + 4 + len(metaSum) + sumLen +
		len(metaLoadRest) + 4 + 1 + loadCodeLen + len(metaZone) + MaxZone + len(metaIn) + len(metaLoads)
	// loadBudget is the room for the published loads: 300 entries of 8
	// bytes.
	loadBudget = 300 * loadEntryLen
	// initialIDBudget is the room for the announced IDs: 3,294 bytes, 40
	// IDs for names of 43 bytes ("tenant-<uuid>"), and one for the
	// longest name a group allows (1,015 bytes, escaped to 3,045 at most).
	initialIDBudget = metadataLimit - recordReserve - fixedMetadataMax - loadBudget
)

// announcement is what a membership's metadata says that changes: the
// lease IDs it accepts shards under and the loads it publishes. A nil
// *announcement is what the group's published says when the metadata is
// not known to say anything: before the first write of a term, or after a
// write that failed.
type announcement struct {
	accept string    // the IDs' value
	loads  string    // the loads' entries
	rest   string    // the rest of the loads: "count:code", or ""
	at     time.Time // when the loads were last written (for their pace)
}

// sumLen is the length of a shard list's digest, in hex.
const sumLen = 16

// leaseIDLen is the length of a lease ID as Lease.NextLeaseID writes it
// (a GUID with hyphens).
const leaseIDLen = 36

// listSum is the digest of a shard list that memberships publish, so that
// an observer ('azlease status --shards') learns which list the replicas
// run: the first 8 bytes of SHA-256 over the names, each ended by a
// newline (no name contains one), in hex.
func listSum(shards []string) string {
	h := sha256.New()
	for _, s := range shards {
		h.Write([]byte(s))
		h.Write([]byte{'\n'})
	}
	return hex.EncodeToString(h.Sum(nil))[:sumLen]
}

// keepMembership holds the membership and keeps its metadata announcing
// IDs for incoming (in the group's order), as many as fit, and publishing
// the loads of the shards this replica owns: it starts a join or a write in
// bg when one is needed and none is under way, and does not wait for it.
// New IDs are written at once; loads when their total, or one shard's
// load, changed by loadTotalStep of the total or more (touch is then true:
// the others should list soon), otherwise at most every loadRepublish.
// Loads written for a smaller change touch too when unsettles (nil: never)
// says the group, settled, would not be once it lists them: a member that
// crosses the band by a few per cent is acted on at the next polls rather
// than at the others' next listing (each replica of a settled group lists
// every ListInterval), which is also when its own decision sees them.
// A listing that loadsCross called for (g.crossing) writes a small change
// at once and touches.
func (g *Group) keepMembership(ctx context.Context, mlease *azlease.Lease, incoming []string, unsettles func(*announcement) bool) {
	g.mu.Lock()
	busy, m, published, budget := g.memberOp, g.member, g.published, g.idBudget
	g.mu.Unlock()
	if busy {
		return // the next poll looks again
	}
	now := time.Now()
	next := &announcement{accept: g.announce(incoming, budget)}
	next.loads, next.rest = g.publishedLoads(now)
	touch := false
	if m != nil && m.Valid() && published != nil {
		big, small := loadsChanged(published, next)
		switch {
		case next.accept != published.accept || big:
			touch = big
		case small && (now.Sub(published.at) >= loadRepublish || g.crossing):
		default:
			return
		}
		if !big && !small {
			next.loads, next.rest = published.loads, published.rest
			next.at = published.at
		} else if !touch {
			touch = g.crossing || unsettles != nil && unsettles(next)
		}
	}
	if next.at.IsZero() {
		next.at = now
	}
	g.mu.Lock()
	g.memberOp = true
	g.mu.Unlock()
	g.bg.Go(func() {
		defer func() {
			g.mu.Lock()
			g.memberOp = false
			g.mu.Unlock()
		}()
		g.membership(ctx, mlease, next, touch)
	})
}

// loadsJumped reports whether the loads this replica publishes moved
// enough since it last wrote them to be written at once (loadsChanged's
// big): the poll then lists, for it is a listing's poll that writes the
// membership (keepMembership, with the IDs that listing calls for), and
// tells the group. Without it a rise waited for this replica's next
// listing, up to ListInterval in a settled group (14 s of a ×10 jump's
// 75 s back to the band in the load benchmark), where "at once" is the
// next poll.
func (g *Group) loadsJumped() bool {
	g.mu.Lock()
	busy, m, published := g.memberOp, g.member, g.published
	g.mu.Unlock()
	if busy || m == nil || !m.Valid() || published == nil {
		return false // a write is under way or due anyway
	}
	next := &announcement{}
	next.loads, next.rest = g.publishedLoads(time.Now())
	big, _ := loadsChanged(published, next)
	return big
}

// loadRepublish is how often at most a replica writes its membership for
// loads that changed by less than loadTotalStep (loadsChanged).
const loadRepublish = 10 * time.Second

// loadItem is a shard's smoothed load, as a replica publishes it.
type loadItem struct {
	name string
	v    float64
}

// publishedLoads is the loads' value of the shards this replica owns whose
// load is known (see formatLoads).
func (g *Group) publishedLoads(now time.Time) (entries, rest string) {
	g.mu.Lock()
	var items []loadItem
	for _, o := range g.owned {
		if !o.lock.Valid() {
			continue
		}
		if v, ok := o.meter.value(now); ok {
			items = append(items, loadItem{name: o.name, v: v})
		}
	}
	g.mu.Unlock()
	return formatLoads(items)
}

// formatLoads is the loads' value of items, the heaviest first (then by
// name), as many as fit loadBudget, and the rest as "count:code" of their
// mean. Two shards whose keys collide are both left to the rest.
func formatLoads(items []loadItem) (entries, rest string) {
	if len(items) == 0 {
		return "", ""
	}
	keys := make(map[string]int, len(items))
	for _, it := range items {
		keys[loadKey(it.name)]++
	}
	slices.SortFunc(items, func(a, b loadItem) int {
		if c := cmp.Compare(b.v, a.v); c != 0 {
			return c
		}
		return cmp.Compare(a.name, b.name)
	})
	var b strings.Builder
	restN, restSum := 0, 0.0
	for _, it := range items {
		k := loadKey(it.name)
		if keys[k] > 1 || b.Len()+loadEntryLen > loadBudget {
			restN++
			restSum += it.v
			continue
		}
		b.WriteString(k)
		b.WriteString(encodeLoad(it.v))
	}
	if restN > 0 {
		rest = strconv.Itoa(restN) + ":" + encodeLoad(restSum/float64(restN))
	}
	return b.String(), rest
}

// loadsChanged compares two announcements' loads: big when their total
// moved by loadTotalStep or more (what the balancer compares is a member's
// total), or one shard published in both by that share of the total (a
// shard whose load rose while another left: the total alone hides it, and
// the balancer moves shards by their loads), small when anything else
// differs.
func loadsChanged(old, next *announcement) (big, small bool) {
	if old.loads == next.loads && old.rest == next.rest {
		return false, false
	}
	before, after := loadsTotal(old), loadsTotal(next)
	if bigChange(before, after) {
		return true, true
	}
	was := parseLoads(old.loads)
	for k, v := range parseLoads(next.loads) {
		if w, ok := was[k]; ok && math.Abs(v-w) >= loadTotalStep*max(before, after) {
			return true, true
		}
	}
	return false, true
}

// loadTotalStep is the relative change of a member's published total load
// that is written at once: smaller ones wait for loadRepublish.
const loadTotalStep = 0.03

// loadsTotal is the sum of an announcement's loads.
func loadsTotal(a *announcement) float64 {
	t := 0.0
	for _, v := range parseLoads(a.loads) {
		t += v
	}
	if n, mean, ok := parseRest(a.rest); ok {
		t += float64(n) * mean
	}
	return t
}

// bigChange reports whether a total load moved from a to b by
// loadTotalStep or more, or became zero or not.
func bigChange(a, b float64) bool {
	if (a == 0) != (b == 0) {
		return true
	}
	return b > (1+loadTotalStep)*a || a > (1+loadTotalStep)*b
}

// parseLoads reads a membership's loads' entries: key → load. Malformed
// entries are skipped (a value whose length is not a whole number of
// entries is read up to its last whole one).
func parseLoads(v string) map[string]float64 {
	out := make(map[string]float64, len(v)/loadEntryLen)
	for i := 0; i+loadEntryLen <= len(v); i += loadEntryLen {
		e := v[i : i+loadEntryLen]
		if l, ok := decodeLoad(e[loadKeyLen:]); ok {
			out[e[:loadKeyLen]] = l
		}
	}
	return out
}

// parseRest reads the rest of a membership's loads, "count:code".
func parseRest(v string) (n int, mean float64, ok bool) {
	c, code, found := strings.Cut(v, ":")
	if !found {
		return 0, 0, false
	}
	n, err := strconv.Atoi(c)
	if err != nil || n < 1 || n > MaxShards {
		return 0, 0, false
	}
	mean, ok = decodeLoad(code)
	return n, mean, ok
}

// announce is the IDs' value, "name=id,…" (names escaped), for as many of
// incoming as fit in budget bytes, in their order; the rest are announced
// once these are handed here.
func (g *Group) announce(incoming []string, budget int) string {
	var b strings.Builder
	for _, s := range incoming {
		sep := 0
		if b.Len() > 0 {
			sep = 1
		}
		item := url.QueryEscape(s) + "="
		if b.Len()+sep+len(item)+leaseIDLen > budget {
			continue // a shorter name may still fit
		}
		item += g.lease(s).NextLeaseID()
		if b.Len()+sep+len(item) > budget {
			continue
		}
		if sep > 0 {
			b.WriteByte(',')
		}
		b.WriteString(item)
	}
	return b.String()
}

// membership joins the group if this replica is not a member (again, if
// the membership was lost), then writes what the membership says. Storage
// refusing the membership for good stops the group.
func (g *Group) membership(ctx context.Context, mlease *azlease.Lease, next *announcement, touch bool) {
	g.mu.Lock()
	m := g.member
	g.mu.Unlock()
	if m == nil || !m.Valid() {
		if m != nil {
			_ = m.Unlock(ctx) // lost: say so, give back what may be held
			g.mu.Lock()
			g.member, g.published = nil, nil
			g.mu.Unlock()
			g.cfg.log.Warn("azlease/shards: lost the membership; joining again")
		}
		lock, err := mlease.Hold(ctx)
		switch {
		case err == nil:
		case ctx.Err() != nil:
			return
		case errors.Is(err, azlease.ErrLeaseHeld):
			g.cfg.log.Warn("azlease/shards: the membership of this identity is held (a previous run that has not expired, or another replica with the same identity); waiting")
			return
		case errors.Is(err, azlease.ErrPermanent):
			g.fail(fmt.Errorf("azlease/shards: storage refused to lease this replica's membership %q (the replica needs permission to lease and write blobs): %w",
				g.names.member(g.cfg.identity), err))
			return
		default:
			g.cfg.log.Debug("azlease/shards: could not join the group", slog.Any("error", err))
			return
		}
		g.mu.Lock()
		g.member, g.published = lock, nil
		g.mu.Unlock()
		m = lock
		touch = true // the others count this replica at their next poll
		g.cfg.log.Info("azlease/shards: joined the group", slog.Int("weight", g.cfg.weight))
	}
	if g.writeMembership(ctx, m, next) && touch {
		g.touch(ctx)
	}
}

// writeMembership writes the membership's metadata with next's IDs and
// loads, and reports whether it did. If Azure finds it too large
// (azlease's record, or metadata written by someone else, took more room
// than reserved), it announces fewer IDs, for good, down to none, then
// publishes no loads: the weight is always written.
func (g *Group) writeMembership(ctx context.Context, m *azlease.Lock, next *announcement) bool {
	for {
		err := m.SetMetadata(ctx, g.membershipMetadata(m, next))
		switch {
		case err == nil:
			g.mu.Lock()
			if g.member == m {
				g.published = next
			}
			g.mu.Unlock()
			return true
		case bloberror.HasCode(err, bloberror.MetadataTooLarge) && (next.accept != "" || next.loads != ""):
			cut := *next
			if next.accept != "" {
				budget := len(next.accept) / 2
				g.mu.Lock()
				g.idBudget = min(g.idBudget, budget)
				g.mu.Unlock()
				g.cfg.log.Warn("azlease/shards: the membership's metadata is too large for Azure; announcing fewer lease IDs",
					slog.Int("id_bytes", len(next.accept)), slog.Int("budget", budget))
				cut.accept = cutAccept(next.accept, budget)
			} else {
				g.cfg.log.Warn("azlease/shards: the membership's metadata is too large for Azure even without lease IDs; publishing no loads")
				cut.loads, cut.rest = "", ""
			}
			next = &cut
			continue
		case ctx.Err() != nil:
		case errors.Is(err, azlease.ErrPermanent):
			g.fail(fmt.Errorf("azlease/shards: storage refused to write this replica's membership %q (the replica needs permission to lease and write blobs): %w",
				g.names.member(g.cfg.identity), err))
		default:
			g.cfg.log.Debug("azlease/shards: could not write the membership", slog.Any("error", err))
		}
		g.mu.Lock()
		if g.member == m {
			g.published = nil
		}
		g.mu.Unlock()
		return false
	}
}

// cutAccept keeps the leading items of an IDs' value that fit in budget
// bytes.
func cutAccept(accept string, budget int) string {
	if len(accept) <= budget {
		return accept
	}
	cut := accept[:budget+1]
	if i := strings.LastIndexByte(cut, ','); i >= 0 {
		return accept[:i]
	}
	return ""
}

// membershipMetadata is what a membership says: weight, when it joined,
// the shard list it runs (count and digest), the lease IDs it accepts
// shards under, and the loads of the shards it owns.
func (g *Group) membershipMetadata(m *azlease.Lock, a *announcement) map[string]string {
	md := map[string]string{
		metaWeight: strconv.Itoa(g.cfg.weight),
		metaJoined: strconv.FormatInt(m.StartedAt().UnixMilli(), 10),
		metaCount:  strconv.Itoa(len(g.shards)),
		metaSum:    g.sum,
		metaIn:     a.accept,
	}
	if a.loads != "" {
		md[metaLoads] = a.loads
	}
	if g.cfg.zone != "" {
		md[metaZone] = g.cfg.zone
	}
	if a.rest != "" {
		md[metaLoadRest] = a.rest
	}
	return md
}

// withdrawTimeout bounds the withdrawal of a leaving replica's IDs.
const withdrawTimeout = 3 * time.Second

// leave withdraws the lease IDs the membership announced and releases it,
// then stops every shard. Withdrawing them first means that nothing is
// handed to this replica as it leaves, nor to a membership that an acquire
// of this replica's, applied late, leases again for a lease duration (it
// would count as a member, with no ID to hand it anything under). The
// same write leaves the shards' loads as they are now on the released
// membership: the others place the shards by them while free and once
// taken, and their takers' meters start from them (lastLoadsOfTheGone),
// where withdrawn they counted at the mean, and their takers started from
// nothing, until each taker published them. Nothing in bg may be running.
func (g *Group) leave() {
	ctx := context.Background()
	last := &announcement{}
	last.loads, last.rest = g.publishedLoads(time.Now())
	g.mu.Lock()
	m := g.member
	g.member = nil
	g.mu.Unlock()
	if m != nil {
		if m.Valid() {
			// One attempt's time at most: storage that does not answer
			// must not hold up the stop, and the withdrawal only saves a
			// lease duration in the rare case above.
			wctx, cancel := context.WithTimeout(ctx, withdrawTimeout)
			_ = m.SetMetadata(wctx, g.membershipMetadata(m, last))
			cancel()
		}
		_ = m.Unlock(ctx)
	}
	// Hand-offs under way complete (or keep their shard, which is then
	// stopped below with the others).
	g.mu.Lock()
	var all []*owned
	for _, o := range g.owned {
		if !o.moving() {
			all = append(all, o)
		}
	}
	g.mu.Unlock()
	for _, o := range all {
		o.end(errStopped)
	}
	g.movers.Wait()
	g.mu.Lock()
	all = all[:0]
	for _, o := range g.owned {
		all = append(all, o)
	}
	g.mu.Unlock()
	for _, o := range all {
		o.end(errStopped)
	}
	var wg sync.WaitGroup
	releases := make(chan struct{}, releaseConcurrency)
	for _, o := range all {
		wg.Go(func() { g.finish(ctx, o, releases) })
	}
	wg.Wait()
	g.wg.Wait()
	// The others list at their next poll, rather than at their listing
	// interval, and take the shards released. Storage that does not answer
	// must not hold up the stop: one attempt's time at most.
	tctx, cancel := context.WithTimeout(ctx, withdrawTimeout)
	g.touch(tctx)
	cancel()
	g.cfg.log.Info("azlease/shards: left the group")
}
