package shards

// The replica's membership: the lease on "GROUP/members/IDENTITY" that
// makes the others count it, and its metadata (its weight, when it joined,
// the shard list it runs, and the lease IDs it accepts shards under), kept
// within Azure's bound on a blob's metadata; joining and writing it off
// the poll loop; and withdrawing it when the replica leaves.

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/storage/azblob/bloberror"

	"github.com/azlease/azlease"
)

// Azure refuses a blob's metadata (400 MetadataTooLarge) when its names and
// values take more than 8 KiB together. A membership's metadata holds
// azlease's own record of the lease's terms and the group's keys; the lease
// IDs it announces get what is left, and are cut to fit: the weight is
// always written, so that the others count the replica.
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
	// fixedMetadataMax is what the group's own keys other than the IDs take
	// at most: the weight (up to 4 digits), when it joined (Unix ms, up to
	// 20 characters), the shard count (4 digits), the shard list's digest,
	// and the name of the IDs' key.
	fixedMetadataMax = len(metaWeight) + 4 + len(metaJoined) + 20 + len(metaCount) + 4 + len(metaSum) + sumLen + len(metaIn)
	// initialIDBudget is the room for the announced IDs: 5,797 bytes, 71
	// IDs for names of 43 bytes ("tenant-<uuid>"), and one for the
	// longest name a group allows (1,015 bytes, escaped to 3,045 at most).
	initialIDBudget = metadataLimit - recordReserve - fixedMetadataMax
)

// unknown is what published says when the membership's metadata is not
// known to say anything: before the first write of a term, or after a
// write that failed.
const unknown = "\x00"

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
// IDs for incoming (in the group's order), as many as fit: it starts a
// join or a write in bg when one is needed and none is under way, and
// does not wait for it.
func (g *Group) keepMembership(ctx context.Context, mlease *azlease.Lease, incoming []string) {
	g.mu.Lock()
	busy, m, published, budget := g.memberOp, g.member, g.published, g.idBudget
	g.mu.Unlock()
	if busy {
		return // the next poll looks again
	}
	accept := g.announce(incoming, budget)
	if m != nil && m.Valid() && accept == published {
		return
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
		g.membership(ctx, mlease, accept)
	})
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
func (g *Group) membership(ctx context.Context, mlease *azlease.Lease, accept string) {
	g.mu.Lock()
	m := g.member
	g.mu.Unlock()
	if m == nil || !m.Valid() {
		if m != nil {
			_ = m.Unlock(ctx) // lost: say so, give back what may be held
			g.mu.Lock()
			g.member, g.published = nil, unknown
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
		g.member, g.published = lock, unknown
		g.mu.Unlock()
		m = lock
		g.cfg.log.Info("azlease/shards: joined the group", slog.Int("weight", g.cfg.weight))
	}
	g.writeMembership(ctx, m, accept)
}

// writeMembership writes the membership's metadata with the IDs accept.
// If Azure finds it too large (azlease's record, or metadata written by
// someone else, took more room than reserved), it announces fewer IDs, for
// good, down to none: the weight is always written.
func (g *Group) writeMembership(ctx context.Context, m *azlease.Lock, accept string) {
	for {
		err := m.SetMetadata(ctx, g.membershipMetadata(m, accept))
		switch {
		case err == nil:
			g.mu.Lock()
			if g.member == m {
				g.published = accept
			}
			g.mu.Unlock()
			return
		case bloberror.HasCode(err, bloberror.MetadataTooLarge) && accept != "":
			budget := len(accept) / 2
			g.mu.Lock()
			g.idBudget = min(g.idBudget, budget)
			g.mu.Unlock()
			g.cfg.log.Warn("azlease/shards: the membership's metadata is too large for Azure; announcing fewer lease IDs",
				slog.Int("id_bytes", len(accept)), slog.Int("budget", budget))
			accept = cutAccept(accept, budget)
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
			g.published = unknown
		}
		g.mu.Unlock()
		return
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
// the shard list it runs (count and digest), and the lease IDs it accepts
// shards under.
func (g *Group) membershipMetadata(m *azlease.Lock, accept string) map[string]string {
	return map[string]string{
		metaWeight: strconv.Itoa(g.cfg.weight),
		metaJoined: strconv.FormatInt(m.StartedAt().UnixMilli(), 10),
		metaCount:  strconv.Itoa(len(g.shards)),
		metaSum:    g.sum,
		metaIn:     accept,
	}
}

// withdrawTimeout bounds the withdrawal of a leaving replica's IDs.
const withdrawTimeout = 3 * time.Second

// leave withdraws the lease IDs the membership announced and releases it,
// then stops every shard. Withdrawing them first means that nothing is
// handed to this replica as it leaves, nor to a membership that an acquire
// of this replica's, applied late, leases again for a lease duration (it
// would count as a member, with no ID to hand it anything under). Nothing
// in bg may be running.
func (g *Group) leave() {
	ctx := context.Background()
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
			_ = m.SetMetadata(wctx, g.membershipMetadata(m, ""))
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
	for _, o := range all {
		wg.Go(func() { g.finish(ctx, o) })
	}
	wg.Wait()
	g.wg.Wait()
	g.cfg.log.Info("azlease/shards: left the group")
}
