package shards

// The group's shard set while it runs: the registry blob "GROUP/shardset"
// lists the shards added and removed at run time (AddShards, RemoveShards:
// read it, change it, write it back conditional on the ETag read, again on
// a conflict), and each static list the replicas run is published once
// ("GROUP/lists/DIGEST") so that replicas started with different lists (a
// rolling deploy) agree on the set and on which of them may own what. The
// registry is also the group's beacon: a replica reads its properties at
// every poll, one cheap request, and lists the group at once when they
// changed (a replica joined or left, or the set changed: see touch).

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/azcore"
	"github.com/Azure/azure-sdk-for-go/sdk/azcore/policy"
	"github.com/Azure/azure-sdk-for-go/sdk/azcore/streaming"
	"github.com/Azure/azure-sdk-for-go/sdk/storage/azblob/blob"
	"github.com/Azure/azure-sdk-for-go/sdk/storage/azblob/bloberror"
	"github.com/Azure/azure-sdk-for-go/sdk/storage/azblob/blockblob"
	"github.com/Azure/azure-sdk-for-go/sdk/storage/azblob/container"

	"github.com/azlease/azlease"
)

// registryHeader opens the registry's content; each line after it is "+"
// or "-" and a shard's name (names hold no control character).
const registryHeader = "azlease-shardset 1"

// metaVersion is the registry's version, counted up by every change of
// its content; metaTouch is changed to tell the replicas to list.
const (
	metaVersion = "shardsetversion"
	metaTouch   = "shardsettouch"
)

// maxRegistry bounds the names the registry holds, added and removed.
const maxRegistry = 2 * MaxShards

// registry is what the registry blob says.
type registry struct {
	version uint64
	added   []string        // in the order they were added
	removed map[string]bool // removed: not run, whoever's list has them
}

func (r registry) has(s string) bool { return slices.Contains(r.added, s) }

// parseRegistry reads the registry's content. Lines that are not a valid
// entry are skipped; a content without the header is an error.
func parseRegistry(b []byte, names leaseNames) (registry, error) {
	r := registry{removed: map[string]bool{}}
	lines := strings.Split(string(b), "\n")
	if len(lines) == 0 || lines[0] != registryHeader {
		return r, fmt.Errorf("azlease/shards: the registry %s does not start with %q", names.registry(), registryHeader)
	}
	seen := map[string]bool{}
	for _, l := range lines[1:] {
		if len(l) < 2 || (l[0] != '+' && l[0] != '-') {
			continue
		}
		name := l[1:]
		if seen[name] || checkNames(names.group, []string{name}) != nil || len(names.shard(name)) > maxBlobName {
			continue
		}
		seen[name] = true
		if l[0] == '+' {
			r.added = append(r.added, name)
		} else {
			r.removed[name] = true
		}
	}
	return r, nil
}

// maxBlobName is the longest blob name Azure takes.
const maxBlobName = 1024

// format is the registry's content.
func (r registry) format() []byte {
	var b bytes.Buffer
	b.WriteString(registryHeader)
	for _, s := range r.added {
		b.WriteString("\n+" + s)
	}
	removed := make([]string, 0, len(r.removed))
	for s := range r.removed {
		removed = append(removed, s)
	}
	slices.SortFunc(removed, naturalCompare)
	for _, s := range removed {
		b.WriteString("\n-" + s)
	}
	return b.Bytes()
}

// AddShards adds shards to the group named group in the container cc
// points at, while its replicas run: within a poll interval they see them,
// and the least loaded replica takes each (a shard added counts at the
// group's mean load until its work reports one). It writes the group's
// registry ("GROUP/shardset"), conditional on what it read, again if
// another writer came first. A shard added is run whatever the replicas'
// static lists say, by every replica (replicas of any list may own it); a
// name already added is left as it is; a name removed before is added
// again, its fencing epochs going on from where they were. It returns an
// *OptionError for invalid names, and an error wrapping
// [azlease.ErrPermanent] when storage refuses (a role that may not write
// blobs), [azlease.ErrTransient] when it fails for longer than ctx allows.
// The registry holds at most 2 × MaxShards names.
func AddShards(ctx context.Context, cc *container.Client, group string, names ...string) error {
	return changeRegistry(ctx, cc, group, names, func(r *registry, s string) {
		delete(r.removed, s)
		if !r.has(s) {
			r.added = append(r.added, s)
		}
	})
}

// RemoveShards removes shards from the group named group, while its
// replicas run: within a poll interval the owner of each ends its work's
// context (cause wrapping [azlease.ErrStopped]), waits for the work to
// return (at most Options.DrainTimeout), clears the shard's blob (its
// content, the checkpoint the work wrote through its term, and the
// group's metadata) and releases it; nobody takes it again. A shard
// removed stays removed whatever the replicas' static lists say, until
// AddShards adds it again. The shard's blob stays, empty, so that its
// fencing epochs go on growing if it is added again. Errors as for
// [AddShards].
func RemoveShards(ctx context.Context, cc *container.Client, group string, names ...string) error {
	return changeRegistry(ctx, cc, group, names, func(r *registry, s string) {
		r.added = slices.DeleteFunc(r.added, func(x string) bool { return x == s })
		r.removed[s] = true
	})
}

