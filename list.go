package azlease

import (
	"context"
	"errors"
	"log/slog"
	"slices"
	"strings"
	"sync/atomic"
	"time"
	"unicode/utf8"

	"github.com/Azure/azure-sdk-for-go/sdk/azcore"
	"github.com/Azure/azure-sdk-for-go/sdk/azcore/to"
	"github.com/Azure/azure-sdk-for-go/sdk/storage/azblob/container"
)

// Reading the status of many lock blobs at once: one List Blobs request per
// 5,000 blobs instead of one Get Blob Properties per blob. InspectPrefix is
// the public form; listPrefix is the building block for the library's own
// types (a waiter that polls every slot of a Semaphore, a balancer that
// learns members and owners), which list under their own configuration,
// health and metrics.

// listPageSize is the most blobs one List Blobs request asks for: Azure's
// maximum.
const listPageSize = 5000

// InspectPrefix reads the status of every blob in the container cc points
// at whose name starts with prefix (a plain string prefix: "jobs/slot-1"
// also lists "jobs/slot-10"), in name order, as [Inspect] reads one. It
// needs only read access and holds no lease: one List Blobs request per
// 5,000 blobs (an empty prefix lists the whole container, azlease's blobs or
// not), each page's transient failures retried for at most 2 ×
// AttemptTimeout (6 s), ctx bounding the whole listing. A missing container
// lists nothing.
//
// Up to 5,000 blobs, the states are those of a single instant; a longer
// listing is not a snapshot: each page shows its blobs as Azure served that
// page (a blob created meanwhile is listed only if its name comes after the
// pages served). A blob whose azlease record is malformed has Status.Err set
// and does not fail the listing. The error is for the listing as a whole (a
// refusal: an *[Error] wrapping [ErrPermanent], Op "list"; [ErrTransient];
// or ctx's), and no partial result comes with one.
func InspectPrefix(ctx context.Context, cc *container.Client, prefix string) ([]Status, error) {
	t, err := containerTarget(cc)
	if err != nil {
		return nil, err
	}
	if r := prefixProblem(prefix); r != "" {
		return nil, optionErr("prefix", "%q: %s", prefix, r)
	}
	cfg, _ := (*LeaseOptions)(nil).config("")
	l := newListLease(t, prefix, cfg)
	budget := 2 * l.cfg.attemptTimeout
	return l.listPages(ctx, prefix, func(start time.Time) time.Time { return start.Add(budget) })
}

// prefixProblem says what is wrong with a listing prefix, or "": no blob
// name is longer than 1,024 bytes or invalid UTF-8, so such a prefix is a
// mistake.
func prefixProblem(p string) string {
	switch {
	case len(p) > 1024:
		return "longer than 1024 bytes (no blob name is)"
	case !utf8.ValidString(p):
		return "not valid UTF-8"
	}
	return ""
}

// newListLease returns a Lease that only lists: its logs, metrics
// (azlease.lock is "container/prefix") and errors name the prefix where a
// Lease names its lock blob. It holds no lease; use it for listPrefix and
// listPages only.
func newListLease(t target, prefix string, cfg leaseConfig) *Lease {
	cfg.log = cfg.log.With(slog.String("container", t.container), slog.String("prefix", prefix))
	t.blob = prefix
	return &Lease{
		t: t, cfg: cfg, seen: new(atomic.Uint64), health: new(storageHealth),
		tm: newTelemetry(cfg.meters, t.container, prefix, cfg.role, cfg.noLockName),
	}
}

// listPrefix lists the blobs under prefix in l's container, as
// InspectPrefix does, under l's configuration: each attempt has a deadline
// (AttemptTimeout, never after limit), the SDK's retries are off, and every
// attempt is recorded in l's metrics (operation "list") and storage health.
// Transient failures are retried until limit, which bounds the whole
// listing, every page of it. A multi-page listing is not atomic (see
// InspectPrefix). It does not record the epochs it sees in l.seen: they are
// other blobs' epochs.
func (l *Lease) listPrefix(ctx context.Context, prefix string, limit time.Time) ([]Status, error) {
	sts, _, err := l.listPagesAt(ctx, prefix, func(time.Time) time.Time { return limit })
	return sts, err
}

// listPrefixAt is listPrefix that also returns storage's clock when it
// answered the last page (its Date header; zero when it sent none), to
// compare with the listed blobs' modification times on one clock.
func (l *Lease) listPrefixAt(ctx context.Context, prefix string, limit time.Time) ([]Status, time.Time, error) {
	return l.listPagesAt(ctx, prefix, func(time.Time) time.Time { return limit })
}

// listPages lists page by page; pageLimit gives, from the instant a page's
// first attempt starts, until when that page's transient failures are
// retried.
func (l *Lease) listPages(ctx context.Context, prefix string, pageLimit func(start time.Time) time.Time) ([]Status, error) {
	sts, _, err := l.listPagesAt(ctx, prefix, pageLimit)
	return sts, err
}

