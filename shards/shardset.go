package shards

// The set of shards a group runs, as a replica decides it from a listing:
// the static lists its live members run (each published once, by digest,
// so that every replica can read the others'), plus the shards the
// registry adds, minus those it removes; and which members may own which
// shard (a member runs the shards of its own list and the registry's; a
// member without a list runs any). While every member runs the same list
// and the registry says nothing, the set is that list, in its order, and
// anyone may own anything: the group behaves as it did before shard sets
// could change.

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"io"
	"log/slog"
	"slices"
	"strings"

	"github.com/Azure/azure-sdk-for-go/sdk/azcore"
	"github.com/Azure/azure-sdk-for-go/sdk/azcore/streaming"
	"github.com/Azure/azure-sdk-for-go/sdk/storage/azblob/blob"
	"github.com/Azure/azure-sdk-for-go/sdk/storage/azblob/bloberror"
	"github.com/Azure/azure-sdk-for-go/sdk/storage/azblob/blockblob"
	"github.com/Azure/azure-sdk-for-go/sdk/storage/azblob/container"
)

// shardSet is the group's shards as a poll decides them.
type shardSet struct {
	names    []string                        // in the group's order
	eligible func(shard, member string) bool // nil: any member may own any shard
	removed  map[string]bool                 // the registry's removed names
	// unknown counts the live members whose static list this replica
	// cannot read (yet): the shards only they run are not in names.
	unknown int
	// capped is true when the set had more than MaxShards names: the
	// first MaxShards, in the group's order, are run.
	capped bool
}

func (s shardSet) has(name string) bool { return slices.Contains(s.names, name) }

// groupSet is the set from a view: the registry as last read, the static
// lists this replica knows (by digest), and this replica's own digest
// (self counts as a member running it, listed or not; "" for an observer,
// or a replica without a static list).
func groupSet(v view, reg registry, known map[string][]string, self, ownSum string) shardSet {
	set := shardSet{removed: reg.removed}
	sums := map[string]string{} // member → the digest of its static list ("" for none)
	for _, m := range v.members {
		switch {
		case !m.says:
			sums[m.name] = "?" // an older version: any shard
		case m.count > 0:
			sums[m.name] = m.sum
		default:
			sums[m.name] = ""
		}
	}
	if self != "" {
		sums[self] = ownSum
	}
	inUse := map[string]bool{}
	for _, s := range sums {
		if s != "" && s != "?" {
			inUse[s] = true
		}
	}
	// The common case: one list, no registry entry.
	if len(reg.added) == 0 && len(reg.removed) == 0 && len(inUse) <= 1 {
		for s := range inUse {
			if l, ok := known[s]; ok {
				set.names = l
				return set
			}
			set.unknown = len(v.members)
		}
		return set
	}
	lists := map[string]map[string]bool{}
	var all []string
	seen := map[string]bool{}
	for s := range inUse {
		l, ok := known[s]
		if !ok {
			for _, m := range sums {
				if m == s {
					set.unknown++
				}
			}
			continue
		}
		in := make(map[string]bool, len(l))
		for _, n := range l {
			in[n] = true
			if !seen[n] {
				seen[n] = true
				all = append(all, n)
			}
		}
		lists[s] = in
	}
	added := make(map[string]bool, len(reg.added))
	for _, n := range reg.added {
		added[n] = true
		if !seen[n] {
			seen[n] = true
			all = append(all, n)
		}
	}
	all = slices.DeleteFunc(all, func(n string) bool { return reg.removed[n] })
	slices.SortFunc(all, naturalCompare)
	if len(all) > MaxShards {
		all, set.capped = all[:MaxShards], true
	}
	set.names = all
	set.eligible = func(shard, member string) bool {
		if added[shard] {
			return true
		}
		s, ok := sums[member]
		switch {
		case !ok || s == "" || s == "?":
			return true
		case lists[s] != nil:
			return lists[s][shard]
		}
		return false
	}
	return set
}

// formatList is a static list's published content: one name a line.
func formatList(names []string) []byte {
	return []byte(strings.Join(names, "\n"))
}

// parseList reads a published static list; nil when its digest does not
// match sum (a list written by someone else, or cut short).
func parseList(b []byte, sum string) []string {
	var out []string
	sc := bufio.NewScanner(bytes.NewReader(b))
	sc.Buffer(make([]byte, 0, 4096), 2*maxBlobName)
	for sc.Scan() {
		out = append(out, sc.Text())
	}
	if sc.Err() != nil || listSum(out) != sum {
		return nil
	}
	return out
}