// ReadShardSet returns the shards the registry of the group named group
// adds and removes (see [AddShards]); both are empty when it does not
// exist. It needs only read access.
func ReadShardSet(ctx context.Context, cc *container.Client, group string) (added, removed []string, err error) {
	if cc == nil {
		return nil, nil, optionErr("container", "nil *container.Client")
	}
	n := leaseNames{group: group}
	r, _, _, err := readRegistry(ctx, cc, n)
	if err != nil {
		return nil, nil, err
	}
	for s := range r.removed {
		removed = append(removed, s)
	}
	slices.SortFunc(removed, naturalCompare)
	return r.added, removed, nil
}

// registryAttempts bounds the conflicts a change of the registry meets
// before it gives up.
const registryAttempts = 20

func changeRegistry(ctx context.Context, cc *container.Client, group string, names []string, apply func(*registry, string)) error {
	if cc == nil {
		return optionErr("container", "nil *container.Client")
	}
	if err := checkNames(group, names); err != nil {
		return err
	}
	n := leaseNames{group: group}
	for _, s := range names {
		if _, err := azlease.NewLease(cc, n.shard(s), nil); err != nil {
			return optionErr("shards", "shard %q: %v", s, err)
		}
	}
	for attempt := 0; ; attempt++ {
		r, etag, exists, err := readRegistry(ctx, cc, n)
		if err != nil {
			return err
		}
		before := string(r.format())
		for _, s := range names {
			apply(&r, s)
		}
		if string(r.format()) == before && exists {
			return nil
		}
		if len(r.added)+len(r.removed) > maxRegistry {
			return optionErr("shards", "the registry would hold %d names: at most %d", len(r.added)+len(r.removed), maxRegistry)
		}
		r.version++
		err = writeRegistry(ctx, cc, n, r, etag, exists)
		switch {
		case err == nil:
			return nil
		case errors.Is(err, errConflict) && attempt < registryAttempts:
			if !sleepCtx(ctx, time.Duration(rand.Int64N(int64(100*time.Millisecond)))) {
				return fmt.Errorf("azlease/shards: changing the registry %s: %w", n.registry(), context.Cause(ctx))
			}
		default:
			return err
		}
	}
}

// errConflict is a conditional write that lost to another writer.
var errConflict = errors.New("azlease/shards: the registry changed meanwhile")

// storageError is a failed request of the group's own (the registry, the
// lists): its kind ([azlease.ErrPermanent] or [azlease.ErrTransient]) and
// the cause. Its text gives the status and error code, never the request's
// URL (which may carry a SAS token).
type storageError struct {
	op, blob string
	kind     error
	status   int
	code     string
	err      error
}

func (e *storageError) Error() string {
	if e.status != 0 {
		return fmt.Sprintf("%v (%s %s: %d %s)", e.kind, e.op, e.blob, e.status, e.code)
	}
	return fmt.Sprintf("%v (%s %s: no answer)", e.kind, e.op, e.blob)
}

func (e *storageError) Unwrap() []error { return []error{e.kind, e.err} }

// storageErr classifies err from a request op on blob.
func storageErr(op, blob string, err error) error {
	e := &storageError{op: op, blob: blob, kind: azlease.ErrTransient, err: err}
	var re *azcore.ResponseError
	if errors.As(err, &re) {
		e.status, e.code = re.StatusCode, re.ErrorCode
		if re.StatusCode < 500 && re.StatusCode != http.StatusRequestTimeout && re.StatusCode != http.StatusTooManyRequests {
			e.kind = azlease.ErrPermanent
		}
	}
	return e
}

// attemptTimeout bounds each of the group's own requests.
const attemptTimeout = 3 * time.Second

// retry runs op until it succeeds, fails for good, or ctx ends, each
// attempt within attemptTimeout and without the SDK's retries.
func retry(ctx context.Context, op func(context.Context) error) error {
	var last error
	for n := 0; ; n++ {
		actx, cancel := context.WithTimeout(policy.WithRetryOptions(ctx, policy.RetryOptions{MaxRetries: -1}), attemptTimeout)
		err := op(actx)
		cancel()
		if err == nil || !errors.Is(err, azlease.ErrTransient) {
			return err
		}
		last = err
		wait := min(time.Duration(1<<min(n, 5))*100*time.Millisecond, 2*time.Second)
		if !sleepCtx(ctx, wait/2+time.Duration(rand.Int64N(int64(wait)))) {
			return fmt.Errorf("%w; last attempt: %w", context.Cause(ctx), last)
		}
	}
}