// listPagesAt is listPages, also returning storage's Date of the last page.
func (l *Lease) listPagesAt(ctx context.Context, prefix string, pageLimit func(start time.Time) time.Time) ([]Status, time.Time, error) {
	return l.listUpTo(ctx, prefix, pageLimit, 0)
}

// listUpTo is listPagesAt; with n > 0, one page of at most n blobs.
func (l *Lease) listUpTo(ctx context.Context, prefix string, pageLimit func(start time.Time) time.Time, n int32) ([]Status, time.Time, error) {
	var date time.Time
	opts := &container.ListBlobsFlatOptions{
		Include:    container.ListBlobsInclude{Metadata: true},
		MaxResults: to.Ptr(int32(listPageSize)),
	}
	if n > 0 {
		opts.MaxResults = to.Ptr(n)
	}
	if prefix != "" {
		opts.Prefix = &prefix
	}
	var out []Status
	for {
		var page []Status
		var next *string
		gone := false
		err := l.loopOn(ctx, "list", prefix, pageLimit(time.Now()), func(actx context.Context, _ time.Time) (bool, error) {
			resp, err := l.t.cc.NewListBlobsFlatPager(opts).NextPage(actx)
			switch c := classify(ctx, err); c {
			case classOK:
			case classNotFound: // the container: nothing to list, or no more
				gone = true
				return true, nil
			case classTransient, classConflict:
				return false, opError("list", l.t.container, prefix, ErrTransient, err)
			case classCanceled:
				return true, err
			default:
				return true, opError("list", l.t.container, prefix, ErrPermanent, err)
			}
			if resp.Date != nil {
				date = *resp.Date
			}
			var items []*container.BlobItem
			if resp.Segment != nil {
				items = resp.Segment.BlobItems
			}
			page, err = statusesOf(l.t.container, prefix, items)
			if err != nil {
				return true, opError("list", l.t.container, prefix, ErrPermanent, err)
			}
			for i, at := 0, time.Now(); i < len(page); i++ {
				page[i].readAt, page[i].listed = at, date
			}
			next = resp.NextMarker
			return true, nil
		})
		if err != nil {
			return nil, time.Time{}, err
		}
		if gone {
			break // a container deleted during the listing has no more blobs
		}
		out = append(out, page...)
		if next == nil || *next == "" || n > 0 {
			break
		}
		if opts.Marker != nil && *opts.Marker == *next {
			return nil, time.Time{}, opError("list", l.t.container, prefix, ErrPermanent, errors.New("the List Blobs answer gave back the marker it was sent: the listing would not advance"))
		}
		opts.Marker = next
	}
	// Azure lists in name order, page after page; sort in case a service
	// does not (Azurite compares UTF-16, not UTF-8).
	slices.SortStableFunc(out, func(a, b Status) int { return strings.Compare(a.Name, b.Name) })
	return out, date, nil
}

// quotedETag is a listed ETag in the form of the ETag header, for
// If-Match: List Blobs gives it without the header's quotes.
func quotedETag(e azcore.ETag) azcore.ETag {
	if e == "" || strings.HasPrefix(string(e), `"`) || strings.HasPrefix(string(e), `W/"`) {
		return e
	}
	return azcore.ETag(`"` + string(e) + `"`)
}

// errNoName means a List Blobs answer held a blob without a name: the
// answer is malformed, and nothing in it can be trusted.
var errNoName = errors.New("a List Blobs answer held a blob without a name")

// statusesOf converts one page of a listing: the status of each blob whose
// name starts with prefix (others, which Azure never lists, are left out),
// parsed as Inspect parses one. A blob whose record is malformed carries the
// error in Err.
func statusesOf(containerName, prefix string, items []*container.BlobItem) ([]Status, error) {
	out := make([]Status, 0, len(items))
	for _, it := range items {
		if it == nil || it.Name == nil || *it.Name == "" {
			return nil, errNoName
		}
		name := *it.Name
		if !strings.HasPrefix(name, prefix) {
			continue
		}
		st := Status{Name: name, Exists: true, Metadata: userMetadata(it.Metadata), raw: it.Metadata}
		if p := it.Properties; p != nil {
			if p.LeaseState != nil {
				st.State = string(*p.LeaseState)
				st.Leased = st.State == "leased" || st.State == "breaking"
			}
			if p.ETag != nil {
				st.etag = quotedETag(*p.ETag)
			}
			if p.CreationTime != nil {
				st.created = *p.CreationTime
			}
			if p.LastModified != nil {
				st.modified = *p.LastModified
			}
		}
		r, err := parseRecord(it.Metadata)
		if err != nil {
			st.Err = opError("list", containerName, name, ErrPermanent, err)
		} else {
			st.setRecord(r)
		}
		out = append(out, st)
	}
	return out, nil
}