// readList reads the published static list of digest sum.
func readList(ctx context.Context, cc *container.Client, n leaseNames, sum string) ([]string, error) {
	var out []string
	err := retry(ctx, func(actx context.Context) error {
		resp, err := cc.NewBlobClient(n.list(sum)).DownloadStream(actx, nil)
		if err != nil {
			return storageErr("read", n.list(sum), err)
		}
		defer resp.Body.Close()
		b, err := io.ReadAll(io.LimitReader(resp.Body, int64(MaxShards)*(maxBlobName+1)))
		if err != nil {
			return storageErr("read", n.list(sum), err)
		}
		out = parseList(b, sum)
		return nil
	})
	if err == nil && out == nil {
		return nil, fmt.Errorf("azlease/shards: the list %s does not match its digest", n.list(sum))
	}
	return out, err
}

// publishList writes a static list under its digest, unless it exists.
func publishList(ctx context.Context, cc *container.Client, n leaseNames, names []string, sum string) error {
	anyTag := azcore.ETagAny
	return retry(ctx, func(actx context.Context) error {
		_, err := cc.NewBlockBlobClient(n.list(sum)).Upload(actx, streaming.NopCloser(bytes.NewReader(formatList(names))),
			&blockblob.UploadOptions{AccessConditions: &blob.AccessConditions{ModifiedAccessConditions: &blob.ModifiedAccessConditions{IfNoneMatch: &anyTag}}})
		if err == nil || bloberror.HasCode(err, bloberror.BlobAlreadyExists, bloberror.ConditionNotMet) {
			return nil
		}
		return storageErr("write", n.list(sum), err)
	})
}

// refreshSet brings what the replica knows of the set up to v: it
// creates the registry if it does not exist (the beacon the replicas
// watch), reads it again when its version changed, publishes this
// replica's static list if it is not, and reads the lists of members that
// run another. Failures leave what was known, and are retried at the next
// listing. It returns the set.
func (g *Group) refreshSet(ctx context.Context, v view) shardSet {
	ctx, cancel := context.WithTimeout(ctx, 2*attemptTimeout)
	defer cancel()
	if !v.registry {
		g.createRegistry(ctx)
	} else if g.regVersion != v.version || !g.regRead {
		if r, _, _, err := readRegistry(ctx, g.cc, g.names); err != nil {
			g.cfg.log.Debug("azlease/shards: could not read the registry", slog.Any("error", err))
		} else {
			if r.version != g.reg.version || !g.regRead {
				g.cfg.log.Info("azlease/shards: the group's shard set changed", slog.Int("added", len(r.added)), slog.Int("removed", len(r.removed)),
					slog.Uint64("version", r.version))
			}
			g.reg, g.regVersion, g.regRead = r, v.version, true
		}
	}
	if len(g.shards) > 0 && !v.lists[g.sum] {
		if err := publishList(ctx, g.cc, g.names, g.shards, g.sum); err != nil {
			g.cfg.log.Debug("azlease/shards: could not publish the shard list", slog.Any("error", err))
		}
	}
	for _, m := range v.members {
		if m.count == 0 || m.sum == "" || g.known[m.sum] != nil || !v.lists[m.sum] {
			continue
		}
		l, err := readList(ctx, g.cc, g.names, m.sum)
		if err != nil {
			g.cfg.log.Debug("azlease/shards: could not read a member's shard list", slog.String("member", m.name), slog.Any("error", err))
			continue
		}
		g.known[m.sum] = l
		g.cfg.log.Info("azlease/shards: a member runs another shard list", slog.String("member", m.name), slog.Int("shards", len(l)))
	}
	self := g.cfg.identity
	ownSum := ""
	if len(g.shards) > 0 {
		ownSum = g.sum
	}
	set := groupSet(v, g.reg, g.known, self, ownSum)
	if set.capped && !g.cappedLogged {
		g.cappedLogged = true
		g.cfg.log.Warn("azlease/shards: the group's shard set has more than MaxShards shards; running the first", slog.Int("max_shards", MaxShards))
	}
	return set
}

// createRegistry creates the registry, empty, if it does not exist.
func (g *Group) createRegistry(ctx context.Context) {
	anyTag := azcore.ETagAny
	zero := "0"
	err := retry(ctx, func(actx context.Context) error {
		_, err := g.cc.NewBlockBlobClient(g.names.registry()).Upload(actx, streaming.NopCloser(bytes.NewReader(nil)), &blockblob.UploadOptions{
			Metadata:         map[string]*string{metaVersion: &zero},
			AccessConditions: &blob.AccessConditions{ModifiedAccessConditions: &blob.ModifiedAccessConditions{IfNoneMatch: &anyTag}},
		})
		if err == nil || bloberror.HasCode(err, bloberror.BlobAlreadyExists, bloberror.ConditionNotMet) {
			return nil
		}
		return storageErr("create", g.names.registry(), err)
	})
	if err != nil {
		g.cfg.log.Debug("azlease/shards: could not create the registry", slog.Any("error", err))
	}
}