// readRegistry reads the registry: its content, its ETag, and whether it
// exists (a missing one is empty).
func readRegistry(ctx context.Context, cc *container.Client, n leaseNames) (r registry, etag azcore.ETag, exists bool, err error) {
	r = registry{removed: map[string]bool{}}
	bc := cc.NewBlobClient(n.registry())
	err = retry(ctx, func(actx context.Context) error {
		resp, err := bc.DownloadStream(actx, nil)
		if bloberror.HasCode(err, bloberror.BlobNotFound, bloberror.ContainerNotFound) {
			exists = false
			return nil
		}
		if err != nil {
			return storageErr("read", n.registry(), err)
		}
		defer resp.Body.Close()
		b, err := io.ReadAll(io.LimitReader(resp.Body, 16<<20))
		if err != nil {
			return storageErr("read", n.registry(), err)
		}
		exists = true
		if resp.ETag != nil {
			etag = *resp.ETag
		}
		if len(b) == 0 { // created empty by a replica: no entry yet
			r = registry{removed: map[string]bool{}}
		} else if r, err = parseRegistry(b, n); err != nil {
			return &storageError{op: "read", blob: n.registry(), kind: azlease.ErrPermanent, err: err}
		}
		if n, err := strconv.ParseUint(metaGet(resp.Metadata, metaVersion), 10, 64); err == nil {
			r.version = n
		}
		return nil
	})
	return r, etag, exists, err
}

// writeRegistry writes r, conditional on etag (or on the blob not
// existing); errConflict when another writer came first.
func writeRegistry(ctx context.Context, cc *container.Client, n leaseNames, r registry, etag azcore.ETag, exists bool) error {
	bc := cc.NewBlockBlobClient(n.registry())
	content := r.format()
	cond := &blob.AccessConditions{ModifiedAccessConditions: &blob.ModifiedAccessConditions{}}
	if exists {
		cond.ModifiedAccessConditions.IfMatch = &etag
	} else {
		any := azcore.ETagAny
		cond.ModifiedAccessConditions.IfNoneMatch = &any
	}
	v := strconv.FormatUint(r.version, 10)
	return retry(ctx, func(actx context.Context) error {
		_, err := bc.Upload(actx, streaming.NopCloser(bytes.NewReader(content)), &blockblob.UploadOptions{
			Metadata: map[string]*string{metaVersion: &v}, AccessConditions: cond,
		})
		switch {
		case err == nil:
			return nil
		case bloberror.HasCode(err, bloberror.ConditionNotMet, bloberror.BlobAlreadyExists):
			// An attempt of this very write whose answer was lost may have
			// been applied: reading again tells, and applying the change
			// again changes nothing.
			return errConflict
		}
		return storageErr("write", n.registry(), err)
	})
}

// metaGet is the value of the metadata key k, whatever the case of its
// name as the answer gives it ("" when absent).
func metaGet(md map[string]*string, k string) string {
	for name, v := range md {
		if v != nil && strings.EqualFold(name, k) {
			return *v
		}
	}
	return ""
}

// headBeacon reads the registry's properties (one Get Blob Properties,
// billed as "other"), and reports whether its version or touch differ
// from what the last listing said: the group changed, and the replica
// should list now. A failure reports a change too.
func (g *Group) headBeacon(ctx context.Context, listed string) bool {
	actx, cancel := context.WithTimeout(policy.WithRetryOptions(ctx, policy.RetryOptions{MaxRetries: -1}), attemptTimeout)
	defer cancel()
	props, err := g.cc.NewBlobClient(g.names.registry()).GetProperties(actx, nil)
	if err != nil {
		return true
	}
	return metaGet(props.Metadata, metaVersion)+"/"+metaGet(props.Metadata, metaTouch) != listed
}

// touch changes the registry's touch mark, so that every replica lists
// the group at its next poll: after this replica joined, left, or its load
// changed much. A write conditional on the properties just read, keeping
// the registry's own; losing to another writer is as good (the registry
// changed). Best effort: a failure costs the others a listing interval.
func (g *Group) touch(ctx context.Context) {
	ctx, cancel := context.WithTimeout(ctx, 2*attemptTimeout)
	defer cancel()
	bc := g.cc.NewBlobClient(g.names.registry())
	mark := strconv.FormatUint(rand.Uint64(), 36)
	err := retry(ctx, func(actx context.Context) error {
		props, err := bc.GetProperties(actx, nil)
		if bloberror.HasCode(err, bloberror.BlobNotFound) {
			g.createRegistry(ctx)
			return nil
		}
		if err != nil {
			return storageErr("read", g.names.registry(), err)
		}
		md := map[string]*string{}
		for k, v := range props.Metadata {
			if !strings.EqualFold(k, metaTouch) {
				md[strings.ToLower(k)] = v
			}
		}
		md[metaTouch] = &mark
		_, err = bc.SetMetadata(actx, md, &blob.SetMetadataOptions{AccessConditions: &blob.AccessConditions{
			ModifiedAccessConditions: &blob.ModifiedAccessConditions{IfMatch: props.ETag}}})
		if err == nil || bloberror.HasCode(err, bloberror.ConditionNotMet, bloberror.BlobNotFound) {
			return nil
		}
		return storageErr("touch", g.names.registry(), err)
	})
	if err != nil {
		g.cfg.log.Debug("azlease/shards: could not touch the registry", slog.Any("error", err))
	}
}
