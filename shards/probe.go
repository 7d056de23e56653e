package shards

// The zone probes: in a group whose members declare two zones or more,
// each zone has one prober outside it (zoneProbers), which reads the
// membership of one of the zone's members every poll, in turn, and tells
// the group (touch) when it finds one gone, so that a lost zone's shards
// are taken within about a lease duration and two polls rather than
// waiting for a listing interval. A probe only makes replicas list:
// decisions still come from listings.

import (
	"cmp"
	"context"
	"hash/fnv"
	"log/slog"
	"slices"
	"sync"
	"time"

	"github.com/azlease/azlease"
)

// zoneProbers returns, for each zone among members, the member that
// probes it: one of the members outside the zone, chosen by the zone's
// name (the members outside it by name, indexed by a hash of the zone's
// name). Every replica computes the same from the same listing; the
// choice depends only on the zone and the members outside it, so it stays
// while the zone's own members go (a zone being lost keeps its prober).
// nil when the members declare fewer than two zones (a member without a
// zone counts as the zone "", as the balancer counts it).
func zoneProbers(members map[string]memberInfo) map[string]string {
	names := make([]string, 0, len(members))
	zones := map[string]bool{}
	for n, m := range members {
		names = append(names, n)
		zones[m.zone] = true
	}
	if len(zones) < 2 {
		return nil
	}
	slices.SortFunc(names, cmp.Compare)
	out := make(map[string]string, len(zones))
	for z := range zones {
		var outside []string
		for _, n := range names {
			if members[n].zone != z {
				outside = append(outside, n)
			}
		}
		h := fnv.New32a()
		h.Write([]byte(z))
		out[z] = outside[h.Sum32()%uint32(len(outside))]
	}
	return out
}

// prober is what the poll loop knows of the zones this replica probes (the
// loop's own: no lock).
type prober struct {
	// zones are the zones this replica probes, each with its members by
	// name, as the last listing showed them live.
	zones map[string][]string
	// alert is, by zone, until when every member of the zone is probed at
	// each poll rather than one in turn: a member of it was found gone, and
	// the others of a lost zone go within a lease duration of the first.
	alert map[string]time.Time
	n     int // polls that probed: whose turn it is in each zone
}

// watchZones takes a new listing's members: it returns the members of the
// zones this replica probed that the listing no longer shows live (the
// group should hear of it: touch), and sets the zones it probes from now
// on.
func (g *Group) watchZones(members map[string]memberInfo) (vanished []string) {
	pr := &g.probe
	for z, ms := range pr.zones {
		for _, m := range ms {
			if _, live := members[m]; !live {
				vanished = append(vanished, m)
				pr.alertZone(z, time.Now().Add(g.cfg.duration))
			}
		}
	}
	pr.zones = map[string][]string{}
	for z, p := range zoneProbers(members) {
		if p != g.cfg.identity {
			continue
		}
		var ms []string
		for n, m := range members {
			if m.zone == z {
				ms = append(ms, n)
			}
		}
		slices.SortFunc(ms, cmp.Compare)
		pr.zones[z] = ms
	}
	slices.Sort(vanished)
	return vanished
}

// probeZones reads the membership of one member of each zone this replica
// probes, in turn (every member of a zone on alert), at once, and returns
// the members found gone: their membership blob missing or its lease not
// held (expired, broken, released). Where it finds one gone, it reads the
// zone's other members at once too, so that every member of a lost zone
// whose lease has expired is told in the same poll; the zone is then on
// alert for a lease duration. A probe that fails is ignored: the next poll
// probes again. Each read is one Get Blob Properties, billed as "other".
func (g *Group) probeZones(ctx context.Context) (gone []string) {
	pr := &g.probe
	if len(pr.zones) == 0 {
		return nil
	}
	now := time.Now()
	probed := map[string]bool{}
	var targets []string
	for z, ms := range pr.zones {
		switch {
		case len(ms) == 0:
		case now.Before(pr.alert[z]):
			targets = append(targets, ms...)
		default:
			targets = append(targets, ms[pr.n%len(ms)])
		}
	}
	pr.n++
	gone = g.probeMembers(ctx, targets, probed)
	// A member found gone: read the rest of its zone now.
	targets = targets[:0]
	for z, ms := range pr.zones {
		if !slices.ContainsFunc(gone, func(m string) bool { return slices.Contains(ms, m) }) {
			continue
		}
		pr.alertZone(z, now.Add(g.cfg.duration))
		for _, m := range ms {
			if !probed[m] {
				targets = append(targets, m)
			}
		}
	}
	gone = append(gone, g.probeMembers(ctx, targets, probed)...)
	for z, ms := range pr.zones {
		pr.zones[z] = slices.DeleteFunc(ms, func(m string) bool { return slices.Contains(gone, m) })
	}
	slices.Sort(gone)
	return gone
}

// probeMembers reads the memberships of members at once, each within an
// attempt's time, marks them in probed, and returns those found gone.
func (g *Group) probeMembers(ctx context.Context, members []string, probed map[string]bool) (gone []string) {
	var mu sync.Mutex
	var wg sync.WaitGroup
	for _, m := range members {
		probed[m] = true
		wg.Go(func() {
			actx, cancel := context.WithTimeout(ctx, attemptTimeout)
			defer cancel()
			st, err := azlease.Inspect(actx, g.cc, g.names.member(m))
			if err != nil || (st.Exists && st.Leased) {
				return
			}
			mu.Lock()
			gone = append(gone, m)
			mu.Unlock()
		})
	}
	wg.Wait()
	return gone
}

// alertZone probes every member of zone z at each poll until then.
func (pr *prober) alertZone(z string, until time.Time) {
	if pr.alert == nil {
		pr.alert = map[string]time.Time{}
	}
	pr.alert[z] = until
}

// tellGone tells the group that members it counts are gone, as a probe or
// a listing of this replica's found: it touches the registry in bg, so
// that every replica lists at its next poll (a member that left cleanly
// touched it already: this costs the group one more listing each).
func (g *Group) tellGone(ctx context.Context, gone []string, how string) {
	g.cfg.log.Info("azlease/shards: members gone, seen by "+how+"; telling the group", slog.Any("members", gone))
	g.bg.Go(func() { g.touch(ctx) })
}
