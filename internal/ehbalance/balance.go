package ehbalance

// The decision of one cycle: from the listed ownership records, which
// records this processor writes (keeps or claims). A pure function of the
// records, the time and the random source.

import (
	"math/rand/v2"
	"time"
)

// record is one partition's ownership as listed: a blob's owner, ETag and
// Last-Modified. A partition without a blob has no ETag.
type record struct {
	partition    string
	owner        string
	etag         string // as listed; "" when the partition never had a blob
	lastModified time.Time
}

// view is what a cycle makes of a listing.
type view struct {
	current    []record // held by this processor, in list order
	free       []record // expired or relinquished, in list order, then the never-owned in partition order
	aboveMax   []record // held by owners above maxAllowed, owner by owner
	owners     int      // distinct live owners, this processor included
	maxAllowed int
	claimMore  bool
}

// assess reads a listing as the Go processor's getAvailablePartitions does.
// listed is in the order the processor meets records (see the package
// documentation); partitions is every partition, in the group's order.
func assess(self string, partitions []string, listed []record, now time.Time, expiration time.Duration) view {
	var v view
	seen := make(map[string]bool, len(listed))
	byOwner := map[string][]record{self: nil}
	order := []string{self} // owners in the order first met
	for _, r := range listed {
		seen[r.partition] = true
		if now.Sub(r.lastModified) > expiration || r.owner == "" {
			v.free = append(v.free, r)
			continue
		}
		if _, ok := byOwner[r.owner]; !ok {
			order = append(order, r.owner)
		}
		byOwner[r.owner] = append(byOwner[r.owner], r)
	}
	for _, p := range partitions {
		if !seen[p] {
			v.free = append(v.free, record{partition: p})
		}
	}
	k := len(partitions)
	v.owners = len(byOwner)
	minRequired := k / v.owners
	v.maxAllowed = minRequired
	extra := k%v.owners > 0
	v.current = byOwner[self]
	if extra && len(v.current) >= minRequired {
		v.maxAllowed++
	}
	for _, o := range order[1:] {
		if rs := byOwner[o]; len(rs) > v.maxAllowed {
			v.aboveMax = append(v.aboveMax, rs...)
		}
	}
	switch {
	case len(v.current) >= v.maxAllowed:
		v.claimMore = false
	case extra && len(v.current) == v.maxAllowed-1:
		v.claimMore = len(v.free) > 0 || len(v.aboveMax) > 0
	default:
		v.claimMore = true
	}
	return v
}

// decide returns the records to write with this processor as owner: the
// ones it holds, then the ones it claims.
func decide(v view, strategy Strategy, rnd *rand.Rand) []record {
	out := append([]record(nil), v.current...)
	if !v.claimMore {
		return out
	}
	switch strategy {
	case Greedy:
		out = append(out, firstInRandomOrder(rnd, v.free, v.maxAllowed-len(out))...)
		if len(out) < v.maxAllowed {
			out = append(out, firstInRandomOrder(rnd, v.aboveMax, v.maxAllowed-len(out))...)
		}
	default:
		switch {
		case len(v.free) > 0:
			out = append(out, v.free[rnd.IntN(len(v.free))])
		case len(v.aboveMax) > 0:
			out = append(out, v.aboveMax[rnd.IntN(len(v.aboveMax))])
		}
	}
	return out
}

// firstInRandomOrder returns the first n of rs (all of them if fewer) in a
// random order: the SDK's pick, which permutes the first n candidates
// rather than choosing n among all of them.
func firstInRandomOrder(rnd *rand.Rand, rs []record, n int) []record {
	n = min(n, len(rs))
	if n <= 0 {
		return nil
	}
	out := make([]record, 0, n)
	for _, i := range rnd.Perm(n) {
		out = append(out, rs[i])
	}
	return out
}
